"""The report of one study, step by step: load -> tables -> significance -> figures -> theory -> document.

Each step is a function with explicit inputs so that orchestration (``flows/report.py``) can run them as
tasks; :func:`build_report` chains them for the CLI. Output layout under ``out_dir``::

    report.md, report.html          the document (HTML with figures inline)
    tables/<table>.{md,tex,csv}     our tables, and <table>_vs_paper.{md,tex,csv}
    significance/*.csv              Wilcoxon tests (across benchmarks, per benchmark), Holm-corrected
    figures/<figure>.{png,pdf}      reliability, confidence, data efficiency, feature similarity, theory
    theory/theorem1_monte_carlo.csv the Monte-Carlo table
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

import simcalib.report.bootstrap as bootstrap
import simcalib.report.figures as figs
import simcalib.report.stats as stats
import simcalib.report.theory as theory
from simcalib.analysis.figure_bins import FIGURE_CALIBRATORS
from simcalib.metrics import ESTIMATOR_NAMES
from simcalib.report.completeness import complete_only
from simcalib.report.definitions import definition_blocks, definitions_frame, write_definitions
from simcalib.report.grid import grid_choices, grid_choices_grid
from simcalib.report.homophily_groups import HomophilyOutputs, homophily_blocks, write_homophily
from simcalib.report.paper import PaperTables, load_paper_tables
from simcalib.report.render import (
    Block,
    Bullets,
    Figure,
    Heading,
    Paragraph,
    contents_block,
    counted,
    table_block,
    to_markdown,
    write_report,
)
from simcalib.report.results import StudyResults, load_study_results, select_splits
from simcalib.report.summary import (
    CONSTANT_BRANCH,
    constant_branch_means,
    summary_blocks,
    summary_frame,
    write_summary,
)
from simcalib.report.tables import (
    ABLATION_METHODS,
    CI_LABEL,
    EXTRA_CALIBRATORS,
    MAIN_METHODS,
    NEWER_ONLY,
    NOT_RECORDED,
    NOT_RUN,
    OTHER_METRICS,
    TABLE_SPECS,
    ComparisonTable,
    ResultTable,
    TableSpec,
    build_comparison,
    build_result_table,
    other_table_specs,
    sorted_benchmarks,
    write_table,
)

FULL_RUNS = 75  # 5 splits x 5 inits x 3 folds


# ---------------------------------------------------------------------------------------------------------
# Steps


def load_inputs(results_dir: str | os.PathLike | Sequence[str | os.PathLike], paper_dir: str | os.PathLike | None = None,
                splits: Sequence[int] | None = None,
                study_file: str | os.PathLike | None = None) -> tuple[StudyResults, PaperTables]:
    """The results (with ``study_file``, only its complete benchmarks: :func:`complete_only`; completeness is
    judged on every run, before ``splits`` selects some) and the paper's tables."""
    results = complete_only(load_study_results(results_dir), study_file)
    return select_splits(results, splits), load_paper_tables(paper_dir)


@dataclass
class TableSet:
    results: list[ResultTable]
    comparisons: dict[str, ComparisonTable]  # by spec key; only tables the paper has

    def get(self, key: str) -> ResultTable:
        return next(t for t in self.results if t.spec.key == key)


def build_tables(study: StudyResults, paper: PaperTables) -> TableSet:
    rows = study.main_rows()
    results = [build_result_table(rows, spec, paper) for spec in (*TABLE_SPECS, *other_table_specs(rows))]
    results = [t for t in results if shows_something_new(t) and not (t.spec.omit_if_empty and t.empty)]
    comparisons = {t.spec.key: c for t in results if (c := build_comparison(t, paper)) is not None}
    return TableSet(results, comparisons)


def shows_something_new(table: ResultTable) -> bool:
    """False for a table beyond the paper's (no ``paper_key``) none of whose own methods (those not in Table 1)
    ran: it would repeat Table 1's columns beside columns of 'not run'. The paper's tables always show."""
    own = [m for m in table.methods if m not in MAIN_METHODS]
    required = [m for m in table.spec.requires if m in table.runs.columns]
    if table.spec.requires and not (required and table.runs[required].to_numpy().sum()):
        return False
    return table.spec.paper_key is not None or not own or bool(table.runs[own].to_numpy().sum())


def write_grid_choices(study: StudyResults, out_dir: Path) -> list[Path]:
    """``tables/simcalib_grid_choices.{csv,md}``: SimCalib's chosen (w, t) counts and fitted temperatures."""
    table = grid_choices(study.main_rows())
    if table.empty:
        return []
    folder = Path(out_dir) / "tables"
    folder.mkdir(parents=True, exist_ok=True)
    csv_path, md_path = folder / "simcalib_grid_choices.csv", folder / "simcalib_grid_choices.md"
    table.to_csv(csv_path, index=False, float_format="%.6g")
    header, body = grid_choices_grid(table)
    md_path.write_text(to_markdown([table_block(header, body, numeric_from=2)]))
    return [csv_path, md_path]


def grid_choice_blocks(study: StudyResults) -> list[Block]:
    table = grid_choices(study.main_rows())
    if table.empty:
        return []
    return [Heading(3, "SimCalib's grid choices and fitted temperatures"), Paragraph(
        "Runs in which each (w, t) point of the grid was chosen (on labelled nodes), and the mean over runs of the "
        "mean and std over test nodes of T_feat and T_move at the chosen point (a std near 0: that branch acts as "
        "one temperature). `nodewise_share`: the share of runs whose T_feat varies over test nodes (coefficient "
        "of variation >= 0.05); `t_feat_spearman`: the median over runs of the Spearman correlation of T_feat "
        "with the distance to the nearest class prototype; `inert`: T_feat is one constant in most runs, so "
        "the variant is a mixture of temperature scaling and the movement branch, not the paper's mechanism. "
        "From the results' audit columns; `tables/simcalib_grid_choices.{md,csv}`."),
        table_block(*grid_choices_grid(table), numeric_from=2)]


def write_tables(tables: TableSet, out_dir: Path) -> list[Path]:
    folder = Path(out_dir) / "tables"
    shown = {t.spec.key for t in tables.results}
    left_out = [*TABLE_SPECS, *(TableSpec(f"other_{m}", "", m, ()) for m in OTHER_METRICS)]
    for spec in left_out:  # an earlier rendering's table that this one leaves out must not linger beside it
        if spec.key not in shown:
            for stem in (spec.key, f"{spec.key}_vs_paper"):
                for suffix in (".md", ".tex", ".csv"):
                    (folder / f"{stem}{suffix}").unlink(missing_ok=True)
    paths = []
    for table in tables.results:
        summary = ("median over runs" if table.spec.statistic == "median" else "mean ± std over runs")
        paths += write_table(table, folder, table.spec.key, f"{table.spec.title}, {summary}; under each benchmark "
                             f"the 95% bootstrap interval of the {table.spec.statistic} (whole splits resampled)")
        if table.spec.key in tables.comparisons:
            paths += write_table(tables.comparisons[table.spec.key], folder, f"{table.spec.key}_vs_paper",
                                 f"{table.spec.title}: ours vs paper (difference in paper standard deviations)")
    return paths


@dataclass
class Significance:
    paper: dict | None  # the paper's test recomputed on its own Table 1
    ours: dict  # the same on our Table 1 means
    across: pd.DataFrame  # SimCalib vs each baseline across benchmarks, Holm over baselines
    paired: pd.DataFrame  # SimCalib vs GATS per benchmark over paired runs, Holm over benchmarks
    comparisons: pd.DataFrame  # every pair of REPORT_PAIRS that ran, per benchmark (stats.paired_comparisons)
    newer: pd.DataFrame = field(default_factory=pd.DataFrame)  # NEWER_PAIRS on NEWER_TESTED_METRICS (+ metric)
    constant: dict | None = None  # the paper's test for SimCalib's constant feature branch vs GATS, where it ran
    constant_means: pd.Series = field(default_factory=pd.Series)  # its mean ECE per (dataset, backbone), the test's input


# The paired tests beyond SimCalib vs GATS: SimCalib's objectives and tuned settings against their references,
# each ablation against the full method, and each extra calibrator against GATS and SimCalib.
REPORT_PAIRS: tuple[tuple[str, str], ...] = (
    ("SimCalib", "GATS"), ("SimCalib_separate", "GATS"), ("SimCalib", "SimCalib_separate"),
    ("SimCalib", "SimCalib_stop_nll"), ("SimCalib_stop_nll", "GATS"),
    ("SimCalib_tuned", "GATS_tuned"), ("SimCalib_tuned", "SimCalib"), ("GATS_tuned", "GATS"),
    ("SimCalib", "SimCalib_decay_all"), ("SimCalib_decay_all", "GATS"),
    *((m, "SimCalib") for m in ABLATION_METHODS if m != "SimCalib"),
    *((m, ref) for m in EXTRA_CALIBRATORS for ref in ("GATS", "SimCalib")),
)


# The newer calibrators against the references a user would pick instead, and GETS against its other forms;
# tested on each metric where lower is better.
NEWER_PAIRS: tuple[tuple[str, str], ...] = (
    ("GETS", "GATS"), ("GETS", "TS"), ("WATS", "GATS"), ("WATS", "TS"), ("GETS", "GETS_ap"),
    ("GETS_holdout", "GETS"), ("GETS_holdout", "GATS"), ("GETS_ap", "GATS"), ("GETS_ap", "TS"),
)
NEWER_TESTED_METRICS = ("ece", "degree_ece", "nll")


def newer_comparisons(rows: pd.DataFrame) -> pd.DataFrame:
    """:func:`stats.paired_comparisons` of :data:`NEWER_PAIRS` on each of :data:`NEWER_TESTED_METRICS` (a
    ``metric`` column first), where one of the newer-only calibrators ran (see :data:`NEWER_ONLY`)."""
    if rows.empty or not rows["calibrator"].isin(NEWER_ONLY).any():
        return pd.DataFrame()
    frames = [stats.paired_comparisons(rows, NEWER_PAIRS, metric).assign(metric=metric)
              for metric in NEWER_TESTED_METRICS if metric in rows.columns]
    frames = [f for f in frames if not f.empty]
    if not frames:
        return pd.DataFrame()
    frame = pd.concat(frames, ignore_index=True)
    return frame[["metric", *[c for c in frame.columns if c != "metric"]]]


def compute_significance(study: StudyResults, tables: TableSet, paper: PaperTables) -> Significance:
    ours_means = tables.get("table1_ece").mean
    reference = None
    if paper.has("table1"):
        published = paper.table("table1").pivot_table(index=["dataset", "backbone"], columns="method", values="mean")
        reference = stats.across_benchmarks(published, "SimCalib", "GATS")
    baselines = [m for m in MAIN_METHODS if m != "SimCalib"]
    constant_means = constant_branch_means(study.main_rows())
    constant = None
    if len(constant_means) and "GATS" in ours_means.columns:
        means = ours_means[["GATS"]].join(constant_means.rename(CONSTANT_BRANCH), how="left")
        constant = stats.across_benchmarks(means, CONSTANT_BRANCH, "GATS")
    return Significance(reference, stats.across_benchmarks(ours_means, "SimCalib", "GATS"),
                        stats.across_benchmarks_all(ours_means, "SimCalib", baselines),
                        stats.paired_runs(study.main_rows(), "SimCalib", "GATS", "ece"),
                        stats.paired_comparisons(study.main_rows(), REPORT_PAIRS, "ece"),
                        newer_comparisons(study.main_rows()), constant, constant_means)


def write_significance(sig: Significance, out_dir: Path) -> list[Path]:
    folder = Path(out_dir) / "significance"
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / "across_benchmarks.csv", folder / "paired_runs_simcalib_vs_gats.csv",
             folder / "paired_runs_all.csv"]
    summary = pd.DataFrame([dict(source="paper Table 1", **sig.paper)] if sig.paper else [])
    summary = pd.concat([summary, pd.DataFrame([dict(source="ours", **sig.ours)])], ignore_index=True)
    constant = pd.DataFrame([dict(source="ours", **sig.constant)] if sig.constant else [])
    pd.concat([summary.assign(family="paper's test"), constant.assign(family="paper's test, constant branch"),
               sig.across.assign(source="ours", family="vs each baseline")],
              ignore_index=True).to_csv(paths[0], index=False, float_format="%.6g")
    sig.paired.to_csv(paths[1], index=False, float_format="%.6g")
    sig.comparisons.to_csv(paths[2], index=False, float_format="%.6g")
    newer = folder / "paired_runs_newer_calibrators.csv"
    if len(sig.newer):
        sig.newer.to_csv(newer, index=False, float_format="%.6g")
        paths.append(newer)
    else:
        newer.unlink(missing_ok=True)
    return paths


@dataclass
class FigureEntry:
    stem: str
    title: str
    caption: str
    paths: list[Path] = field(default_factory=list)  # PNG first; empty when not available
    note: str = ""  # why it is not available


@dataclass
class FigureSet:
    entries: list[FigureEntry]
    similarity: pd.DataFrame | None = None  # group ECEs behind the feature-similarity figure


KEPT_FIGURE = (" (Kept from an earlier rendering of this folder: it is drawn from saved test predictions, "
               "which are not committed; the numbers above are recomputed.)")


def make_figures(study: StudyResults, out_dir: Path, keep_existing: bool = False,
                 sweep: StudyResults | None = None, pinned: Sequence[str] = (),
                 figure_calibrators: Sequence[str] | None = None, figure_data: StudyResults | None = None,
                 figure_recommendation: str | os.PathLike | None = None) -> FigureSet:
    """The study's figures; with ``keep_existing``, a figure that cannot be drawn here (no saved predictions)
    but exists in ``out_dir/figures`` from an earlier rendering is kept and labelled as such. ``sweep``: a
    label-rate sweep kept in folders of its own, drawn as the data-efficiency figure instead of the study's
    rows (its runs at the main rate stay out of the tables, whose runs at that rate may be other draws).
    ``pinned``: figure stems kept from an earlier rendering even where they could be redrawn (e.g. drawn from
    every run's test predictions, against figure data that only some rows carry). ``figure_calibrators``: the
    calibrators of the reliability and confidence figures (default
    :data:`simcalib.report.figures.REPORT_FIGURE_CALIBRATORS`). ``figure_data``: the results (rows with
    ``figure_bins``) those two figures are drawn from instead of the study's own, e.g. the figure pass
    (study/figures.yaml), with each caption naming it and its runs; ``figure_recommendation``: the
    ``recommendation.csv`` the calibrators come from, named per family in the captions."""
    folder = Path(out_dir) / "figures"
    efficiency_rows = study.rows if sweep is None else sweep.rows
    sweep_note = "" if sweep is None else f" Drawn from the label-rate sweep in `{sweep.root}`."
    if len(efficiency_rows) and "CoraFull" not in set(efficiency_rows["dataset"].astype(str)):
        sweep_note += (" The paper draws this figure on CoraFull, which has no results here (its data is not in "
                       "every machine's mirror); the panels are the datasets the sweep ran.")
    shown = tuple(figs.REPORT_FIGURE_CALIBRATORS if figure_calibrators is None else figure_calibrators)
    bins = figs.figure_bins_frame(study.main_predictions(), study.main_rows(),
                                  tuple(dict.fromkeys((*shown, *figs.SIMILARITY_METHODS))))
    drawn_from = study if figure_data is None else figure_data  # the reliability and confidence figures' runs
    shown_bins = bins if figure_data is None else figs.figure_bins_frame(
        figure_data.main_predictions(), figure_data.main_rows(), shown)
    drawn = figs.shown_methods(shown_bins, shown)
    ran = set(drawn_from.main_rows()["calibrator"]) if len(drawn_from.rows) else set()
    undrawn = [m for m in shown if m not in drawn and m in ran]
    undrawn_note = (f" {', '.join(undrawn)} ran but {'has' if len(undrawn) == 1 else 'have'} no figure data here: "
                    "its results rows carry no `figure_bins` (the passes of reports/ other than the figure pass, "
                    "reports/figures, wrote that column for " + ", ".join(FIGURE_CALIBRATORS) + " only; saved test "
                    "predictions serve every calibrator)." if undrawn else "")
    source_note = "" if figure_data is None else figure_data_note(study, figure_data, shown_bins, drawn)
    role_note = "" if figure_recommendation is None else recommendation_note(figure_recommendation, drawn)
    entries = []

    def add(stem: str, title: str, caption: str, fig, note: str, kept_caption: str | None = None) -> None:
        """``kept_caption``: the caption of a figure kept from an earlier rendering, when the present one
        describes marks that rendering did not draw."""
        if stem in pinned and (folder / f"{stem}.png").is_file():
            fig = None  # the earlier rendering wins (see ``pinned``)
        if fig is not None:
            entries.append(FigureEntry(stem, title, caption, figs.save_figure(fig, folder, stem)))
        elif keep_existing and (folder / f"{stem}.png").is_file():
            kept = [p for p in (folder / f"{stem}.png", folder / f"{stem}.pdf") if p.is_file()]
            entries.append(FigureEntry(stem, title, (kept_caption or caption) + KEPT_FIGURE, kept))
        else:
            entries.append(FigureEntry(stem, title, caption, [], note))

    no_predictions = ("not available: no saved predictions and no `figure_bins` in the results rows (rows written "
                      "before that column existed; rerun the runs, or `simcalib benchmark ... --save-predictions`)")
    smooth = figs.smooth_curves(drawn_from.main_predictions(), drawn)
    smooth_benchmarks = sorted_benchmarks({b for b, _ in smooth})
    smooth_note = (("Dotted black line: the smooth reliability curve (relplot's kernel at smooth ECE's bandwidth, Blasiok & "
                    "Nakkiran 2023) of the saved test predictions, on " + ", ".join(f"{d} {b}" for d, b in
                                                                                    smooth_benchmarks) + "; ")
                   if smooth else "No smooth reliability curve: ")
    smooth_note += ("`figure_bins` keeps per-bin sums only, and a smooth curve needs each node's prediction, "
                    "so it is drawn only where saved test predictions exist"
                    + (" (none here)." if not smooth else "."))
    listed = ", ".join(drawn) if drawn else ", ".join(shown)
    if figure_data is None:
        reliability_caption = (
            f"Reliability diagrams of {listed} per benchmark (test nodes pooled over the runs whose rows carry "
            "figure data, counted in each title; rows of passes older than that column have it only where a "
            "recomputation reproduced them, see docs/decisions.md). Each title gives two ECEs: that of the pooled "
            "test nodes of its runs (one diagram's bins) and the mean over runs of each run's ECE, the statistic of "
            "Table 1; they differ because pooling averages the runs' bins before taking the gaps." + undrawn_note)
    else:
        reliability_caption = (
            f"Reliability diagrams of {listed} per benchmark." + role_note + source_note + " Each title gives two "
            "ECEs: first that of the pooled test nodes of the figure pass's runs counted in the title (one "
            "diagram's bins), then the mean over those runs of each run's ECE, the statistic of Table 1 (whose "
            "mean is over this report's runs); they differ because pooling averages the runs' bins before taking "
            "the gaps." + undrawn_note)
    add("reliability_uncal_vs_simcalib", "Reliability diagrams",
        reliability_caption + " Black lines: each bin's 95% bootstrap interval of the pooled accuracy over runs "
        "(correct nodes over nodes of the drawn runs, whole splits resampled, from each run's `figure_bins`; none "
        "where fewer than two runs have nodes in the bin). " + smooth_note,
        figs.reliability_grid(shown_bins, drawn, smooth=smooth), no_predictions, kept_caption=reliability_caption)
    add("confidence_distributions", "Confidence distributions",
        f"Top-1 confidence of the test nodes of {listed} per benchmark, the runs of each pooled (no ECE is "
        "drawn)." + role_note + source_note + undrawn_note, figs.confidence_grid(shown_bins, drawn), no_predictions)
    add("data_efficiency", "Data efficiency",
        "ECE against the label rate (UnCal dashed; mean ± std over runs). Here the label rate sets the whole "
        "labelled set (backbone training folds and calibration fold); the paper reuses one pretrained backbone and "
        "varies only the calibration data." + sweep_note, figs.data_efficiency_figure(efficiency_rows),
        "not available: no benchmark has results at two or more label rates (run study/data_efficiency.yaml, "
        "which sweeps the label rate in one study, and report on results/data_efficiency)")
    groups = figs.similarity_groups(bins)
    summary = figs.similarity_summary(groups) if groups is not None else None
    add("feature_similarity", "Feature similarity and calibration improvement",
        "Test nodes of each run in 5 equal groups by squared Mahalanobis distance to the nearest class prototype "
        "(1 = closest): group ECE (bars) and improvement over UnCal (dashed); where rows record it, below, SimCalib's "
        "feature temperature per group divided by its run's mean (a branch that follows the distance rises or falls "
        "across the groups); group ECEs and temperatures in figures/feature_similarity_groups.csv.", figs.feature_similarity_figure(summary) if summary is not None else None,
        "not available: no run has UnCal, GATS and SimCalib predictions (or figure_bins) with feature distances")
    if summary is not None:
        folder.mkdir(parents=True, exist_ok=True)
        summary.to_csv(folder / "feature_similarity_groups.csv", index=False, float_format="%.6g")
    cost = figs.cost_frame(study.main_rows())
    add("cost_ece_vs_fit_time", "Calibration against cost",
        "Mean test ECE against median fit time per calibrator (log axis), one panel per benchmark; lines: the 95% "
        "bootstrap intervals of both (whole splits resampled); numbers in figures/cost_ece_vs_fit_time.csv. Fit "
        "time: wall-clock seconds of the calibrator's fit on one torch thread as each row records it (a fit shared "
        "by a split's runs counts its time divided by the runs), on the machine and load of its pass "
        "(provenance.yaml). UnCal, which fits nothing, is left out (its ECE is in Table 1, its time in the table "
        "of fit times and the CSV).",
        figs.cost_figure(cost) if len(cost) else None, "not available: no row has a fit time")
    if len(cost):
        folder.mkdir(parents=True, exist_ok=True)
        cost.to_csv(folder / "cost_ece_vs_fit_time.csv", index=False, float_format="%.6g")
    return FigureSet(entries, summary)


@dataclass
class TheoryResult:
    table: pd.DataFrame
    paths: list[Path]


def run_theory(out_dir: Path, reps: int = 2000, seed: int = 10, grid: dict | None = None) -> TheoryResult:
    """The Monte-Carlo table over the default grid (or ``grid``: n_values, d_values, a_values), CSV and figure."""
    table = theory.theorem_check(**(grid or {}), reps=reps, seed=seed)
    folder = Path(out_dir) / "theory"
    folder.mkdir(parents=True, exist_ok=True)
    csv = folder / "theorem1_monte_carlo.csv"
    table.to_csv(csv, index=False, float_format="%.6g")
    paths = [csv, *figs.save_figure(figs.theory_figure(table), Path(out_dir) / "figures", "theory_theorem1")]
    return TheoryResult(table, paths)


# ---------------------------------------------------------------------------------------------------------
# The document


def remove_theory(out_dir: Path) -> None:
    """Delete the theory check's files of an earlier rendering of ``out_dir`` (a report without it)."""
    out_dir = Path(out_dir)
    for path in (out_dir / "theory" / "theorem1_monte_carlo.csv", out_dir / "figures" / "theory_theorem1.png",
                 out_dir / "figures" / "theory_theorem1.pdf"):
        path.unlink(missing_ok=True)
    if (out_dir / "theory").is_dir() and not any((out_dir / "theory").iterdir()):
        (out_dir / "theory").rmdir()


def _p(value: float) -> str:
    return "n/a" if value is None or not np.isfinite(value) else f"{value:.3g}"


def _pct(value: float) -> str:
    return "n/a" if value is None or not np.isfinite(value) else f"{100 * value:.1f}%"


def overview_blocks(study: StudyResults, paper: PaperTables, regenerate: str | None = None) -> list[Block]:
    """The section on the rows read: where from, which runs per benchmark, the estimators, the notes."""
    rows = study.rows
    blocks: list[Block] = [Heading(2, "Runs")]
    if regenerate:
        blocks.append(Paragraph(f"**Regenerate** every number in this report from the committed `results.csv` "
                                f"files with one command: {regenerate}."))
    blocks.append(Paragraph(f"Results read from `{study.root}` ({len(rows)} rows, "
                            f"{rows['source'].nunique() if len(rows) else 0} results files)."))
    if len(rows):
        main = study.main_rows()
        runs = main.groupby(["dataset", "backbone"])[["split", "init", "fold"]].apply(
            lambda g: len(g.drop_duplicates()))
        splits = main.groupby(["dataset", "backbone"])["split"].nunique()
        calibrators = main.groupby(["dataset", "backbone"])["calibrator"].apply(lambda c: ", ".join(sorted(set(c))))
        body = [[d, b, calibrators[(d, b)], str(int(runs[(d, b)])), str(int(splits[(d, b)])),
                 "yes" if runs[(d, b)] >= FULL_RUNS else "no"] for d, b in sorted_benchmarks(runs.index)]
        blocks += [Paragraph(f"Tables 1-4 use the runs at label rate {_pct(study.main_label_rate or math.nan)}; "
                             "runs at other label rates enter the data-efficiency figure only."),
                   table_block(["Dataset", "Backbone", "Calibrators", "Runs", "Splits", f"Full {FULL_RUNS}"], body, 3),
                   estimator_coverage(main)]
        rates = sorted(rows["label_rate"].dropna().unique())
        if len(rates) > 1:
            blocks.append(Paragraph("Label rates present: " + ", ".join(_pct(r) for r in rates) + "."))
    notes = study.notes + paper.notes
    if notes:
        blocks += [Heading(3, "Notes"), Bullets(tuple(notes))]
    return blocks


ESTIMATOR_LABELS = {
    "smece": "smooth ECE (`smece`)", "debiased_ce": "debiased CE (`debiased_ce`)",
    "signed_ce": "signed CE (`signed_ce`)", "degree_ece": "degree-binned ECE (`degree_ece`)",
}


def _benchmarks_with(rows: pd.DataFrame, metric: str) -> list[tuple[str, str]]:
    if metric not in rows.columns or rows.empty:
        return []
    values = pd.to_numeric(rows[metric], errors="coerce")
    return sorted_benchmarks(zip(rows.loc[values.notna(), "dataset"], rows.loc[values.notna(), "backbone"]))


def estimator_coverage(rows: pd.DataFrame) -> Paragraph:
    """Which rows and benchmarks carry each estimator of :data:`ESTIMATOR_NAMES` (rows written before its
    column lack it: missing, not zero)."""
    parts = []
    for metric in ESTIMATOR_NAMES:
        values = pd.to_numeric(rows[metric], errors="coerce") if metric in rows.columns else pd.Series(dtype=float)
        have = _benchmarks_with(rows, metric)
        parts.append(f"{ESTIMATOR_LABELS[metric]} in {int(values.notna().sum())} of {len(rows)} rows, benchmarks: "
                     + (", ".join(f"{d} {b}" for d, b in have) if have else "none"))
    return Paragraph("**Estimators beside the binned metrics** (computed for each run from its test predictions; "
                     "rows written before their columns lack them, and their tables show them as missing, never "
                     "as 0): " + "; ".join(parts) + ".")


def _table_or_note(table: ResultTable | ComparisonTable) -> Block:
    if table.empty:
        return Paragraph(table.empty_note() if isinstance(table, ResultTable) else f"_{NOT_RUN}: no results for this table._")
    return table_block(*table.grid(), numeric_from=2)


ESTIMATOR_DEFINITIONS = {
    "smece": "Smooth ECE (Blasiok & Nakkiran 2023), relplot's `smECE` of the top-1 confidence against "
             "correctness: the residuals smoothed by a reflected Gaussian kernel whose bandwidth is its own fixed "
             "point, so no bins are chosen.",
    "debiased_ce": "Kumar et al. (2019)'s debiased top-label L2 calibration error, `calibration.lower_bound_scaling_ce"
                   "(p=2, debias=True, mode='top-label')` with 15 equal-mass bins: each bin's squared gap minus the "
                   "variance of its accuracy, square root of the clipped sum. An L2 error: not on the ECE's scale.",
    "signed_ce": "Mean top-1 confidence minus accuracy: positive when over-confident, negative when under-confident; "
                 "errors of both signs cancel.",
    "degree_ece": "The number the GETS and WATS code report as ECE: the test nodes sorted by degree and cut into 10 "
                  "equal-count bins, |accuracy - mean confidence| per bin weighted by its share of nodes. It groups "
                  "nodes by degree, not confidence, so it is a different metric from the ECE above.",
}


def split_evidence(rows: pd.DataFrame, methods=MAIN_METHODS, metric: str = "ece") -> dict:
    """Over the Table 1 cells (benchmark x calibrator) with runs from two or more splits: how many, the median
    share of the run-to-run variance between splits (:func:`bootstrap.split_icc`), and the median width of
    the interval resampling splits over the one resampling runs one by one."""
    iccs, ratios = [], []
    chosen = rows[rows["calibrator"].isin(methods)] if len(rows) else rows
    for _, group in (chosen.groupby(["dataset", "backbone", "calibrator"]) if len(chosen) else []):
        values = pd.to_numeric(group[metric], errors="coerce").to_numpy(dtype=np.float64)
        splits = group["split"].to_numpy()
        if len(set(splits)) < 2 or len(values) <= len(set(splits)):
            continue
        by_split, by_run = bootstrap.mean_interval(values, splits), bootstrap.mean_interval(values)
        if by_split is None or by_run is None or by_run.high <= by_run.low:
            continue
        iccs.append(bootstrap.split_icc(values, splits))
        ratios.append((by_split.high - by_split.low) / (by_run.high - by_run.low))
    return {"cells": len(iccs), "icc": float(np.nanmedian(iccs)) if iccs else math.nan,
            "width_ratio": float(np.median(ratios)) if ratios else math.nan}


def table_blocks(tables: TableSet, evidence: dict | None = None) -> list[Block]:
    evidence = evidence or {"cells": 0}
    measured = (f"On this report's rows, over the {evidence['cells']} Table 1 cells with runs from two or more "
                f"splits, the split carries a median {100 * evidence['icc']:.0f}% of the run-to-run variance "
                f"(intraclass correlation), and the intervals resampling splits are a median "
                f"{evidence['width_ratio']:.2f} times as wide as those resampling runs one by one. "
                if evidence["cells"] else "")
    blocks: list[Block] = [Heading(2, "Tables"), Paragraph(
        "Mean ± population std over runs (ECE-type metrics in %); the best mean of each row in **bold** (the "
        "lowest; the highest for accuracy; the closest to 0 for the signed error); "
        f"'{NOT_RUN}' where a calibrator has no results, '{NOT_RECORDED}' where it ran but its rows lack the "
        "metric, and '(n of N runs)' where a cell pools fewer runs than the calibrator has. "
        f"Under each benchmark, the '{CI_LABEL}' line gives the 95% bootstrap interval of each mean "
        f"(`scipy.stats.bootstrap`, percentile, {bootstrap.N_RESAMPLES} resamples, seed {bootstrap.SEED}). "
        "**The resampling unit is the split**: the runs of one split share its test nodes, so whole splits are "
        "drawn with replacement, all their runs with them; benchmarks with runs from one split only (the Splits "
        "column above) resample their runs instead, and a cell with one run has no interval. " + measured +
        "In simulated benchmarks of 5 splits, resampling splits held the true mean in 82-85% of them rather "
        "than 95% (five units are few), and resampling runs in 47-94%, less the larger the split's share, so "
        "these intervals still understate the uncertainty (`benchmarks/statistics/bootstrap_design.py`, "
        "`reports/offline/bootstrap_design.txt`, docs/decisions.md). "
        "Each table is also under `tables/` as Markdown, LaTeX (booktabs) and CSV (with the interval's ends).")]
    for table in tables.results:
        if table.empty:  # nothing ran: no section (the paper's cells of it are in tables/<table>_vs_paper.csv)
            continue
        blocks.append(Heading(3, table.spec.title))
        if table.spec.metric in ESTIMATOR_DEFINITIONS:
            blocks.append(Paragraph(ESTIMATOR_DEFINITIONS[table.spec.metric]))
        if table.spec.metric == "fit_seconds":
            blocks.append(Paragraph(
                "Median over runs of the calibrator's fit, wall-clock seconds on one torch thread as each row "
                "records it (a fit shared by a split's runs, `--batch-calibrators`, counts its time divided by "
                "the runs); the machine and its load are those of the pass that wrote the rows (provenance.yaml), "
                "so times compare within a benchmark better than across. Calibrators that ran on no benchmark are "
                "left out. Against ECE: the figure 'Calibration against cost'."))
        blocks.append(_table_or_note(table))
        comparison = tables.comparisons.get(table.spec.key)
        if comparison is not None:
            s = comparison.summary()
            blocks += [Heading(4, f"{table.spec.title.split(':')[0]}: ours vs paper"), Paragraph(
                "Cells: ours vs paper (difference in units of the paper's std; n/a where the paper gives no std). "
                f"{s['ran']} of {s['cells']} paper cells run here; "
                + (f"mean |difference| {s['mean_abs_z']:.2f} paper stds, {s['within_1_std']} of {s['with_std']} "
                   f"within one std; mean difference {s['mean_diff']:+.2f}."
                   if s["with_std"] else "no paper std to compare with." if s["ran"] else
                   f"the paper's cells of this table are on {', '.join(sorted({b[0] for b in comparison.benchmarks}))}, "
                   "none of which has results here" + ("." if table.empty else ": our rows in the table above are on "
                   "other datasets, so they stand beside the paper's, not against them."))),
                _table_or_note(comparison)]
            far = far_from_paper(comparison)
            if far is not None:
                blocks.append(far)
        elif table.spec.paper_key:
            blocks.append(Paragraph(f"_Paper comparison skipped: the paper's {table.spec.paper_key} is not loaded._"))
    return blocks


def far_from_paper(comparison: ComparisonTable, threshold: float = 1.0) -> Paragraph | None:
    """A sentence naming every cell more than ``threshold`` paper stds from the paper (largest first), or None."""
    long = comparison.long
    far = long[(long["runs"] > 0) & np.isfinite(long["z"]) & (long["z"].abs() > threshold)]
    if far.empty:
        return None
    far = far.reindex(far["z"].abs().sort_values(ascending=False).index)
    d = comparison.spec.digits
    cells = [f"{r.dataset} {r.backbone} {r.method} {r.ours_mean:.{d}f} vs {r.paper_mean:.{d}f} ({r.z:+.1f} std)"
             for r in far.itertuples()]
    below = int((far["z"] < 0).sum())
    return Paragraph(
        f"**More than {threshold:g} paper std from the paper: {counted(len(far), 'cell')}** ({below} below it, "
        f"{len(far) - below} above): " + "; ".join(cells) + ". What was checked about the largest gaps is in "
        "`docs/decisions.md` (section on the measured gaps).")


def significance_blocks(sig: Significance) -> list[Block]:
    blocks: list[Block] = [Heading(2, "Significance"), Paragraph(
        "The paper's test: Wilcoxon signed-rank (two-sided) of SimCalib vs GATS over the per-benchmark mean ECEs, "
        "and the mean over benchmarks of the relative reduction (GATS - SimCalib) / GATS.")]
    body = []
    for name, result in (("paper Table 1 (recomputed)", sig.paper), ("ours (Table 1 means)", sig.ours)):
        if result is None:
            body.append([name, "not loaded", "", "", "", ""])
            continue
        body.append([name, str(result["n"]), f"{result['wins']}", _p(result["statistic"]), _p(result["pvalue"]),
                     _pct(result["relative_reduction"])])
    blocks.append(table_block(["Source", "Benchmarks", "SimCalib lower", "W", "p", "Mean relative reduction"], body, 1))
    if sig.ours["n"] < 6:
        blocks.append(Paragraph(f"With {counted(sig.ours['n'], 'benchmark')} where both SimCalib and GATS ran, the exact test "
                                "cannot reach p < 0.05 (the smallest two-sided p with n pairs is 2 / 2^n)."))
    if len(sig.across):
        body = [[r.reference, str(r.n), str(r.wins), _p(r.pvalue), _p(r.pvalue_holm), _pct(r.relative_reduction)]
                for r in sig.across.itertuples()]
        blocks += [Heading(3, "SimCalib vs each baseline across benchmarks (Holm over the baselines)"),
                   table_block(["Baseline", "Benchmarks", "SimCalib lower", "p", "p (Holm)", "Mean relative reduction"],
                               body, 1)]
    blocks.append(Heading(3, "SimCalib vs GATS per benchmark over paired runs (Holm over the benchmarks)"))
    blocks.append(Paragraph("Two rows are a pair when they share dataset, backbone, split, init and fold, and their "
                            "`backbone_digest` (a hash of the backbone's logits) where both rows record one: rows "
                            "of one run computed on different backbones, e.g. on two machines, are not paired. "
                            "'Diff 95% CI': the 95% bootstrap interval of the mean paired difference (SimCalib "
                            "minus GATS), whole splits of pairs resampled as in the tables; the Wilcoxon p beside "
                            "it treats the pairs as independent."))
    if sig.paired.empty:
        blocks.append(Paragraph(f"_{NOT_RUN}: no benchmark has runs of both SimCalib and GATS._"))
    else:
        body = [[r.dataset, r.backbone, str(r.pairs), f"{r.SimCalib_mean:.2f}", f"{r.GATS_mean:.2f}",
                 f"{r.mean_diff:+.2f}", stats.diff_interval_text(r.diff_ci_low, r.diff_ci_high), str(r.wins),
                 _p(r.pvalue), _p(r.pvalue_holm)] for r in sig.paired.itertuples()]
        blocks.append(table_block(["Dataset", "Backbone", "Pairs", "SimCalib", "GATS", "Mean diff", "Diff 95% CI",
                                   "SimCalib lower", "p", "p (Holm)"], body, 2))
    others = sig.comparisons[~((sig.comparisons["method"] == "SimCalib") & (sig.comparisons["reference"] == "GATS"))]
    if len(others):
        blocks += [Heading(3, "Other paired comparisons on test ECE (Holm over the benchmarks within each pair)"),
                   Paragraph("SimCalib's objectives and tuned settings against their references, each ablation "
                             "against the full method, each extra calibrator against GATS and SimCalib; runs "
                             "paired as above; `significance/paired_runs_all.csv` holds them all."),
                   table_block(stats.PAIRED_HEADER, stats.paired_comparison_cells(others), 3)]
    if len(sig.newer):
        blocks += [Heading(3, "The newer calibrators: GETS and WATS against TS and GATS, GETS against its other "
                              "forms, on ECE, degree-binned ECE and NLL (Holm over the benchmarks within each pair "
                              "and metric)"),
                   Paragraph("GETS is the GETS code's model (per-class scaling: it may change the argmax), GETS_ap "
                             "the accuracy-preserving form (one temperature per node), GETS_holdout GETS stopped on a "
                             "held-out half of the calibration fold; degree-binned ECE is the number the GETS and "
                             "WATS papers report. Runs paired as above; "
                             "`significance/paired_runs_newer_calibrators.csv` holds them all.")]
        for metric, frame in sig.newer.groupby("metric", sort=False):
            digits = 4 if metric == "nll" else 2
            blocks += [Paragraph(f"**{metric}**"),
                       table_block(stats.PAIRED_HEADER, stats.paired_comparison_cells(frame, digits), 3)]
    return blocks


def figure_blocks(figures: FigureSet, out_dir: Path) -> list[Block]:
    """A section per drawn figure; a figure without data (``note`` only) has none, nor the whole part when
    nothing was drawn."""
    drawn = [entry for entry in figures.entries if entry.paths]
    blocks: list[Block] = [Heading(2, "Figures")] if drawn else []
    for entry in drawn:
        blocks += [Heading(3, entry.title), Figure(str(entry.paths[0].relative_to(out_dir)), entry.caption)]
    return blocks


def _mc_error(row: pd.Series, variant: str) -> str:
    """Monte-Carlo uncertainty: the standard error, or the rule of three when no replicate failed."""
    reps, p = int(row["reps"]), float(row[f"p_joint_better_{variant}"])
    if p == 1.0:
        return f"no failure in {reps} replicates: P >= {1 - 3 / reps:.4f} at 95% confidence"
    return f"SE {row[f'se_{variant}']:.3f} over {reps} replicates"


def theory_blocks(result: TheoryResult | None, out_dir: Path) -> list[Block]:
    """The Monte-Carlo check of Theorem 1; nothing where the report leaves it out (``result`` None)."""
    if result is None:
        return []
    table = result.table
    ex = theory.PAPER_EXAMPLE
    row = theory.paper_example_row(table)
    reading = (
        "Reading of Theorem 1 (paper, Theoretical Results and appendix): x | y ~ N(y mu, sigma^2 I) in d dimensions, "
        "||mu||^2 = d and ||mu||^2 / sigma^2 = sqrt(d/n), so sigma^2 = sqrt(d n); isolated estimator "
        "mu_bar = mean of y x over n samples, joint estimator mu_hat = (mu_bar_i + a (mu_bar_j - b)) / (1 + a^2). "
        "b is known and cancels (no value needed); only |a| matters. ECE_paper is the paper's expression "
        "E_v |sigmoid(2 r v) - sigmoid(2 v)| with r = m^T mu / ||m||^2 and v = m^T x, which drops sigma; "
        "ECE_exact is the ECE of the ECM classifier sigmoid(2 m^T x / sigma^2) that knows sigma. Both are "
        "integrated by quadrature; the probability is over the n training samples.")
    a_cols = sorted(table["a"].unique())
    body = []
    for (n, d), group in table.groupby(["n", "d"]):
        cells = []
        for a in a_cols:
            hit = group[np.isclose(group["a"], a)]
            cells.append(f"{hit['p_joint_better_paper'].iloc[0]:.3f}" if len(hit) else "—")
        body.append([str(n), str(d), *cells])
    return [
        Heading(2, "Theory check: Theorem 1 by Monte Carlo"), Paragraph(reading),
        Paragraph(f"**Paper's example** (n = {ex['n']}, d = {ex['d']}, |a| = {ex['a']}, claimed >= "
                  f"{ex['claimed_lower_bound']}): P(ECE_joint <= ECE_isolated) = "
                  f"**{row['p_joint_better_paper']:.3f}** (paper's expression, {_mc_error(row, 'paper')}) and {row['p_joint_better_exact']:.3f} (sigma-aware). Mean ECE "
                  f"isolated {row['mean_ece_bar_paper']:.3f}% vs joint {row['mean_ece_hat_paper']:.3f}% (paper's "
                  f"expression). The proof's intermediate event 1 >= r_hat >= r_bar >= 1/2 has probability "
                  f"{row['p_proof_event']:.3f}: under this parameter setting r_bar is about "
                  f"1 / (1 + sqrt(d/n)) = {row['mean_r_bar']:.2f}, so the conclusion holds while that step of the "
                  "proof does not."),
        Paragraph("P(ECE_joint <= ECE_isolated), paper's expression, by (n, d) and |a| (full table with the sigma-aware "
                  "reading, standard errors and mean ECEs: `theory/theorem1_monte_carlo.csv`):"),
        table_block(["n", "d", *[f"|a|={a:g}" for a in a_cols]], body, 2),
        Figure(str(result.paths[1].relative_to(out_dir)), "Theorem 1 Monte Carlo: P(ECE_joint <= ECE_isolated) "
               "against |a|"),
    ]


def report_summary(tables: TableSet, sig: Significance, left_out: str = "") -> list[Block]:
    """The summary table and the paper's test (:mod:`simcalib.report.summary`), read from the tables and tests;
    under them ``left_out``, the line naming the study's benchmarks left out (:attr:`StudyResults.left_out`)."""
    blocks = summary_blocks(summary_frame(tables, sig, sig.constant_means), sig)
    return [*blocks, Paragraph(f"**Not in this report:** {left_out}.")] if left_out else blocks


def one_class_blocks(rows: pd.DataFrame) -> list[Block]:
    """A note naming the benchmarks whose backbone predicts one class on every test node in some runs (their
    rows are flagged ``one_class_backbone``): ECE and accuracy there say little about calibration."""
    if "one_class_backbone" not in rows.columns or rows.empty:
        return []
    runs = rows.drop_duplicates(subset=["dataset", "backbone", "split", "init", "fold"])
    flagged = runs[runs["one_class_backbone"].astype(str).str.lower() == "true"]  # a run's rows share its backbone
    if flagged.empty:
        return []
    counts = flagged.groupby(["dataset", "backbone"]).size()
    totals = runs.groupby(["dataset", "backbone"]).size()
    parts = [f"{d} {b}: {counts[(d, b)]} of {totals[(d, b)]} runs" for d, b in sorted_benchmarks(counts.index)]
    binary = "roc_auc" in flagged.columns and flagged["roc_auc"].notna().any()  # ROC-AUC is computed for 2 classes
    informative = ("ROC-AUC and the calibration error of p(y = 1) are the informative metrics" if binary else
                   "NLL and Brier, which score the whole predicted distribution, say more than the top-label ECE")
    return [Paragraph("**Backbones that predict one class only** (every test node gets the same top-1 class; rows "
                      "flagged `one_class_backbone`): " + "; ".join(parts) + ". On those runs the top-label ECE "
                      f"measures how far the confidence is from that class's share; {informative}.")]


def assemble(study: StudyResults, paper: PaperTables, tables: TableSet, sig: Significance, figures: FigureSet,
             theory_result: TheoryResult | None, out_dir: Path, title: str, regenerate: str | None = None,
             summary: list[Block] | None = None, homophily: HomophilyOutputs | None = None) -> list[Block]:
    """The report's blocks in order: the title, the summary, the contents (:func:`contents_block`), then the
    runs, tables, tests, homophily analysis, figures, theory check and definitions, each only where it has
    data; ``summary``: :func:`report_summary`'s blocks where the caller has them; ``homophily``:
    :func:`write_homophily`'s outputs (the local-homophily section where rows carry its data);
    ``theory_result`` None: no theory section."""
    out_dir = Path(out_dir)
    summary = report_summary(tables, sig, study.left_out) if summary is None else summary
    head = [Heading(1, title), Heading(2, "Summary"), *summary]
    body = [*overview_blocks(study, paper, regenerate), *one_class_blocks(study.main_rows()),
            *table_blocks(tables, split_evidence(study.main_rows())),
            *grid_choice_blocks(study),
            *significance_blocks(sig),
            *homophily_blocks(homophily, out_dir),
            *figure_blocks(figures, out_dir), *theory_blocks(theory_result, out_dir),
            *definition_blocks(definitions_frame(study.rows))]
    return [*head, contents_block([*head, *body]), *body]


SAME_ECE = 1e-5  # ECE points: "the same ECE" (two computations of one run differ by about 1e-6 points)


def figure_data_note(study: StudyResults, figure_data: StudyResults, bins: pd.DataFrame, drawn: Sequence[str]) -> str:
    """One caption sentence on the runs a figure is drawn from when they are another pass's (``figure_data``):
    the folder, the runs per benchmark and how many of its rows of runs this report also has carry the same
    ECE on the same backbone."""
    chosen = bins[bins["calibrator"].isin(drawn)]
    runs = chosen.groupby(["dataset", "backbone"])[["split", "init", "fold"]].apply(
        lambda frame: len(frame.drop_duplicates()))
    counts = sorted(set(int(n) for n in runs))
    per_benchmark = (f"{counts[0]} runs per benchmark" if len(counts) == 1 else "runs per benchmark: " + ", ".join(
        f"{d} {b} {int(runs[(d, b)])}" for d, b in sorted_benchmarks(runs.index)))
    keys = ["dataset", "backbone", "calibrator", "split", "init", "fold"]
    theirs = figure_data.main_rows()
    theirs = theirs[theirs["calibrator"].isin(drawn)]
    ours = study.main_rows()
    if len(ours) and len(theirs):
        as_text = lambda frame: frame.assign(**{k: frame[k].astype(str) for k in keys})  # noqa: E731
        both = as_text(theirs).merge(as_text(ours), on=keys, suffixes=("", "_report"))
        digest = lambda column: both[column].astype(object).where(both[column].notna(), "").astype(str)  # noqa: E731
        same = int((np.isclose(both["ece"].astype(float), both["ece_report"].astype(float), rtol=0, atol=SAME_ECE)
                    & (digest("backbone_digest") == digest("backbone_digest_report"))).sum())
        shared = (f" Of its {len(theirs)} rows of these calibrators, {len(both)} are of runs this report also has, "
                  f"{same} of them with the same ECE (within {SAME_ECE:g} points) on the same backbone.")
    else:
        shared = ""
    return (f" Drawn from the figure pass `{figure_data.root}` ({per_benchmark}), whose results rows carry "
            f"every drawn calibrator's `figure_bins`.{shared}")


def recommendation_note(path: str | os.PathLike, drawn: Sequence[str]) -> str:
    """One caption sentence naming the family of graphs each drawn calibrator is recommended for."""
    frame = pd.read_csv(path)
    roles = [f"{row.calibrator} on {row.family} graphs" for row in frame.itertuples() if row.calibrator in drawn]
    return f" Recommended ({path}): {', '.join(roles)}." if roles else ""


@dataclass
class ReportOutputs:
    folder: Path
    report_md: Path
    report_html: Path
    summary_md: Path  # the summary table alone, for embedding (summary.embed_summary)
    files: list[Path]
    significance: Significance
    theory_table: pd.DataFrame | None  # None: the report has no theory check


def build_report(results_dir: str | os.PathLike | Sequence[str | os.PathLike], out_dir: str | os.PathLike, paper_dir: str | os.PathLike | None = None,
                 title: str | None = None, theory_reps: int = 2000, seed: int = 10,
                 theory_grid: dict | None = None, splits: Sequence[int] | None = None, keep_figures: bool = False,
                 regenerate: str | None = None,
                 data_efficiency: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
                 pinned_figures: Sequence[str] = (), compare_paper: bool = True,
                 figure_calibrators: Sequence[str] | None = None, theory_check: bool = True,
                 figure_data: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
                 figure_recommendation: str | os.PathLike | None = None,
                 study_file: str | os.PathLike | None = None) -> ReportOutputs:
    """Everything above in order; returns the paths written. ``study_file``: the study whose results these are;
    the report shows its complete benchmarks only and names the others under the summary
    (:mod:`simcalib.report.completeness`). ``splits`` restricts every table, test and
    figure to those splits' runs (e.g. the splits never looked at while choosing defaults); ``keep_figures``
    keeps figures of an earlier rendering that need predictions not present here; ``regenerate`` is the
    command that re-renders the report (Markdown), stated at its top; ``data_efficiency``: the results of a
    label-rate sweep drawn as the data-efficiency figure; ``pinned_figures``: stems kept from the earlier
    rendering even where they could be redrawn (see :func:`make_figures`); ``compare_paper`` False: no table
    beside the paper's (a study of graphs the paper has not); ``figure_calibrators``: the calibrators of the
    reliability and confidence figures (default :data:`simcalib.report.figures.REPORT_FIGURE_CALIBRATORS`);
    ``theory_check`` False: no Theorem 1 section (and its files of an earlier rendering are removed);
    ``figure_data``: the results folder(s) the reliability and confidence figures are drawn from (default: the
    study's own rows), ``figure_recommendation`` the recommendation.csv their calibrators come from (see
    :func:`make_figures`)."""
    out_dir = Path(out_dir)
    study, paper = load_inputs(results_dir, paper_dir, splits, study_file)
    if not compare_paper:
        paper = PaperTables(None, paper.long.iloc[0:0], ["No table of this report is compared with the paper's "
                                                         "(its manifest entry says paper: false)."])
    sweep = None if data_efficiency is None else select_splits(load_study_results(data_efficiency), splits)
    tables = build_tables(study, paper)
    files = write_tables(tables, out_dir) + write_grid_choices(study, out_dir)
    files.append(write_definitions(definitions_frame(study.rows), out_dir))
    sig = compute_significance(study, tables, paper)
    files += write_significance(sig, out_dir)
    shown_from = None if figure_data is None else select_splits(load_study_results(figure_data), splits)
    figures = make_figures(study, out_dir, keep_figures, sweep, pinned_figures, figure_calibrators, shown_from,
                           figure_recommendation)
    files += [p for e in figures.entries for p in e.paths]
    theory_result = run_theory(out_dir, theory_reps, seed, theory_grid) if theory_check else None
    if theory_result is not None:
        files += theory_result.paths
    else:
        remove_theory(out_dir)
    homophily = write_homophily(study.main_rows(), out_dir)
    if homophily is not None:
        files += homophily.files
    summary = report_summary(tables, sig, study.left_out)
    summary_md = write_summary(summary, out_dir)  # the summary alone, for a README to embed (``summary_in``)
    files.append(summary_md)
    if title is None:
        name = Path(results_dir).name if isinstance(results_dir, (str, os.PathLike)) else "several folders"
        title = f"SimCalib study report: {name}"
    md, page = write_report(assemble(study, paper, tables, sig, figures, theory_result, out_dir, title, regenerate,
                                     summary, homophily), out_dir, title)
    return ReportOutputs(out_dir, md, page, summary_md, [md, page, *files], sig,
                         None if theory_result is None else theory_result.table)


__all__ = ["FigureSet", "ReportOutputs", "Significance", "TableSet", "TheoryResult", "assemble", "build_report",
           "build_tables", "compute_significance", "figure_data_note", "load_inputs", "make_figures", "report_summary", "run_theory",
           "write_significance", "write_tables"]
