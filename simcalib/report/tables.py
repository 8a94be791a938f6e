"""The paper's tables from results rows, and the same tables side by side with the published numbers.

A :class:`ResultTable` is benchmarks x methods of one metric: mean ± population std over the runs (the GATS
code's convention), the number of runs, the 95% bootstrap interval of the mean (whole splits resampled,
:mod:`simcalib.report.bootstrap`) on a second line under each benchmark, and the best mean of each row in
bold (the lowest; the highest for accuracy; the closest to 0 for a signed error). A :class:`ComparisonTable`
joins a table with the paper's and expresses each difference in units of the paper's standard deviation:

    z = (mean_ours - mean_paper) / std_paper.

Both render as Markdown, LaTeX (booktabs) and CSV. A method without results for a benchmark is the text
"not run", never an error; a method that ran but whose rows lack the metric (rows written before its column)
is "not recorded", and a cell that pools fewer runs than the method has says how many.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from simcalib.metrics import ESTIMATOR_NAMES
from simcalib.report.bootstrap import Interval, fixed_digits, interval_text, mean_interval, median_interval
from simcalib.report.paper import PaperTables
from simcalib.report.render import table_block, to_markdown

NOT_RUN = "not run"
NOT_RECORDED = "not recorded"  # the method ran, but its rows lack this metric
CI_LABEL = "95% CI"  # the label of the interval line under each benchmark
DATASET_ORDER = ("Cora", "Citeseer", "Pubmed", "Computers", "Photo", "CS", "Physics", "CoraFull")
BACKBONE_ORDER = ("GCN", "GAT")
MAIN_METHODS = ("UnCal", "TS", "VS", "ETS", "CaGCN", "GATS", "SimCalib")
# SimCalib's objectives (joint: the paper's; separate: branches alone) and tuned settings, beside the baselines
VARIANT_METHODS = ("TS", "GATS", "GATS_tuned", "SimCalib", "SimCalib_stop_nll", "SimCalib_separate", "SimCalib_tuned")
# SimCalib's node-wise feature branch (the default) beside the constant one it replaced, on the same backbones.
FEATURE_BRANCH_METHODS = ("TS", "GATS", "SimCalib_decay_all", "SimCalib")
# The calibrators beyond the paper's seven, shown beside them in tables of their own.
EXTRA_CALIBRATORS = ("Dirichlet", "IRM", "Spline", "OrderInvariant", "GETS", "WATS")
EXTRA_METHODS = MAIN_METHODS + EXTRA_CALIBRATORS
# The newer node-wise calibrators (GETS as its code runs it, its accuracy-preserving and held-out-stop variants,
# WATS) beside TS and GATS, on the metrics their papers report and the ones this benchmark reports.
NEWER_METHODS = ("UnCal", "TS", "GATS", "GETS_ap", "GETS", "GETS_holdout", "WATS")
NEWER_METRICS = ("ece", "degree_ece", "signed_ce", "nll", "accuracy")
# rows of GETS from before it ran as its code does carry the old definition (now GETS_ap): the newer tables show
# only where one of these ran beside it
NEWER_ONLY = ("GETS_ap", "GETS_holdout", "WATS")
BINARY_METHODS = (*EXTRA_METHODS, "GETS_ap", "GETS_holdout")  # EXTRA_METHODS holds GETS and WATS
ABLATION_METHODS = ("SimCalib_l", "SimCalib_m", "SimCalib_h", "SimCalib_r", "SimCalib_n", "SimCalib")
W_SWEEP_NAME = re.compile(r"^SimCalib_w(\d+(?:\.\d+)?)$")
METRIC_LABELS = {
    "ece": "ECE (%)", "ace": "ACE (%)", "mce": "MCE (%)", "classwise_ece": "classwise ECE (%)",
    "kde_ece": "KDE-ECE (%)", "nll": "NLL", "brier": "Brier score", "accuracy": "accuracy (%)",
    "smece": "smooth ECE (%)", "debiased_ce": "debiased CE (%)", "signed_ce": "signed CE (%)",
    "degree_ece": "degree-binned ECE (%)", "fit_seconds": "fit time (s)", "roc_auc": "ROC-AUC (%)",
    "positive_ece": "ECE of p(y = 1) (%)",
}
METRIC_DIGITS = {"nll": 4, "brier": 4}
SIGNIFICANT_METRICS = ("fit_seconds",)

Benchmark = tuple[str, str]  # (dataset, backbone)


@dataclass(frozen=True)
class TableSpec:
    key: str  # file stem, e.g. "table1_ece"
    title: str
    metric: str
    methods: tuple[str, ...] | None  # None: the w sweep, whose columns are the w values found
    paper_key: str | None = None  # the paper table it is compared with
    lower_is_better: bool = True  # which mean of a row is bold
    closest_to_zero: bool = False  # bold the mean nearest 0 instead (a signed error)
    statistic: str = "mean"  # "mean" (± std) or "median" of the runs
    drop_unrun: bool = False  # leave out the methods that ran on no benchmark
    bold_best: bool = True  # False: no cell is bold (e.g. fit times, where lower is not better calibrated)
    requires: tuple[str, ...] = ()  # shown only where one of these ran (rows of the definitions it is about)
    omit_if_empty: bool = False  # left out of the report where no row has the metric (e.g. binary-graph metrics)

    @property
    def digits(self) -> int:
        return METRIC_DIGITS.get(self.metric, 2)

    def fmt(self, value: float) -> str:
        """A value as the tables show it: fixed decimals, or 3 significant digits for times (they span
        1e-4 to 1e2 s)."""
        return f"{value:.3g}" if self.metric in SIGNIFICANT_METRICS else f"{value:.{self.digits}f}"


TABLE_SPECS: tuple[TableSpec, ...] = (
    TableSpec("table1_ece", "Table 1: ECE (%) of every calibrator", "ece", MAIN_METHODS, "table1"),
    TableSpec("table2_ace", "Table 2: ACE (%), adaptive (equal-mass) bins", "ace", MAIN_METHODS, "table2"),
    TableSpec("table3_ablation_ece", "Table 3: ECE (%) of the SimCalib ablations", "ece", ABLATION_METHODS, "table3"),
    TableSpec("table4_w_sweep_ece", "Table 4: ECE (%) of SimCalib with a fixed ensemble weight w", "ece", None,
              "table4"),
    TableSpec("simcalib_variants_ece", "ECE (%) of SimCalib's objectives and tuned settings beside TS and GATS",
              "ece", VARIANT_METHODS),
    TableSpec("feature_branch_ece", "ECE (%) of SimCalib with its node-wise feature branch (the default) and with "
              "one feature temperature per run (SimCalib_decay_all), beside TS and GATS", "ece", FEATURE_BRANCH_METHODS),
    TableSpec("feature_branch_nll", "NLL of SimCalib with its node-wise and its constant feature branch, beside TS "
              "and GATS", "nll", FEATURE_BRANCH_METHODS),
    TableSpec("metric_nll", "NLL of every calibrator", "nll", MAIN_METHODS),
    TableSpec("metric_brier", "Brier score of every calibrator", "brier", MAIN_METHODS),
    TableSpec("metric_classwise_ece", "Classwise ECE (%) of every calibrator", "classwise_ece", MAIN_METHODS),
    TableSpec("metric_kde_ece", "KDE-ECE (%) of every calibrator", "kde_ece", MAIN_METHODS),
    TableSpec("metric_accuracy", "Accuracy (%) of every calibrator (equal across a row unless a calibrator changes "
              "the argmax, as VS may)", "accuracy", MAIN_METHODS, lower_is_better=False),
    *(TableSpec(f"extra_{metric}", f"{label} of the paper's calibrators and the extra ones", metric, EXTRA_METHODS)
      for metric, label in (("ece", "ECE (%)"), ("ace", "ACE (%)"), ("nll", "NLL"), ("brier", "Brier score"))),
    TableSpec("extra_accuracy", "Accuracy (%) of the paper's calibrators and the extra ones (equal across a row "
              "unless a calibrator changes the argmax, as VS and Dirichlet may)", "accuracy", EXTRA_METHODS,
              lower_is_better=False),
    TableSpec("metric_smece", "Smooth ECE (%) of every calibrator (relplot's smECE of the top-1 confidence; "
              "Blasiok & Nakkiran 2023)", "smece", MAIN_METHODS),
    TableSpec("metric_debiased_ce", "Debiased top-label L2 calibration error (%) of every calibrator (Kumar et al. "
              "2019; 15 equal-mass bins)", "debiased_ce", MAIN_METHODS),
    TableSpec("metric_signed_ce", "Signed calibration error (%) of every calibrator: mean top-1 confidence minus "
              "accuracy (over-confident > 0; bold: closest to 0)", "signed_ce", MAIN_METHODS, closest_to_zero=True),
    TableSpec("metric_degree_ece", "Degree-binned ECE (%) of every calibrator, as the GETS and WATS code report it "
              "(10 equal-count bins of nodes by degree, not by confidence: not the ECE)", "degree_ece", MAIN_METHODS),
    *(TableSpec(f"newer_{metric}", f"{METRIC_LABELS[metric][:1].upper()}{METRIC_LABELS[metric][1:]} of the newer "
                "calibrators (GETS as its code runs it, GETS_ap its accuracy-preserving form, GETS_holdout stopped "
                "on held-out calibration nodes, WATS) beside TS and GATS", metric, NEWER_METHODS,
                lower_is_better=metric != "accuracy", closest_to_zero=metric == "signed_ce", drop_unrun=True,
                requires=NEWER_ONLY)
      for metric in NEWER_METRICS),
    TableSpec("binary_roc_auc", "ROC-AUC (%) of p(y = 1) on the binary graphs (node-wise temperatures can change "
              "the ranking; a global temperature cannot)", "roc_auc", BINARY_METHODS, lower_is_better=False,
              drop_unrun=True, omit_if_empty=True),
    TableSpec("binary_positive_ece", "Calibration error (%) of p(y = 1) on the binary graphs (15 equal-width bins "
              "of p(y = 1) against the share of positives)", "positive_ece", BINARY_METHODS, drop_unrun=True,
              omit_if_empty=True),
    TableSpec("cost_fit_seconds", "Fit time (s) of every calibrator: median over runs", "fit_seconds",
              EXTRA_METHODS, statistic="median", drop_unrun=True, bold_best=False),
)
ESTIMATOR_TABLES = tuple(s.key for s in TABLE_SPECS if s.metric in ESTIMATOR_NAMES)
OTHER_METRICS = ("ece", "nll", "accuracy")  # the tables of calibrators no table above names


def other_methods(rows: pd.DataFrame) -> list[str]:
    """The calibrators of ``rows`` that no table of :data:`TABLE_SPECS` names (e.g. from another package)."""
    named = {m for spec in TABLE_SPECS if spec.methods for m in spec.methods}
    names = rows["calibrator"].astype(str).unique() if len(rows) else []
    return sorted(n for n in names if n not in named and not W_SWEEP_NAME.match(n))


def other_table_specs(rows: pd.DataFrame) -> tuple[TableSpec, ...]:
    """Tables of :func:`other_methods` beside the paper's calibrators (those that ran), on :data:`OTHER_METRICS`;
    none when every calibrator of ``rows`` has a table."""
    others = tuple(other_methods(rows))
    if not others:
        return ()
    return tuple(TableSpec(f"other_{metric}", f"{METRIC_LABELS[metric]} of the calibrators no other table shows "
                           "(e.g. from other packages) beside the paper's", metric, MAIN_METHODS + others,
                           lower_is_better=metric != "accuracy", drop_unrun=True) for metric in OTHER_METRICS)


def benchmark_sort_key(benchmark: Benchmark) -> tuple:
    dataset, backbone = benchmark
    d = DATASET_ORDER.index(dataset) if dataset in DATASET_ORDER else len(DATASET_ORDER)
    b = BACKBONE_ORDER.index(backbone) if backbone in BACKBONE_ORDER else len(BACKBONE_ORDER)
    return d, dataset, b, backbone


def sorted_benchmarks(benchmarks: Iterable[Benchmark]) -> list[Benchmark]:
    return sorted({(str(d), str(b)) for d, b in benchmarks}, key=benchmark_sort_key)


def w_sweep_methods(names: Iterable[str]) -> list[str]:
    """The ``SimCalib_w<w>`` names among ``names``, ordered by w."""
    found = {n for n in names if W_SWEEP_NAME.match(str(n))}
    return sorted(found, key=lambda n: float(W_SWEEP_NAME.match(n).group(1)))


def display_name(method: str, latex: bool = False) -> str:
    match = W_SWEEP_NAME.match(method)
    if match:
        return f"$w={match.group(1)}$" if latex else f"w={match.group(1)}"
    if latex and "_" in method:
        base, sub = method.split("_", 1)
        return f"{latex_escape(base)}$_{{{latex_escape(sub)}}}$"
    return latex_escape(method) if latex else method


def latex_escape(text: str) -> str:
    for char, repl in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("#", r"\#"), ("_", r"\_"),
                       ("±", r"$\pm$"), ("σ", r"$\sigma$")):
        text = text.replace(char, repl)
    return text


def _fmt(value: float, digits: int) -> str:
    return f"{value:.{digits}f}"


def _interval_cell(text: str, latex: bool) -> str:
    """An interval under a table's mean: small in LaTeX; blank stays blank."""
    return r"{\footnotesize $" + text + "$}" if latex and text else text


# ---------------------------------------------------------------------------------------------------------
# Our numbers


@dataclass
class ResultTable:
    """benchmarks x methods of one metric; NaN mean / 0 runs where a method was not run. ``mean`` holds the
    spec's statistic (the median for a median table); ``ci_low``/``ci_high`` its 95% bootstrap interval (NaN:
    none, e.g. one run); ``present`` how many runs of the method there are, with or without this metric."""

    spec: TableSpec
    benchmarks: list[Benchmark]
    methods: list[str]
    mean: pd.DataFrame  # [B, M]
    std: pd.DataFrame  # [B, M], population std (ddof = 0)
    runs: pd.DataFrame  # [B, M], int: runs with a value of the metric
    ci_low: pd.DataFrame | None = None  # [B, M]
    ci_high: pd.DataFrame | None = None  # [B, M]
    present: pd.DataFrame | None = None  # [B, M], int: runs of the method
    unrecorded_rows: int = 0  # rows of these methods (any benchmark) without the metric

    def best(self) -> pd.DataFrame:
        """True where the mean is the row's best (lowest, highest for accuracy, nearest 0 for a signed error) at
        the displayed precision; ties are all bold."""
        rounded = self.mean.round(self.spec.digits)
        if not self.spec.bold_best:
            return pd.DataFrame(False, index=self.mean.index, columns=self.mean.columns)
        if self.spec.closest_to_zero:
            rounded = rounded.abs()
            best = rounded.min(axis=1)
        else:
            best = rounded.min(axis=1) if self.spec.lower_is_better else rounded.max(axis=1)
        return rounded.eq(best, axis=0) & self.mean.notna()

    def _present(self, benchmark: Benchmark, method: str) -> int:
        return int(self.present.at[benchmark, method]) if self.present is not None else int(self.runs.at[benchmark, method])

    def cell_parts(self, benchmark: Benchmark, method: str) -> tuple[str, str]:
        """(the number, a note): the note says how many runs the cell pools when the method has more."""
        runs = int(self.runs.at[benchmark, method])
        if runs == 0:
            return (NOT_RECORDED if self._present(benchmark, method) > 0 else NOT_RUN), ""
        value = self.spec.fmt(self.mean.at[benchmark, method])
        if self.spec.statistic == "mean":
            value += f" ± {self.spec.fmt(self.std.at[benchmark, method])}"
        present = self._present(benchmark, method)
        return value, (f" ({runs} of {present} runs)" if present > runs else "")

    def cell(self, benchmark: Benchmark, method: str) -> str:
        value, note = self.cell_parts(benchmark, method)
        return value + note

    def interval(self, benchmark: Benchmark, method: str) -> tuple[float, float] | None:
        if self.ci_low is None:
            return None
        low, high = self.ci_low.at[benchmark, method], self.ci_high.at[benchmark, method]
        return None if not (np.isfinite(low) and np.isfinite(high)) else (float(low), float(high))

    def interval_cell(self, benchmark: Benchmark, method: str, latex: bool = False) -> str:
        low, high = self.interval(benchmark, method) or (math.nan, math.nan)
        return _interval_cell(interval_text(low, high, self.spec.fmt), latex)

    def runs_label(self, benchmark: Benchmark) -> str:
        counts = self.runs.loc[[benchmark]].iloc[0]
        counts = counts[counts > 0]
        lo, hi = (int(counts.min()), int(counts.max())) if len(counts) else (0, 0)
        return str(lo) if lo == hi else f"{lo}–{hi}"

    def to_csv_frame(self) -> pd.DataFrame:
        """The paper's CSV layout (dataset, backbone, <m>_mean, <m>_std) plus <m>_runs (0 = not run) and the
        95% interval <m>_ci_low, <m>_ci_high (empty: none). A median table's <m>_mean is the median."""
        rows = []
        stats = ("mean", "std", "runs", "ci_low", "ci_high")
        for b in self.benchmarks:
            row = {"dataset": b[0], "backbone": b[1]}
            for m in self.methods:
                row[f"{m}_mean"] = self.mean.at[b, m]
                row[f"{m}_std"] = self.std.at[b, m]
                row[f"{m}_runs"] = int(self.runs.at[b, m])
                found = self.interval(b, m)
                row[f"{m}_ci_low"], row[f"{m}_ci_high"] = found if found is not None else (np.nan, np.nan)
            rows.append(row)
        return pd.DataFrame(rows, columns=["dataset", "backbone", *[f"{m}_{s}" for m in self.methods for s in stats]])

    def grid(self, latex: bool = False) -> tuple[list[str], list[list[str]]]:
        """Header and body rows of strings (bold applied), shared by the Markdown and LaTeX writers; under each
        benchmark's row a row of 95% intervals (blank where a cell has none)."""
        header = ["Dataset", "Backbone", "Runs", *[display_name(m, latex) for m in self.methods]]
        best = self.best()
        body = []
        for b in self.benchmarks:
            cells = []
            for m in self.methods:
                value, note = self.cell_parts(b, m)
                if latex:
                    if value in (NOT_RUN, NOT_RECORDED):
                        text = rf"\textit{{{value}}}"
                    else:
                        math = value.replace("±", r"\pm")
                        text = (r"$\mathbf{" + math + "}$") if best.at[b, m] else f"${math}$"
                        text += latex_escape(note)
                else:
                    text = f"**{value}**{note}" if best.at[b, m] else value + note
                cells.append(text)
            body.append([latex_escape(b[0]) if latex else b[0], b[1], self.runs_label(b), *cells])
            intervals = [self.interval_cell(b, m, latex) for m in self.methods]
            if any(intervals):
                body.append(["", latex_escape(CI_LABEL) if latex else CI_LABEL, "", *intervals])
        return header, body

    @property
    def empty(self) -> bool:
        return not self.benchmarks or not self.methods

    def empty_note(self) -> str:
        """Why an empty table is empty: nothing ran, or the rows predate the metric's column."""
        if self.unrecorded_rows:
            return (f"_{NOT_RECORDED}: none of the {self.unrecorded_rows} rows of these calibrators has "
                    f"`{self.spec.metric}` (rows written before that column existed); benchmarks with it: none._")
        return f"_{NOT_RUN}: no results for this table._"


def _interval(values: np.ndarray, splits, statistic: str) -> Interval | None:
    return (median_interval if statistic == "median" else mean_interval)(values, splits)


def build_result_table(rows: pd.DataFrame, spec: TableSpec, paper: PaperTables | None = None) -> ResultTable:
    """Mean, population std and run count per (benchmark, method) of ``spec.metric`` from results rows."""
    if spec.methods is None:  # w sweep: the w values run here and those the paper reports
        names = set(rows["calibrator"].astype(str)) if len(rows) else set()
        if paper is not None and spec.paper_key:
            names |= set(paper.table(spec.paper_key)["method"])
        methods = w_sweep_methods(names)
    else:
        methods = list(dict.fromkeys(spec.methods))  # a repeated name would make two columns of one method
    ran = rows[rows["calibrator"].isin(methods)] if len(rows) else rows
    if spec.metric not in ran.columns:
        ran = ran.assign(**{spec.metric: np.nan})
    values = pd.to_numeric(ran[spec.metric], errors="coerce") if len(ran) else pd.Series(dtype=float)
    relevant = ran.assign(_value=values)[values.notna()] if len(ran) else ran
    if spec.drop_unrun:
        methods = [m for m in methods if len(relevant) and (relevant["calibrator"] == m).any()]
    benchmarks = sorted_benchmarks(zip(relevant["dataset"], relevant["backbone"])) if len(relevant) else []
    index = pd.MultiIndex.from_tuples(benchmarks, names=["dataset", "backbone"]) if benchmarks else \
        pd.MultiIndex.from_tuples([], names=["dataset", "backbone"])
    mean = pd.DataFrame(np.nan, index=index, columns=methods)
    std, ci_low, ci_high = mean.copy(), mean.copy(), mean.copy()
    runs = pd.DataFrame(0, index=index, columns=methods)
    present = runs.copy()
    if len(relevant):
        split = relevant["split"] if "split" in relevant.columns else pd.Series(np.nan, index=relevant.index)
        grouped = relevant.assign(_split=split).groupby(["dataset", "backbone", "calibrator"])
        for (dataset, backbone, method), group in grouped:
            b = (str(dataset), str(backbone))
            series = group["_value"].to_numpy(dtype=np.float64)
            mean.at[b, method] = float(np.median(series) if spec.statistic == "median" else series.mean())
            std.at[b, method] = float(np.std(series, ddof=0))
            runs.at[b, method] = int(series.size)
            splits = None if group["_split"].isna().all() else group["_split"].to_numpy()
            found = _interval(series, splits, spec.statistic)
            if found is not None:
                ci_low.at[b, method], ci_high.at[b, method] = found.low, found.high
        for (dataset, backbone, method), group in ran.groupby(["dataset", "backbone", "calibrator"]):
            b = (str(dataset), str(backbone))
            if b in present.index and method in present.columns:
                present.at[b, method] = len(group)
    unrecorded = int(values.isna().sum()) if len(ran) else 0
    return ResultTable(spec, benchmarks, methods, mean, std, runs, ci_low, ci_high, present, unrecorded)


# ---------------------------------------------------------------------------------------------------------
# Paper vs ours


@dataclass
class ComparisonTable:
    """The paper's cells joined with ours: one row per (benchmark, method) the paper reports."""

    spec: TableSpec
    long: pd.DataFrame  # dataset, backbone, method, paper_mean, paper_std, ours_mean, ours_std, runs, diff, z,
    # ours_ci_low, ours_ci_high (the 95% interval of our mean; NaN: none)

    @property
    def benchmarks(self) -> list[Benchmark]:
        return sorted_benchmarks(zip(self.long["dataset"], self.long["backbone"]))

    @property
    def methods(self) -> list[str]:
        names = list(dict.fromkeys(self.long["method"]))
        return w_sweep_methods(names) if self.spec.methods is None else \
            [m for m in self.spec.methods if m in names] + [m for m in names if m not in self.spec.methods]

    def cell(self, benchmark: Benchmark, method: str, latex: bool = False) -> str:
        match = self.long[(self.long["dataset"] == benchmark[0]) & (self.long["backbone"] == benchmark[1])
                          & (self.long["method"] == method)]
        if match.empty:
            return "—"
        r = match.iloc[0]
        d = self.spec.digits
        if r["runs"] == 0:
            return (r"\textit{not run}" if latex else NOT_RUN) + f" ({_fmt(r['paper_mean'], d)})"
        z = "n/a" if not np.isfinite(r["z"]) else f"{r['z']:+.2f}" + (r"$\sigma$" if latex else "σ")
        return f"{_fmt(r['ours_mean'], d)} vs {_fmt(r['paper_mean'], d)} ({z})"

    def interval_cell(self, benchmark: Benchmark, method: str, latex: bool = False) -> str:
        """Our mean's 95% interval, blank where there is none."""
        match = self.long[(self.long["dataset"] == benchmark[0]) & (self.long["backbone"] == benchmark[1])
                          & (self.long["method"] == method)]
        if match.empty or "ours_ci_low" not in match.columns:
            return ""
        text = interval_text(match["ours_ci_low"].iloc[0], match["ours_ci_high"].iloc[0],
                             fixed_digits(self.spec.digits))
        return _interval_cell(text, latex)

    def grid(self, latex: bool = False) -> tuple[list[str], list[list[str]]]:
        """Header and rows; under each benchmark a row of the 95% intervals of our means."""
        header = ["Dataset", "Backbone", *[display_name(m, latex) for m in self.methods]]
        body = []
        for b in self.benchmarks:
            body.append([latex_escape(b[0]) if latex else b[0], b[1], *[self.cell(b, m, latex) for m in self.methods]])
            intervals = [self.interval_cell(b, m, latex) for m in self.methods]
            if any(intervals):
                body.append(["", latex_escape(CI_LABEL) if latex else CI_LABEL, *intervals])
        return header, body

    def to_csv_frame(self) -> pd.DataFrame:
        return self.long

    @property
    def empty(self) -> bool:
        return self.long.empty

    def summary(self) -> dict:
        """How many paper cells we ran, and how far we are on average (in paper stds and in absolute terms)."""
        ran = self.long[self.long["runs"] > 0]
        z = ran["z"][np.isfinite(ran["z"])]
        return {"cells": len(self.long), "ran": len(ran), "mean_abs_z": float(z.abs().mean()) if len(z) else math.nan,
                "within_1_std": int((z.abs() <= 1).sum()), "with_std": len(z),
                "mean_diff": float(ran["diff"].mean()) if len(ran) else math.nan}


def build_comparison(table: ResultTable, paper: PaperTables) -> ComparisonTable | None:
    """Join ``table`` with the paper's table it reproduces; None when the paper has no such table here."""
    if table.spec.paper_key is None or not paper.has(table.spec.paper_key):
        return None
    published = paper.table(table.spec.paper_key)
    rows = []
    for _, p in published.iterrows():
        b, m = (p["dataset"], p["backbone"]), p["method"]
        ran = b in table.benchmarks and m in table.methods and table.runs.at[b, m] > 0
        ours_mean = table.mean.at[b, m] if ran else np.nan
        ours_std = table.std.at[b, m] if ran else np.nan
        interval = table.interval(b, m) if ran else None
        diff = ours_mean - p["mean"]
        z = diff / p["std"] if ran and np.isfinite(p["std"]) and p["std"] > 0 else np.nan
        rows.append({"dataset": b[0], "backbone": b[1], "method": m, "paper_mean": p["mean"], "paper_std": p["std"],
                     "ours_mean": ours_mean, "ours_std": ours_std,
                     "runs": int(table.runs.at[b, m]) if ran else 0, "diff": diff, "z": z,
                     "ours_ci_low": interval[0] if interval else np.nan,
                     "ours_ci_high": interval[1] if interval else np.nan})
    return ComparisonTable(table.spec, pd.DataFrame(rows))


# ---------------------------------------------------------------------------------------------------------
# Writers


def latex_grid(header: Sequence[str], body: Sequence[Sequence[str]], caption: str, label: str,
               numeric_from: int = 2) -> str:
    """A booktabs table; a dataset name is written once for its consecutive rows, and a row whose first cell is
    empty (the interval line under a benchmark) continues the row above."""
    spec = "l" * numeric_from + "c" * (len(header) - numeric_from)
    lines = [r"\begin{table}[t]", r"\centering", r"\small", rf"\caption{{{latex_escape(caption)}}}",
             rf"\label{{tab:{label}}}", rf"\begin{{tabular}}{{{spec}}}", r"\toprule",
             " & ".join(header) + r" \\", r"\midrule"]
    previous = None
    for row in body:
        row = list(row)
        if row[0] == "":
            lines.append(" & ".join(row) + r" \\")
            continue
        if previous is not None and row[0] != previous:
            lines.append(r"\addlinespace")
        shown = "" if row[0] == previous else row[0]
        previous = row[0]
        lines.append(" & ".join([shown, *row[1:]]) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def _empty_note(table: ResultTable | ComparisonTable) -> str:
    return table.empty_note() if isinstance(table, ResultTable) else f"_{NOT_RUN}: no results for this table._"


def table_markdown(table: ResultTable | ComparisonTable) -> str:
    if table.empty:
        return _empty_note(table)
    header, body = table.grid()
    return to_markdown([table_block(header, body, numeric_from=2)]).strip()


def table_latex(table: ResultTable | ComparisonTable, caption: str) -> str:
    if table.empty:
        return f"% {caption}: {_empty_note(table).strip('_')}\n"
    header, body = table.grid(latex=True)
    return latex_grid(header, body, caption, table.spec.key + ("_vs_paper" if isinstance(table, ComparisonTable) else ""))


def write_table(table: ResultTable | ComparisonTable, folder: Path, stem: str, caption: str) -> list[Path]:
    """``stem``.md, .tex and .csv under ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{stem}.md", folder / f"{stem}.tex", folder / f"{stem}.csv"]
    paths[0].write_text(f"{caption}\n\n{table_markdown(table)}\n")
    paths[1].write_text(table_latex(table, caption))
    table.to_csv_frame().to_csv(paths[2], index=False, float_format="%.6g")
    return paths


__all__ = ["ABLATION_METHODS", "CI_LABEL", "ESTIMATOR_TABLES", "EXTRA_CALIBRATORS", "EXTRA_METHODS", "MAIN_METHODS",
           "OTHER_METRICS", "other_methods", "other_table_specs",
           "NEWER_METHODS", "NEWER_METRICS", "NEWER_ONLY",
           "NOT_RECORDED", "NOT_RUN", "TABLE_SPECS", "ComparisonTable", "ResultTable", "TableSpec", "benchmark_sort_key", "build_comparison", "build_result_table", "display_name",
           "sorted_benchmarks", "table_latex", "table_markdown", "w_sweep_methods", "write_table"]
