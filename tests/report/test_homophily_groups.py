"""The local-homophily section: group ECEs from the rows' JSON, the low-homophily tests, the per-graph choice."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from simcalib.analysis.homophily import group_names
from simcalib.report.build import build_tables, one_class_blocks
from simcalib.report.homophily_groups import (
    LOW_GROUP,
    choice_table,
    group_frame,
    group_means,
    homophily_blocks,
    low_group_tests,
    write_homophily,
)
from simcalib.report.paper import LONG_COLUMNS, PaperTables
from simcalib.report.render import Figure, Table
from simcalib.report.results import StudyResults

GROUPS = group_names()


def _bins(ece: list, count: list) -> str:
    return json.dumps({"version": 1, "groups": GROUPS, "count": count, "ece": ece,
                       "accuracy": [None] * len(GROUPS), "confidence": [None] * len(GROUPS)})


def _rows(low_ece: dict[str, list[float]], dataset: str = "Actor", extra: dict | None = None) -> pd.DataFrame:
    """One row per calibrator and run (splits 0-2, init 0, fold 0-1); the h < 0.2 group's ECE from ``low_ece``
    (one value per run), the [0.8, 1] group 5.0 everywhere, the middle groups empty, no isolated node."""
    rows = []
    runs = [(s, f) for s in range(3) for f in range(2)]
    for name, values in low_ece.items():
        for (split, fold), value in zip(runs, values):
            rows.append({"dataset": dataset, "backbone": "GCN", "calibrator": name, "split": split, "init": 0,
                         "fold": fold, "ece": value / 2, "nll": 1.0 + value / 100, "brier": 0.5,
                         "backbone_digest": f"d{split}{fold}",
                         "homophily_bins": _bins([value, None, None, None, 5.0, None], [40, 0, 0, 0, 10, 0]),
                         **(extra or {})})
    return pd.DataFrame(rows)


def test_group_frame_reads_each_group_with_nodes_and_skips_rows_without_the_column():
    rows = _rows({"TS": [10.0] * 6})
    rows.loc[0, "homophily_bins"] = np.nan  # a row written before the column existed
    frame = group_frame(rows)
    assert len(frame) == 5 * 2  # 5 rows with data x 2 groups with nodes (empty groups left out)
    assert set(frame["group"]) == {LOW_GROUP, "[0.8,1]"}
    assert frame[frame["group"] == LOW_GROUP]["count"].eq(40).all()
    assert group_frame(rows.drop(columns=["homophily_bins"])).empty


def test_group_means_are_means_over_runs_with_a_split_interval():
    values = [10.0, 12.0, 14.0, 16.0, 18.0, 20.0]
    means = group_means(group_frame(_rows({"TS": values})))
    low = means[(means["group"] == LOW_GROUP) & (means["calibrator"] == "TS")].iloc[0]
    assert low["ece"] == pytest.approx(np.mean(values))
    assert low["runs"] == 6 and low["nodes"] == 40
    assert low["ci_low"] <= low["ece"] <= low["ci_high"]


def test_low_group_tests_find_simcalib_below_its_ablation_without_the_homophily_term():
    rows = _rows({"SimCalib": [8.0, 9.0, 7.0, 8.5, 9.5, 7.5], "SimCalib_r": [12.0, 13.0, 11.0, 12.5, 13.5, 11.5],
                  "TS": [8.0] * 6})
    tests = low_group_tests(group_frame(rows))
    pair = tests[(tests["method"] == "SimCalib") & (tests["reference"] == "SimCalib_r")].iloc[0]
    assert pair["mean_diff"] == pytest.approx(-4.0)
    assert pair["wins"] == 6 and pair["pairs"] == 6
    # only the low group is tested: the [0.8, 1] group (equal everywhere) does not enter
    assert pair["method_mean"] == pytest.approx(np.mean([8.0, 9.0, 7.0, 8.5, 9.5, 7.5]))


def test_choice_picks_the_lowest_error_and_the_highest_roc_auc_and_tests_it_against_ts():
    rows = _rows({"TS": [10.0] * 6, "GATS": [6.0, 7.0, 6.5, 6.0, 7.0, 6.5], "UnCal": [1.0] * 6})
    rows["roc_auc"] = np.where(rows["calibrator"] == "TS", 80.0, 85.0)
    rows["accuracy"] = 70.0
    choice = choice_table(rows).set_index("metric")
    assert choice.loc["ece", "best"] == "GATS"  # UnCal is never a choice
    assert choice.loc["ece", "accuracy_diff"] == pytest.approx(0.0)
    assert choice.loc["ece", "mean_diff"] == pytest.approx((np.mean([6.0, 7.0, 6.5]) - 10.0) / 2)
    assert choice.loc["roc_auc", "best"] == "GATS"
    assert choice.loc["brier", "best"] in {"GATS", "TS"}  # equal means: either, with no difference
    assert choice.loc["brier", "mean_diff"] == pytest.approx(0.0)


def test_write_homophily_writes_tables_tests_and_the_figure_and_the_blocks_show_them(tmp_path):
    rows = _rows({"SimCalib": [8.0, 9.0, 7.0, 8.5, 9.5, 7.5], "SimCalib_r": [12.0] * 6, "TS": [8.0] * 6})
    outputs = write_homophily(rows, tmp_path)
    assert (tmp_path / "tables" / "homophily_groups_ece.csv").is_file()
    assert (tmp_path / "significance" / "paired_runs_low_homophily.csv").is_file()
    assert outputs.figure and outputs.figure[0].is_file()
    blocks = homophily_blocks(outputs, tmp_path)
    assert any(isinstance(b, Figure) for b in blocks)
    assert sum(isinstance(b, Table) for b in blocks) == 3  # groups, low-group tests, choice
    assert write_homophily(rows.drop(columns=["homophily_bins"]), tmp_path / "none") is None


def _study(rows: pd.DataFrame) -> StudyResults:
    return StudyResults(root=None, rows=rows.assign(label_rate=0.15), predictions=pd.DataFrame())


def test_binary_tables_appear_only_where_rows_hold_binary_metrics():
    # GETS and WATS among them: the binary tables once named them twice, which broke the table on real rows
    rows = _rows({"TS": [10.0] * 6, "GATS": [9.0] * 6, "GETS": [11.0] * 6, "WATS": [8.0] * 6})
    empty_paper = PaperTables(None, pd.DataFrame(columns=LONG_COLUMNS))
    keys = {t.spec.key for t in build_tables(_study(rows), empty_paper).results}
    assert "binary_roc_auc" not in keys and "binary_positive_ece" not in keys
    rows["roc_auc"], rows["positive_ece"] = 80.0, 3.0
    results = {t.spec.key: t for t in build_tables(_study(rows), empty_paper).results}
    assert {"binary_roc_auc", "binary_positive_ece"} <= set(results)
    assert list(results["binary_roc_auc"].mean.columns) == ["TS", "GATS", "GETS", "WATS"]


def test_one_class_backbones_are_named_with_their_run_counts():
    rows = _rows({"TS": [10.0] * 6, "GATS": [9.0] * 6}, dataset="tolokers")
    rows["one_class_backbone"] = rows["split"] == 0  # 2 of 6 runs
    text = one_class_blocks(rows)[0].text
    assert "tolokers GCN: 2 of 6 runs" in text
    assert "NLL and Brier" in text and "ROC-AUC" not in text  # rows without ROC-AUC: a multi-class graph
    assert "ROC-AUC and the calibration error of p(y = 1)" in one_class_blocks(rows.assign(roc_auc=70.0))[0].text
    assert one_class_blocks(rows.assign(one_class_backbone=False)) == []

