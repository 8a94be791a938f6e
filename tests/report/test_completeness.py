"""A report over a study's results shows the benchmarks complete by the study's plan and names the others
(:mod:`simcalib.report.completeness`): tables, tests, summary and leaderboard, on tiny synthetic results folders."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from simcalib.cli import main
from simcalib.commands.report import read_manifest
from simcalib.errors import DataMissingError
from simcalib.experiment.plan import plan_study
from simcalib.experiment.study import load_study
from simcalib.report import build_report
from simcalib.report.build import build_tables, load_inputs
from simcalib.report.completeness import complete_only, study_completeness
from simcalib.report.leaderboard import Family, build_leaderboard, leaderboard_markdown, read_families
from simcalib.report.results import load_study_results
from simcalib.store.integrity import CALIBRATOR_DIGEST_COLUMN

from .synthetic import write_benchmark

CALIBRATORS = ["UnCal", "TS", "GATS", "SimCalib", "SimCalib_l"]
SPLITS, FOLDS = (0, 1), (0, 1, 2)  # 6 runs per benchmark (init 0)
SMALL_THEORY = {"n_values": [4], "d_values": [64], "a_values": [1.0]}


@pytest.fixture
def study_file(tmp_path, mirror_dir, splits_dir) -> Path:
    """Cora and Pubmed x GCN and GAT, 6 runs, five calibrators (planned without the data)."""
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({
        "name": "tiny", "seed": 10, "benchmarks": {"datasets": ["Cora", "Pubmed"], "backbones": ["GCN", "GAT"]},
        "calibrators": CALIBRATORS, "runs": {"splits": len(SPLITS), "inits": 1, "folds": len(FOLDS)},
        "output": str(tmp_path / "results"), "data": {"mirror": str(mirror_dir), "splits_dir": str(splits_dir)},
        "device": "cpu"}))
    return path


def write_planned(study_file: Path, dataset: str, backbone: str, runs: int | None = None, extra: int = 0) -> None:
    """The benchmark's synthetic rows as the plan keys them (its seeds and calibrator digests): the first ``runs``
    runs with every calibrator (None: all), then ``extra`` calibrators of the next run."""
    plan = next(b for b in plan_study(load_study(study_file), data=False).benchmarks
                if (b.dataset, b.backbone) == (dataset, backbone))
    folder = plan.out_dir
    write_benchmark(folder, dataset, backbone, CALIBRATORS, splits=SPLITS, folds=FOLDS, seed=sum(map(ord, plan.name)),
                    predictions=False)
    frame = pd.read_csv(folder / "results.csv")
    order = {(r.split, r.init, r.fold): i for i, r in enumerate(plan.runs)}
    position = [order[(s, i, f)] for s, i, f in zip(frame["split"], frame["init"], frame["fold"])]
    frame["seed"] = [plan.seeds[p] for p in position]
    frame[CALIBRATOR_DIGEST_COLUMN] = [plan.calibrator(c).digest for c in frame["calibrator"]]
    if runs is not None:
        index = pd.Series(position, index=frame.index)
        rank = frame.groupby(index).cumcount()
        frame = frame[(index < runs) | ((index == runs) & (rank < extra))]
    frame.to_csv(folder / "results.csv", index=False)


@pytest.fixture
def partial_study(study_file) -> Path:
    """Cora complete; Pubmed GCN 3 of 6 runs and two calibrators of a fourth; Pubmed GAT nothing."""
    for backbone in ("GCN", "GAT"):
        write_planned(study_file, "Cora", backbone)
    write_planned(study_file, "Pubmed", "GCN", runs=3, extra=2)
    (study_file.parent / "results" / "Pubmed_GAT").mkdir(parents=True)  # a benchmark folder without rows
    return study_file


LINE = "Pubmed GCN: 3 of 6 runs; Pubmed GAT: not started ({study})"
INCOMPLETE = "Left out until complete (every planned run with a row of each planned calibrator): "


def test_the_line_names_each_incomplete_benchmark_and_how_far_it_is(partial_study):
    rows = load_study_results(partial_study.parent / "results").rows
    completeness = study_completeness(partial_study, rows)
    assert [ledger.plan.name for ledger in completeness.incomplete] == ["Pubmed-GCN", "Pubmed-GAT"]
    assert completeness.line() == LINE.format(study=partial_study)
    assert set(rows[completeness.left_out(rows)]["dataset"]) == {"Pubmed"}


def test_several_study_files_over_one_folder_each_leave_out_their_incomplete_benchmarks(partial_study):
    other = partial_study.parent / "other.yaml"  # a second study writing into the same results folder
    spec = yaml.safe_load(partial_study.read_text())
    other.write_text(yaml.safe_dump({**spec, "name": "other", "benchmarks": {"datasets": ["Citeseer"],
                                                                             "backbones": ["GCN"]}}))
    write_planned(partial_study, "Cora", "GCN")  # rows the first study plans and the second does not stay in
    results = load_study_results(partial_study.parent / "results")
    kept = complete_only(results, [partial_study, other])
    assert set(kept.rows["dataset"]) == {"Cora"}
    # one sentence: the phrase once, then each study's benchmarks with the study file that plans them
    assert kept.left_out == INCOMPLETE + "; ".join([LINE.format(study=partial_study),
                                                    f"Citeseer GCN: not started ({other})"])
    assert complete_only(results, partial_study).left_out == INCOMPLETE + LINE.format(study=partial_study)


def test_rows_of_a_benchmark_no_study_file_plans_are_left_out_and_named_where_the_report_asks(partial_study):
    """A slice whose study file the AutoCal report does not list: its rows, complete or not, are not the report's."""
    spec = yaml.safe_load(partial_study.read_text())
    unlisted = partial_study.parent / "unlisted.yaml"
    unlisted.write_text(yaml.safe_dump({**spec, "name": "unlisted", "benchmarks": {"datasets": ["Citeseer"],
                                                                                  "backbones": ["GCN"]}}))
    write_planned(unlisted, "Citeseer", "GCN", runs=2)
    results = load_study_results(partial_study.parent / "results")
    assert "Citeseer" in set(complete_only(results, partial_study).rows["dataset"])  # a reference folder's, kept
    kept = complete_only(results, partial_study, keep_unplanned=False)
    assert set(kept.rows["dataset"]) == {"Cora"}
    assert kept.left_out == INCOMPLETE + LINE.format(study=partial_study) + (
        f". Citeseer GCN: planned by none of {partial_study}; left out (add the study file that computes them to the "
        "report's study)")
    listed = complete_only(results, [partial_study, unlisted], keep_unplanned=False)  # listed: judged by its own plan (2 of 6 runs)
    assert "Citeseer" not in set(listed.rows["dataset"]) and "Citeseer GCN: 2 of 6 runs" in listed.left_out


def test_a_partial_benchmark_is_left_out_of_the_tables_and_tests_and_named_under_the_summary(partial_study, tmp_path,
                                                                                            paper_dir):
    results = partial_study.parent / "results"
    out = build_report(results, tmp_path / "report", paper_dir, title="tiny", theory_reps=20,
                       theory_grid=SMALL_THEORY, study_file=partial_study)
    table1 = pd.read_csv(out.folder / "tables" / "table1_ece.csv")
    assert set(table1["dataset"]) == {"Cora"}
    vs_paper = pd.read_csv(out.folder / "tables" / "table1_ece_vs_paper.csv")
    assert (vs_paper.loc[vs_paper["dataset"] == "Pubmed", "runs"] == 0).all()  # the paper's cells, ours not run
    ran = vs_paper["method"].isin(CALIBRATORS)
    assert (vs_paper.loc[(vs_paper["dataset"] == "Cora") & ran, "runs"] == len(SPLITS) * len(FOLDS)).all()
    paired = pd.read_csv(out.folder / "significance" / "paired_runs_all.csv")
    assert set(paired["dataset"]) == {"Cora"}
    assert out.significance.ours["n"] == 2  # the paper's test over Cora GCN and GAT only
    line = f"**Not in this report:** {INCOMPLETE}{LINE.format(study=partial_study)}."
    assert line in out.summary_md.read_text()
    summary = out.report_md.read_text().split("## Contents")[0]
    assert summary.rstrip().endswith(line)  # the last line of the summary
    # the same folder without the study: the partial rows enter the tables (what the study rule keeps out)
    plain, paper = load_inputs(results, paper_dir)
    assert ("Pubmed", "GCN") in build_tables(plain, paper).get("table1_ece").benchmarks
    assert plain.left_out == ""


def test_a_complete_benchmark_stands_beside_the_papers_cells(study_file, paper_dir):
    for dataset in ("Cora", "Pubmed"):
        for backbone in ("GCN", "GAT"):
            write_planned(study_file, dataset, backbone)
    study, paper = load_inputs(study_file.parent / "results", paper_dir, study_file=study_file)
    assert study.left_out == ""
    tables = build_tables(study, paper)
    compared = tables.comparisons["table1_ece"].long.set_index(["dataset", "backbone", "method"])
    published = {("GCN", "UnCal"): 7.18, ("GCN", "GATS"): 0.98, ("GCN", "SimCalib"): 0.93,
                 ("GAT", "UnCal"): 12.32, ("GAT", "GATS"): 1.03, ("GAT", "SimCalib"): 0.95}
    table1 = tables.get("table1_ece")
    for (backbone, method), value in published.items():
        cell = compared.loc[("Pubmed", backbone, method)]
        assert cell["paper_mean"] == pytest.approx(value)
        assert cell["runs"] == len(SPLITS) * len(FOLDS)
        assert cell["ours_mean"] == pytest.approx(table1.mean.at[("Pubmed", backbone), method])
    # Table 3 of the paper has no Pubmed cells: our Pubmed ablation rows stand in our table, none beside the paper's
    assert ("Pubmed", "GCN") in tables.get("table3_ablation_ece").benchmarks
    assert "Pubmed" not in set(tables.comparisons["table3_ablation_ece"].long["dataset"])


def test_the_leaderboard_ranks_the_complete_benchmarks_and_names_the_others(partial_study):
    results = str(partial_study.parent / "results")
    result = build_leaderboard([Family("f", "Tiny", (results,), study=str(partial_study))], n_resamples=50)
    assert set(result.benchmarks["dataset"]) == {"Cora"}
    assert int(result.table["benchmarks"].iloc[0]) == 2
    assert f"**Not ranked:** {INCOMPLETE}{LINE.format(study=partial_study)}." in leaderboard_markdown(result)
    unruled = build_leaderboard([Family("f", "Tiny", (results,))], n_resamples=50)
    assert "Pubmed" in set(unruled.benchmarks["dataset"])


def test_a_missing_study_file_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write_benchmark(tmp_path / "results" / "Cora_GCN", "Cora", "GCN", ["UnCal", "TS"], predictions=False)
    (tmp_path / "reports.yaml").write_text(yaml.safe_dump([{"results": "results", "out": "out", "title": "t",
                                                             "study": "study/none.yaml"}]))
    with pytest.raises(DataMissingError, match="study file 'study/none.yaml' does not exist"):
        read_manifest(tmp_path / "reports.yaml")
    (tmp_path / "board.yaml").write_text(yaml.safe_dump([{"name": "f", "title": "F", "results": "results",
                                                           "study": "study/none.yaml"}]))
    with pytest.raises(DataMissingError, match="study file 'study/none.yaml' does not exist"):
        read_families(tmp_path / "board.yaml")
    assert main(["report", "results", "--study", "study/none.yaml", "--out", "out"]) == 2
    err = capsys.readouterr().err
    assert "study file study/none.yaml does not exist" in err and "Traceback" not in err
