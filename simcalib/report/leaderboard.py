"""Which calibrator for my graph: the leaderboard and the recommendation, generated from committed results rows.

A family of graphs (homophilous; heterophilous multi-class; binary) is a set of benchmarks (dataset x backbone).
Every calibrator run on all of them is ranked on each benchmark and metric, and the ranks are averaged:

    mean_b = (1 / R_b) sum_{r in runs_b} metric_{r, c}        the mean over the benchmark's runs
    rank_{b, c} = rank of mean_b(c) among the calibrators     (1 = lowest; ties share the average rank)
    mean rank_c = (1 / B) sum_b rank_{b, c}

``runs_b`` are the runs (split, init, fold) where every ranked calibrator has a row on one backbone (rows of one run
with two ``backbone_digest`` values are left out), so every mean of a benchmark is over the same runs. The 95%
interval of a mean rank resamples whole splits within each benchmark (:func:`simcalib.report.bootstrap.resampled_means`,
:data:`~simcalib.report.bootstrap.N_RESAMPLES` resamples, a generator seeded with
:data:`~simcalib.report.bootstrap.SEED` per family and metric) and takes the percentile interval of the mean rank.

Against TS, per benchmark and metric, the Wilcoxon signed-rank test over the same paired runs
(:func:`simcalib.report.stats.wilcoxon_pvalue`), Holm over the family's benchmarks for each calibrator and metric
(:func:`simcalib.report.stats.holm`); "below" and "above" count the benchmarks with Holm p < :data:`ALPHA` and a lower
or higher mean. The accuracy change is the benchmark's mean accuracy minus UnCal's (points), averaged over the family
with its largest absolute value beside it; the fit time is the median over benchmarks of each benchmark's median
``fit_seconds``.

The recommendation (:func:`recommend`) per family: among the calibrators other than UnCal that are significantly
above TS on ECE on no benchmark of the family and whose mean accuracy differs from UnCal's by at most
:data:`ACCURACY_BOUND` points on every benchmark, the lowest mean ECE rank (ties: the lower mean NLL rank, then the
name).

Shapes: a family's rows are results rows (:data:`simcalib.store.results_store.RESULT_COLUMNS`); the leaderboard is
one row per family and calibrator (:data:`LEADERBOARD_COLUMNS`), the per-benchmark table one row per family,
benchmark, calibrator and metric (:data:`BENCHMARK_COLUMNS`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from simcalib.errors import ConfigError, DataMissingError
from simcalib.report.bootstrap import CONFIDENCE, N_RESAMPLES, SEED, resampled_means
from simcalib.report.stats import holm, wilcoxon_pvalue
from simcalib.report.tables import benchmark_sort_key

METRICS = ("ece", "nll", "brier")
METRIC_LABELS = {"ece": "ECE", "nll": "NLL", "brier": "Brier"}
REFERENCE = "TS"
BASELINE = "UnCal"
ALPHA = 0.05
ACCURACY_BOUND = 0.5  # points of accuracy (%), per benchmark, for the recommendation
CLASSES = ("any", "multi-class", "binary")  # binary benchmarks: rows carry ROC-AUC (computed for two classes only)
RUN_KEYS = ["split", "init", "fold"]
RULE = (f"lowest mean ECE rank among the calibrators other than {BASELINE} that are significantly above {REFERENCE} "
        f"on ECE (Wilcoxon over paired runs, Holm over the family's benchmarks, p < {ALPHA}) on no benchmark of the "
        f"family and whose mean accuracy is within {ACCURACY_BOUND} points of {BASELINE}'s on every benchmark; ties: "
        "the lower mean NLL rank")

LEADERBOARD_COLUMNS = ["family", "calibrator", "benchmarks", *(
    f"{m}_{c}" for m in METRICS for c in ("rank", "rank_low", "rank_high", "below_ts", "above_ts")),
    "accuracy_change", "accuracy_change_max_abs", "fit_seconds"]
BENCHMARK_COLUMNS = ["family", "dataset", "backbone", "calibrator", "metric", "runs", "mean", "rank", "diff_vs_ts",
                     "pvalue", "pvalue_holm"]
RECOMMENDATION_COLUMNS = ["family", "calibrator", "ece_rank", "ece_rank_low", "ece_rank_high", "benchmarks",
                          "candidates", "evidence", "rule"]


@dataclass(frozen=True)
class Family:
    """A family of graphs: its name and title, the results folders its rows come from, which benchmarks of them it
    takes (``classes``: any, multi-class or binary), the report that carries its per-benchmark evidence and
    ``study``, the study file whose results they are (only its complete benchmarks are ranked,
    :mod:`simcalib.report.completeness`; None: every benchmark of the folders)."""

    name: str
    title: str
    results: tuple[str, ...]
    classes: str = "any"
    evidence: tuple[str, ...] = ()
    study: str | None = None


@dataclass
class Leaderboard:
    table: pd.DataFrame  # LEADERBOARD_COLUMNS
    benchmarks: pd.DataFrame  # BENCHMARK_COLUMNS
    recommendation: pd.DataFrame  # RECOMMENDATION_COLUMNS
    families: list[Family]
    notes: list[str] = field(default_factory=list)
    left_out: dict[str, str] = field(default_factory=dict)  # family -> the line naming its incomplete benchmarks


def read_families(path: str | os.PathLike) -> list[Family]:
    """The families of a leaderboard manifest (``reports/leaderboard.yaml``): a YAML list of {name, title, results
    (a folder or a list), classes (optional), evidence (optional: files), study (optional: the study file whose
    results the folders hold)}, paths relative to the project root."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"leaderboard manifest {path} does not exist; see reports/leaderboard.yaml")
    entries = yaml.safe_load(path.read_text())
    keys = {"name", "title", "results", "classes", "evidence", "study"}
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{path}: expected a list of families, each with name, title and results")
    families = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or not {"name", "title", "results"} <= set(entry) or set(entry) - keys:
            raise ConfigError(f"{path}: family {index} must have the keys name, title, results (and optionally "
                              f"classes, evidence, study), got {entry!r}")
        listed = lambda value: tuple(value) if isinstance(value, list) else (value,)  # noqa: E731
        family = Family(str(entry["name"]), str(entry["title"]), listed(entry["results"]),
                        str(entry.get("classes", "any")), listed(entry.get("evidence", [])),
                        None if entry.get("study") is None else str(entry["study"]))
        if family.classes not in CLASSES:
            raise ConfigError(f"{path}: family {family.name}: classes must be one of {', '.join(CLASSES)}, "
                              f"got {family.classes!r}")
        for folder in family.results:
            if not Path(folder).is_dir():
                raise DataMissingError(f"{path}: family {family.name}: results folder {folder!r} does not exist")
        if family.study is not None and not Path(family.study).is_file():
            raise DataMissingError(f"{path}: family {family.name}: study file {family.study!r} does not exist; "
                                   "`study` names the study file whose results the family reads")
        families.append(family)
    return families


def select_classes(rows: pd.DataFrame, classes: str) -> pd.DataFrame:
    """The rows of the benchmarks of ``classes``: binary where every row of the benchmark has a ROC-AUC."""
    if classes == "any" or rows.empty:
        return rows
    auc = pd.to_numeric(rows["roc_auc"], errors="coerce") if "roc_auc" in rows.columns else pd.Series(np.nan, rows.index)
    binary = np.isfinite(auc.to_numpy(float)).astype(float)
    is_binary = pd.Series(binary, index=rows.index).groupby([rows["dataset"], rows["backbone"]]).transform("min") == 1
    return rows[is_binary if classes == "binary" else ~is_binary]


def common_runs(rows: pd.DataFrame, calibrators: Sequence[str]) -> pd.DataFrame:
    """One benchmark's rows of ``calibrators`` on the runs where all of them have a row on one backbone."""
    rows = rows[rows["calibrator"].isin(calibrators)]
    digests = rows["backbone_digest"] if "backbone_digest" in rows.columns else pd.Series(np.nan, rows.index)
    per_run = rows.assign(_digest=digests).groupby(RUN_KEYS).agg(
        n=("calibrator", "nunique"), digests=("_digest", "nunique"))
    keep = per_run[(per_run["n"] == len(calibrators)) & (per_run["digests"] <= 1)].index
    return rows.set_index(RUN_KEYS).loc[lambda f: f.index.isin(keep)].reset_index()


def _ranks(means: np.ndarray) -> np.ndarray:
    """Ranks along the last axis, 1 = lowest, ties averaged."""
    return scipy_stats.rankdata(means, axis=-1, method="average")


def family_leaderboard(rows: pd.DataFrame, family: str, metrics: Sequence[str] = METRICS,
                       n_resamples: int = N_RESAMPLES) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(leaderboard rows, per-benchmark rows, notes) of one family's results rows (see the module docstring)."""
    notes: list[str] = []
    benchmarks = sorted({(str(d), str(b)) for d, b in zip(rows["dataset"], rows["backbone"])}, key=benchmark_sort_key)
    if not benchmarks:
        raise DataMissingError(f"family {family}: no results rows; check its results folders and classes")
    present = [set(rows.loc[(rows["dataset"] == d) & (rows["backbone"] == b), "calibrator"]) for d, b in benchmarks]
    calibrators = sorted(set.intersection(*present))
    left_out = sorted(set.union(*present) - set(calibrators))
    if left_out:
        notes.append(f"{family}: not ranked (run on only some of its benchmarks): {', '.join(left_out)}.")
    if REFERENCE not in calibrators or BASELINE not in calibrators:
        raise DataMissingError(f"family {family}: {REFERENCE} and {BASELINE} must be run on every benchmark "
                               "(the tests and the accuracy change are against them)")
    columns = {c: i for i, c in enumerate(calibrators)}
    per_benchmark = []  # (dataset, backbone, runs frame pivoted per metric, splits)
    for dataset, backbone in benchmarks:
        part = common_runs(rows[(rows["dataset"] == dataset) & (rows["backbone"] == backbone)], calibrators)
        if part.empty:
            raise DataMissingError(f"family {family}: {dataset} {backbone} has no run with every calibrator")
        wide = {m: part.pivot_table(index=RUN_KEYS, columns="calibrator", values=m, aggfunc="first")[calibrators]
                for m in (*metrics, "accuracy", "fit_seconds")}
        splits = wide[metrics[0]].index.get_level_values("split").to_numpy()
        per_benchmark.append((dataset, backbone, wide, splits))

    records, table = [], {c: {"family": family, "calibrator": c, "benchmarks": len(benchmarks)} for c in calibrators}
    for metric in metrics:
        rng = np.random.default_rng(SEED)  # one generator per family and metric: independent of the order of work
        rank_sum, draws = np.zeros(len(calibrators)), np.zeros((n_resamples, len(calibrators)))
        tests = {c: [] for c in calibrators}  # per calibrator: (record index, p)
        for dataset, backbone, wide, splits in per_benchmark:
            values = wide[metric].to_numpy(float)  # [runs, C]
            means = values.mean(axis=0)
            ranks = _ranks(means)
            rank_sum += ranks
            draws += _ranks(resampled_means(values, splits, rng, n_resamples))
            reference = values[:, columns[REFERENCE]]
            for c, i in columns.items():
                p = np.nan if c == REFERENCE else wilcoxon_pvalue(values[:, i], reference)[1]
                tests[c].append((len(records), p))
                records.append({"family": family, "dataset": dataset, "backbone": backbone, "calibrator": c,
                                "metric": metric, "runs": len(values), "mean": float(means[i]),
                                "rank": float(ranks[i]), "diff_vs_ts": float(means[i] - reference.mean()),
                                "pvalue": p, "pvalue_holm": np.nan})
        low, high = np.percentile(draws / len(benchmarks), [100 * (1 - CONFIDENCE) / 2, 100 * (1 + CONFIDENCE) / 2],
                                  axis=0)
        for c, i in columns.items():
            adjusted = holm([p for _, p in tests[c]])
            below = above = 0
            for (index, _), p_holm in zip(tests[c], adjusted):
                records[index]["pvalue_holm"] = p_holm
                if p_holm < ALPHA:
                    below += records[index]["diff_vs_ts"] < 0
                    above += records[index]["diff_vs_ts"] > 0
            table[c].update({f"{metric}_rank": rank_sum[i] / len(benchmarks), f"{metric}_rank_low": low[i],
                             f"{metric}_rank_high": high[i], f"{metric}_below_ts": int(below),
                             f"{metric}_above_ts": int(above)})
    for c in calibrators:
        change = np.array([w["accuracy"][c].mean() - w["accuracy"][BASELINE].mean() for _, _, w, _ in per_benchmark])
        fit = np.array([w["fit_seconds"][c].median() for _, _, w, _ in per_benchmark])
        table[c].update({"accuracy_change": float(change.mean()), "accuracy_change_max_abs": float(np.abs(change).max()),
                         "fit_seconds": float(np.median(fit))})
    board = pd.DataFrame(list(table.values())).reindex(columns=LEADERBOARD_COLUMNS)
    board = board.sort_values(["ece_rank", "nll_rank", "calibrator"], kind="stable").reset_index(drop=True)
    return board, pd.DataFrame(records, columns=BENCHMARK_COLUMNS), notes


def recommend(board: pd.DataFrame, family: Family) -> dict:
    """The recommended calibrator of one family's leaderboard (:data:`RULE`), with its rank and its evidence."""
    eligible = board[(board["calibrator"] != BASELINE) & (board["ece_above_ts"] == 0)
                     & (board["accuracy_change_max_abs"] <= ACCURACY_BOUND)]
    if eligible.empty:  # TS always qualifies against itself; empty only if its accuracy moved, which it cannot
        raise DataMissingError(f"family {family.name}: no calibrator meets the rule ({RULE})")
    best = eligible.sort_values(["ece_rank", "nll_rank", "calibrator"], kind="stable").iloc[0]
    return {"family": family.name, "calibrator": best["calibrator"], "ece_rank": best["ece_rank"],
            "ece_rank_low": best["ece_rank_low"], "ece_rank_high": best["ece_rank_high"],
            "benchmarks": int(best["benchmarks"]), "candidates": len(eligible),
            "evidence": " ".join(["reports/leaderboard_benchmarks.csv", *family.evidence]), "rule": RULE}


def build_leaderboard(families: Sequence[Family], n_resamples: int = N_RESAMPLES) -> Leaderboard:
    """The leaderboard of every family, read from its committed results rows (at the protocol's label rate); a
    family with a ``study`` ranks that study's complete benchmarks only."""
    from simcalib.report.completeness import complete_only
    from simcalib.report.results import load_study_results

    tables, details, picks, notes, left_out = [], [], [], [], {}
    for family in families:
        study = complete_only(load_study_results(list(family.results)), family.study)
        if study.left_out:
            left_out[family.name] = study.left_out
        rows = select_classes(study.main_rows(), family.classes)
        board, detail, family_notes = family_leaderboard(rows, family.name, n_resamples=n_resamples)
        tables.append(board)
        details.append(detail)
        picks.append(recommend(board, family))
        notes += family_notes
    return Leaderboard(pd.concat(tables, ignore_index=True), pd.concat(details, ignore_index=True),
                       pd.DataFrame(picks, columns=RECOMMENDATION_COLUMNS), list(families), notes, left_out)


def _signed(value: float) -> str:
    """A change in points with its sign, two decimals, without a negative zero."""
    return f"{round(float(value), 2) + 0.0:+.2f}"


def _rank_cell(row, metric: str) -> str:
    return f"{row[f'{metric}_rank']:.1f} [{row[f'{metric}_rank_low']:.1f}, {row[f'{metric}_rank_high']:.1f}]"


def _markdown_table(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    return "\n".join([*lines, *("| " + " | ".join(cells) + " |" for cells in body)])


LEADERBOARD_HEADER = ("Calibrator", "ECE rank [95% CI]", "NLL rank [95% CI]", "Brier rank [95% CI]",
                      "vs TS: ECE below/above", "NLL below/above", "Brier below/above", "Accuracy change (largest)",
                      "Fit time (s)")


def leaderboard_cells(board: pd.DataFrame, top: int | None = None) -> list[list[str]]:
    """Rows of :data:`LEADERBOARD_HEADER` for one family's leaderboard, best mean ECE rank first."""
    shown = board if top is None else board.head(top)
    return [[str(r["calibrator"]), *(_rank_cell(r, m) for m in METRICS),
             *(f"{int(r[f'{m}_below_ts'])}/{int(r[f'{m}_above_ts'])}" if r["calibrator"] != REFERENCE else "-"
               for m in METRICS),
             f"{_signed(r['accuracy_change'])} ({r['accuracy_change_max_abs']:.2f})", f"{r['fit_seconds']:.3g}"]
            for _, r in shown.iterrows()]


def recommendation_cells(recommendation: pd.DataFrame, families: Sequence[Family]) -> list[list[str]]:
    titles = {f.name: f.title for f in families}
    return [[titles.get(r.family, r.family), f"**{r.calibrator}**", f"{r.ece_rank:.1f} [{r.ece_rank_low:.1f}, "
             f"{r.ece_rank_high:.1f}]", f"{r.candidates}", ", ".join(f"[{Path(e).name}]({_relative(e)})"
                                                                     for e in r.evidence.split())]
            for r in recommendation.itertuples()]


def _relative(path: str) -> str:
    """A path of the project root as linked from reports/leaderboard.md."""
    return path[len("reports/"):] if path.startswith("reports/") else f"../{path}"


def leaderboard_markdown(result: Leaderboard) -> str:
    parts = ["# Which calibrator for my graph: the leaderboard", "",
             "Every calibrator's mean rank over a family's benchmarks (1 = lowest mean on every benchmark), with its "
             "95% bootstrap interval; how many benchmarks it is significantly below and above TS on; its accuracy "
             "change against the uncalibrated backbone; its fit time. Generated by `make report` from the committed "
             "results rows (`simcalib report --leaderboard reports/leaderboard.yaml`); numbers in "
             "[leaderboard.csv](leaderboard.csv), per benchmark in "
             "[leaderboard_benchmarks.csv](leaderboard_benchmarks.csv).", ""]
    for family in result.families:
        board = result.table[result.table["family"] == family.name]
        parts += [f"## {family.title} ({int(board['benchmarks'].iloc[0])} benchmarks)", "",
                  _markdown_table(LEADERBOARD_HEADER, leaderboard_cells(board)), ""]
        if family.name in result.left_out:
            parts += [f"**Not ranked:** {result.left_out[family.name]}.", ""]
    parts += ["## Recommendation", "",
              _markdown_table(("Family", "Calibrator", "ECE rank [95% CI]", "Calibrators meeting the rule",
                               "Evidence"), recommendation_cells(result.recommendation, result.families)), "",
              f"Rule, per family: the {RULE}. TS always meets it (a temperature changes no argmax, and it is "
              "not tested against itself), so it is the answer wherever nothing ranks better without a cost on some "
              "benchmark.", "",
              "## How it is computed", "",
              "- Per benchmark, each calibrator's mean over the runs where every ranked calibrator has a row on one "
              "backbone; the calibrators are ranked on that mean (ties share the average rank) and the ranks "
              "averaged over the family's benchmarks.",
              f"- The interval: {N_RESAMPLES} resamples of whole splits within each benchmark (a split's runs share "
              "its test nodes), seeded; the percentile interval of the mean rank.",
              f"- Below/above TS: the benchmarks where the Wilcoxon signed-rank test over paired runs, Holm-corrected "
              f"over the family's benchmarks, gives p < {ALPHA}, with a lower/higher mean.",
              f"- Accuracy change: mean accuracy minus {BASELINE}'s, in points, averaged over the benchmarks (in "
              "brackets the largest absolute change on one benchmark). Fit time: the median over benchmarks of each "
              "benchmark's median fit time, on the machines recorded in each results folder's provenance.yaml.",
              *(f"- {note}" for note in result.notes), ""]
    return "\n".join(parts)


EXCERPT_ROWS = 5
EXCERPT_HEADER = ("Graphs", "Calibrator", "ECE rank [95% CI]", "NLL rank", "Brier rank", "vs TS: ECE below/above",
                  "Accuracy change")


def leaderboard_excerpt(table: pd.DataFrame, recommendation: pd.DataFrame, families: Sequence[Family],
                        top: int = EXCERPT_ROWS, link: str = "reports/leaderboard.md") -> str:
    """The recommendation and each family's top ``top`` rows, as Markdown for a page that links ``link`` (the
    block that ``simcalib report --leaderboard ... --summary-in README.md`` writes between its markers). Reads only
    the two CSVs' columns, so a test can check an embedded excerpt against the committed CSVs."""
    picks = recommendation.set_index("family")
    first = _markdown_table(("Graphs", "Use", "Mean ECE rank [95% CI]", "Benchmarks", "Calibrators meeting the rule"),
                            [[f.title, f"**{picks.at[f.name, 'calibrator']}**",
                              f"{picks.at[f.name, 'ece_rank']:.1f} [{picks.at[f.name, 'ece_rank_low']:.1f}, "
                              f"{picks.at[f.name, 'ece_rank_high']:.1f}]", str(int(picks.at[f.name, 'benchmarks'])),
                              str(int(picks.at[f.name, 'candidates']))] for f in families if f.name in picks.index])
    body = []
    for family in families:
        board = table[table["family"] == family.name].sort_values(["ece_rank", "nll_rank", "calibrator"],
                                                                  kind="stable").head(top)
        for _, r in board.iterrows():
            body.append([family.title, str(r["calibrator"]), _rank_cell(r, "ece"), f"{r['nll_rank']:.1f}",
                         f"{r['brier_rank']:.1f}",
                         "-" if r["calibrator"] == REFERENCE else f"{int(r['ece_below_ts'])}/{int(r['ece_above_ts'])}",
                         _signed(r["accuracy_change"])])
    rule = (f"Per family, the lowest mean ECE rank among the calibrators never significantly above {REFERENCE} on ECE "
            f"and within {ACCURACY_BOUND} accuracy points of {BASELINE} on every benchmark (the rule in full, every "
            f"calibrator, the intervals and the fit times: [{link}]({link})). The top {top} of each family by mean ECE "
            "rank (1 = lowest mean on every benchmark):")
    return "\n".join([first, "", rule, "", _markdown_table(EXCERPT_HEADER, body)])


def write_leaderboard(result: Leaderboard, out: str | os.PathLike) -> list[Path]:
    """``leaderboard.md``, ``leaderboard.csv``, ``leaderboard_benchmarks.csv`` and ``recommendation.csv`` in ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "leaderboard.md", out / "leaderboard.csv", out / "leaderboard_benchmarks.csv",
             out / "recommendation.csv"]
    paths[0].write_text(leaderboard_markdown(result))
    result.table.to_csv(paths[1], index=False, float_format="%.6g")
    result.benchmarks.to_csv(paths[2], index=False, float_format="%.6g")
    result.recommendation.to_csv(paths[3], index=False, float_format="%.6g")
    return paths


__all__ = ["ACCURACY_BOUND", "BENCHMARK_COLUMNS", "Family", "LEADERBOARD_COLUMNS", "Leaderboard", "RECOMMENDATION_COLUMNS",
           "RULE", "build_leaderboard", "family_leaderboard", "leaderboard_cells", "leaderboard_excerpt", "leaderboard_markdown",
           "read_families", "recommend", "select_classes", "write_leaderboard"]
