"""A report a reader navigates: the summary first, a table of contents, no section without data."""

from __future__ import annotations

import re

import pytest

from simcalib.cli import main
from simcalib.report import build_report
from simcalib.report.render import Contents, Heading, Paragraph, anchor, contents_block, to_html, to_markdown

from .synthetic import write_benchmark

SMALL_THEORY = {"n_values": [4], "d_values": [64], "a_values": [1.0]}


def _headings(md: str, levels=(2, 3)) -> list[str]:
    return [m.group(2) for m in re.finditer(r"^(#{2,6}) (.+)$", md, re.M) if len(m.group(1)) in levels]


def _contents(md: str) -> list[tuple[str, str]]:
    part = md[md.index("## Contents\n"):]
    part = part[:part.index("\n\n", len("## Contents\n\n"))]
    return re.findall(r"^\s*- \[(.+)\]\(#([^)]+)\)$", part, re.M)


def test_anchors_follow_githubs_rule_and_repeats_are_numbered():
    assert anchor("Table 1: ECE (%) of every calibrator") == "table-1-ece--of-every-calibrator"
    assert anchor("SimCalib's `grid` choices, **bold**") == "simcalibs-grid-choices-bold"
    assert anchor("SimCalib_decay_all vs TS") == "simcalib_decay_all-vs-ts"
    blocks = [Heading(1, "T"), Heading(2, "Tables"), Heading(3, "NLL"), Paragraph("x"), Heading(3, "NLL")]
    contents = contents_block(blocks)
    assert contents.entries == ((2, "Tables", "tables"), (3, "NLL", "nll"), (3, "NLL", "nll-1"))
    page = to_html([blocks[0], contents, *blocks[1:]], base=None, title="T")
    for target in ("tables", "nll", "nll-1"):  # every link of the contents has its heading
        assert f'href="#{target}"' in page and f'id="{target}"' in page
    md = to_markdown([blocks[0], contents, *blocks[1:]])
    assert "## Contents\n\n- [Tables](#tables)\n  - [NLL](#nll)\n  - [NLL](#nll-1)\n" in md


def test_the_report_starts_with_its_summary_and_its_contents_list_every_section(tmp_path, paper_dir):
    write_benchmark(tmp_path / "study" / "Cora_GCN", "Cora", "GCN", ["UnCal", "TS", "GATS", "SimCalib"], seed=1)
    out = build_report(tmp_path / "study", tmp_path / "r", paper_dir, title="t", theory_reps=20,
                       theory_grid=SMALL_THEORY)
    md = out.report_md.read_text()
    assert md.startswith("# t\n\n## Summary\n\nECE (%), mean over runs (Table 1)")
    assert md.index("## Summary") < md.index("## Contents") < md.index("## Runs") < md.index("## Tables")
    entries = _contents(md)
    headings = [h for h in _headings(md) if h != "Contents"]
    assert [text for text, _ in entries] == headings  # every section and subsection, in order, nothing else
    assert [target for _, target in entries][:3] == ["summary", "runs", "tables"]
    page = out.report_html.read_text()
    assert all(f'id="{target}"' in page for _, target in entries)  # each link lands on its heading
    # no section without data: no w sweep, no label-rate sweep, nothing "not available"
    assert "Table 4" not in md and "### Data efficiency" not in md and "not available" not in md
    assert "## Theory check" in md  # in by default


def test_a_manifest_entry_leaves_the_theory_check_out_and_names_the_figures_calibrators(tmp_path, capsys):
    results = tmp_path / "results"
    write_benchmark(results / "Cora_GCN", "Cora", "GCN", ["UnCal", "TS", "GATS", "SimCalib", "Dirichlet"], seed=1)
    out, manifest = tmp_path / "report", tmp_path / "reports.yaml"
    entry = f"- results: {results}\n  out: {out}\n  title: t\n"
    assert main(["report", "--every", str(manifest.with_name("none.yaml"))]) == 2
    capsys.readouterr()
    manifest.write_text(entry)
    assert main(["report", "--every", str(manifest), "--theory-reps", "20", "--paper-dir", str(tmp_path / "np")]) == 0
    assert (out / "theory" / "theorem1_monte_carlo.csv").is_file() and (out / "figures" / "theory_theorem1.png").is_file()
    manifest.write_text(entry + "  theory: false\n  figure_calibrators: [UnCal, Dirichlet, TS]\n")
    assert main(["report", "--every", str(manifest), "--theory-reps", "20", "--paper-dir", str(tmp_path / "np")]) == 0
    md = (out / "report.md").read_text()
    assert "Theory check" not in md and "Theorem 1 Monte Carlo" not in md
    assert not (out / "theory").exists() and not (out / "figures" / "theory_theorem1.png").exists()  # no stale copy
    assert "Reliability diagrams of UnCal, Dirichlet, TS per benchmark" in md
    assert "Top-1 confidence of the test nodes of UnCal, Dirichlet, TS per benchmark" in md
    for bad, message in (("  figure_calibrators: TS\n", "figure_calibrators must be a list of calibrator names"),
                         ("  theory: maybe\n", "theory must be true or false")):
        manifest.write_text(entry + bad)
        assert main(["report", "--every", str(manifest)]) == 2
        assert message in capsys.readouterr().err


def test_a_calibrator_that_ran_without_figure_data_is_named_in_the_caption(tmp_path):
    from simcalib.report.build import make_figures
    from simcalib.report.results import load_study_results

    write_benchmark(tmp_path / "study" / "Cora_GCN", "Cora", "GCN", ["UnCal", "TS", "SimCalib"], seed=1)
    for path in (tmp_path / "study" / "Cora_GCN" / "predictions").glob("*_TS.npz"):
        path.unlink()  # TS ran (its rows are there) but left nothing to draw
    figures = {e.stem: e for e in make_figures(load_study_results(tmp_path / "study"), tmp_path / "out").entries}
    reliability = figures["reliability_uncal_vs_simcalib"]
    assert reliability.paths and "Reliability diagrams of UnCal, SimCalib per benchmark" in reliability.caption
    assert "TS ran but has no figure data here" in reliability.caption
    assert "TS ran but has no figure data here" in figures["confidence_distributions"].caption


@pytest.mark.parametrize("levels", [(2,), (2, 3)])
def test_contents_keep_only_the_levels_asked(levels):
    blocks = [Heading(1, "T"), Heading(2, "A"), Heading(3, "B"), Heading(4, "C")]
    assert [e[0] for e in contents_block(blocks, levels).entries] == list(levels)
    assert isinstance(contents_block(blocks), Contents)
