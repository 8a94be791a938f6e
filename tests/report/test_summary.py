"""The report's summary (summary.md): numbers read from the rows, and its block embedded in a README."""

from __future__ import annotations

import pandas as pd
import pytest
from scipy.stats import wilcoxon

from simcalib.cli import main
from simcalib.report import build_report
from simcalib.report.summary import BEGIN, END, embed_summary

from .synthetic import write_benchmark

SMALL_THEORY = {"n_values": [4], "d_values": [64], "a_values": [1.0]}
METHODS = ["UnCal", "TS", "GATS", "SimCalib", "SimCalib_decay_all"]


def _summary_row(md: str, benchmark: str) -> list[str]:
    line = next(line for line in md.splitlines() if line.startswith(f"| {benchmark} |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_the_summary_row_holds_the_benchmarks_means_and_the_paired_difference(tmp_path):
    write_benchmark(tmp_path / "results" / "Cora_GCN", "Cora", "GCN", METHODS, predictions=False)
    write_benchmark(tmp_path / "results" / "Photo_GAT", "Photo", "GAT", METHODS[:4], predictions=False, seed=3)
    out = build_report(tmp_path / "results", tmp_path / "report", paper_dir=tmp_path / "no_paper", theory_reps=20,
                       theory_grid=SMALL_THEORY)
    md = out.summary_md.read_text()
    assert "## Summary" in out.report_md.read_text() and md.strip() in out.report_md.read_text()

    rows = pd.read_csv(tmp_path / "results" / "Cora_GCN" / "results.csv")
    means = rows.groupby("calibrator")["ece"].mean()
    header = _summary_row(md, "benchmark")
    assert header == ["benchmark", "runs", "UnCal", "TS", "GATS", "SimCalib", "SimCalib constant branch",
                      "SimCalib - GATS"]  # no paper tables loaded: no paper columns
    cora = dict(zip(header, _summary_row(md, "Cora GCN")))
    assert cora["runs"] == "6"
    lowest = means[METHODS].round(2).min()
    for column, method in zip(header[2:7], METHODS):
        expected = f"{means[method]:.2f}"
        assert cora[column] == (f"**{expected}**" if round(means[method], 2) == lowest else expected)

    wide = rows.pivot_table(index=["split", "init", "fold"], columns="calibrator", values="ece")
    diff = wide["SimCalib"] - wide["GATS"]
    wins = int((diff < 0).sum())
    assert cora["SimCalib - GATS"].startswith(f"{diff.mean():+.2f} [")
    assert f", {wins}/6, " in cora["SimCalib - GATS"]
    # Photo GAT has no constant-branch rows: its cell is empty, not 0
    assert dict(zip(header, _summary_row(md, "Photo GAT")))["SimCalib constant branch"] == ""

    photo = pd.read_csv(tmp_path / "results" / "Photo_GAT" / "results.csv").groupby("calibrator")["ece"].mean()
    simcalib, gats = [means["SimCalib"], photo["SimCalib"]], [means["GATS"], photo["GATS"]]
    p = wilcoxon(simcalib, gats).pvalue
    lower = sum(s < g for s, g in zip(simcalib, gats))
    assert f"SimCalib lower on {lower} of 2, p = {p:.2g}," in md


def test_the_constant_branchs_test_over_benchmarks_is_in_the_summary_and_in_across_benchmarks_csv(tmp_path):
    for dataset, seed in (("Cora", 0), ("Photo", 3)):
        write_benchmark(tmp_path / "results" / f"{dataset}_GCN", dataset, "GCN", METHODS, predictions=False,
                        seed=seed)
    out = build_report(tmp_path / "results", tmp_path / "report", paper_dir=tmp_path / "no_paper", theory_reps=20,
                       theory_grid=SMALL_THEORY)
    means = [pd.read_csv(tmp_path / "results" / f"{d}_GCN" / "results.csv").groupby("calibrator")["ece"].mean()
             for d in ("Cora", "Photo")]
    constant, gats = [m["SimCalib_decay_all"] for m in means], [m["GATS"] for m in means]
    p = wilcoxon(constant, gats).pvalue
    lower = sum(c < g for c, g in zip(constant, gats))
    reduction = sum((g - c) / g for c, g in zip(constant, gats)) / 2
    assert (f"The constant branch against GATS: lower on {lower} of 2, p = {p:.2g}, {100 * reduction:+.1f}%."
            in out.summary_md.read_text())
    across = pd.read_csv(tmp_path / "report" / "significance" / "across_benchmarks.csv")
    (row,) = across[across["family"] == "paper's test, constant branch"].to_dict("records")
    assert (row["method"], row["reference"], row["n"], row["wins"]) == ("SimCalib_decay_all", "GATS", 2, lower)
    assert row["pvalue"] == pytest.approx(p, rel=1e-5)
    assert row["relative_reduction"] == pytest.approx(reduction, rel=1e-5)


def test_without_the_constant_branch_the_summary_has_no_column_for_it(tmp_path):
    write_benchmark(tmp_path / "results", "Cora", "GCN", METHODS[:4], predictions=False)
    out = build_report(tmp_path / "results", tmp_path / "report", paper_dir=tmp_path / "no_paper", theory_reps=20,
                       theory_grid=SMALL_THEORY)
    md = out.summary_md.read_text()
    assert "constant branch" not in md and _summary_row(md, "benchmark")[-1] == "SimCalib - GATS"


def test_embedding_replaces_only_the_block_of_the_named_report(tmp_path):
    readme = tmp_path / "README.md"
    other = BEGIN.format(out="reports/other")
    readme.write_text(f"# Results\n\nintro\n\n{BEGIN.format(out='reports/offline')}\nold table\n{END}\n\n"
                      f"{other}\nother table\n{END}\n\nafter\n")
    assert embed_summary(readme, "reports/offline", "| new | table |\n")
    text = readme.read_text()
    assert "old table" not in text and "| new | table |" in text and "other table" in text
    assert text.startswith("# Results\n\nintro\n\n") and text.endswith("after\n")
    assert embed_summary(readme, "reports/offline", "| newer |\n")  # the markers stay, so it repeats
    assert "| new | table |" not in readme.read_text() and "| newer |" in readme.read_text()
    assert not embed_summary(readme, "reports/missing", "x") and "| newer |" in readme.read_text()


def test_make_report_embeds_the_summary_where_the_manifest_says_and_refuses_a_file_without_markers(tmp_path, capsys):
    write_benchmark(tmp_path / "results", "Cora", "GCN", METHODS, predictions=False)
    out, readme, manifest = tmp_path / "report", tmp_path / "README.md", tmp_path / "reports.yaml"
    readme.write_text(f"before\n{BEGIN.format(out=out)}\ntyped numbers\n{END}\nafter\n")
    manifest.write_text(f"- results: {tmp_path / 'results'}\n  out: {out}\n  title: t\n  summary_in: {readme}\n")
    assert main(["report", "--every", str(manifest), "--theory-reps", "20", "--paper-dir", str(tmp_path / "np")]) == 0
    text = readme.read_text()
    assert "typed numbers" not in text and (out / "summary.md").read_text().strip() in text
    assert text.startswith("before\n") and text.endswith("after\n")

    readme.write_text("no markers here\n")
    assert main(["report", "--every", str(manifest)]) == 2
    err = capsys.readouterr().err
    assert f"{readme} has no summary block for {out}" in err and "put the two lines" in err
    assert readme.read_text() == "no markers here\n"
