r"""The prediction-set report (``reports/conformal/``): split-conformal sets from each calibrator's probabilities,
from the rows of :func:`simcalib.experiment.node_runs.evaluate_conformal_run`.

Per benchmark (dataset, backbone), score (APS, RAPS, DAPS) and :math:`\alpha`, for every calibrator:

* coverage :math:`P(y \in C)`, mean set size and singleton-hit rate :math:`P(|C| = 1, y \in C)` on the test
  nodes, means over runs with 95% intervals, whole splits resampled (:func:`simcalib.report.bootstrap.mean_interval`);
* the set size against TS's on the same runs: mean paired difference with its interval, the Wilcoxon signed-rank
  test (:func:`simcalib.report.stats.wilcoxon_pvalue`), Holm over every calibrator, benchmark, score and alpha of
  the table (:func:`simcalib.report.stats.holm`);
* does better calibration give smaller sets: Spearman's rank correlation over the calibrators of their mean test
  ECE and their mean set size (``scipy.stats.spearmanr``; positive: the better calibrated, the smaller the sets),
  with its p-value, per benchmark, score and alpha. Every calibrator's sets carry the same marginal guarantee
  :math:`1 - \alpha` (the quantile is set on held-out calibration nodes), so the sizes are compared at the same
  nominal coverage; the coverage columns show how close to it each one is.

With the study file, a calibrator whose rows miss a planned run of a benchmark is left out of it and named
(:func:`simcalib.report.completeness.complete_calibrators`).

Shapes: the rows carry ``<score>_<metric>@<alpha>`` columns (:func:`simcalib.conformal.conformal_metrics`);
:func:`conformal_table` gives one row per benchmark, score, alpha and calibrator (:data:`TABLE_COLUMNS`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from simcalib.report.render import Bullets, Heading, Paragraph, counted, table_block, write_report
from simcalib.report.shift import (
    PAIR_KEYS,
    coverage_lines,
    interval_cell,
    mean_with_interval,
    p_text,
    paired,
    planned_rows,
    read_kind_rows,
    runs_text,
)
from simcalib.report.stats import holm, wilcoxon_pvalue
from simcalib.report.summary import write_summary

REFERENCE = "TS"
ALPHA = 0.05  # significance level of the tests (not a conformal alpha)
BENCHMARK = ["dataset", "backbone"]
COLUMN = re.compile(r"^(?P<score>[A-Za-z]+)_coverage@(?P<alpha>[0-9.]+)$")
TABLE_COLUMNS = [*BENCHMARK, "score", "alpha", "calibrator", "runs", "ece_mean", *(
    f"{m}_{s}" for m in ("coverage", "set_size", "singleton_hit") for s in ("mean", "low", "high")),
    "coverage_expected", "size_diff", "size_diff_low", "size_diff_high", "size_pvalue", "size_pvalue_holm"]
CORRELATION_COLUMNS = [*BENCHMARK, "score", "alpha", "calibrators", "spearman", "pvalue", "smallest", "smallest_size"]


def score_alphas(columns) -> list[tuple[str, str]]:
    """(score, alpha text) of every ``<score>_coverage@<alpha>`` column, in column order."""
    return [(m["score"], m["alpha"]) for m in (COLUMN.match(c) for c in columns) if m]


def expected_coverage(rows: pd.DataFrame, alpha: float) -> float:
    r"""The mean over ``rows`` of split conformal's expected coverage with each run's quantile part of
    :math:`n` nodes (``n_quantile``), :math:`\lceil (n + 1)(1 - \alpha) \rceil / (n + 1)`: exact for scores
    without ties, between :math:`1 - \alpha` and :math:`1 - \alpha + 1/(n + 1)`; :math:`1 - \alpha` for rows
    without ``n_quantile``."""
    from simcalib.conformal import quantile_rank

    if "n_quantile" not in rows or rows["n_quantile"].isna().all():
        return 1 - alpha
    return float(np.mean([quantile_rank(int(n), alpha) / (int(n) + 1) for n in rows["n_quantile"].dropna()]))


def coverage_off(table: pd.DataFrame) -> pd.Series:
    """Rows of :func:`conformal_table` whose 95% interval of mean coverage excludes the expected coverage."""
    return (table["coverage_high"] < table["coverage_expected"]) | (table["coverage_low"] > table["coverage_expected"])


def conformal_table(rows: pd.DataFrame, reference: str = REFERENCE) -> pd.DataFrame:
    """One row per benchmark, score, alpha and calibrator (:data:`TABLE_COLUMNS`)."""
    records = []
    pairs_of = score_alphas(rows.columns)
    for key, group in rows.groupby(BENCHMARK, sort=True):
        for score, alpha in pairs_of:
            for calibrator, own in group.groupby("calibrator", sort=False):
                column = f"{score}_%s@{alpha}"
                if own[column % "coverage"].isna().all():
                    continue
                record = dict(zip(BENCHMARK, key), score=score, alpha=float(alpha), calibrator=calibrator,
                              runs=len(own), ece_mean=float(own["ece"].astype(float).mean()))
                for metric in ("coverage", "set_size", "singleton_hit"):
                    record[f"{metric}_mean"], record[f"{metric}_low"], record[f"{metric}_high"] = mean_with_interval(
                        own[column % metric].astype(float), own["split"])
                record["coverage_expected"] = expected_coverage(own, float(alpha))
                pairs = paired(group, calibrator, column % "set_size", reference) if calibrator != reference \
                    else pd.DataFrame()
                if len(pairs):
                    record["size_diff"], record["size_diff_low"], record["size_diff_high"] = mean_with_interval(
                        pairs["m"] - pairs["r"], pairs["split"])
                    record["size_pvalue"] = wilcoxon_pvalue(pairs["m"], pairs["r"])[1]
                else:
                    record.update(size_diff=np.nan, size_diff_low=np.nan, size_diff_high=np.nan, size_pvalue=np.nan)
                records.append(record)
    table = pd.DataFrame(records, columns=TABLE_COLUMNS[:-1])
    table["size_pvalue_holm"] = holm(table["size_pvalue"]) if len(table) else []
    return table[TABLE_COLUMNS]


def calibration_and_size(table: pd.DataFrame) -> pd.DataFrame:
    """Per benchmark, score and alpha: Spearman's correlation over the calibrators of mean ECE and mean set size,
    its p-value, and the calibrator with the smallest mean set size (:data:`CORRELATION_COLUMNS`)."""
    records = []
    for key, group in table.groupby([*BENCHMARK, "score", "alpha"], sort=True):
        rho, pvalue = (scipy_stats.spearmanr(group["ece_mean"], group["set_size_mean"]) if len(group) >= 3
                       else (np.nan, np.nan))
        best = group.loc[group["set_size_mean"].idxmin()]
        records.append({**dict(zip([*BENCHMARK, "score", "alpha"], key)), "calibrators": len(group),
                        "spearman": float(rho), "pvalue": float(pvalue), "smallest": best["calibrator"],
                        "smallest_size": float(best["set_size_mean"])})
    return pd.DataFrame(records, columns=CORRELATION_COLUMNS)


def answer_bullets(table: pd.DataFrame, correlation: pd.DataFrame, reference: str = REFERENCE) -> list[str]:
    """Per benchmark and alpha: the smallest sets per score, the calibrators with sets significantly smaller and
    larger than ``reference``'s, and the ECE / set-size correlation."""
    items = []
    for (dataset, backbone, alpha), group in table.groupby([*BENCHMARK, "alpha"], sort=False):
        parts = []
        for score, own in group.groupby("score", sort=False):
            significant = own["size_pvalue_holm"] < ALPHA
            smaller = own[significant & (own["size_diff"] < 0)]["calibrator"].tolist()
            larger = own[significant & (own["size_diff"] > 0)]["calibrator"].tolist()
            c = correlation[(correlation["dataset"] == dataset) & (correlation["backbone"] == backbone)
                            & (correlation["score"] == score) & (correlation["alpha"] == alpha)].iloc[0]
            parts.append(f"{score}: smallest sets {c['smallest']} ({c['smallest_size']:.2f} labels); smaller than "
                         f"{reference}'s: {', '.join(smaller) or 'none'}, larger: {', '.join(larger) or 'none'}; "
                         f"Spearman(ECE, size) over {int(c['calibrators'])} calibrators {c['spearman']:+.2f} "
                         f"(p {p_text(c['pvalue'])})")
        outside = group[coverage_off(group)]
        held = ("the 95% interval of every calibrator's mean coverage holds its expected value" if outside.empty else
                f"expected {group['coverage_expected'].iloc[0]:.3f}; mean coverage with a 95% interval beside it: "
                + ", ".join(f"{r.calibrator} ({r.score}, {r.coverage_mean:.3f})" for r in outside.itertuples()))
        items.append(f"**{dataset} {backbone}, alpha {alpha:g}**: " + "; ".join(parts) + f"; coverage: {held}.")
    return items


def _cell_name(score: str, alpha: float) -> str:
    return f"{score} @ {alpha:g}"


def answer_table(table: pd.DataFrame) -> pd.DataFrame:
    """One row per calibrator over the benchmarks of ``table``: ``benchmarks``, ``ece_rank`` (mean rank of its mean
    ECE among the calibrators of a benchmark, 1 = lowest, ties averaged), one mean set-size rank per score and
    alpha (columns ``size_rank <score> @ <alpha>``), on how many benchmark-score-alpha cells its sets are
    significantly ``smaller`` and ``larger`` than the reference's (:func:`conformal_table`'s tests; of ``cells``),
    and on how many the 95% interval of its mean coverage excludes the expected coverage (``coverage_off``,
    :func:`coverage_off`); ordered by the first size rank."""
    if table.empty:
        return pd.DataFrame(columns=["calibrator", "benchmarks", "ece_rank"])
    cells = [*BENCHMARK, "score", "alpha"]
    ranked = table.assign(size_rank=table.groupby(cells)["set_size_mean"].rank(method="average"),
                          smaller=(table["size_pvalue_holm"] < ALPHA) & (table["size_diff"] < 0),
                          larger=(table["size_pvalue_holm"] < ALPHA) & (table["size_diff"] > 0),
                          coverage_off=coverage_off(table))
    ece = ranked.drop_duplicates([*BENCHMARK, "calibrator"])
    ece = ece.assign(ece_rank=ece.groupby(BENCHMARK)["ece_mean"].rank(method="average"))
    grouped = ranked.groupby("calibrator", sort=False)
    answer = pd.DataFrame({"benchmarks": ece.groupby("calibrator", sort=False).size(),
                           "ece_rank": ece.groupby("calibrator", sort=False)["ece_rank"].mean()})
    order = ranked[["score", "alpha"]].drop_duplicates().sort_values("alpha", ascending=False, kind="stable")
    for score, alpha in order.itertuples(index=False):
        own = ranked[(ranked["score"] == score) & (ranked["alpha"] == alpha)]
        answer[f"size_rank {_cell_name(score, alpha)}"] = own.groupby("calibrator")["size_rank"].mean()
    answer["smaller"] = grouped["smaller"].sum().astype(int)
    answer["larger"] = grouped["larger"].sum().astype(int)
    answer["coverage_off"] = grouped["coverage_off"].sum().astype(int)
    answer["cells"] = grouped.size()
    answer = answer.reset_index(names="calibrator")
    first = [c for c in answer.columns if c.startswith("size_rank ")][:1]
    return answer.sort_values([*first, "calibrator"], kind="stable").reset_index(drop=True)


def answer_sentence(table: pd.DataFrame, answer: pd.DataFrame, correlation: pd.DataFrame,
                    reference: str = REFERENCE) -> str:
    """What :func:`answer_table` and :func:`calibration_and_size` say in one sentence: the smallest mean set-size
    rank per score at the largest alpha, the calibrators with sets significantly smaller than ``reference``'s
    somewhere, and how often lower ECE goes with smaller sets over the calibrators of a cell."""
    benchmarks = table[BENCHMARK].drop_duplicates().shape[0]
    alpha = float(table["alpha"].max())
    cells_at = [_cell_name(score, alpha) for score in table.loc[table["alpha"] == alpha, "score"].unique()]
    best = [f"{cell}: {answer.loc[answer[f'size_rank {cell}'].idxmin(), 'calibrator']} "
            f"({answer[f'size_rank {cell}'].min():.1f})" for cell in cells_at]
    smaller = answer[(answer["smaller"] > 0) & (answer["calibrator"] != reference)]
    larger = answer[(answer["larger"] > 0) & (answer["calibrator"] != reference)]
    cells = int(answer["cells"].max())
    rho = correlation["spearman"].dropna()
    significant = correlation[(correlation["pvalue"] < ALPHA) & (correlation["spearman"] > 0)]
    return (f"Over {counted(benchmarks, 'benchmark')}: the lowest mean set-size rank at alpha {alpha:g} (1 = the smallest "
            f"sets of the calibrators at the same nominal coverage) per score: {'; '.join(best)}. Sets significantly "
            f"smaller than {reference}'s (cells of {cells}): "
            f"{', '.join(f'{r.calibrator} ({r.smaller})' for r in smaller.itertuples()) or 'none'}; larger: "
            f"{', '.join(f'{r.calibrator} ({r.larger})' for r in larger.itertuples()) or 'none'}. Lower ECE goes "
            f"with smaller sets (Spearman over the calibrators of a benchmark, score and alpha) in {int((rho > 0).sum())} "
            f"of {len(rho)} cells, significantly (p < {ALPHA}) in {len(significant)}.")


def answer_block(answer: pd.DataFrame, reference: str = REFERENCE):
    """:func:`answer_table` as a report table."""
    ranks = [c for c in answer.columns if c.startswith("size_rank ")]
    header = ["Calibrator", "Benchmarks", "ECE rank", *(f"Size rank {c.removeprefix('size_rank ')}" for c in ranks),
              f"Sets smaller / larger than {reference}", "Coverage beside its expected value"]
    body = [[r["calibrator"], str(int(r["benchmarks"])), f"{r['ece_rank']:.1f}",
             *(f"{r[c]:.1f}" if np.isfinite(r[c]) else "" for c in ranks),
             "-" if r["calibrator"] == reference else f"{int(r['smaller'])} / {int(r['larger'])} of {int(r['cells'])}",
             f"{int(r['coverage_off'])} of {int(r['cells'])}"] for r in answer.to_dict("records")]
    return table_block(header, body, numeric_from=1)


def _body(table: pd.DataFrame) -> list[list[str]]:
    return [[f"{r['dataset']} {r['backbone']}", f"{r['score']} @ {r['alpha']:g}", r["calibrator"], str(int(r["runs"])),
             f"{r['ece_mean']:.2f}", interval_cell(r["coverage_mean"], r["coverage_low"], r["coverage_high"], 3),
             f"{r['coverage_expected']:.3f}",
             interval_cell(r["set_size_mean"], r["set_size_low"], r["set_size_high"], 2),
             interval_cell(r["size_diff"], r["size_diff_low"], r["size_diff_high"], 2, signed=True), p_text(r["size_pvalue_holm"]),
             interval_cell(r["singleton_hit_mean"], r["singleton_hit_low"], r["singleton_hit_high"], 3)]
            for r in table.to_dict("records")]


def build_conformal_report(results: str | os.PathLike, out: str | os.PathLike, title: str,
                           study: str | os.PathLike | None = None, regenerate: str | None = None) -> Path | None:
    """``report.md``, ``report.html``, ``conformal_table.csv``, ``calibration_and_size.csv``, ``answer.csv`` and
    ``summary.md`` (the answer alone, for a README to embed) under ``out`` from the results folders below
    ``results``; None (nothing written) when there are no rows."""
    kind_rows = read_kind_rows(results, ["dataset", "backbone", "calibrator", "split", "init", "fold", "ece"])
    rows, planned, left_out = planned_rows(kind_rows, study)
    if rows.empty or not score_alphas(rows.columns):
        return None
    out = Path(out)
    table = conformal_table(rows)
    correlation = calibration_and_size(table)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "conformal_table.csv", index=False, float_format="%.6g")
    correlation.to_csv(out / "calibration_and_size.csv", index=False, float_format="%.6g")
    runs = rows.groupby("folder")[PAIR_KEYS].apply(lambda g: len(g.drop_duplicates()))
    answer = answer_table(table)
    answer.to_csv(out / "answer.csv", index=False, float_format="%.6g")
    summary = [Paragraph(answer_sentence(table, answer, correlation)), answer_block(answer),
               Paragraph(f"Per calibrator over the benchmarks: mean rank of its mean test ECE and, per score and "
                         "alpha, of its mean set size among the calibrators (1 = lowest); on how many benchmark-score-"
                         f"alpha cells its sets are significantly smaller / larger than {REFERENCE}'s (Wilcoxon over "
                         f"paired runs, Holm over the whole table, p < {ALPHA}), and on how many the 95% interval of "
                         "its mean coverage excludes the coverage split conformal gives in expectation with the run's "
                         "n quantile nodes, ceil((n + 1)(1 - alpha)) / (n + 1), at least 1 - alpha (by chance in about "
                         "1 of 20).")]
    write_summary(summary, out)
    blocks = [Heading(1, title)]
    if regenerate:
        blocks.append(Paragraph(f"Rendered from the committed rows by {regenerate}; the rows come from "
                                "`simcalib.experiment.node_runs.evaluate_run` (provenance: `results/provenance.yaml`)."))
    blocks += [
        Heading(2, "Answer"),
        *summary,
        Heading(2, "Per benchmark"),
        Paragraph(f"Per benchmark and alpha: which calibrator gives the smallest sets, which give sets significantly "
                  f"smaller or larger than {REFERENCE}'s (Wilcoxon over paired runs, Holm over the whole table, "
                  f"p < {ALPHA}), and Spearman's correlation over the calibrators of mean test ECE and mean set size "
                  "(positive: better-calibrated probabilities, smaller sets)."),
        Bullets(tuple(answer_bullets(table, correlation))),
        Heading(2, "Coverage, set size and singleton hits"),
        Paragraph("Means over runs with 95% intervals (whole splits resampled). Coverage is the share of test nodes "
                  "whose label is in its set (nominal 1 - alpha; expected: ceil((n + 1)(1 - alpha)) / (n + 1) with n "
                  "quantile nodes, the mean over runs); size the mean number of labels per set; singleton "
                  f"hit the share of test nodes with a one-label set holding the true label. Size - {REFERENCE}: paired "
                  "over the same runs. ECE (percent) of the calibrator fitted on the fit part of the calibration fold."),
        table_block(["Benchmark", "Score @ alpha", "Calibrator", "Runs", "ECE", "Coverage", "Expected", "Set size",
                     f"Size - {REFERENCE}", "p (Holm)", "Singleton hit"], _body(table), numeric_from=3),
        Heading(2, "Calibration against set size"),
        table_block(["Benchmark", "Score", "Alpha", "Calibrators", "Spearman(ECE, size)", "p", "Smallest sets"],
                    [[f"{r['dataset']} {r['backbone']}", r["score"], f"{r['alpha']:g}", str(int(r["calibrators"])),
                      f"{r['spearman']:+.2f}" if np.isfinite(r["spearman"]) else "", p_text(r["pvalue"]),
                      f"{r['smallest']} ({r['smallest_size']:.2f})"] for r in correlation.to_dict("records")],
                    numeric_from=2),
        Heading(2, "What the rows hold"),
        Bullets(tuple([*coverage_lines(rows, planned), *left_out])),
        Heading(2, "What the rows show and what they cannot"),
        Paragraph(f"{counted(len(runs), 'benchmark')}, {runs_text(int(runs.min()), int(runs.max()))} each. Each run's "
                  "calibration fold is divided per class: half fits every calibrator, half sets the quantile, so each calibrator "
                  "is fitted on fewer nodes than under the protocol, and its ECE here is not the protocol's. The "
                  "quantile part is small (about 70 nodes on Cora, 23 on chameleon_filtered), so a run's coverage "
                  "varies by a few points around its expected value, which lies above 1 - alpha by up to 1 / (n + 1) "
                  "(0.04 with 23 nodes); the guarantee is marginal over the draw of those nodes, not per run. The "
                  "correlation is over the calibrators of one benchmark (their means), a description of these "
                  "calibrators, not a causal effect of calibration; with 5 splits the intervals are wide. The "
                  "calibration fold is drawn per class in proportion to the class sizes and the test nodes uniformly "
                  "from the rest, so quantile and test nodes are exchangeable up to that stratification. The table "
                  f"holds {len(table)} coverage intervals: at 95% about {0.05 * len(table):.0f} miss the expected "
                  "coverage by chance "
                  "even where every calibrator covers, so a coverage named in the answer is a flag, not a finding; "
                  "where a calibrator's sets are the smallest at a coverage below 1 - alpha, they are small partly "
                  "because they cover less."),
    ]
    write_report(blocks, out, title)
    return out / "report.md"


__all__ = ["CORRELATION_COLUMNS", "TABLE_COLUMNS", "answer_block", "answer_bullets", "answer_sentence", "answer_table",
           "coverage_off", "expected_coverage", "build_conformal_report", "calibration_and_size",
           "conformal_table", "score_alphas"]
