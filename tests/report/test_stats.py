"""Significance tests: the paper's Wilcoxon number from its own Table 1, Holm, pairing by run."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from simcalib.report.paper import load_paper_tables
from simcalib.report.stats import (
    across_benchmarks,
    holm,
    paired_comparison_cells,
    paired_comparisons,
    paired_runs,
    relative_reduction,
    wilcoxon_pvalue,
)


@pytest.fixture
def paper_table1_means(paper_dir) -> pd.DataFrame:
    paper = load_paper_tables(paper_dir)
    return paper.table("table1").pivot_table(index=["dataset", "backbone"], columns="method", values="mean")


def test_wilcoxon_on_the_papers_table1_gives_the_published_p(paper_table1_means):
    result = across_benchmarks(paper_table1_means, "SimCalib", "GATS")
    assert result["n"] == 16 and result["wins"] == 14
    assert result["pvalue"] == pytest.approx(7.63e-4, abs=5e-7)  # paper: p = 7.63 x 10^-4


def test_relative_reduction_on_the_papers_table1_is_the_published_ten_point_four_percent(paper_table1_means):
    result = across_benchmarks(paper_table1_means, "SimCalib", "GATS")
    assert round(100 * result["relative_reduction"], 1) == 10.4


def test_relative_reduction_is_the_mean_of_per_benchmark_ratios_not_the_ratio_of_means():
    # (2-1)/2 = 0.5 and (10-9)/10 = 0.1 -> 0.3; the ratio of means would be 2/12.
    assert relative_reduction([1.0, 9.0], [2.0, 10.0]) == pytest.approx(0.3)


def test_holm_matches_hand_computed_step_down_values_and_ignores_nan():
    adjusted = holm([0.01, 0.04, 0.03, np.nan])
    # m = 3: 3 x 0.01 = 0.03; 2 x 0.03 = 0.06; max(0.06, 1 x 0.04) = 0.06.
    np.testing.assert_allclose(adjusted[:3], [0.03, 0.06, 0.06])
    assert np.isnan(adjusted[3])
    np.testing.assert_allclose(holm([0.9, 0.8]), [1.0, 1.0])  # capped at 1, monotone


def test_wilcoxon_is_undefined_for_too_few_or_identical_pairs():
    assert np.isnan(wilcoxon_pvalue([1.0], [2.0])[1])
    assert np.isnan(wilcoxon_pvalue([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])[1])


def _runs(calibrator: str, ece: list[float], dataset: str = "Cora") -> pd.DataFrame:
    keys = [(s, i, f) for s in range(2) for i in range(1) for f in range(3)]
    return pd.DataFrame([{"dataset": dataset, "backbone": "GCN", "calibrator": calibrator, "split": s, "init": i,
                          "fold": f, "ece": e} for (s, i, f), e in zip(keys, ece)])


def test_paired_runs_pairs_by_split_init_fold_regardless_of_row_order():
    simcalib = _runs("SimCalib", [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    gats = _runs("GATS", [1.5, 2.6, 3.7, 4.8, 5.9, 7.0]).iloc[::-1]  # reversed rows: pairing must not care
    result = paired_runs(pd.concat([gats, simcalib]), "SimCalib", "GATS")
    row = result.iloc[0]
    assert row["pairs"] == 6 and row["wins"] == 6
    assert row["mean_diff"] == pytest.approx(-np.mean([0.5, 0.6, 0.7, 0.8, 0.9, 1.0]))
    assert row["pvalue"] == pytest.approx(2 / 2**6)  # exact two-sided test, all 6 differences negative


def test_paired_runs_holm_corrects_over_benchmarks_and_skips_unpaired_runs():
    rows = pd.concat([_runs("SimCalib", [1, 2, 3, 4, 5, 6]), _runs("GATS", [2, 3, 4, 5, 6, 7]),
                      _runs("SimCalib", [1, 2, 3, 4, 5, 6], "Citeseer"), _runs("GATS", [2, 3, 4, 5, 6, 7], "Citeseer"),
                      _runs("SimCalib", [1, 2, 3], "Photo")])  # Photo has no GATS runs: no pairs
    result = paired_runs(rows, "SimCalib", "GATS")
    assert list(result["dataset"]) == ["Cora", "Citeseer"]  # paper order, Photo absent
    np.testing.assert_allclose(result["pvalue_holm"], 2 * result["pvalue"])


def test_paired_comparisons_stacks_pairs_in_benchmark_order_and_skips_pairs_that_never_ran():
    rows = pd.concat([_runs("GATS", [3.0, 4.0, 5.0, 6.0, 7.0, 8.0], "Citeseer"),
                      _runs("SimCalib", [2.0, 3.5, 4.0, 5.5, 6.0, 8.5], "Citeseer"),
                      _runs("GATS", [3.0, 4.0, 5.0, 6.0, 7.0, 8.0]),
                      _runs("SimCalib", [3.5, 4.5, 5.5, 6.5, 7.5, 7.0]),
                      _runs("IRM", [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])])
    frame = paired_comparisons(rows, [("SimCalib", "GATS"), ("IRM", "GATS"), ("GETS", "GATS")])
    assert list(zip(frame["dataset"], frame["method"])) == [("Cora", "SimCalib"), ("Cora", "IRM"),
                                                          ("Citeseer", "SimCalib")]
    cora_irm = frame.iloc[1]
    assert cora_irm["pairs"] == 6 and cora_irm["wins"] == 6 and cora_irm["mean_diff"] == pytest.approx(-2.0)
    # Holm within a pair: SimCalib vs GATS is corrected over its two benchmarks, IRM's single test is not
    simcalib = frame[frame["method"] == "SimCalib"]
    assert (simcalib["pvalue_holm"] >= simcalib["pvalue"]).all()
    assert cora_irm["pvalue_holm"] == cora_irm["pvalue"]
    cells = paired_comparison_cells(frame)
    assert cells[1][:4] == ["Cora GCN", "IRM", "GATS", "6"] and cells[1][8] == "6/6"
    assert cells[1][7] == "[-2.00, -2.00]"  # every pair differs by -2: the interval is that point


def test_rows_of_one_run_on_different_backbones_are_not_paired():
    gats = _runs("GATS", [3.0, 4.0, 5.0, 6.0, 7.0, 8.0]).assign(backbone_digest=["a", "b", "c", "d", "e", None])
    simcalib = _runs("SimCalib", [2.0, 3.0, 4.0, 5.0, 6.0, 7.0]).assign(
        backbone_digest=["a", "b", "c", "x", None, "f"])  # run 4: another backbone; 5 and 6: one side unknown
    result = paired_runs(pd.concat([gats, simcalib]), "SimCalib", "GATS")
    assert result["pairs"].tolist() == [5]


def test_each_paired_difference_has_the_split_bootstrap_interval_of_its_mean():
    from simcalib.report.bootstrap import mean_interval

    simcalib = _runs("SimCalib", [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    gats = _runs("GATS", [1.5, 2.5, 3.5, 6.0, 7.0, 8.0])  # differences -0.5 in split 0, -2 in split 1
    row = paired_runs(pd.concat([gats, simcalib]), "SimCalib", "GATS").iloc[0]
    want = mean_interval([-0.5] * 3 + [-2.0] * 3, [0, 0, 0, 1, 1, 1])
    assert (row["diff_ci_low"], row["diff_ci_high"]) == pytest.approx((want.low, want.high))
    assert (want.low, want.high) == pytest.approx((-2.0, -0.5))  # the two splits' mean differences
    one = paired_runs(pd.concat([gats.iloc[:1], simcalib.iloc[:1]]), "SimCalib", "GATS").iloc[0]
    assert one["pairs"] == 1 and np.isnan(one["diff_ci_low"])  # one pair: no interval
