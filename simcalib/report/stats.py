"""Significance of SimCalib's improvement, computed the way the paper does and per benchmark.

* Across benchmarks (the paper's test): the Wilcoxon signed-rank test of the per-benchmark mean ECEs,
  ``scipy.stats.wilcoxon(SimCalib_mean, GATS_mean)`` (two-sided, scipy defaults). On the paper's Table 1 this
  gives p = 7.63e-4 (16 benchmarks, SimCalib lower on 14).
* Mean relative ECE reduction vs GATS (paper: 10.4%): ``mean_b (GATS_b - SimCalib_b) / GATS_b``.
* Per benchmark: the Wilcoxon signed-rank test over the paired runs (the same split, init and fold give the
  same backbone to both calibrators), two-sided.
* Beside each per-benchmark test, the 95% bootstrap interval of the mean paired difference (method minus
  reference), whole splits resampled (:func:`simcalib.report.bootstrap.mean_interval`).
* Several tests at once (one per benchmark, or one per baseline) are Holm-corrected (step-down):
  ``p_(i)^adj = max_{j <= i} min(1, (m - j + 1) p_(j))`` for the sorted p-values ``p_(1) <= ... <= p_(m)``.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from simcalib.report.bootstrap import fixed_digits, interval_text, mean_interval
from simcalib.report.tables import benchmark_sort_key

PAIR_KEYS = ["dataset", "backbone", "split", "init", "fold"]


def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm-adjusted p-values (NaNs stay NaN and do not count as tests)."""
    p = np.asarray(pvalues, dtype=np.float64)
    adjusted = np.full_like(p, np.nan)
    valid = np.flatnonzero(np.isfinite(p))
    m = len(valid)
    if m == 0:
        return adjusted
    order = valid[np.argsort(p[valid], kind="stable")]
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
    return adjusted


def wilcoxon_pvalue(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """(statistic, two-sided p) of ``scipy.stats.wilcoxon(a, b)``; NaN when fewer than 2 pairs or all equal."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if len(a) < 2 or np.allclose(a, b):
        return float("nan"), float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns about ties / small samples; the p-value stays defined
        result = stats.wilcoxon(a, b)
    return float(result.statistic), float(result.pvalue)


def relative_reduction(method_means: Sequence[float], reference_means: Sequence[float]) -> float:
    """Mean over benchmarks of ``(reference - method) / reference`` (a fraction; the paper's 10.4% is 0.104)."""
    m, r = np.asarray(method_means, dtype=np.float64), np.asarray(reference_means, dtype=np.float64)
    return float(np.mean((r - m) / r)) if len(m) else float("nan")


def across_benchmarks(means: pd.DataFrame, method: str = "SimCalib", reference: str = "GATS") -> dict:
    """The paper's test on a benchmarks x methods table of means (benchmarks where both ran).

    Returns n, the Wilcoxon statistic and p-value, the mean relative reduction of ``method`` vs ``reference``
    and the number of benchmarks where ``method`` is lower.
    """
    if method not in means.columns or reference not in means.columns:
        return {"method": method, "reference": reference, "n": 0, "statistic": np.nan, "pvalue": np.nan,
                "relative_reduction": np.nan, "wins": 0}
    both = means[[method, reference]].dropna()
    statistic, pvalue = wilcoxon_pvalue(both[method], both[reference])
    return {"method": method, "reference": reference, "n": len(both), "statistic": statistic, "pvalue": pvalue,
            "relative_reduction": relative_reduction(both[method], both[reference]),
            "wins": int((both[method] < both[reference]).sum())}


def across_benchmarks_all(means: pd.DataFrame, method: str = "SimCalib",
                          references: Sequence[str] | None = None) -> pd.DataFrame:
    """``method`` vs every other column of ``means`` across benchmarks, Holm-corrected over the references."""
    references = [c for c in (references or means.columns) if c != method and c in means.columns]
    frame = pd.DataFrame([across_benchmarks(means, method, r) for r in references],
                         columns=["method", "reference", "n", "statistic", "pvalue", "relative_reduction", "wins"])
    frame["pvalue_holm"] = holm(frame["pvalue"]) if len(frame) else []
    return frame


def paired_runs(rows: pd.DataFrame, method: str = "SimCalib", reference: str = "GATS",
                metric: str = "ece") -> pd.DataFrame:
    """Per benchmark: runs of ``method`` and ``reference`` paired by (split, init, fold), Wilcoxon over the pairs.
    Rows whose ``backbone_digest`` both exist and differ (the run's backbone was trained twice, e.g. on two
    machines) are not a pair.

    Columns: dataset, backbone, pairs, mean of each, mean difference with its 95% bootstrap interval
    (diff_ci_low, diff_ci_high; NaN for one pair), wins, statistic, pvalue, pvalue_holm (Holm over the
    benchmarks tested).
    """
    columns = ["dataset", "backbone", "pairs", f"{method}_mean", f"{reference}_mean", "mean_diff", "diff_ci_low",
               "diff_ci_high", "wins", "statistic", "pvalue", "pvalue_holm"]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    keyed = rows.drop_duplicates(subset=[*PAIR_KEYS, "calibrator"], keep="last")
    if "backbone_digest" not in keyed.columns:
        keyed = keyed.assign(backbone_digest=np.nan)
    left = keyed[keyed["calibrator"] == method][[*PAIR_KEYS, metric, "backbone_digest"]]
    right = keyed[keyed["calibrator"] == reference][[*PAIR_KEYS, metric, "backbone_digest"]]
    pairs = left.merge(right, on=PAIR_KEYS, suffixes=("_m", "_r"))
    # Two rows of a run are a pair only if they saw the same backbone: digests equal, or unknown on a side
    # (rows written before the digest existed).
    digest_m, digest_r = pairs["backbone_digest_m"], pairs["backbone_digest_r"]
    pairs = pairs[digest_m.isna() | digest_r.isna() | (digest_m == digest_r)]
    records = []
    for (dataset, backbone), group in pairs.groupby(["dataset", "backbone"], sort=False):
        a, b = group[f"{metric}_m"].to_numpy(float), group[f"{metric}_r"].to_numpy(float)
        statistic, pvalue = wilcoxon_pvalue(a, b)
        interval = mean_interval(a - b, group["split"].to_numpy())
        records.append({"dataset": dataset, "backbone": backbone, "pairs": len(group), f"{method}_mean": a.mean(),
                        f"{reference}_mean": b.mean(), "mean_diff": float((a - b).mean()),
                        "diff_ci_low": np.nan if interval is None else interval.low,
                        "diff_ci_high": np.nan if interval is None else interval.high,
                        "wins": int((a < b).sum()), "statistic": statistic, "pvalue": pvalue})
    frame = pd.DataFrame(records, columns=columns[:-1])
    frame["pvalue_holm"] = holm(frame["pvalue"]) if len(frame) else []
    order = sorted(range(len(frame)), key=lambda i: benchmark_sort_key((frame["dataset"].iloc[i],
                                                                         frame["backbone"].iloc[i])))
    return frame.iloc[order].reset_index(drop=True)


def paired_comparisons(rows: pd.DataFrame, pairs: Sequence[tuple[str, str]], metric: str = "ece") -> pd.DataFrame:
    """:func:`paired_runs` for every (method, reference) pair, as one long frame in benchmark order.

    Columns: dataset, backbone, method, reference, pairs, method_mean, reference_mean, mean_diff, diff_ci_low,
    diff_ci_high, wins, statistic, pvalue, pvalue_holm (Holm over the benchmarks within one pair, as in
    :func:`paired_runs`). Pairs with no run in common are absent.
    """
    columns = ["dataset", "backbone", "method", "reference", "pairs", "method_mean", "reference_mean", "mean_diff",
               "diff_ci_low", "diff_ci_high", "wins", "statistic", "pvalue", "pvalue_holm"]
    frames = []
    for rank, (method, reference) in enumerate(pairs):
        frame = paired_runs(rows, method, reference, metric).rename(
            columns={f"{method}_mean": "method_mean", f"{reference}_mean": "reference_mean"})
        frames.append(frame.assign(method=method, reference=reference, _rank=rank))
    if not frames or all(f.empty for f in frames):
        return pd.DataFrame(columns=columns)
    frame = pd.concat([f for f in frames if not f.empty], ignore_index=True)
    order = sorted(range(len(frame)), key=lambda i: (benchmark_sort_key((frame["dataset"].iloc[i],
                                                                         frame["backbone"].iloc[i])),
                                                     frame["_rank"].iloc[i]))
    return frame.iloc[order][columns].reset_index(drop=True)


PAIRED_HEADER = ("Benchmark", "Method", "Reference", "Pairs", "Method mean", "Reference mean", "Mean diff",
                 "Diff 95% CI", "Method lower", "p", "p (Holm)")


def diff_interval_text(low: float, high: float, digits: int = 2) -> str:
    """``[low, high]`` with signs, blank where there is no interval (one pair)."""
    return interval_text(low, high, fixed_digits(digits, signed=True))


def paired_comparison_cells(frame: pd.DataFrame, digits: int = 2) -> list[list[str]]:
    """Rows of :data:`PAIRED_HEADER` for a :func:`paired_comparisons` frame (one rendering for report and scripts)."""
    return [[f"{r.dataset} {r.backbone}", r.method, r.reference, str(int(r.pairs)), f"{r.method_mean:.{digits}f}",
             f"{r.reference_mean:.{digits}f}", f"{r.mean_diff:+.{digits}f}",
             diff_interval_text(r.diff_ci_low, r.diff_ci_high, digits), f"{int(r.wins)}/{int(r.pairs)}",
             f"{r.pvalue:.2g}", f"{r.pvalue_holm:.2g}"] for r in frame.itertuples()]


__all__ = ["PAIRED_HEADER", "across_benchmarks", "across_benchmarks_all", "diff_interval_text", "holm",
           "paired_comparison_cells",
           "paired_comparisons", "paired_runs", "relative_reduction", "wilcoxon_pvalue"]
