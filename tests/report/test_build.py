"""The whole report: report.md and report.html from a study folder, complete or empty; the CLI."""

from __future__ import annotations

import pandas as pd
import pytest

from simcalib.cli import main
from simcalib.report import build_report

from .synthetic import write_benchmark

SMALL_THEORY = {"n_values": [4], "d_values": [64], "a_values": [1.0]}


def test_report_of_a_partial_study_has_tables_tests_figures_and_theory(synthetic_study, tmp_path, paper_dir):
    out = build_report(synthetic_study, tmp_path / "report", paper_dir, title="synthetic", theory_reps=50,
                       theory_grid=SMALL_THEORY)
    md = out.report_md.read_text()
    for text in ("# synthetic", "Table 1: ECE", "ours vs paper", "not run (23.31)", "| paper Table 1 (recomputed) | 16 | 14 "
                 "| 8 | 0.000763 | 10.4% |", "figures/reliability_uncal_vs_simcalib.png", "figures/feature_similarity.png",
                 "figures/data_efficiency.png", "Paper's example", "Label rates present: 3.0%, 6.0%, 15.0%",
                 "The paper draws this figure on CoraFull, which has no results here",
                 "the paper's cells of this table are on CoraFull, none of which has results here"):
        assert text in md, text
    assert "| paper SimCalib | paper GATS |" in md.split("## Contents")[0]  # the summary beside the paper's cells
    html = out.report_html.read_text()
    assert html.count("data:image/png;base64,") == 6  # five study figures (cost included) and the theory figure
    for stem in ("table1_ece", "table1_ece_vs_paper", "table3_ablation_ece", "table4_w_sweep_ece", "metric_kde_ece"):
        for suffix in (".md", ".tex", ".csv"):
            assert (out.folder / "tables" / f"{stem}{suffix}").is_file()
    assert out.significance.paper["pvalue"] == pytest.approx(7.63e-4, abs=5e-7)
    # every mean with its interval, the newer estimators with their coverage, the cost table and figure
    for text in ("|  | 95% CI |  | [", "**The resampling unit is the split**", "| Mean diff | Diff 95% CI |",
                 "degree-binned ECE (`degree_ece`) in 0 of", "benchmarks: none",
                 "### Fit time (s) of every calibrator: median over runs",
                 "figures/cost_ece_vs_fit_time.png", "Dotted black line: the smooth reliability curve", "on Cora GCN"):
        assert text in md, text
    assert "not recorded: none of the" not in md  # a table whose rows lack its metric has no section
    assert (out.folder / "figures" / "cost_ece_vs_fit_time.csv").is_file()
    paired = pd.read_csv(out.folder / "significance" / "paired_runs_simcalib_vs_gats.csv")
    assert (paired["diff_ci_low"] <= paired["mean_diff"]).all() and (paired["mean_diff"] <= paired["diff_ci_high"]).all()
    # the ablation is tested against the full method, run by run, beside SimCalib vs GATS
    assert "Other paired comparisons on test ECE" in md and "| Cora GCN | SimCalib_l | SimCalib |" in md
    pairs = (out.folder / "significance" / "paired_runs_all.csv").read_text()
    assert "SimCalib_l,SimCalib" in pairs and "SimCalib,GATS" in pairs


def test_report_of_an_empty_folder_renders_with_notes(tmp_path):
    (tmp_path / "empty").mkdir()
    out = build_report(tmp_path / "empty", tmp_path / "report", paper_dir=tmp_path / "no_paper", theory_reps=20,
                       theory_grid=SMALL_THEORY)
    md = out.report_md.read_text()
    assert "No results.csv found" in md and "comparisons are skipped" in md
    # no section without data: no table, no figure
    assert "not available" not in md and "## Figures" not in md and "### Table 1" not in md


def test_cli_writes_the_report_and_turns_user_errors_into_exit_2(tmp_path, capsys):
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    write_benchmark(tmp_path / "quick", "Cora", "GCN", ["UnCal", "TS"], predictions=False)
    assert main(["report", str(tmp_path / "quick"), "--out", str(tmp_path / "r"), "--theory-reps", "20",
                 "--paper-dir", str(tmp_path / "no_paper")]) == 0
    assert (tmp_path / "r" / "report.html").is_file()


def test_a_study_file_resolves_to_its_output_folder_and_name(tmp_path):
    from simcalib.commands.report import resolve_source

    study = tmp_path / "tiny.yaml"
    study.write_text(f"name: tiny\nbenchmarks: {{datasets: [Cora], backbones: [GCN]}}\ncalibrators: [UnCal]\n"
                     f"output: {tmp_path / 'out'}\n")
    assert resolve_source(str(study)) == (tmp_path / "out", "tiny")
    assert resolve_source(str(tmp_path)) == (tmp_path, tmp_path.name)


def test_cells_more_than_one_paper_std_away_are_named_in_a_sentence_from_the_numbers():
    import numpy as np
    import pandas as pd

    from simcalib.report.build import far_from_paper
    from simcalib.report.tables import TABLE_SPECS, ComparisonTable

    long = pd.DataFrame([
        ("Cora", "GAT", "UnCal", 23.31, 1.81, 13.97, 3.46, 75),  # -5.2 std
        ("Cora", "GCN", "GATS", 3.64, 0.90, 3.45, 0.8, 75),  # within one std: not named
        ("Citeseer", "GCN", "SimCalib", 3.94, 1.12, 5.10, 1.0, 75),  # +1.0357 std
        ("Photo", "GCN", "TS", 3.00, 1.00, np.nan, np.nan, 0),  # not run: not named
    ], columns=["dataset", "backbone", "method", "paper_mean", "paper_std", "ours_mean", "ours_std", "runs"])
    long["diff"] = long["ours_mean"] - long["paper_mean"]
    long["z"] = long["diff"] / long["paper_std"]
    sentence = far_from_paper(ComparisonTable(TABLE_SPECS[0], long)).text
    assert "2 cells** (1 below it, 1 above)" in sentence
    assert sentence.index("Cora GAT UnCal 13.97 vs 23.31 (-5.2 std)") < sentence.index(
        "Citeseer GCN SimCalib 5.10 vs 3.94 (+1.0 std)")
    assert "GATS" not in sentence and "Photo" not in sentence
    assert far_from_paper(ComparisonTable(TABLE_SPECS[0], long.iloc[[1]])) is None


def test_every_report_of_a_manifest_regenerates_from_results_keeping_prediction_figures(tmp_path, capsys):
    import shutil

    results = tmp_path / "results" / "Cora_GCN"
    write_benchmark(results, "Cora", "GCN", ["UnCal", "SimCalib"])
    out, no_paper = tmp_path / "report", str(tmp_path / "no_paper")
    assert main(["report", str(tmp_path / "results"), "--out", str(out), "--theory-reps", "20",
                 "--paper-dir", no_paper]) == 0  # the first rendering, with the saved predictions
    first = (out / "figures" / "reliability_uncal_vs_simcalib.png").read_bytes()
    shutil.rmtree(results / "predictions")  # what is committed: results.csv only
    manifest = tmp_path / "reports.yaml"
    manifest.write_text(f"- results: {tmp_path / 'results'}\n  out: {out}\n  title: again\n  splits: [1]\n")
    assert main(["report", "--every", str(manifest), "--theory-reps", "20", "--paper-dir", no_paper]) == 0
    md = (out / "report.md").read_text()
    assert md.startswith("# again\n\n## Summary\n\n")
    assert ("**Regenerate** every number in this report from the committed `results.csv` files with one command: "
            f"`make report` (= `simcalib report --every {manifest}`).") in md
    assert "figures/reliability_uncal_vs_simcalib.png" in md and "Kept from an earlier rendering" in md
    assert (out / "figures" / "reliability_uncal_vs_simcalib.png").read_bytes() == first
    assert "| Cora | GCN | SimCalib, UnCal | 3 |" in md  # split 1 only: 3 of the 6 runs

    manifest.write_text(f"- results: {tmp_path / 'results'}\n  out: {out}\n")
    assert main(["report", "--every", str(manifest)]) == 2
    assert "must have the keys results, out, title" in capsys.readouterr().err
    manifest.write_text(f"- results: [{tmp_path / 'results'}, {tmp_path / 'missing'}]\n  out: {out}\n  title: t\n")
    assert main(["report", "--every", str(manifest)]) == 2
    err = capsys.readouterr().err
    assert f"results folder '{tmp_path / 'missing'}' does not exist" in err


def test_a_manifest_entry_may_read_several_results_folders(tmp_path):
    write_benchmark(tmp_path / "small" / "Cora_GCN", "Cora", "GCN", ["UnCal", "SimCalib"], predictions=False)
    write_benchmark(tmp_path / "large" / "Photo_GAT", "Photo", "GAT", ["UnCal", "SimCalib"], predictions=False)
    out, manifest = tmp_path / "report", tmp_path / "reports.yaml"
    manifest.write_text(f"- results: [{tmp_path / 'small'}, {tmp_path / 'large'}]\n  out: {out}\n  title: both\n")
    assert main(["report", "--every", str(manifest), "--theory-reps", "20", "--paper-dir", str(tmp_path / "np")]) == 0
    md = (out / "report.md").read_text()
    assert "| Cora | GCN | SimCalib, UnCal | 6 |" in md and "| Photo | GAT | SimCalib, UnCal | 6 |" in md


def test_only_re_renders_the_named_entry_and_names_an_unknown_one(tmp_path, capsys):
    write_benchmark(tmp_path / "results" / "Cora_GCN", "Cora", "GCN", ["UnCal", "SimCalib"], predictions=False)
    manifest = tmp_path / "reports.yaml"
    manifest.write_text("".join(f"- results: {tmp_path / 'results'}\n  out: {tmp_path / name}\n  title: {name}\n"
                                for name in ("a", "b")))
    args = ["report", "--every", str(manifest), "--theory-reps", "20", "--paper-dir", str(tmp_path / "np")]
    assert main([*args, "--only", str(tmp_path / "b")]) == 0
    assert (tmp_path / "b" / "report.md").is_file() and not (tmp_path / "a").exists()
    assert f"--every {manifest}`" in (tmp_path / "b" / "report.md").read_text()  # the manifest, not a subset
    assert main([*args, "--only", str(tmp_path / "c")]) == 2
    assert "no entry of" in capsys.readouterr().err


def test_a_manifest_entry_with_paper_false_compares_no_table_with_the_paper(tmp_path, paper_dir):
    write_benchmark(tmp_path / "results" / "Actor_GCN", "Actor", "GCN", ["UnCal", "SimCalib"], predictions=False)
    out, manifest = tmp_path / "report", tmp_path / "reports.yaml"
    entry = f"- results: {tmp_path / 'results'}\n  out: {out}\n  title: t\n"
    manifest.write_text(entry)
    assert main(["report", "--every", str(manifest), "--theory-reps", "20", "--paper-dir", str(paper_dir)]) == 0
    assert "ours vs paper" in (out / "report.md").read_text()
    manifest.write_text(entry + "  paper: false\n")
    assert main(["report", "--every", str(manifest), "--theory-reps", "20", "--paper-dir", str(paper_dir)]) == 0
    md = (out / "report.md").read_text()
    assert "ours vs paper" not in md and "No table of this report is compared with the paper's" in md
    summary = md.split("## Contents")[0]
    assert "| benchmark |" in summary and "paper SimCalib" not in summary  # no column without data


def test_a_manifest_entry_draws_data_efficiency_from_its_sweep_without_its_rows_entering_the_tables(tmp_path):
    write_benchmark(tmp_path / "main" / "Cora_GCN", "Cora", "GCN", ["UnCal", "SimCalib"], predictions=False, seed=1)
    for k, rate in enumerate((0.03, 0.15)):  # the sweep's 15% runs are the same runs, drawn again
        write_benchmark(tmp_path / "sweep" / f"label_rate_{rate}" / "Cora_GCN", "Cora", "GCN", ["UnCal", "SimCalib"],
                        label_rate=rate, predictions=False, seed=20 + k)
    out, manifest = tmp_path / "report", tmp_path / "reports.yaml"
    manifest.write_text(f"- results: {tmp_path / 'main'}\n  out: {out}\n  title: t\n")
    assert main(["report", "--every", str(manifest), "--theory-reps", "20", "--paper-dir", str(tmp_path / "np")]) == 0
    alone = (out / "tables" / "table1_ece.csv").read_text()
    assert "### Data efficiency" not in (out / "report.md").read_text()  # no sweep: no section

    manifest.write_text(f"- results: {tmp_path / 'main'}\n  out: {out}\n  title: t\n"
                        f"  data_efficiency: {tmp_path / 'sweep'}\n")
    assert main(["report", "--every", str(manifest), "--theory-reps", "20", "--paper-dir", str(tmp_path / "np")]) == 0
    md = (out / "report.md").read_text()
    assert "figures/data_efficiency.png" in md and f"Drawn from the label-rate sweep in `{tmp_path / 'sweep'}`" in md
    assert (out / "tables" / "table1_ece.csv").read_text() == alone  # the sweep's 15% rows stay out of Table 1

    manifest.write_text(f"- results: {tmp_path / 'main'}\n  out: {out}\n  title: t\n"
                        f"  data_efficiency: {tmp_path / 'nowhere'}\n")
    assert main(["report", "--every", str(manifest)]) == 2


def test_a_pinned_figure_keeps_its_earlier_rendering_where_it_could_be_redrawn(tmp_path):
    import shutil

    results, out = tmp_path / "results" / "Cora_GCN", tmp_path / "report"
    render = ["report", "--every", str(tmp_path / "reports.yaml"), "--theory-reps", "20", "--paper-dir", str(tmp_path / "np")]
    write_benchmark(results, "Cora", "GCN", ["UnCal", "SimCalib"], seed=1)
    (tmp_path / "reports.yaml").write_text(f"- results: {tmp_path / 'results'}\n  out: {out}\n  title: t\n"
                                           "  pinned_figures: [reliability_uncal_vs_simcalib]\n")
    assert main(render) == 0  # the first rendering: nothing to keep yet, so drawn
    first = {stem: (out / "figures" / f"{stem}.png").read_bytes()
             for stem in ("reliability_uncal_vs_simcalib", "confidence_distributions")}
    shutil.rmtree(results)
    write_benchmark(results, "Cora", "GCN", ["UnCal", "SimCalib"], seed=2)  # other predictions: other figures
    assert main(render) == 0
    assert (out / "figures" / "reliability_uncal_vs_simcalib.png").read_bytes() == first["reliability_uncal_vs_simcalib"]
    assert (out / "figures" / "confidence_distributions.png").read_bytes() != first["confidence_distributions"]
    assert "Kept from an earlier rendering" in (out / "report.md").read_text()


def test_a_table_beyond_the_papers_is_left_out_when_none_of_its_own_methods_ran(tmp_path):
    write_benchmark(tmp_path / "paper_methods", "Cora", "GCN", ["UnCal", "TS", "GATS", "SimCalib"], predictions=False)
    out = build_report(tmp_path / "paper_methods", tmp_path / "r1", paper_dir=tmp_path / "no_paper", theory_reps=20,
                       theory_grid=SMALL_THEORY)
    md = out.report_md.read_text()
    assert "Table 1: ECE" in md and "Table 3: ECE" in md  # the paper's tables show even when not run
    assert "the extra ones" not in md and "ECE (%) of SimCalib's objectives" not in md
    assert not (out.folder / "tables" / "extra_ece.md").exists()

    write_benchmark(tmp_path / "with_extra", "Cora", "GCN", ["UnCal", "GATS", "SimCalib", "Dirichlet"],
                    predictions=False)
    out = build_report(tmp_path / "with_extra", tmp_path / "r2", paper_dir=tmp_path / "no_paper", theory_reps=20,
                       theory_grid=SMALL_THEORY)
    md = out.report_md.read_text()
    assert "ECE (%) of the paper's calibrators and the extra ones" in md and "ECE (%) of SimCalib's objectives" not in md
    assert (out.folder / "tables" / "extra_ece.md").is_file()

    # rendered again into the same folder without the extra calibrator, its earlier tables do not linger
    build_report(tmp_path / "paper_methods", tmp_path / "r2", paper_dir=tmp_path / "no_paper", theory_reps=20,
                 theory_grid=SMALL_THEORY)
    assert not list((tmp_path / "r2" / "tables").glob("extra_*")) and (tmp_path / "r2" / "tables" / "table1_ece.md").is_file()


def test_a_paper_table_with_no_cell_run_names_the_papers_datasets_and_our_rows_only_where_there_are_some(
        tmp_path, paper_dir):
    write_benchmark(tmp_path / "study", "Cora", "GCN", ["UnCal", "TS", "GATS", "SimCalib"], predictions=False)
    md = build_report(tmp_path / "study", tmp_path / "r", paper_dir, theory_reps=20,
                      theory_grid=SMALL_THEORY).report_md.read_text()
    table2 = md[md.index("#### Table 2: ours vs paper"):md.index("### Table 3")]
    assert "are on CoraFull, none of which has results here: our rows in the table above" in table2
    assert "Table 4" not in md  # no w sweep ran: no rows of ours, no section (its paper cells stay in the CSV)


def test_the_estimator_tables_hold_the_rows_that_have_them_and_name_the_benchmarks(tmp_path):
    write_benchmark(tmp_path / "results" / "Cora_GCN", "Cora", "GCN", ["UnCal", "GATS", "SimCalib"], folds=(0,),
                    predictions=False, estimators=True)
    write_benchmark(tmp_path / "results" / "Photo_GAT", "Photo", "GAT", ["UnCal", "GATS"], folds=(0,), seed=3,
                    predictions=False)  # rows without the estimator columns
    out = build_report(tmp_path / "results", tmp_path / "report", tmp_path / "no_paper", theory_reps=20,
                       theory_grid=SMALL_THEORY)
    md = out.report_md.read_text()
    assert "degree-binned ECE (`degree_ece`) in 6 of 10 rows, benchmarks: Cora GCN" in md
    degree = pd.read_csv(out.folder / "tables" / "metric_degree_ece.csv")
    assert list(degree["dataset"]) == ["Cora"] and degree["GATS_runs"].tolist() == [2]
    assert degree["GATS_ci_low"].notna().all()  # two splits: an interval
    signed = (out.folder / "tables" / "metric_signed_ce.md").read_text()
    assert "| Cora | GCN | 2 |" in signed and "Photo" not in signed


def test_the_newer_calibrators_get_tables_and_paired_tests_on_each_metric_only_beside_their_current_definitions(
        tmp_path):
    old = ["UnCal", "TS", "GATS", "GETS"]  # a GETS of before its code's definition, alone: no newer tables
    write_benchmark(tmp_path / "old", "Cora", "GCN", old, predictions=False, estimators=True)
    out = build_report(tmp_path / "old", tmp_path / "r_old", paper_dir=tmp_path / "no_paper", theory_reps=20,
                       theory_grid=SMALL_THEORY)
    assert not list((out.folder / "tables").glob("newer_*"))
    assert not (out.folder / "significance" / "paired_runs_newer_calibrators.csv").exists()

    newer = ["UnCal", "TS", "GATS", "GETS_ap", "GETS", "GETS_holdout", "WATS"]
    write_benchmark(tmp_path / "new", "Cora", "GCN", newer, predictions=False, estimators=True)
    out = build_report(tmp_path / "new", tmp_path / "r_new", paper_dir=tmp_path / "no_paper", theory_reps=20,
                       theory_grid=SMALL_THEORY)
    md = out.report_md.read_text()
    for metric in ("ece", "degree_ece", "signed_ce", "nll", "accuracy"):
        assert (out.folder / "tables" / f"newer_{metric}.md").is_file()
    tests = pd.read_csv(out.folder / "significance" / "paired_runs_newer_calibrators.csv")
    assert set(tests["metric"]) == {"ece", "degree_ece", "nll"}
    assert {("GETS", "GETS_ap"), ("WATS", "GATS"), ("GETS_holdout", "GETS")} <= set(zip(tests["method"],
                                                                                          tests["reference"]))
    assert (tests["pairs"] == 6).all()  # 2 splits x 3 folds
    gets = tests[(tests["metric"] == "ece") & (tests["method"] == "GETS") & (tests["reference"] == "GETS_ap")].iloc[0]
    rows = pd.read_csv(tmp_path / "new" / "results.csv").pivot_table(index=["split", "fold"], columns="calibrator",
                                                                      values="ece")
    assert gets["mean_diff"] == pytest.approx((rows["GETS"] - rows["GETS_ap"]).mean())
    assert "The newer calibrators: GETS and WATS against TS and GATS" in md and "Calibrator definitions" in md
