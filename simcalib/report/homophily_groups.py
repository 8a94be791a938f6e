"""Calibration by local homophily, and which calibrator to use per graph: the report's section for benchmarks
whose rows carry ``homophily_bins`` (:mod:`simcalib.analysis.homophily`).

For every run, the test nodes are grouped by local homophily h_i (share of a node's neighbours with its label,
from the true labels: an analysis, never seen by a calibrator) into [0, 0.2), ..., [0.8, 1] and isolated; each
row stores per group the node count and the ECE of those nodes. Here, per benchmark, group and calibrator:

    mean_g = (1 / R_g) sum_{runs r with nodes in g} ECE_{r,g},

with the 95% bootstrap interval of that mean (whole splits resampled, :func:`simcalib.report.bootstrap.mean_interval`).
The paired tests ask the paper's question on the group where homophily is lowest (h < 0.2): does SimCalib's
homophily term help there (SimCalib against SimCalib_r, the same model without it), and does any node-wise
calibrator beat one global temperature (TS) there. Pairs are runs of one benchmark with the same split, init and
fold (Wilcoxon signed-rank, Holm over the benchmarks within each pair, :func:`simcalib.report.stats.paired_comparisons`).

The second part answers "which calibrator on which graph": per benchmark and metric, the calibrator with the best
mean, its interval and its paired test against TS. The best is picked on the same runs it is tested on, so its
p-value is optimistic (a selection effect the text states).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure as MplFigure

from simcalib.analysis import palette
from simcalib.analysis.homophily import ISOLATED, group_names
from simcalib.report.bootstrap import mean_interval
from simcalib.report.figures import save_figure
from simcalib.report.render import Block, Figure, Heading, Paragraph, table_block
from simcalib.report.stats import (
    PAIRED_HEADER,
    holm,
    paired_comparison_cells,
    paired_comparisons,
    paired_runs,
)
from simcalib.report.tables import sorted_benchmarks

# The calibrators the group table and figure show: the global baselines, the node-wise ones, SimCalib's ablations.
GROUP_METHODS = ("UnCal", "TS", "GATS", "SimCalib", "SimCalib_r", "SimCalib_h", "SimCalib_n", "SimCalib_m",
                 "GETS", "WATS")
FIGURE_METHODS = ("UnCal", "TS", "ETS", "GATS", "SimCalib", "SimCalib_r", "Dirichlet", "IRM", "GETS", "WATS")
LOW_GROUP = group_names()[0]  # h < 0.2
NODEWISE_METHODS = ("CaGCN", "GATS", "SimCalib", "GETS", "GETS_holdout", "WATS")
LOW_GROUP_PAIRS = (("SimCalib", "SimCalib_r"), *((m, "TS") for m in NODEWISE_METHODS))
GROUP_KEYS = ["dataset", "backbone", "calibrator", "split", "init", "fold", "backbone_digest"]

# "Which calibrator": metric -> (label, lower is better); binary-only metrics appear where rows have them.
CHOICE_METRICS = {"ece": ("ECE (%)", True), "nll": ("NLL", True), "brier": ("Brier", True),
                  "roc_auc": ("ROC-AUC (%)", False), "positive_ece": ("ECE of p(y = 1) (%)", True)}


def group_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (results row, homophily group with nodes): GROUP_KEYS, group, count, ece. Empty when no row
    carries ``homophily_bins``."""
    columns = [*GROUP_KEYS, "group", "count", "ece"]
    if rows.empty or "homophily_bins" not in rows.columns:
        return pd.DataFrame(columns=columns)
    records = []
    keyed = rows.assign(backbone_digest=rows["backbone_digest"] if "backbone_digest" in rows.columns else np.nan)
    for row in keyed.itertuples(index=False):
        text = row.homophily_bins
        if not isinstance(text, str) or not text.strip():
            continue
        bins = json.loads(text)
        base = {key: getattr(row, key) for key in GROUP_KEYS}
        for group, count, value in zip(bins["groups"], bins["count"], bins["ece"]):
            if count and value is not None:
                records.append({**base, "group": group, "count": int(count), "ece": float(value)})
    return pd.DataFrame.from_records(records, columns=columns)


def group_means(frame: pd.DataFrame, methods: Sequence[str] = GROUP_METHODS) -> pd.DataFrame:
    """Per benchmark, group and calibrator: runs, mean nodes per run, mean ECE and its 95% split-bootstrap
    interval (columns dataset, backbone, group, calibrator, runs, nodes, ece, ci_low, ci_high)."""
    columns = ["dataset", "backbone", "group", "calibrator", "runs", "nodes", "ece", "ci_low", "ci_high"]
    picked = frame[frame["calibrator"].isin(methods)]
    records = []
    for (dataset, backbone, group, method), part in picked.groupby(["dataset", "backbone", "group", "calibrator"]):
        interval = mean_interval(part["ece"].to_numpy(float), part["split"].to_numpy())
        records.append({"dataset": dataset, "backbone": backbone, "group": group, "calibrator": method,
                        "runs": len(part), "nodes": float(part["count"].mean()), "ece": float(part["ece"].mean()),
                        "ci_low": np.nan if interval is None else interval.low,
                        "ci_high": np.nan if interval is None else interval.high})
    return pd.DataFrame.from_records(records, columns=columns)


def _benchmark_order(frame: pd.DataFrame) -> list[tuple[str, str]]:
    return sorted_benchmarks(set(zip(frame["dataset"].astype(str), frame["backbone"].astype(str))))


def group_table_cells(means: pd.DataFrame, methods: Sequence[str] = GROUP_METHODS) -> tuple[list[str], list[list[str]]]:
    """Markdown grid: one line per benchmark and group, mean ECE per calibrator (lowest in bold)."""
    shown = [m for m in methods if (means["calibrator"] == m).any()]
    header = ["Benchmark", "Group (h)", "Nodes/run", *shown]
    body = []
    order = {name: i for i, name in enumerate(group_names())}
    for dataset, backbone in _benchmark_order(means):
        part = means[(means["dataset"] == dataset) & (means["backbone"] == backbone)]
        for group in sorted(set(part["group"]), key=order.get):
            cells = part[part["group"] == group].set_index("calibrator")
            values = {m: cells.at[m, "ece"] for m in shown if m in cells.index}
            best = min(values.values()) if values else None
            line = [f"{dataset} {backbone}", group, f"{cells['nodes'].iloc[0]:.0f}"]
            for m in shown:
                if m not in values:
                    line.append("")
                else:
                    text = f"{values[m]:.2f}"
                    line.append(f"**{text}**" if values[m] == best else text)
            body.append(line)
    return header, body


def low_group_tests(frame: pd.DataFrame, pairs: Sequence[tuple[str, str]] = LOW_GROUP_PAIRS) -> pd.DataFrame:
    """:func:`paired_comparisons` of the ECE of the h < 0.2 group's test nodes."""
    low = frame[frame["group"] == LOW_GROUP]
    return paired_comparisons(low.drop(columns=["group", "count"]), pairs, metric="ece")


def homophily_figure(means: pd.DataFrame, methods: Sequence[str] = FIGURE_METHODS):
    """ECE per homophily group (x) per calibrator (lines, 95% intervals as bars), one panel per benchmark."""
    data = means[means["calibrator"].isin(methods) & (means["group"] != ISOLATED)]
    if data.empty:
        return None
    benchmarks = _benchmark_order(data)
    groups = [g for g in group_names() if g != ISOLATED]
    columns = min(4, len(benchmarks))
    rows = -(-len(benchmarks) // columns)
    fig = MplFigure(figsize=(3.6 * columns, 2.9 * rows))
    axes = fig.subplots(rows, columns, squeeze=False, sharex=True)
    shown = [m for m in methods if (data["calibrator"] == m).any()]
    styles = palette.styles(shown)
    for ax, (dataset, backbone) in zip(axes.flat, benchmarks):
        part = data[(data["dataset"] == dataset) & (data["backbone"] == backbone)]
        for offset, method in enumerate(shown):
            line = part[part["calibrator"] == method].set_index("group").reindex(groups)
            x = np.arange(len(groups)) + (offset - (len(shown) - 1) / 2) * 0.06
            low = (line["ece"] - line["ci_low"]).clip(lower=0)
            high = (line["ci_high"] - line["ece"]).clip(lower=0)
            ax.errorbar(x, line["ece"], yerr=[low.fillna(0), high.fillna(0)], color=styles[method].color,
                        marker=styles[method].marker,
                        markersize=3, linewidth=1, capsize=1.5, label=method)
        ax.set_title(f"{dataset} {backbone}", fontsize=9)
        ax.set_xticks(range(len(groups)), [g.replace(",", ", ") for g in groups], fontsize=7, rotation=30)
        ax.set_ylabel("ECE (%)", fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
    for ax in list(axes.flat)[len(benchmarks):]:
        ax.set_visible(False)
    legend: dict = {}  # label -> handle, over every panel (a panel may lack a calibrator)
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(label, handle)
    labels = [m for m in shown if m in legend]
    fig.legend([legend[m] for m in labels], labels, loc="upper center", ncol=len(labels), fontsize=8, frameon=False)
    fig.supxlabel("local homophily h of the test nodes (share of neighbours with the node's label)", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / (2.9 * rows)))
    return fig


def choice_table(rows: pd.DataFrame, metrics: dict = CHOICE_METRICS, reference: str = "TS") -> pd.DataFrame:
    """Per benchmark and metric: the calibrator with the best mean (UnCal left out), its mean and 95% interval,
    the reference's mean, and the paired test of the best against the reference (Holm over the benchmarks within
    each metric). Columns: dataset, backbone, metric, best, best_mean, best_ci_low, best_ci_high,
    reference_mean, mean_diff, diff_ci_low, diff_ci_high, pairs, pvalue, pvalue_holm."""
    records = []
    candidates = rows[rows["calibrator"] != "UnCal"]
    for metric, (_, lower_better) in metrics.items():
        if metric not in rows.columns:
            continue
        values = candidates.assign(_v=pd.to_numeric(candidates[metric], errors="coerce")).dropna(subset=["_v"])
        tests = []
        for (dataset, backbone), part in values.groupby(["dataset", "backbone"]):
            means = part.groupby("calibrator")["_v"].mean()
            if reference not in means.index or len(means) < 2:
                continue
            best = means.idxmin() if lower_better else means.idxmax()
            chosen = part[part["calibrator"] == best]
            interval = mean_interval(chosen["_v"].to_numpy(float), chosen["split"].to_numpy())
            record = {"dataset": dataset, "backbone": backbone, "metric": metric, "best": best,
                      "best_mean": float(means[best]),
                      "best_ci_low": np.nan if interval is None else interval.low,
                      "best_ci_high": np.nan if interval is None else interval.high,
                      "reference_mean": float(means[reference]),
                      "accuracy_diff": _accuracy_gap(part, best, reference)}
            if best == reference:
                record.update(mean_diff=0.0, diff_ci_low=np.nan, diff_ci_high=np.nan, pairs=int(len(chosen)),
                              pvalue=np.nan)
            else:
                pair = part.assign(**{metric: part["_v"]}).drop(columns=["_v"])
                test = paired_runs(pair, best, reference, metric)
                first = test.iloc[0]
                record.update(mean_diff=float(first["mean_diff"]), diff_ci_low=float(first["diff_ci_low"]),
                              diff_ci_high=float(first["diff_ci_high"]), pairs=int(first["pairs"]),
                              pvalue=float(first["pvalue"]))
            tests.append(record)
        if tests:
            frame = pd.DataFrame.from_records(tests)
            pvalues = frame["pvalue"].to_numpy(float)
            tested = np.isfinite(pvalues)
            holm_values = np.full(len(frame), np.nan)
            if tested.any():
                holm_values[tested] = holm(pvalues[tested])
            records.extend(frame.assign(pvalue_holm=holm_values).to_dict("records"))
    columns = ["dataset", "backbone", "metric", "best", "best_mean", "best_ci_low", "best_ci_high", "reference_mean",
               "accuracy_diff", "mean_diff", "diff_ci_low", "diff_ci_high", "pairs", "pvalue", "pvalue_holm"]
    frame = pd.DataFrame.from_records(records, columns=columns)
    if frame.empty:
        return frame
    order = {m: i for i, m in enumerate(metrics)}
    ranked = {b: i for i, b in enumerate(_benchmark_order(frame))}
    keys = sorted(range(len(frame)), key=lambda i: (ranked[(frame["dataset"].iloc[i], frame["backbone"].iloc[i])],
                                                    order[frame["metric"].iloc[i]]))
    return frame.iloc[keys].reset_index(drop=True)


def _accuracy_gap(rows: pd.DataFrame, method: str, reference: str) -> float:
    """Mean accuracy of ``method`` minus that of ``reference`` (points; 0 for accuracy-preserving calibrators)."""
    if "accuracy" not in rows.columns:
        return np.nan
    accuracy = pd.to_numeric(rows["accuracy"], errors="coerce")
    return float(accuracy[rows["calibrator"] == method].mean() - accuracy[rows["calibrator"] == reference].mean())


def _digits(metric: str) -> int:
    return 4 if metric in ("nll", "brier") else 2


def choice_cells(frame: pd.DataFrame, metrics: dict = CHOICE_METRICS) -> list[list[str]]:
    body = []
    for r in frame.itertuples():
        d = _digits(r.metric)
        interval = "" if not np.isfinite(r.best_ci_low) else f" [{r.best_ci_low:.{d}f}, {r.best_ci_high:.{d}f}]"
        if r.best == "TS":
            diff, p = "", ""
        else:
            ci = "" if not np.isfinite(r.diff_ci_low) else f" [{r.diff_ci_low:+.{d}f}, {r.diff_ci_high:+.{d}f}]"
            diff, p = f"{r.mean_diff:+.{d}f}{ci}", f"{r.pvalue:.2g} / {r.pvalue_holm:.2g}"
        accuracy = "" if not np.isfinite(r.accuracy_diff) else f"{r.accuracy_diff:+.2f}"
        body.append([f"{r.dataset} {r.backbone}", metrics[r.metric][0], r.best, f"{r.best_mean:.{d}f}{interval}",
                     f"{r.reference_mean:.{d}f}", diff, p, accuracy])
    return body


@dataclass
class HomophilyOutputs:
    means: pd.DataFrame
    low_tests: pd.DataFrame
    choice: pd.DataFrame
    figure: list[Path]  # the PNG and the PDF; empty when nothing could be drawn
    files: list[Path]  # every file written, the figure's included


def write_homophily(rows: pd.DataFrame, out_dir: Path) -> HomophilyOutputs | None:
    """The group means, the low-homophily tests, the per-benchmark choice (CSV under ``tables/`` and
    ``significance/``) and the figure; None when no row carries ``homophily_bins``."""
    frame = group_frame(rows)
    if frame.empty:
        return None
    out_dir = Path(out_dir)
    means = group_means(frame, tuple(dict.fromkeys((*GROUP_METHODS, *FIGURE_METHODS))))
    tests = low_group_tests(frame)
    choice = choice_table(rows)
    files = []
    for table, folder, stem in ((means, "tables", "homophily_groups_ece"), (choice, "tables", "calibrator_choice"),
                                (tests, "significance", "paired_runs_low_homophily")):
        path = out_dir / folder / f"{stem}.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(path, index=False, float_format="%.6g")
        files.append(path)
    fig = homophily_figure(means)
    figure = [] if fig is None else save_figure(fig, out_dir / "figures", "homophily_groups_ece")
    return HomophilyOutputs(means, tests, choice, figure, files + figure)


def _answer(tests: pd.DataFrame) -> str:
    """The low-homophily question answered from the tests, in one paragraph."""
    if tests.empty:
        return "No benchmark has runs of both calibrators of a pair with test nodes of h < 0.2."
    parts = []
    for (method, reference), part in tests.groupby(["method", "reference"], sort=False):
        lower = part[(part["pvalue_holm"] < 0.05) & (part["mean_diff"] < 0)]
        higher = part[(part["pvalue_holm"] < 0.05) & (part["mean_diff"] > 0)]
        name = lambda frame: ", ".join(f"{r.dataset} {r.backbone}" for r in frame.itertuples())  # noqa: E731
        text = (f"{method} vs {reference}: lower on {int((part['mean_diff'] < 0).sum())} of {len(part)} benchmarks, "
                f"significantly lower on {len(lower)}" + (f" ({name(lower)})" if len(lower) else "")
                + f", significantly higher on {len(higher)}" + (f" ({name(higher)})" if len(higher) else ""))
        parts.append(text)
    return ("On the test nodes with h < 0.2 (Holm-corrected p < 0.05 counted as significant): " + "; ".join(parts)
            + ".")


def homophily_blocks(outputs: HomophilyOutputs | None, out_dir: Path) -> list[Block]:
    if outputs is None:
        return []
    out_dir = Path(out_dir)
    header, body = group_table_cells(outputs.means)
    blocks: list[Block] = [
        Heading(2, "Calibration by local homophily"),
        Paragraph("Test nodes grouped by local homophily h (share of a node's neighbours with its own label, from "
                  "the true labels: an analysis only, no calibrator sees it); ECE (%) of each group's nodes per "
                  "run, mean over the runs with nodes in the group (the lowest of a line in **bold**). Small "
                  "groups give noisy ECEs (15 bins over few nodes): read them with their node counts. Intervals "
                  "(whole splits resampled) in `tables/homophily_groups_ece.csv`."),
        table_block(header, body, numeric_from=2),
    ]
    if outputs.figure:
        blocks.append(Figure(str(outputs.figure[0].relative_to(out_dir)),
                             "ECE per local-homophily group, mean over runs with its 95% bootstrap interval (whole "
                             "splits resampled); isolated nodes left out."))
    blocks.append(Heading(3, "Where homophily is lowest (h < 0.2): does SimCalib's homophily term help, does a "
                             "node-wise calibrator beat TS?"))
    blocks.append(Paragraph(_answer(outputs.low_tests)))
    if not outputs.low_tests.empty:
        blocks.append(table_block(PAIRED_HEADER, paired_comparison_cells(outputs.low_tests), numeric_from=3))
    if not outputs.choice.empty:
        blocks.append(Heading(3, "Which calibrator, per graph and metric"))
        blocks.append(Paragraph(
            "Per benchmark and metric, the calibrator with the best mean over runs (every calibrator but UnCal, "
            "including those that may change the argmax), its mean with the 95% interval (whole splits resampled), "
            "TS's mean, and the best against TS over paired runs: mean difference with its interval, Wilcoxon p and "
            "p with Holm over the benchmarks of that metric, and the best's mean accuracy minus TS's (points; not 0 "
            "where the best changes the argmax, as Dirichlet, VS and GETS may). The best is picked on the same runs it is tested on, "
            "so its p-values are optimistic. CSV: `tables/calibrator_choice.csv`."))
        blocks.append(table_block(["Benchmark", "Metric", "Best", "Best mean [95% CI]", "TS mean", "Best - TS",
                                   "p / p (Holm)", "Accuracy - TS's"], choice_cells(outputs.choice), numeric_from=3))
    return blocks


__all__ = ["CHOICE_METRICS", "GROUP_METHODS", "HomophilyOutputs", "LOW_GROUP", "LOW_GROUP_PAIRS", "choice_table",
           "group_frame", "group_means", "homophily_blocks", "homophily_figure", "low_group_tests",
           "write_homophily"]
