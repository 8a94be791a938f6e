"""The paper's figures from results and saved predictions (seaborn on matplotlib Figures; PNG and PDF).

* Reliability diagrams of a list of calibrators (:data:`REPORT_FIGURE_CALIBRATORS` unless the report names its
  own) per benchmark, as a grid (test predictions of all runs pooled), with
  each bin's 95% bootstrap interval of the pooled accuracy over runs (whole splits resampled,
  :func:`reliability_intervals`) and, where the saved test predictions are present, the smooth reliability
  curve of relplot's kernel (:func:`smooth_reliability`; the per-bin sums of ``figure_bins`` cannot give it).
* Confidence distributions of the same predictions.

These and the feature-similarity figure read each run's test predictions binned (:mod:`simcalib.analysis.figure_bins`):
from the saved predictions where present, else from the ``figure_bins`` column of ``results.csv``, so they
regenerate from committed results files.
* Data efficiency: ECE against the calibration label rate for UnCal, ETS, CaGCN, GATS and SimCalib.
* Feature similarity: test nodes of each run split into 5 equal-size groups by ``feature_distance`` (squared
  Mahalanobis distance to the nearest class prototype; group 1 = most similar); per group the ECE of UnCal,
  GATS and SimCalib (bars, mean over runs) and the improvement ``ECE_UnCal - ECE_method`` (dashed lines).
* Cost: mean ECE against median fit time per calibrator (SimCalib's constant branch SimCalib_decay_all among them), one panel per benchmark, log time axis, each with
  its 95% bootstrap interval (:func:`cost_figure`).
* The theory check (Theorem 1): P(ECE_joint <= ECE_isolated) against |a|.

Every calibrator has one colour and one marker in all of them (:mod:`simcalib.analysis.palette`). Every builder
returns None when its inputs are absent, and the report leaves the figure out.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from simcalib.analysis import palette
from simcalib.analysis.figure_bins import N_GROUPS, FigureBins, from_json, pool, summarise
from simcalib.analysis.plots import confidence_histogram_from_counts, reliability_diagram_from_bins
from simcalib.errors import DataCorruptError, DataMissingError
from simcalib.report.bootstrap import mean_interval, median_interval, ratio_interval
from simcalib.report.results import load_predictions
from simcalib.report.tables import EXTRA_METHODS, sorted_benchmarks
from simcalib.report.theory import PAPER_EXAMPLE

EFFICIENCY_METHODS = ("UnCal", "ETS", "CaGCN", "GATS", "SimCalib")
SIMILARITY_METHODS = ("UnCal", "GATS", "SimCalib")
# the reliability and confidence figures' calibrators unless a report names its own (reports.yaml,
# ``figure_calibrators``); one without binned runs is left out of the figure and named in its caption
REPORT_FIGURE_CALIBRATORS = ("UnCal", "TS", "GATS", "SimCalib", "SimCalib_decay_all")
# ``figure_calibrators: recommended`` in reports.yaml: the references and the paper's subject around the
# recommendation's calibrators (:func:`recommended_figure_calibrators`)
RECOMMENDED_FIGURE_REFERENCES = ("UnCal", "TS")
RECOMMENDED_FIGURE_SUBJECT = ("SimCalib",)
PANEL_COLUMNS = 4


def recommended_figure_calibrators(recommendation: str | Path) -> tuple[str, ...]:
    """UnCal and TS, the calibrators of ``recommendation`` (a ``recommendation.csv`` of
    :mod:`simcalib.report.leaderboard`: one row per family of graphs) in its row order, then SimCalib; each
    once."""
    path = Path(recommendation)
    if not path.is_file():
        raise DataMissingError(f"{path} does not exist: `figure_calibrators: recommended` reads the recommendation "
                               "beside the manifest; write it with `simcalib report --leaderboard "
                               "reports/leaderboard.yaml`, or list the calibrators")
    frame = pd.read_csv(path)
    if "calibrator" not in frame.columns or frame["calibrator"].isna().any():
        raise DataCorruptError(f"{path}: expected a column `calibrator` with a name on every row (the recommendation "
                               "of `simcalib report --leaderboard`); rewrite it with that command")
    return tuple(dict.fromkeys((*RECOMMENDED_FIGURE_REFERENCES, *frame["calibrator"].astype(str),
                                *RECOMMENDED_FIGURE_SUBJECT)))


def save_figure(fig: Figure, folder: Path, stem: str) -> list[Path]:
    """``stem``.png (150 dpi) and ``stem``.pdf under ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{stem}.png", folder / f"{stem}.pdf"]
    fig.savefig(paths[0], dpi=150)
    fig.savefig(paths[1], metadata={"CreationDate": None})  # no timestamp: a re-rendered report is byte-identical
    return paths


def _palette(methods: Sequence[str]) -> dict[str, str]:
    """Each calibrator's colour, the same in every figure (:mod:`simcalib.analysis.palette`)."""
    return palette.colors(methods)


# ---------------------------------------------------------------------------------------------------------
# The test predictions of each run, binned (simcalib.analysis.figure_bins): from saved predictions or results.csv

BINS_KEYS = ["dataset", "backbone", "calibrator", "split", "init", "fold"]


def figure_bins_frame(predictions: pd.DataFrame, rows: pd.DataFrame | None = None,
                      methods: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per (benchmark, method, run) with its :class:`FigureBins` (column ``bins``) and ``source``:
    the saved predictions where a run has them, else the ``figure_bins`` column of its results row.
    ``methods``: the calibrators to read (None: every one)."""
    records = {}
    every = lambda frame: frame["calibrator"].notna() if methods is None else frame["calibrator"].isin(methods)  # noqa: E731
    if rows is not None and "figure_bins" in rows.columns:
        found = rows[every(rows) & rows["figure_bins"].notna()]
        for row in found[[*BINS_KEYS, "figure_bins"]].itertuples(index=False):
            key = tuple(str(v) for v in row[:6])
            try:
                records[key] = (row[:6], from_json(row.figure_bins), "results.csv")
            except ValueError as exc:
                raise DataCorruptError(f"results row {' '.join(key)}: {exc}; rerun that run to rewrite it") from None
    if len(predictions):
        found = predictions[every(predictions)]
        for row in found[[*BINS_KEYS, "path"]].itertuples(index=False):
            run = load_predictions(row.path)
            records[tuple(str(v) for v in row[:6])] = (row[:6], summarise(run.probs, run.labels, run.feature_distance),
                                                       "predictions")
    frame = pd.DataFrame([(*key, bins, source) for key, bins, source in records.values()],
                         columns=[*BINS_KEYS, "bins", "source"])
    return frame


def _pooled(frame: pd.DataFrame, benchmark: tuple[str, str], method: str) -> FigureBins | None:
    chosen = frame[(frame["dataset"] == benchmark[0]) & (frame["backbone"] == benchmark[1]) & (frame["calibrator"] == method)]
    return pool(chosen["bins"])


def _grid(n_panels: int, rows_per_block: int, panel: tuple[float, float]) -> tuple[Figure, np.ndarray]:
    cols = max(1, min(n_panels, PANEL_COLUMNS))
    blocks = int(np.ceil(n_panels / cols)) if n_panels else 1
    fig = Figure(figsize=(panel[0] * cols, panel[1] * rows_per_block * blocks), layout="constrained")
    axes = np.atleast_2d(fig.subplots(rows_per_block * blocks, cols, squeeze=False))
    return fig, axes


def _suptitle(fig: Figure, text: str) -> None:
    """A figure title wrapped to the figure's width (about 11 characters per inch at this size)."""
    width = int(fig.get_figwidth() * 11)
    fig.suptitle(textwrap.fill(text, width=max(width, 30)), fontsize="medium")


def _blank(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize="small", color="gray")
    ax.set_xticks([])
    ax.set_yticks([])


def reliability_intervals(frame: pd.DataFrame, benchmark: tuple[str, str], method: str) -> tuple[np.ndarray, np.ndarray]:
    """Per confidence bin, the 95% bootstrap interval (low, high) of the bin's accuracy pooled over the runs of
    ``frame`` (:func:`figure_bins_frame`), correct nodes over nodes, whole splits resampled
    (:func:`simcalib.report.bootstrap.ratio_interval`); NaN where fewer than two runs have nodes in the bin."""
    chosen = frame[(frame["dataset"] == benchmark[0]) & (frame["backbone"] == benchmark[1])
                   & (frame["calibrator"] == method)]
    count = np.array([b.reliability()[0] for b in chosen["bins"]])  # [runs, B]
    correct = np.array([b.reliability()[2] for b in chosen["bins"]])
    splits = chosen["split"].to_numpy()
    n_bins = count.shape[1] if count.ndim == 2 else 0
    low, high = np.full(n_bins, np.nan), np.full(n_bins, np.nan)
    for b in range(n_bins):
        found = ratio_interval(correct[:, b], count[:, b], splits)
        if found is not None:
            low[b], high[b] = found.low, found.high
    return low, high


def smooth_reliability(confidence: np.ndarray, correct: np.ndarray, points: int = 200,
                       min_density: float = 0.02) -> tuple[np.ndarray, np.ndarray]:
    """The smooth reliability curve of Blasiok & Nakkiran (2023) by relplot: the residuals confidence - correct
    smoothed with relplot's reflected Gaussian kernel at smECE's own bandwidth, mu(t) = t - r(t), on
    ``points`` confidences in [0, 1]; NaN where the kernel density of the confidences is below ``min_density``
    times its largest value (no nodes there to speak of)."""
    from relplot.kernels import ReflectedGaussianKernel
    from relplot.metrics import smECE

    confidence, correct = np.asarray(confidence, dtype=np.float64), np.asarray(correct, dtype=np.float64)
    _, sigma = smECE(confidence, correct, return_width=True)
    grid = np.linspace(0.0, 1.0, points)
    residual, density = ReflectedGaussianKernel(sigma).smooth(confidence, confidence - correct, grid)
    curve = grid - residual
    curve[density < min_density * density.max()] = np.nan
    return grid, curve


def smooth_curves(predictions: pd.DataFrame, methods: Sequence[str] = ("UnCal", "SimCalib")) -> dict:
    """(benchmark, method) -> (grid, curve, runs) of :func:`smooth_reliability` over every run's saved test
    predictions pooled; empty without saved predictions."""
    curves = {}
    if predictions is None or predictions.empty:
        return curves
    found = predictions[predictions["calibrator"].isin(methods)]
    for (dataset, backbone, method), group in found.groupby(["dataset", "backbone", "calibrator"]):
        conf, correct = [], []
        for path in group["path"]:
            run = load_predictions(path)
            conf.append(run.probs.max(1))
            correct.append((run.probs.argmax(1) == run.labels).astype(np.float64))
        grid, curve = smooth_reliability(np.concatenate(conf), np.concatenate(correct))
        curves[((str(dataset), str(backbone)), str(method))] = (grid, curve, len(group))
    return curves


def shown_methods(bins: pd.DataFrame, methods: Sequence[str]) -> list[str]:
    """The calibrators of ``methods`` that have binned runs in ``bins`` (:func:`figure_bins_frame`), in order."""
    present = set(bins["calibrator"]) if len(bins) else set()
    return [m for m in dict.fromkeys(methods) if m in present]


def _run_mean_ece(frame: pd.DataFrame, benchmark: tuple[str, str], method: str) -> float:
    """Mean over runs of each run's ECE (%) from its bins (the statistic of Table 1)."""
    chosen = frame[(frame["dataset"] == benchmark[0]) & (frame["backbone"] == benchmark[1])
                   & (frame["calibrator"] == method)]
    values = [b.ece() for b in chosen["bins"]]
    return float(np.nanmean(values)) if values else float("nan")


def reliability_grid(bins: pd.DataFrame, methods: Sequence[str] = REPORT_FIGURE_CALIBRATORS,
                     smooth: dict | None = None) -> Figure | None:
    """Per benchmark a row of panels, one per method with binned runs (two benchmarks side by side when at
    most two methods are shown); None without binned runs (:func:`figure_bins_frame`). Each panel's title
    gives the ECE of its runs pooled and the mean of the runs' ECEs (Table 1's statistic). Each bin carries
    its 95% interval over runs (:func:`reliability_intervals`); ``smooth`` (:func:`smooth_curves`) adds the
    smooth curve where it has one."""
    methods = shown_methods(bins, methods)
    found = bins[bins["calibrator"].isin(methods)]
    if found.empty:
        return None
    smooth = smooth or {}
    benchmarks = sorted_benchmarks(zip(found["dataset"], found["backbone"]))
    per_row = min(len(benchmarks), 2 if len(methods) <= 2 else 1)
    rows = int(np.ceil(len(benchmarks) / per_row))
    fig = Figure(figsize=(3.3 * per_row * len(methods), 3.6 * rows + 0.8), layout="constrained")
    axes = np.atleast_2d(fig.subplots(rows, per_row * len(methods), squeeze=False))
    colors = _palette(methods)
    for i, b in enumerate(benchmarks):
        row, slot = divmod(i, per_row)
        for j, method in enumerate(methods):
            ax = axes[row, slot * len(methods) + j]
            pooled = _pooled(found, b, method)
            title = f"{b[0]} {b[1]}: {method}"
            if pooled is None:
                _blank(ax, f"{method}: no figure data")
                ax.set_title(title, fontsize="small")
                continue
            reliability_diagram_from_bins(*pooled.reliability(), ax=ax, color=colors[method], legend=False)
            ax.set_title(f"{title} ({pooled.runs} runs)\nECE pooled {pooled.ece():.2f}%, "
                         f"mean over runs {_run_mean_ece(found, b, method):.2f}%")
            low, high = reliability_intervals(found, b, method)
            centers = (np.arange(len(low)) + 0.5) / len(low)
            shown = np.isfinite(low)
            ax.vlines(centers[shown], low[shown], high[shown], color="black", linewidth=1.2,
                      label="95% interval over runs (splits resampled)")
            if (b, method) in smooth:
                grid, curve, runs = smooth[(b, method)]
                ax.plot(grid, curve, color="black", linestyle=":", linewidth=1.5,
                        label="smooth reliability curve (relplot; saved predictions)")
            ax.title.set_fontsize("small")
    for k in range(len(benchmarks), rows * per_row):  # an odd count leaves one slot empty
        for j in range(len(methods)):
            axes[-1, (k % per_row) * len(methods) + j].set_visible(False)
    handles = {}
    for ax in axes.flat:  # every kind of mark once (the smooth curve is only on some panels)
        if ax.get_visible():
            for h, lab in zip(*ax.get_legend_handles_labels()):
                handles.setdefault(lab, h)
    keep = [lab for lab in handles if lab != "accuracy"]
    fig.legend([handles[lab] for lab in keep] + _method_handles(colors), keep + [f"accuracy ({m})" for m in colors],
               loc="outside lower center", ncols=3, fontsize="small", frameon=False)
    _suptitle(fig, "Reliability diagrams (test nodes pooled over the runs counted in each title, 15 bins; each title: "
              "the ECE of the pooled nodes and the mean of the runs' ECEs, Table 1's statistic; black: each bin's "
              "95% bootstrap interval over runs)")
    return fig


def _method_handles(colors: dict[str, tuple]) -> list:
    from matplotlib.patches import Patch

    return [Patch(facecolor=c, edgecolor="black", linewidth=0.5) for c in colors.values()]


def _hide_unused(axes: np.ndarray, n_panels: int, rows_per_block: int) -> None:
    cols = axes.shape[1]
    for i in range(n_panels, axes.shape[0] // rows_per_block * cols):
        block, col = divmod(i, cols)
        for j in range(rows_per_block):
            axes[block * rows_per_block + j, col].set_visible(False)


def confidence_grid(bins: pd.DataFrame, methods: Sequence[str] = REPORT_FIGURE_CALIBRATORS) -> Figure | None:
    """Top-1 confidence densities per benchmark, the methods with binned runs overlaid; None without any."""
    methods = shown_methods(bins, methods)
    found = bins[bins["calibrator"].isin(methods)]
    if found.empty:
        return None
    benchmarks = sorted_benchmarks(zip(found["dataset"], found["backbone"]))
    fig, axes = _grid(len(benchmarks), 1, (3.6, 2.8))
    colors = _palette(methods)
    for i, b in enumerate(benchmarks):
        block, col = divmod(i, PANEL_COLUMNS)
        counts, shades = {}, {}
        for method in methods:
            pooled = _pooled(found, b, method)
            if pooled is not None:
                label = f"{method} ({pooled.runs} runs)"
                counts[label], shades[label] = pooled.hist, colors[method]
        confidence_histogram_from_counts(counts, ax=axes[block, col], title=f"{b[0]} {b[1]}", colors=shades)
    _hide_unused(axes, len(benchmarks), 1)
    _suptitle(fig, "Confidence distributions of the test nodes (all runs pooled)")
    return fig


# ---------------------------------------------------------------------------------------------------------
# Data efficiency


def efficiency_frame(rows: pd.DataFrame, methods: Sequence[str] = EFFICIENCY_METHODS) -> pd.DataFrame:
    """ECE per (benchmark, calibrator, label rate) run, restricted to benchmarks with >= 2 label rates."""
    if rows.empty:
        return rows.iloc[0:0]
    frame = rows[rows["calibrator"].isin(methods) & rows["label_rate"].notna()].copy()
    frame["label_rate_pct"] = (100 * frame["label_rate"].astype(float)).round(3)
    rates = frame.groupby(["dataset", "backbone"])["label_rate_pct"].nunique()
    keep = rates[rates >= 2].index
    return frame[frame.set_index(["dataset", "backbone"]).index.isin(keep)]


def data_efficiency_figure(rows: pd.DataFrame, methods: Sequence[str] = EFFICIENCY_METHODS) -> Figure | None:
    """ECE (mean ± std over runs) against the label rate, one panel per benchmark; UnCal dashed."""
    frame = efficiency_frame(rows, methods)
    if frame.empty:
        return None
    benchmarks = sorted_benchmarks(zip(frame["dataset"], frame["backbone"]))
    fig, axes = _grid(len(benchmarks), 1, (4.2, 3.3))
    present = [m for m in methods if m in set(frame["calibrator"])]
    colors = _palette(present)
    markers = {m: s.marker for m, s in palette.styles(present).items()}
    for i, b in enumerate(benchmarks):
        block, col = divmod(i, PANEL_COLUMNS)
        ax = axes[block, col]
        panel = frame[(frame["dataset"] == b[0]) & (frame["backbone"] == b[1])]
        for method in present:
            data = panel[panel["calibrator"] == method]
            if data.empty:
                continue
            sns.lineplot(data=data, x="label_rate_pct", y="ece", errorbar="sd", err_style="bars",
                         marker=markers[method], ax=ax,
                         color=colors[method], label=method, linestyle="--" if method == "UnCal" else "-")
        ax.set_xticks(sorted(panel["label_rate_pct"].unique()))
        ax.set_xlabel("label rate (%)")
        ax.set_ylabel("ECE (%)")
        ax.set_title(f"{b[0]} {b[1]}")
        handles, labels = ax.get_legend_handles_labels()
        ax.get_legend().remove()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(present), 3 * axes.shape[1]),
               fontsize="small", frameon=False)
    _hide_unused(axes, len(benchmarks), 1)
    _suptitle(fig, "Data efficiency: ECE against the label rate (mean ± std over runs)")
    return fig


# ---------------------------------------------------------------------------------------------------------
# Feature similarity


def similarity_groups(bins: pd.DataFrame, methods: Sequence[str] = SIMILARITY_METHODS,
                      n_groups: int = N_GROUPS) -> pd.DataFrame | None:
    """Per (benchmark, run, group, method) ECE of the test nodes grouped by feature distance.

    Groups are quantiles of the feature distance within each run (group 1: closest to a prototype), as
    :func:`simcalib.analysis.figure_bins.summarise` bins them. Runs need every method's bins with distance groups;
    others are skipped. None if nothing is left.
    """
    found = bins[bins["calibrator"].isin(methods)]
    records = []
    for key, run in found.groupby(["dataset", "backbone", "split", "init", "fold"]):
        by_method = dict(zip(run["calibrator"], run["bins"]))
        if not all(m in by_method and by_method[m].count.shape[0] == n_groups for m in methods):
            continue
        for m in methods:
            b = by_method[m]
            for g in range(n_groups):
                records.append({"dataset": key[0], "backbone": key[1], "split": key[2], "init": key[3],
                                "fold": key[4], "group": g + 1, "calibrator": m,
                                "mean_distance": float(b.distance[g]), "ece": b.ece(g),
                                "t_feat": np.nan if b.t_feat is None else float(b.t_feat[g]),
                                # relative to the run's mean (groups are equal-sized): the within-run trend
                                "t_feat_relative": np.nan if b.t_feat is None else float(b.t_feat[g] / b.t_feat.mean())})
    return pd.DataFrame(records) if records else None


def similarity_summary(groups: pd.DataFrame) -> pd.DataFrame:
    """Mean group ECE over runs and the improvement over UnCal, per (benchmark, group, method); for a method
    with a node-wise feature temperature (SimCalib), its group mean over the runs that recorded it."""
    for column in ("t_feat", "t_feat_relative"):
        if column not in groups.columns:
            groups = groups.assign(**{column: np.nan})
    mean = groups.groupby(["dataset", "backbone", "group", "calibrator"], as_index=False).agg(
        ece=("ece", "mean"), ece_std=("ece", lambda s: float(np.std(s, ddof=0))), runs=("ece", "size"),
        mean_distance=("mean_distance", "mean"), t_feat=("t_feat", "mean"),
        t_feat_std=("t_feat", lambda s: float(np.nanstd(s)) if s.notna().any() else np.nan),
        t_feat_relative=("t_feat_relative", "mean"),
        t_feat_relative_std=("t_feat_relative", lambda s: float(np.nanstd(s)) if s.notna().any() else np.nan),
        t_feat_runs=("t_feat", "count"))
    uncal = mean[mean["calibrator"] == "UnCal"][["dataset", "backbone", "group", "ece"]].rename(columns={"ece": "uncal"})
    mean = mean.merge(uncal, on=["dataset", "backbone", "group"], how="left")
    mean["improvement"] = mean["uncal"] - mean["ece"]
    return mean.drop(columns="uncal")


def feature_similarity_figure(summary: pd.DataFrame, methods: Sequence[str] = SIMILARITY_METHODS) -> Figure:
    """Per benchmark two panels: group ECE and improvement over UnCal; below it SimCalib's feature temperature
    T_feat per group relative to its run's mean (mean over runs, bars: std over runs), the within-run trend
    with the distance that should make SimCalib differ from GATS (the runs' own levels differ much more)."""
    benchmarks = sorted_benchmarks(zip(summary["dataset"], summary["backbone"]))
    # the T_feat row only where some run recorded it (rows written before it have none)
    rows = 2 if "t_feat" in summary.columns and summary["t_feat"].notna().any() else 1
    fig, axes = _grid(len(benchmarks), rows, (4.6, 3.0 if rows == 2 else 3.5))
    colors = _palette(methods)
    markers = {m: s.marker for m, s in palette.styles(methods).items()}
    for i, b in enumerate(benchmarks):
        block, col = divmod(i, PANEL_COLUMNS)
        ax = axes[rows * block, col]
        panel = summary[(summary["dataset"] == b[0]) & (summary["backbone"] == b[1])]
        if rows == 2:
            _feature_temperature_panel(axes[2 * block + 1, col], panel, colors.get("SimCalib"))
        sns.barplot(data=panel, x="group", y="ece", hue="calibrator", hue_order=list(methods), palette=colors,
                    ax=ax, errorbar=None, saturation=1)  # the palette's colours as they are
        for method in methods[1:]:  # improvements over UnCal as dashed lines (same % scale)
            line = panel[panel["calibrator"] == method].sort_values("group")
            ax.plot(line["group"] - 1, line["improvement"], linestyle="--", marker=markers[method], color=colors[method],
                    label=f"{method} improvement")
        ax.axhline(0, color="black", linewidth=0.5)
        ax.set_xlabel("feature-distance group (1 = closest to a prototype)")
        ax.set_ylabel("ECE (%) / improvement (%)")
        runs = int(panel["runs"].max()) if len(panel) else 0
        ax.set_title(f"{b[0]} {b[1]} ({runs} runs)")
        handles, labels = ax.get_legend_handles_labels()
        ax.get_legend().remove()
    fig.legend(handles, labels, loc="outside lower center", ncols=3, fontsize="small", frameon=False)
    _hide_unused(axes, len(benchmarks), rows)
    _suptitle(fig, "Feature similarity: group ECE (bars) and improvement over UnCal (dashed lines)" +
              ("; below, SimCalib's feature temperature T_feat per group relative to its run's mean" if rows == 2 else ""))
    return fig


def _feature_temperature_panel(ax, panel: pd.DataFrame, color) -> None:
    """SimCalib's mean T_feat per distance group, or a note where no run recorded it."""
    line = panel[(panel["calibrator"] == "SimCalib") & panel["t_feat"].notna()].sort_values("group") \
        if "t_feat" in panel.columns else panel.iloc[:0]
    if line.empty:
        _blank(ax, "T_feat per group not recorded\n(rows written before the figure data carried it)")
        return
    ax.errorbar(line["group"], line["t_feat_relative"], yerr=line["t_feat_relative_std"], color=color, marker="o",
                capsize=3)
    ax.axhline(1.0, color="black", linewidth=0.5)
    ax.set_xticks(sorted(line["group"].unique()))
    ax.set_xlabel("feature-distance group")
    ax.set_ylabel("SimCalib T_feat / run mean")
    low, high = line["t_feat"].min(), line["t_feat"].max()
    ax.set_title(f"T_feat per group, relative ({int(line['t_feat_runs'].min())} runs; mean T_feat "
                 f"{low:.2f}-{high:.2f})", fontsize="small")


# ---------------------------------------------------------------------------------------------------------
# Cost


COST_FRAME_METHODS = (*EXTRA_METHODS, "SimCalib_decay_all")  # the paper's seven, the extra six, the constant branch


def cost_frame(rows: pd.DataFrame, methods: Sequence[str] = COST_FRAME_METHODS) -> pd.DataFrame:
    """Per (benchmark, calibrator): runs, median fit time and mean ECE, each with its 95% bootstrap interval
    (whole splits resampled); calibrators with a positive fit time only (a log axis)."""
    records = []
    if rows.empty:
        return pd.DataFrame()
    chosen = rows[rows["calibrator"].isin(methods)]
    for (dataset, backbone, method), group in chosen.groupby(["dataset", "backbone", "calibrator"]):
        seconds = pd.to_numeric(group["fit_seconds"], errors="coerce").to_numpy(dtype=np.float64)
        ece = pd.to_numeric(group["ece"], errors="coerce").to_numpy(dtype=np.float64)
        keep = np.isfinite(seconds) & (seconds > 0) & np.isfinite(ece)
        if not keep.any():
            continue
        splits = group["split"].to_numpy()[keep]
        time_ci, ece_ci = median_interval(seconds[keep], splits), mean_interval(ece[keep], splits)
        records.append({"dataset": str(dataset), "backbone": str(backbone), "calibrator": str(method),
                        "runs": int(keep.sum()), "fit_seconds_median": float(np.median(seconds[keep])),
                        "fit_seconds_ci_low": np.nan if time_ci is None else time_ci.low,
                        "fit_seconds_ci_high": np.nan if time_ci is None else time_ci.high,
                        "ece_mean": float(ece[keep].mean()),
                        "ece_ci_low": np.nan if ece_ci is None else ece_ci.low,
                        "ece_ci_high": np.nan if ece_ci is None else ece_ci.high})
    return pd.DataFrame(records)


# UnCal fits nothing: no cost to show
COST_FIGURE_METHODS = tuple(m for m in COST_FRAME_METHODS if m != "UnCal")


def cost_figure(frame: pd.DataFrame, methods: Sequence[str] = COST_FIGURE_METHODS) -> Figure | None:
    """Mean ECE against median fit time (log axis), one point per calibrator, one panel per benchmark; lines:
    the 95% intervals of both. None without rows (:func:`cost_frame`)."""
    frame = frame[frame["calibrator"].isin(methods)] if len(frame) else frame
    if frame.empty:
        return None
    benchmarks = sorted_benchmarks(zip(frame["dataset"], frame["backbone"]))
    present = [m for m in methods if m in set(frame["calibrator"])]
    colors = _palette(present)
    markers = {m: s.marker for m, s in palette.styles(present).items()}
    fig, axes = _grid(len(benchmarks), 1, (3.6, 3.0))
    for i, b in enumerate(benchmarks):
        block, col = divmod(i, PANEL_COLUMNS)
        ax = axes[block, col]
        panel = frame[(frame["dataset"] == b[0]) & (frame["backbone"] == b[1])]
        for r in panel.itertuples():
            x, y = r.fit_seconds_median, r.ece_mean
            if np.isfinite(r.fit_seconds_ci_low):
                ax.plot([r.fit_seconds_ci_low, r.fit_seconds_ci_high], [y, y], color=colors[r.calibrator], lw=0.8)
            if np.isfinite(r.ece_ci_low):
                ax.plot([x, x], [r.ece_ci_low, r.ece_ci_high], color=colors[r.calibrator], lw=0.8)
            ax.plot([x], [y], marker=markers[r.calibrator], color=colors[r.calibrator], linestyle="none",
                    markeredgecolor="black", markeredgewidth=0.4, label=r.calibrator)
        ax.set_xscale("log")
        ax.set_xlabel("fit time (s, median over runs)")
        ax.set_ylabel("ECE (%, mean over runs)")
        runs = int(panel["runs"].max()) if len(panel) else 0
        ax.set_title(f"{b[0]} {b[1]} ({runs} runs)", fontsize="small")
    _hide_unused(axes, len(benchmarks), 1)
    handles = {}
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    order = [m for m in present if m in handles]
    fig.legend([handles[m] for m in order], order, loc="outside lower center", ncols=min(len(order), 6),
               fontsize="small", frameon=False)
    _suptitle(fig, "Calibration against cost: mean ECE and median fit time per calibrator (lines: 95% bootstrap "
              "intervals over runs, splits resampled)")
    return fig


# ---------------------------------------------------------------------------------------------------------
# Theory


def theory_figure(table: pd.DataFrame) -> Figure:
    """P(ECE_joint <= ECE_isolated) against |a|, one panel per d, one line per n; both ECE readings."""
    d_values = sorted(table["d"].unique())
    fig = Figure(figsize=(3.4 * len(d_values), 6.2), layout="constrained")
    axes = np.atleast_2d(fig.subplots(2, len(d_values), sharey=True, squeeze=False))
    n_values = sorted(table["n"].unique())
    palette = dict(zip(n_values, sns.color_palette("viridis", n_colors=len(n_values))))
    ex = PAPER_EXAMPLE
    lowest = table[["p_joint_better_paper", "p_joint_better_exact"]].to_numpy().min()
    y_low = min(0.5, np.floor(10 * lowest) / 10) - 0.02
    for row, (variant, label) in enumerate((("paper", "paper's ECE expression"), ("exact", "sigma-aware ECE"))):
        for col, d in enumerate(d_values):
            ax = axes[row, col]
            panel = table[table["d"] == d]
            sns.lineplot(data=panel, x="a", y=f"p_joint_better_{variant}", hue="n", palette=palette, marker="o",
                         ax=ax, legend=(row == 0 and col == 0))
            ax.axhline(ex["claimed_lower_bound"], color="tab:red", linestyle=":", linewidth=1)
            if d == ex["d"]:
                hit = panel[(panel["n"] == ex["n"]) & np.isclose(panel["a"], ex["a"])]
                if len(hit):
                    ax.plot(hit["a"], hit[f"p_joint_better_{variant}"], marker="*", markersize=14, color="tab:red",
                            linestyle="none", label="paper's example")
                    ax.legend(fontsize="x-small", frameon=False, loc="lower right")
            ax.set_ylim(y_low, 1.02)
            ax.set_xlabel("|a|  (mu_j = a mu_i + b)")
            ax.set_ylabel(f"P(ECE_joint <= ECE_isolated)\n{label}")
            ax.set_title(f"d = {d}")
    _suptitle(fig, "Theorem 1 by Monte Carlo: joint vs isolated estimation (dotted: the paper's 0.84; star: its example n=4, d=64, |a|=2.66)")
    return fig


__all__ = ["COST_FIGURE_METHODS", "COST_FRAME_METHODS", "EFFICIENCY_METHODS", "REPORT_FIGURE_CALIBRATORS",
           "recommended_figure_calibrators",
           "SIMILARITY_METHODS", "confidence_grid", "cost_figure", "cost_frame",
           "data_efficiency_figure", "efficiency_frame", "feature_similarity_figure", "figure_bins_frame",
           "reliability_grid", "reliability_intervals", "save_figure", "similarity_groups", "similarity_summary",
           "shown_methods", "smooth_curves", "smooth_reliability", "theory_figure"]
