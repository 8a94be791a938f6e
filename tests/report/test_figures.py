"""Figures: the reliability panel, the grids from saved predictions, feature-distance groups, data efficiency."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from simcalib.analysis.figure_bins import to_json
from simcalib.analysis.plots import reliability_diagram
from simcalib.errors import DataCorruptError
from simcalib.metrics import ece, reliability_bins
from simcalib.report import figures
from simcalib.report.results import load_study_results

from .synthetic import write_benchmark


def test_reliability_diagram_draws_bin_accuracies_and_reports_the_ece():
    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.ones(3) * 0.5, 500)
    labels = rng.integers(0, 3, 500)
    ax = reliability_diagram(probs, labels, title="toy")
    assert ax.get_title() == "toy" and ax.get_xlabel() == "confidence"
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert f"ECE = {100 * ece(probs, labels):.2f}%" in texts
    accuracy_bars = ax.containers[0]
    expected = np.nan_to_num(reliability_bins(probs, labels).accuracy)
    np.testing.assert_allclose([bar.get_height() for bar in accuracy_bars], expected)
    gap_bars = ax.containers[1]  # from accuracy to mean confidence, one per non-empty bin
    bins = reliability_bins(probs, labels)
    filled = bins.count > 0
    np.testing.assert_allclose([bar.get_height() for bar in gap_bars],
                               np.abs(bins.confidence - bins.accuracy)[filled])
    titled = reliability_diagram(probs, labels, title="toy", legend=False)
    assert titled.get_legend() is None and titled.get_title().endswith(f"ECE {100 * ece(probs, labels):.2f}%")


def test_binned_results_rows_draw_the_figures_of_the_saved_predictions(synthetic_study):
    study = load_study_results(synthetic_study)
    from_files = figures.figure_bins_frame(study.main_predictions())
    # the same runs as results rows carrying only their figure_bins, as results.csv stores them
    rows = from_files[figures.BINS_KEYS].copy()
    rows["figure_bins"] = [to_json(b) for b in from_files["bins"]]
    from_rows = figures.figure_bins_frame(study.main_predictions().iloc[0:0], rows)
    assert set(from_rows["source"]) == {"results.csv"} and len(from_rows) == len(from_files)
    for method in ("UnCal", "SimCalib"):
        a = figures._pooled(from_files, ("Cora", "GCN"), method)
        b = figures._pooled(from_rows, ("Cora", "GCN"), method)
        np.testing.assert_allclose(b.confidence, a.confidence, atol=1e-5)
        assert np.array_equal(a.count, b.count) and np.array_equal(a.correct, b.correct) and a.runs == b.runs
    np.testing.assert_allclose(figures.similarity_groups(from_rows)["ece"], figures.similarity_groups(from_files)["ece"],
                               atol=1e-4)


def test_a_corrupt_figure_bins_value_is_a_clear_error(synthetic_study):
    rows = pd.DataFrame([{"dataset": "Cora", "backbone": "GCN", "calibrator": "UnCal", "split": 0, "init": 0,
                          "fold": 0, "figure_bins": "{not json"}])
    with pytest.raises(DataCorruptError, match="results row Cora GCN UnCal 0 0 0: not a figure_bins value"):
        figures.figure_bins_frame(pd.DataFrame(), rows)


def test_grids_and_figures_are_written_as_png_and_pdf(synthetic_study, tmp_path):
    study = load_study_results(synthetic_study)
    bins = figures.figure_bins_frame(study.main_predictions(), study.main_rows())
    for name, fig in (("rel", figures.reliability_grid(bins)), ("conf", figures.confidence_grid(bins)),
                      ("eff", figures.data_efficiency_figure(study.rows))):
        paths = figures.save_figure(fig, tmp_path, name)
        assert [p.suffix for p in paths] == [".png", ".pdf"] and all(p.stat().st_size > 1000 for p in paths)


def test_feature_groups_are_equal_sized_quantiles_of_the_distance(synthetic_study):
    predictions = load_study_results(synthetic_study).main_predictions()
    groups = figures.similarity_groups(figures.figure_bins_frame(predictions))
    assert set(groups["group"]) == {1, 2, 3, 4, 5}
    assert set(zip(groups["dataset"], groups["backbone"])) == {("Cora", "GCN")}  # Citeseer has no distances
    one_run = groups[(groups["split"] == 0) & (groups["fold"] == 0) & (groups["calibrator"] == "UnCal")]
    assert one_run.sort_values("group")["mean_distance"].is_monotonic_increasing
    summary = figures.similarity_summary(groups)
    uncal = summary[summary["calibrator"] == "UnCal"]
    assert np.allclose(uncal["improvement"], 0.0)
    # The synthetic SimCalib is overconfident where evidence is low (far nodes): UnCal worst far away too.
    assert uncal.sort_values("group")["ece"].iloc[-1] > uncal.sort_values("group")["ece"].iloc[0]


def test_missing_inputs_give_no_figure_instead_of_an_error(tmp_path):
    write_benchmark(tmp_path / "a", "Cora", "GCN", ["UnCal", "GATS", "SimCalib"], feature_distance=False)
    study = load_study_results(tmp_path)
    assert figures.similarity_groups(figures.figure_bins_frame(study.predictions)) is None  # no feature_distance arrays
    assert figures.data_efficiency_figure(study.rows) is None  # a single label rate
    assert figures.reliability_grid(figures.figure_bins_frame(study.predictions.iloc[0:0])) is None
    assert figures.data_efficiency_figure(pd.DataFrame(columns=study.rows.columns)) is None


def test_the_feature_similarity_figure_shows_simcalib_feature_temperature_per_group(synthetic_study):
    from dataclasses import replace

    bins = figures.figure_bins_frame(load_study_results(synthetic_study).main_predictions())
    simcalib = bins["calibrator"] == "SimCalib"
    # T_feat growing with the group's distance, as the paper's mechanism should give
    bins.loc[simcalib, "bins"] = [replace(b, t_feat=0.5 + b.distance, t_feat_runs=1) for b in bins.loc[simcalib, "bins"]]
    summary = figures.similarity_summary(figures.similarity_groups(bins))
    line = summary[summary["calibrator"] == "SimCalib"].sort_values("group")
    assert line["t_feat"].is_monotonic_increasing and (line["t_feat_runs"] == line["runs"]).all()
    assert summary[summary["calibrator"] == "UnCal"]["t_feat"].isna().all()
    fig = figures.feature_similarity_figure(summary)
    assert line["t_feat_relative"].is_monotonic_increasing and line["t_feat_relative"].mean() == pytest.approx(1.0)
    drawn = [ax for ax in fig.axes if ax.get_visible() and ax.get_ylabel() == "SimCalib T_feat / run mean"]
    assert len(drawn) == 1 and drawn[0].lines  # one benchmark with distances: one T_feat panel, with its line


def test_reliability_bins_carry_the_split_bootstrap_interval_of_their_pooled_accuracy(synthetic_study):
    from simcalib.report.bootstrap import ratio_interval

    bins = figures.figure_bins_frame(load_study_results(synthetic_study).main_predictions())
    low, high = figures.reliability_intervals(bins, ("Cora", "GCN"), "UnCal")
    runs = bins[(bins["dataset"] == "Cora") & (bins["calibrator"] == "UnCal")]
    top = int(np.flatnonzero(np.isfinite(low))[-1])  # the highest bin with an interval
    count = np.array([b.reliability()[0][top] for b in runs["bins"]])
    correct = np.array([b.reliability()[2][top] for b in runs["bins"]])
    want = ratio_interval(correct, count, runs["split"].to_numpy())
    assert (low[top], high[top]) == pytest.approx((want.low, want.high))
    pooled = correct.sum() / count.sum()
    assert low[top] <= pooled <= high[top]
    figure = figures.reliability_grid(bins)
    panel = figure.axes[0]
    assert any(len(c.get_segments()) == int(np.isfinite(low).sum()) for c in panel.collections)  # one line per bin


def test_the_smooth_curve_follows_the_diagonal_for_calibrated_predictions_and_is_drawn_from_saved_ones(
        synthetic_study):
    rng = np.random.default_rng(0)
    confidence = rng.uniform(0.3, 1.0, 20000)
    correct = (rng.uniform(size=20000) < confidence).astype(float)  # calibrated
    grid, curve = figures.smooth_reliability(confidence, correct)
    inside = (grid > 0.4) & (grid < 0.9)
    assert np.nanmax(np.abs(curve[inside] - grid[inside])) < 0.05
    assert np.isnan(curve[grid < 0.2]).all()  # no confidences there: no curve
    over = figures.smooth_reliability(confidence, (rng.uniform(size=20000) < confidence - 0.2).astype(float))[1]
    assert np.nanmean(grid[inside] - over[inside]) == pytest.approx(0.2, abs=0.05)  # over-confident by 0.2
    study = load_study_results(synthetic_study)
    curves = figures.smooth_curves(study.main_predictions())
    assert set(curves) == {(("Cora", "GCN"), "UnCal"), (("Cora", "GCN"), "SimCalib"), (("Citeseer", "GAT"), "UnCal"),
                           (("Citeseer", "GAT"), "SimCalib")}
    figure = figures.reliability_grid(figures.figure_bins_frame(study.main_predictions()), smooth=curves)
    assert any(line.get_linestyle() == ":" for line in figure.axes[0].get_lines())  # the dotted smooth curve


def test_cost_points_are_the_median_fit_time_and_mean_ece_with_their_intervals():
    rows = pd.DataFrame([{"dataset": "Cora", "backbone": "GCN", "calibrator": c, "split": s, "init": 0, "fold": f,
                          "ece": e + s, "fit_seconds": t * (1 + s)}
                         for c, e, t in (("TS", 3.0, 0.1), ("GATS", 2.0, 2.0), ("UnCal", 9.0, 0.0))
                         for s in (0, 1) for f in range(3)])
    frame = figures.cost_frame(rows).set_index("calibrator")
    assert set(frame.index) == {"TS", "GATS"}  # UnCal fits nothing: no point on a log axis
    assert frame.at["GATS", "fit_seconds_median"] == pytest.approx(3.0) and frame.at["GATS", "ece_mean"] == 2.5
    assert (frame.at["GATS", "ece_ci_low"], frame.at["GATS", "ece_ci_high"]) == pytest.approx((2.0, 3.0))
    figure = figures.cost_figure(frame.reset_index())
    assert figure.axes[0].get_xscale() == "log" and figure.axes[0].get_title() == "Cora GCN (6 runs)"
    assert len(figure.axes[0].get_lines()) == 2 * 3  # TS and GATS: a point and two interval lines each
    uncal_only = pd.DataFrame([{**frame.reset_index().iloc[0].to_dict(), "calibrator": "UnCal"}])
    assert figures.cost_figure(uncal_only) is None  # UnCal fits nothing: not drawn against cost


def test_without_recorded_feature_temperatures_the_figure_keeps_one_row_per_benchmark(synthetic_study):
    bins = figures.figure_bins_frame(load_study_results(synthetic_study).main_predictions())
    fig = figures.feature_similarity_figure(figures.similarity_summary(figures.similarity_groups(bins)))
    assert not [ax for ax in fig.axes if ax.get_visible() and ax.get_ylabel() == "SimCalib T_feat / run mean"]
    assert len([ax for ax in fig.axes if ax.get_visible()]) == 1  # one benchmark with distances, no empty panel
