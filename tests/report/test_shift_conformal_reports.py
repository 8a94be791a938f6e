"""The shift and conformal reports on tiny synthetic rows: the answer table's means, intervals and Holm-corrected
paired tests against TS, the ECE / set-size correlation, the run counts, and `simcalib report --every` rendering a
kind entry when its rows exist and skipping it in one line when not."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml

from simcalib.report.completeness import complete_calibrators, study_plan
from simcalib.report.conformal import (
    answer_bullets,
    calibration_and_size,
    conformal_table,
    coverage_off,
    expected_coverage,
)
from simcalib.report.conformal import answer_sentence as conformal_answer_sentence
from simcalib.report.conformal import answer_table as conformal_answer_table
from simcalib.report.shift import (
    answer_sentence,
    answer_table,
    build_shift_report,
    read_kind_rows,
    shift_table,
)
from simcalib.store.integrity import CALIBRATOR_DIGEST_COLUMN
from simcalib.store.results_store import append_rows

RUNS = [(s, 0, f) for s in range(5) for f in range(3)]


def _shift_rows(property: str = "popularity") -> list[dict]:
    rng = np.random.default_rng(0)
    rows = []
    for split, init, fold in RUNS:
        ts_id, ts_ood = 4 + rng.normal(0, 0.5), 8 + rng.normal(0, 0.5)
        # GATS: below TS out of distribution on every run; Worse: above TS in and out; UnCal far above
        for name, id_ece, ood_ece in (("UnCal", ts_id + 10, ts_ood + 12), ("TS", ts_id, ts_ood),
                                      ("GATS", ts_id + rng.normal(0, 0.1), ts_ood - 2 + rng.normal(0, 0.1)),
                                      ("Worse", ts_id + 1 + rng.normal(0, 0.1), ts_ood + 1 + rng.normal(0, 0.1))):
            rows.append({"dataset": "Cora", "backbone": "GCN", "calibrator": name, "split": split, "init": init,
                         "fold": fold, "seed": 100 * split + fold, "label_rate": 0.15, "backbone_digest": f"b{split}{fold}",
                         "shift_property": property, "id_ece": id_ece, "ood_ece": ood_ece, "id_nll": id_ece / 10,
                         "ood_nll": ood_ece / 10})
    return rows


def _conformal_rows() -> list[dict]:
    rows = []
    for split, init, fold in RUNS:
        for rank, name in enumerate(("TS", "Good", "UnCal")):  # ECE and set size grow together
            rows.append({"dataset": "Cora", "backbone": "GCN", "calibrator": name, "split": split, "init": init,
                         "fold": fold, "seed": 100 * split + fold, "label_rate": 0.15, "backbone_digest": "b",
                         "ece": 3.0 + 5 * rank + 0.1 * split, "APS_coverage@0.1": 0.9 + 0.001 * fold + 0.003 * split,
                         "APS_set_size@0.1": 1.5 + 0.4 * rank + 0.01 * split - (0.1 if name == "Good" else 0),
                         "APS_singleton_hit@0.1": 0.5 - 0.1 * rank})
    return rows


def test_the_shift_table_pairs_runs_and_tests_against_ts(tmp_path):
    table = shift_table(pd.DataFrame(_shift_rows()))
    gats = table.set_index("calibrator").loc["GATS"]
    assert gats["runs"] == 15 and gats["ood_ece_diff"] == pytest.approx(-2, abs=0.1)
    assert gats["ood_ece_diff_low"] < gats["ood_ece_diff"] < gats["ood_ece_diff_high"] < 0
    assert gats["ood_ece_pvalue_holm"] < 0.05 and not gats["id_ece_pvalue_holm"] < 0.05
    ts = table.set_index("calibrator").loc["TS"]
    assert np.isnan(ts["ood_ece_pvalue"]) and ts["id_ece_low"] < ts["id_ece_mean"] < ts["id_ece_high"]
    # Holm over the table: each adjusted p at least its raw p
    assert (table["ood_ece_pvalue_holm"].dropna() >= table["ood_ece_pvalue"].dropna()).all()


def test_the_shift_report_leads_with_the_answer_and_states_the_run_counts(tmp_path):
    for property in ("popularity", "density"):
        append_rows(tmp_path / "results" / f"Cora_GCN_{property}" / "results.csv", _shift_rows(property))
    report = build_shift_report(tmp_path / "results", tmp_path / "out", "Shift")
    text = report.read_text()
    assert text.index("## Answer") < text.index("## Per benchmark") < text.index("## ECE and NLL") < text.index(
        "## What the rows hold")
    assert "Below TS on both: none; below in distribution only: none" in text
    assert "Node-wise (graph-aware) calibrators below one temperature (TS) out of distribution: GATS of 1" in text
    assert "OOD ECE below TS: GATS" in text and "ID ECE below TS: none; above: UnCal, Worse" in text
    assert "`Cora_GCN_density`: 15 runs, 4 calibrators" in text and "2 benchmarks, 15 runs each" in text
    assert (tmp_path / "out" / "report.html").is_file() and (tmp_path / "out" / "shift_table.csv").is_file()
    # the same run in two property folders is no repeat: each folder is checked on its own
    assert len(read_kind_rows(tmp_path / "results", ["id_ece"]).rows) == 2 * 60


def test_the_shift_answer_is_one_row_per_calibrator_over_the_benchmarks_and_its_sentence(tmp_path):
    rows = pd.DataFrame([*_shift_rows("popularity"), *_shift_rows("density")])
    table = shift_table(rows)
    answer = answer_table(table).set_index("calibrator")
    assert list(answer.index[:2]) == ["GATS", "TS"] and answer.index[-1] == "UnCal"  # by mean OOD ECE rank
    assert answer.loc["GATS", "ood_ece_rank"] == 1.0 and answer.loc["UnCal", "id_ece_rank"] == 4.0
    assert answer.loc["GATS", ["ood_below", "ood_above", "id_below", "kept"]].tolist() == [2, 0, 0, 0]
    assert answer.loc["Worse", ["ood_above", "id_above"]].tolist() == [2, 2]
    assert answer.loc["GATS", "benchmarks"] == 2 and answer.loc["GATS", "shift_ece_mean"] == pytest.approx(2, abs=0.2)
    sentence = answer_sentence(table, answer_table(table))
    assert sentence.startswith("Over 2 benchmarks (dataset x backbone x shift property): the lowest mean ECE rank "
                               "on the out-of-distribution test nodes is GATS's (1.0). Significantly below TS out of "
                               "distribution (benchmarks): GATS (2); below it in and out of distribution: none.")
    assert sentence.endswith("out of distribution on any benchmark: 1 of 1 (GATS).")
    append_rows(tmp_path / "results" / "Cora_GCN_popularity" / "results.csv", _shift_rows("popularity"))
    build_shift_report(tmp_path / "results", tmp_path / "out", "Shift")
    summary = (tmp_path / "out" / "summary.md").read_text()  # the answer alone, for a README to embed
    assert summary.startswith("Over 1 benchmark") and "| GATS | 1 | 1.0 |" in summary
    assert summary in (tmp_path / "out" / "report.md").read_text()


def _planned_shift_rows(tmp_path):
    """The rows of ``_shift_rows`` keyed as the plan of a one-benchmark shift study keys them (its seeds and
    calibrator digests; ``Worse`` played by VS), and that plan."""
    study = tmp_path / "shift.yaml"
    study.write_text(yaml.safe_dump({
        "name": "shift", "seed": 10, "benchmarks": {"datasets": ["Cora"], "backbones": ["GCN"]},
        "calibrators": ["UnCal", "TS", "GATS", "VS"], "runs": {"splits": 5, "inits": 1, "folds": 3,
                                                                "generated_splits": True},
        "shift": {"properties": ["popularity"], "id_fraction": 0.5}, "output": str(tmp_path / "results")}))
    plan = study_plan(study)
    benchmark = plan.benchmarks[0]
    seeds = {(r.split, r.init, r.fold): seed for r, seed in zip(benchmark.runs, benchmark.seeds)}
    rows = pd.DataFrame(_shift_rows()).replace({"calibrator": {"Worse": "VS"}}).assign(folder=benchmark.out_dir.name)
    rows["seed"] = [seeds[key] for key in zip(rows["split"], rows["init"], rows["fold"])]
    rows[CALIBRATOR_DIGEST_COLUMN] = [benchmark.calibrator(c).digest for c in rows["calibrator"]]
    return rows, plan


def test_a_calibrator_with_a_planned_run_missing_is_left_out_and_named(tmp_path):
    rows, plan = _planned_shift_rows(tmp_path)
    assert rows["folder"].iloc[0] == "Cora_GCN_popularity"
    partial = rows[~((rows["calibrator"] == "GATS") & (rows["split"] == 4))]  # GATS: 12 of 15 runs
    kept, lines = complete_calibrators(partial, plan)
    assert set(kept["calibrator"]) == {"UnCal", "TS", "VS"} and len(kept) == 45
    assert lines == ["`Cora_GCN_popularity`: GATS with at most 12 of 15 runs; left out until complete"]
    same, none = complete_calibrators(rows, plan)
    assert same is rows and none == []  # every calibrator complete: every row
    assert complete_calibrators(partial, None)[0] is partial  # without a study file: every row


def test_a_row_under_another_definition_does_not_complete_its_calibrator(tmp_path):
    rows, plan = _planned_shift_rows(tmp_path)
    stale = (rows["calibrator"] == "TS") & (rows["split"] == 0) & (rows["fold"] == 0)
    rows.loc[stale, CALIBRATOR_DIGEST_COLUMN] = "0123456789ab"  # TS of that run computed by other code
    kept, lines = complete_calibrators(rows, plan)
    assert "TS" not in set(kept["calibrator"]) and len(kept) == 45
    assert lines == ["`Cora_GCN_popularity`: TS with at most 14 of 15 runs; left out until complete"]


def test_a_shift_report_without_rows_writes_nothing(tmp_path):
    assert build_shift_report(tmp_path / "none", tmp_path / "out", "Shift") is None
    assert not (tmp_path / "out").exists()


def test_the_conformal_table_and_the_calibration_set_size_correlation():
    table = conformal_table(pd.DataFrame(_conformal_rows()))
    good = table.set_index("calibrator").loc["Good"]
    assert good["score"] == "APS" and good["alpha"] == 0.1 and good["runs"] == 15
    assert good["set_size_mean"] == pytest.approx(1.8, abs=0.03) and good["size_diff"] == pytest.approx(0.3)
    assert good["coverage_low"] < good["coverage_mean"] < good["coverage_high"]
    assert good["size_pvalue_holm"] < 0.05
    (correlation,) = calibration_and_size(table).to_dict("records")
    assert correlation["spearman"] == pytest.approx(1.0) and correlation["smallest"] == "TS"
    (answer,) = answer_bullets(table, calibration_and_size(table))
    assert "smaller than TS's: none, larger: Good, UnCal" in answer
    # coverage 0.907 on every run of every calibrator: above 0.9 beyond its interval, said so
    assert "expected 0.900; mean coverage with a 95% interval beside it: TS (APS, 0.907)" in answer


def test_coverage_is_held_against_split_conformals_expected_coverage_with_the_runs_quantile_nodes():
    # with n = 20 quantile nodes split conformal covers ceil(21 * 0.9) / 21 = 19/21 = 0.905 in expectation, not 0.9
    table = conformal_table(pd.DataFrame(_conformal_rows()).assign(n_quantile=20))
    assert table["coverage_expected"].tolist() == pytest.approx([19 / 21] * 3)
    assert not coverage_off(table).any()  # 0.907, interval about [0.903, 0.911]: beside 0.9, not beside 0.905
    (answer,) = answer_bullets(table, calibration_and_size(table))
    assert "the 95% interval of every calibrator's mean coverage holds its expected value" in answer
    assert expected_coverage(pd.DataFrame({"n_quantile": [99]}), 0.1) == pytest.approx(90 / 100)  # exact rank
    assert expected_coverage(pd.DataFrame({"x": [1]}), 0.05) == pytest.approx(0.95)  # no n_quantile: 1 - alpha


def test_the_conformal_answer_ranks_set_sizes_per_calibrator_and_counts_cells_against_ts(tmp_path):
    rows = pd.DataFrame([*_conformal_rows(), *(dict(r, dataset="Citeseer") for r in _conformal_rows())])
    table = conformal_table(rows)
    answer = conformal_answer_table(table).set_index("calibrator")
    assert list(answer.index) == ["TS", "Good", "UnCal"]  # by mean set-size rank (TS's sets the smallest)
    assert answer.loc["Good", "size_rank APS @ 0.1"] == 2.0 and answer.loc["UnCal", "ece_rank"] == 3.0
    assert answer.loc["Good", ["benchmarks", "smaller", "larger", "cells"]].tolist() == [2, 0, 2, 2]
    assert answer.loc["TS", "coverage_off"] == 2  # 0.907 on every run, beside 0.9 beyond its interval
    sentence = conformal_answer_sentence(table, conformal_answer_table(table), calibration_and_size(table))
    assert sentence.startswith("Over 2 benchmarks: the lowest mean set-size rank at alpha 0.1 (1 = the smallest "
                               "sets of the calibrators at the same nominal coverage) per score: APS @ 0.1: TS (1.0).")
    assert "smaller than TS's (cells of 2): none; larger: Good (2), UnCal (2)." in sentence
    assert sentence.endswith("in 2 of 2 cells, significantly (p < 0.05) in 2.")  # rho = 1 on both benchmarks


def test_make_report_renders_kind_entries_with_rows_and_skips_them_without(tmp_path, capsys):
    from simcalib.cli import main

    append_rows(tmp_path / "conformal" / "Cora_GCN" / "results.csv", _conformal_rows())
    manifest = tmp_path / "reports.yaml"
    manifest.write_text(f"- results: {tmp_path / 'conformal'}\n  out: {tmp_path / 'cout'}\n  kind: conformal\n"
                        f"  title: Sets\n- results: {tmp_path / 'absent'}\n  out: {tmp_path / 'sout'}\n  kind: shift\n"
                        "  title: Shift\n")
    assert main(["report", "--every", str(manifest)]) == 0
    printed = capsys.readouterr().out
    assert f"report: {tmp_path / 'cout' / 'report.md'}" in printed
    assert f"report: {tmp_path / 'sout'} skipped (no shift rows below {tmp_path / 'absent'} yet)" in printed
    assert "Spearman(ECE, size) over 3 calibrators +1.00" in (tmp_path / "cout" / "report.md").read_text()
    assert not (tmp_path / "sout").exists()
    manifest.write_text(f"- results: {tmp_path}\n  out: o\n  kind: drift\n  title: t\n")
    assert main(["report", "--every", str(manifest)]) == 2
    assert "kind must be one of shift, conformal" in capsys.readouterr().err


def test_the_coverage_line_names_the_planned_benchmarks_without_a_complete_calibrator():
    from simcalib.report.shift import coverage_lines

    rows = pd.DataFrame([{"folder": "Cora_GCN", "calibrator": c, "split": s, "init": 0, "fold": 0}
                         for c in ("TS", "GATS") for s in range(2)])
    planned = pd.DataFrame([{"folder": f, "calibrators": ("TS", "GATS", "WATS"), "runs": 2}
                            for f in ("Cora_GCN", "Photo_GAT")])
    lines = coverage_lines(rows, planned)
    assert lines[0] == "`Cora_GCN`: 2 runs, 2 calibrators (GATS, TS), 2 runs each"
    assert lines[1] == ("The study file plans 2 benchmarks of 2 runs and 3 calibrators; no calibrator has every "
                        "planned run on 1 benchmarks (Photo_GAT; those with rows in progress are named below), and "
                        "the calibrators WATS have it on none.")
