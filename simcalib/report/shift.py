r"""The structural-shift report (``reports/shift/``): calibration on in-distribution (ID) and out-of-distribution
(OOD) test nodes, from the rows of :func:`simcalib.experiment.node_runs.evaluate_shift_run`.

A benchmark here is (dataset, backbone, shift property): one results folder ``<dataset>_<backbone>_<property>``
(:mod:`simcalib.experiment.plan`, kind ``shift``). Per benchmark and calibrator, for ECE and NLL on the ID and the
OOD test nodes:

* the mean over runs with its 95% interval, whole splits resampled (:func:`simcalib.report.bootstrap.mean_interval`);
* against TS, the mean paired difference (calibrator minus TS, run by run: same split, init and fold, hence the
  same backbone; pairs on two backbone digests are left out) with its interval, and the Wilcoxon signed-rank test
  over the pairs (:func:`simcalib.report.stats.wilcoxon_pvalue`), Holm-corrected (:func:`simcalib.report.stats.holm`)
  over every calibrator and benchmark of the table, per metric and part;
* the shift's cost, mean OOD minus ID ECE, with its interval.

"Keeps its advantage out of distribution": significantly below TS (Holm p < :data:`ALPHA`, lower mean) on the OOD
test nodes. The answer is one row per calibrator over the benchmarks (:func:`answer_table`: mean ECE ranks on OOD
and ID test nodes, benchmarks below and above TS), then, per benchmark, the calibrators below and above TS.

With the study file, a calibrator whose rows miss a run the study plans for a benchmark is left out of that
benchmark's tables and named (:func:`simcalib.report.completeness.complete_calibrators`, the study's ledger per
calibrator): a slice in progress enters once complete.

Shapes: the rows are results rows with the columns ``id_<metric>``, ``ood_<metric>`` (:data:`SHIFT_METRICS`),
``shift_property``; :func:`shift_table` gives one row per benchmark and calibrator (:data:`TABLE_COLUMNS`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from simcalib.errors import DataCorruptError
from simcalib.report.bootstrap import mean_interval
from simcalib.report.render import Bullets, Heading, Paragraph, counted, table_block, write_report
from simcalib.report.stats import holm, wilcoxon_pvalue
from simcalib.report.summary import write_summary
from simcalib.store.integrity import check_results
from simcalib.store.results_store import read_results

if TYPE_CHECKING:
    from simcalib.experiment.plan import StudyPlan

REFERENCE = "TS"
ALPHA = 0.05
METRICS = ("ece", "nll")
PARTS = ("id", "ood")
PAIR_KEYS = ["split", "init", "fold"]
LABELS = {"ece": "ECE", "nll": "NLL", "id": "ID", "ood": "OOD"}
BENCHMARK = ["dataset", "backbone", "shift_property"]
TABLE_COLUMNS = [*BENCHMARK, "calibrator", "runs", *(
    f"{part}_{m}_{s}" for m in METRICS for part in PARTS for s in ("mean", "low", "high", "diff", "diff_low",
                                                                   "diff_high", "pvalue", "pvalue_holm")),
    "shift_ece_mean", "shift_ece_low", "shift_ece_high"]


@dataclass(frozen=True)
class KindRows:
    """The rows of every results folder below a root, each folder checked on its own (a run appears once per
    folder; the folders of one dataset and backbone hold the same runs under other divisions of the nodes)."""

    root: Path
    rows: pd.DataFrame  # with ``folder``: the results folder's name
    folders: tuple[str, ...]


def read_kind_rows(root: str | os.PathLike, required: Sequence[str]) -> KindRows:
    """Every ``results.csv`` below ``root`` (none: no rows), each checked (:func:`~simcalib.store.integrity.check_results`)
    and required to have the columns ``required`` (DataCorruptError naming the file otherwise)."""
    root = Path(root)
    frames, folders = [], []
    for path in sorted(root.rglob("results.csv")) if root.is_dir() else []:
        frame = read_results(path)
        if frame.empty:
            continue
        missing = [c for c in required if c not in frame.columns]
        if missing:
            raise DataCorruptError(f"{path}: missing column(s) {', '.join(missing)}; expected the rows of "
                                   "simcalib.experiment.node_runs.evaluate_run for this report's kind")
        frame = check_results(frame, str(path))
        frames.append(frame.assign(folder=path.parent.name))
        folders.append(path.parent.name)
    rows = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=[*required, "folder"])
    return KindRows(root, rows, tuple(folders))


def paired(rows: pd.DataFrame, calibrator: str, column: str, reference: str = REFERENCE) -> pd.DataFrame:
    """``calibrator``'s and ``reference``'s values of ``column`` on the same runs of one benchmark (columns ``m``,
    ``r``, ``split``); rows of a run on two backbone digests are no pair."""
    keep = [*PAIR_KEYS, column, "backbone_digest"]
    rows = rows.assign(backbone_digest=rows["backbone_digest"]) if "backbone_digest" in rows else \
        rows.assign(backbone_digest=np.nan)
    left = rows[rows["calibrator"] == calibrator][keep]
    right = rows[rows["calibrator"] == reference][keep]
    pairs = left.merge(right, on=PAIR_KEYS, suffixes=("_m", "_r"))
    same = pairs["backbone_digest_m"].isna() | pairs["backbone_digest_r"].isna() | (
        pairs["backbone_digest_m"] == pairs["backbone_digest_r"])
    pairs = pairs[same]
    return pd.DataFrame({"m": pairs[f"{column}_m"].astype(float), "r": pairs[f"{column}_r"].astype(float),
                         "split": pairs["split"]})


def mean_with_interval(values: pd.Series, splits: pd.Series) -> tuple[float, float, float]:
    interval = mean_interval(values.to_numpy(float), splits.to_numpy())
    return (float(values.mean()), np.nan if interval is None else interval.low,
            np.nan if interval is None else interval.high)


def shift_table(rows: pd.DataFrame, reference: str = REFERENCE) -> pd.DataFrame:
    """One row per benchmark and calibrator (:data:`TABLE_COLUMNS`): means with intervals on ID and OOD test nodes,
    paired differences against ``reference`` with intervals and Holm-corrected Wilcoxon p-values (Holm over every
    calibrator and benchmark tested, per metric and part), and the mean OOD - ID ECE."""
    records = []
    for key, group in rows.groupby(BENCHMARK, sort=True):
        for calibrator, own in group.groupby("calibrator", sort=False):
            record = dict(zip(BENCHMARK, key), calibrator=calibrator, runs=len(own))
            for metric in METRICS:
                for part in PARTS:
                    column = f"{part}_{metric}"
                    prefix = f"{column}_"
                    record[prefix + "mean"], record[prefix + "low"], record[prefix + "high"] = mean_with_interval(
                        own[column].astype(float), own["split"])
                    pairs = paired(group, calibrator, column, reference) if calibrator != reference else pd.DataFrame()
                    if len(pairs):
                        diff = pairs["m"] - pairs["r"]
                        record[prefix + "diff"], record[prefix + "diff_low"], record[prefix + "diff_high"] = \
                            mean_with_interval(diff, pairs["split"])
                        record[prefix + "pvalue"] = wilcoxon_pvalue(pairs["m"], pairs["r"])[1]
                    else:
                        for s in ("diff", "diff_low", "diff_high", "pvalue"):
                            record[prefix + s] = np.nan
            record["shift_ece_mean"], record["shift_ece_low"], record["shift_ece_high"] = mean_with_interval(
                own["ood_ece"].astype(float) - own["id_ece"].astype(float), own["split"])
            records.append(record)
    table = pd.DataFrame(records, columns=[c for c in TABLE_COLUMNS if not c.endswith("pvalue_holm")])
    for metric in METRICS:
        for part in PARTS:
            table[f"{part}_{metric}_pvalue_holm"] = holm(table[f"{part}_{metric}_pvalue"]) if len(table) else []
    return table[TABLE_COLUMNS]


def interval_cell(mean: float, low: float, high: float, digits: int = 2, signed: bool = False) -> str:
    if not np.isfinite(mean):
        return ""
    fmt = (lambda v: f"{v:+.{digits}f}") if signed else (lambda v: f"{v:.{digits}f}")
    return fmt(mean) + (f" [{fmt(low)}, {fmt(high)}]" if np.isfinite(low) and np.isfinite(high) else "")


def runs_text(low: int, high: int) -> str:
    """``15 runs`` or ``9-15 runs``."""
    return f"{low} runs" if low == high else f"{low}-{high} runs"


def p_text(value: float) -> str:
    return f"{value:.2g}" if np.isfinite(value) else ""


def significant(table: pd.DataFrame, column: str, below: bool) -> pd.Series:
    """Rows significantly below (``below``) or above the reference on ``column`` (``ood_ece`` ...): Holm p < ALPHA and
    the mean difference of that sign."""
    diff = table[f"{column}_diff"]
    return (table[f"{column}_pvalue_holm"] < ALPHA) & ((diff < 0) if below else (diff > 0))


def graph_aware(name: str) -> bool:
    """Whether calibrator ``name`` reads the graph (its class's ``needs_graph``: a temperature per node from the
    graph, e.g. CaGCN, GATS, SimCalib, WATS); unknown names: False."""
    from simcalib.calibrators import CALIBRATORS

    entry = CALIBRATORS.get(name)
    return bool(entry is not None and entry.cls.needs_graph)


def answer_bullets(table: pd.DataFrame, reference: str = REFERENCE) -> list[str]:
    """Per benchmark: the calibrators significantly below and above ``reference`` on ID and on OOD ECE, and the
    graph-aware (node-wise) ones among those below it out of distribution."""
    items = []
    for key, group in table.groupby(BENCHMARK, sort=True):
        parts = []
        for part in PARTS:
            below = group[significant(group, f"{part}_ece", True)]["calibrator"].tolist()
            above = group[significant(group, f"{part}_ece", False)]["calibrator"].tolist()
            parts.append(f"{LABELS[part]} ECE below {reference}: {', '.join(below) or 'none'}; above: "
                         f"{', '.join(above) or 'none'}")
        kept = sorted(set(group[significant(group, "id_ece", True)]["calibrator"])
                      & set(group[significant(group, "ood_ece", True)]["calibrator"]))
        lost = sorted(set(group[significant(group, "id_ece", True)]["calibrator"])
                      - set(group[significant(group, "ood_ece", True)]["calibrator"]))
        ood_below = group[significant(group, "ood_ece", True)]["calibrator"].tolist()
        nodewise = [c for c in ood_below if graph_aware(c)]
        tested = sorted(c for c in group["calibrator"] if graph_aware(c))
        items.append(f"**{' '.join(map(str, key))}**: " + "; ".join(parts)
                     + f". Below {reference} on both: {', '.join(kept) or 'none'}; below in distribution only: "
                       f"{', '.join(lost) or 'none'}. Node-wise (graph-aware) calibrators below one temperature "
                       f"({reference}) out of distribution: {', '.join(nodewise) or 'none'} of {len(tested)}.")
    return items


ANSWER_COLUMNS = ["calibrator", "benchmarks", "ood_ece_rank", "id_ece_rank", "ood_below", "ood_above", "id_below",
                  "id_above", "kept", "shift_ece_mean"]


def answer_table(table: pd.DataFrame) -> pd.DataFrame:
    """One row per calibrator over the benchmarks of ``table`` (:data:`ANSWER_COLUMNS`): its mean rank of mean OOD
    and of mean ID ECE (1 = the lowest of the calibrators on a benchmark, ties averaged), on how many benchmarks
    its OOD and its ID ECE are significantly below and above the reference's (:func:`shift_table`'s tests), on
    how many below on both (``kept``), and its mean OOD - ID ECE; ordered by the OOD rank."""
    if table.empty:
        return pd.DataFrame(columns=ANSWER_COLUMNS)
    ranked = table.assign(
        ood_ece_rank=table.groupby(BENCHMARK)["ood_ece_mean"].rank(method="average"),
        id_ece_rank=table.groupby(BENCHMARK)["id_ece_mean"].rank(method="average"),
        ood_below=significant(table, "ood_ece", True), ood_above=significant(table, "ood_ece", False),
        id_below=significant(table, "id_ece", True), id_above=significant(table, "id_ece", False))
    ranked["kept"] = ranked["ood_below"] & ranked["id_below"]
    grouped = ranked.groupby("calibrator", sort=False)
    answer = pd.DataFrame({
        "benchmarks": grouped.size(),
        "ood_ece_rank": grouped["ood_ece_rank"].mean(), "id_ece_rank": grouped["id_ece_rank"].mean(),
        **{c: grouped[c].sum().astype(int) for c in ("ood_below", "ood_above", "id_below", "id_above", "kept")},
        "shift_ece_mean": grouped["shift_ece_mean"].mean()}).reset_index()
    return answer.sort_values(["ood_ece_rank", "calibrator"], kind="stable").reset_index(drop=True)[ANSWER_COLUMNS]


def answer_sentence(table: pd.DataFrame, answer: pd.DataFrame, reference: str = REFERENCE) -> str:
    """What :func:`answer_table` says in one sentence: the lowest mean OOD ECE rank, the calibrators significantly
    below ``reference`` out of distribution on some benchmark, and the node-wise (graph-aware) ones among them."""
    benchmarks = table[BENCHMARK].drop_duplicates().shape[0]
    best = answer.iloc[0]
    below = answer[(answer["ood_below"] > 0) & (answer["calibrator"] != reference)]
    listed = ", ".join(f"{r.calibrator} ({r.ood_below})" for r in below.itertuples()) or "none"
    nodewise = [c for c in below["calibrator"] if graph_aware(c)]
    tested = [c for c in answer["calibrator"] if graph_aware(c)]
    kept = answer[answer["kept"] > 0]
    return (f"Over {counted(benchmarks, 'benchmark')} (dataset x backbone x shift property): the lowest mean ECE rank on the "
            f"out-of-distribution test nodes is {best['calibrator']}'s ({best['ood_ece_rank']:.1f}). Significantly "
            f"below {reference} out of distribution (benchmarks): {listed}; below it in and out of distribution: "
            f"{', '.join(f'{r.calibrator} ({r.kept})' for r in kept.itertuples()) or 'none'}. Node-wise (graph-aware) "
            f"calibrators significantly below one temperature ({reference}) out of distribution on any benchmark: "
            f"{len(nodewise)} of {len(tested)}{' (' + ', '.join(nodewise) + ')' if nodewise else ''}.")


def answer_block(answer: pd.DataFrame, reference: str = REFERENCE):
    """:func:`answer_table` as a report table."""
    header = ["Calibrator", "Benchmarks", "OOD ECE rank", "ID ECE rank", f"OOD ECE below / above {reference}",
              f"ID ECE below / above {reference}", "Below on both", "OOD - ID ECE"]
    body = [[r["calibrator"], str(int(r["benchmarks"])), f"{r['ood_ece_rank']:.1f}", f"{r['id_ece_rank']:.1f}",
             "-" if r["calibrator"] == reference else f"{int(r['ood_below'])} / {int(r['ood_above'])}",
             "-" if r["calibrator"] == reference else f"{int(r['id_below'])} / {int(r['id_above'])}",
             "-" if r["calibrator"] == reference else str(int(r["kept"])), f"{r['shift_ece_mean']:+.2f}"]
            for r in answer.to_dict("records")]
    return table_block(header, body, numeric_from=1)


def _header() -> list[str]:
    return ["Benchmark", "Calibrator", "Runs", "ID ECE", "OOD ECE", "OOD ECE - TS", "p (Holm)", "OOD - ID ECE",
            "ID NLL", "OOD NLL", "OOD NLL - TS", "p (Holm)"]


def _body(table: pd.DataFrame) -> list[list[str]]:
    body = []
    for r in table.to_dict("records"):
        body.append([f"{r['dataset']} {r['backbone']} {r['shift_property']}", r["calibrator"], str(int(r["runs"])),
                     interval_cell(r["id_ece_mean"], r["id_ece_low"], r["id_ece_high"]),
                     interval_cell(r["ood_ece_mean"], r["ood_ece_low"], r["ood_ece_high"]),
                     interval_cell(r["ood_ece_diff"], r["ood_ece_diff_low"], r["ood_ece_diff_high"], signed=True),
                     p_text(r["ood_ece_pvalue_holm"]),
                     interval_cell(r["shift_ece_mean"], r["shift_ece_low"], r["shift_ece_high"], signed=True),
                     interval_cell(r["id_nll_mean"], r["id_nll_low"], r["id_nll_high"], 3),
                     interval_cell(r["ood_nll_mean"], r["ood_nll_low"], r["ood_nll_high"], 3),
                     interval_cell(r["ood_nll_diff"], r["ood_nll_diff_low"], r["ood_nll_diff_high"], 3, signed=True),
                     p_text(r["ood_nll_pvalue_holm"])])
    return body


def coverage_lines(rows: pd.DataFrame, planned: pd.DataFrame | None) -> list[str]:
    """What the rows hold (benchmarks, runs, calibrators) and, with ``planned`` (one row per planned benchmark:
    folder, calibrators, runs), what the study plans beyond them. ``rows`` are the rows a report shows (complete
    calibrators only), so a benchmark or calibrator absent from them may have rows in progress."""
    lines = []
    for folder, group in rows.groupby("folder", sort=True):
        per = group.groupby("calibrator").size()
        lines.append(f"`{folder}`: {group[PAIR_KEYS].drop_duplicates().shape[0]} runs, {len(per)} calibrators "
                     f"({', '.join(per.index)}), {runs_text(per.min(), per.max())} each")
    if planned is not None:
        have = set(rows["folder"]) if len(rows) else set()
        missing = [f for f in planned["folder"] if f not in have]
        calibrators = sorted({c for cs in planned["calibrators"] for c in cs} - set(rows.get("calibrator", [])))
        lines.append(f"The study file plans {len(planned)} benchmarks of {int(planned['runs'].max())} runs and "
                     f"{len({c for cs in planned['calibrators'] for c in cs})} calibrators; no calibrator has every planned "
                     f"run on {len(missing)} benchmarks ({', '.join(missing) or 'none'}; those with rows in progress "
                     f"are named below), and the calibrators {', '.join(calibrators) or 'none'} have it on none.")
    return lines


def planned_benchmarks(plan: StudyPlan | None) -> pd.DataFrame | None:
    """The benchmarks ``plan`` plans (folder, calibrators, runs); None without a plan."""
    if plan is None:
        return None
    return pd.DataFrame([{"folder": b.out_dir.name, "calibrators": b.calibrator_names, "runs": len(b.runs)}
                         for b in plan.benchmarks])


def planned_rows(kind_rows: KindRows, study: str | os.PathLike | None) -> tuple[pd.DataFrame, pd.DataFrame | None, list[str]]:
    """The rows a kind report shows (:func:`~simcalib.report.completeness.complete_calibrators` under the plan of
    the study file ``study``), the benchmarks it plans (:func:`planned_benchmarks`) and the lines naming what is
    left out; without a study file every row, no plan, no lines."""
    from simcalib.report.completeness import complete_calibrators, study_plan

    plan = study_plan(study) if study is not None else None
    rows, left_out = complete_calibrators(kind_rows.rows, plan)
    return rows, planned_benchmarks(plan), left_out


def build_shift_report(results: str | os.PathLike, out: str | os.PathLike, title: str,
                       study: str | os.PathLike | None = None, regenerate: str | None = None) -> Path | None:
    """``report.md``, ``report.html``, ``shift_table.csv``, ``answer.csv`` and ``summary.md`` (the answer alone, for a
    README to embed) under ``out`` from the results folders below ``results``; None (nothing written) when there
    are no rows."""
    kind_rows = read_kind_rows(results, ["dataset", "backbone", "calibrator", "split", "init", "fold",
                                         "shift_property", "id_ece", "ood_ece", "id_nll", "ood_nll"])
    rows, planned, left_out = planned_rows(kind_rows, study)
    if rows.empty:
        return None
    out = Path(out)
    table = shift_table(rows)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "shift_table.csv", index=False, float_format="%.6g")
    runs = rows.groupby("folder")[PAIR_KEYS].apply(lambda g: len(g.drop_duplicates()))
    answer = answer_table(table)
    answer.to_csv(out / "answer.csv", index=False, float_format="%.6g")
    summary = [Paragraph(answer_sentence(table, answer)), answer_block(answer),
               Paragraph(f"Per calibrator over the benchmarks: mean rank of its mean ECE among the calibrators on the "
                         f"OOD and on the ID test nodes (1 = lowest); on how many benchmarks its ECE is significantly "
                         f"below / above {REFERENCE}'s (Wilcoxon over paired runs, Holm over every calibrator and "
                         f"benchmark, p < {ALPHA}); its mean OOD - ID ECE (percentage points; the shift's cost).")]
    write_summary(summary, out)
    blocks = [Heading(1, title)]
    if regenerate:
        blocks.append(Paragraph(f"Rendered from the committed rows by {regenerate}; the rows come from "
                                "`simcalib.experiment.node_runs.evaluate_run` (provenance: `results/provenance.yaml`)."))
    blocks += [
        Heading(2, "Answer"),
        *summary,
        Heading(2, "Per benchmark"),
        Paragraph(f"Per benchmark (dataset, backbone, shift property), the calibrators whose ECE is significantly "
                  f"below or above {REFERENCE}'s on the in-distribution (ID) and on the out-of-distribution (OOD) test "
                  "nodes. A calibrator \"keeps its advantage\" when it is below TS on both."),
        Bullets(tuple(answer_bullets(table))),
        Heading(2, "ECE and NLL on ID and OOD test nodes"),
        Paragraph("Means over runs with 95% intervals (whole splits resampled); differences are paired (calibrator "
                  f"minus {REFERENCE} on the same run and backbone); OOD - ID ECE is the shift's cost on the same run. "
                  "ECE in percent."),
        table_block(_header(), _body(table), numeric_from=2),
        Heading(2, "What the rows hold"),
        Bullets(tuple([*coverage_lines(rows, planned), *left_out])),
        Heading(2, "What the rows show and what they cannot"),
        Paragraph(f"{counted(len(runs), 'benchmark')}, {runs_text(int(runs.min()), int(runs.max()))} each (5 splits x 1 "
                  "initialisation x 3 folds where complete). The intervals resample whole splits, so with 5 splits "
                  "they are wide, and the tests have few pairs: a difference that is not significant here is not "
                  "shown to be absent. Every benchmark is one graph and one backbone under one shift; what holds "
                  "on it need not hold on other graphs, backbones or ID shares. The OOD nodes are the half of the "
                  "graph with the smallest property value, never labelled; each calibrator is fitted on the ID "
                  "calibration fold only."),
    ]
    write_report(blocks, out, title)
    return out / "report.md"


__all__ = ["ALPHA", "ANSWER_COLUMNS", "KindRows", "REFERENCE", "TABLE_COLUMNS", "answer_block", "answer_bullets",
           "answer_sentence", "answer_table", "build_shift_report", "interval_cell",
           "mean_with_interval", "p_text", "runs_text",
           "coverage_lines", "graph_aware", "paired", "planned_benchmarks", "planned_rows", "read_kind_rows", "shift_table",
           "significant"]
