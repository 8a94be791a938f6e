"""95% bootstrap intervals over runs, the resampling unit being the split.

The 75 runs of a benchmark are 5 splits x 5 backbone initialisations x 3 calibration folds. The 15 runs of one
split share its test nodes (and the folds of one initialisation their labelled nodes), so they are not 15
independent draws: resampling runs one by one treats them as such and gives intervals too narrow wherever the
split moves the metric. The intervals here therefore resample whole splits (a cluster bootstrap;
docs/decisions.md, "Confidence intervals", has the measurement behind the choice and the coverage it gives):

* the runs are grouped by split;
* ``scipy.stats.bootstrap`` draws splits with replacement and evaluates the statistic on every run of the
  drawn splits: for a mean (:func:`mean_interval`) the mean over those runs, computed as the ratio of the
  drawn splits' value sums and run counts (``paired``: a split's sum and count are drawn together); for a
  ratio of sums (:func:`ratio_interval`, e.g. a reliability bin's pooled accuracy, correct nodes over nodes)
  the same with the runs' own denominators; for a median (:func:`median_interval`) the median of the runs;
* the interval is the percentile interval of :data:`N_RESAMPLES` resamples, from a generator seeded with
  :data:`SEED` for every interval, so a rendering is deterministic and does not depend on the order in which
  intervals are computed.

Runs from a single split (e.g. a quick study) cannot show split-to-split variation; their interval resamples
the runs one by one, and says so (:attr:`Interval.unit` is ``"run"``). One run gives no interval (None), never
a zero-width one; runs that all have the same value give that value as both ends.

A paired difference (method minus reference, run by run) is a mean over runs like any other: its interval is
:func:`mean_interval` of the per-run differences, grouped by the split of each pair.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
N_RESAMPLES = 9999
SEED = 20230
METHOD = "percentile"


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    units: int  # how many units were resampled
    unit: str  # "split" (whole splits resampled) or "run" (the runs of one split resampled one by one)

    def text(self, digits: int = 2, signed: bool = False) -> str:
        return interval_text(self.low, self.high, fixed_digits(digits, signed))


def fixed_digits(digits: int, signed: bool = False) -> Callable[[float], str]:
    """A number written with ``digits`` decimals (and its sign when ``signed``)."""
    return (lambda value: f"{value:+.{digits}f}") if signed else (lambda value: f"{value:.{digits}f}")


def interval_text(low: float, high: float, fmt: Callable[[float], str]) -> str:
    """``[low, high]``, each end written by ``fmt``; blank where an end is not finite (no interval)."""
    return f"[{fmt(low)}, {fmt(high)}]" if np.isfinite(low) and np.isfinite(high) else ""


def _ratio(sums: np.ndarray, counts: np.ndarray, axis: int = -1) -> np.ndarray:
    return sums.sum(axis=axis) / counts.sum(axis=axis)


def _percentile_interval(data: tuple[np.ndarray, ...], statistic) -> tuple[float, float]:
    result = stats.bootstrap(data, statistic, paired=True, vectorized=True, n_resamples=N_RESAMPLES,
                             confidence_level=CONFIDENCE, method=METHOD, rng=np.random.default_rng(SEED))
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


@lru_cache(maxsize=65536)
def _ratio_interval(sums: tuple[float, ...], counts: tuple[float, ...], unit: str) -> Interval:
    low, high = _percentile_interval((np.asarray(sums), np.asarray(counts)), _ratio)
    return Interval(low, high, len(sums), unit)


@lru_cache(maxsize=4096)
def _median_interval(groups: tuple[tuple[float, ...], ...], unit: str) -> Interval:
    width = max(len(g) for g in groups)
    equal = all(len(g) == width for g in groups)  # no padding: np.median, several times faster
    padded = np.full((len(groups), width), np.nan)
    for i, g in enumerate(groups):
        padded[i, :len(g)] = g

    def median_of_drawn(index: np.ndarray, axis: int = -1) -> np.ndarray:
        drawn = padded[np.moveaxis(index, axis, -1).astype(np.int64)]  # [..., units, width]
        flat = drawn.reshape(*drawn.shape[:-2], -1)
        return np.median(flat, axis=-1) if equal else np.nanmedian(flat, axis=-1)

    low, high = _percentile_interval((np.arange(len(groups), dtype=np.float64),), median_of_drawn)
    return Interval(low, high, len(groups), unit)


def _groups(count: int, splits: Sequence | None) -> tuple[list[np.ndarray], str]:
    """Index arrays of the resampled units: one per split when there are two or more, else one per run."""
    labels = None if splits is None else np.asarray(splits, dtype=object).astype(str)
    if labels is not None and len(set(labels)) >= 2:
        return [np.flatnonzero(labels == s) for s in sorted(set(labels))], "split"
    return [np.array([i]) for i in range(count)], "run"


def ratio_interval(numerators: Sequence[float], denominators: Sequence[float],
                   splits: Sequence | None = None) -> Interval | None:
    """The 95% bootstrap interval of sum(numerators) / sum(denominators) over runs (one pair per run), whole
    splits resampled when ``splits`` (the split of each run) names two or more; None for fewer than two runs.
    Runs with a non-finite value or a zero denominator are left out."""
    num = np.asarray(numerators, dtype=np.float64)
    den = np.asarray(denominators, dtype=np.float64)
    keep = np.isfinite(num) & np.isfinite(den) & (den > 0)
    if keep.sum() < 2:
        return None
    num, den = num[keep], den[keep]
    groups, unit = _groups(len(num), None if splits is None else np.asarray(splits, dtype=object)[keep])
    if np.ptp(num / den) == 0:
        return Interval(float(num[0] / den[0]), float(num[0] / den[0]), len(groups), unit)
    return _ratio_interval(tuple(float(num[g].sum()) for g in groups), tuple(float(den[g].sum()) for g in groups),
                           unit)


def mean_interval(values: Sequence[float], splits: Sequence | None = None) -> Interval | None:
    """The 95% bootstrap interval of the mean of ``values`` (one per run), whole splits resampled when
    ``splits`` names two or more; None for fewer than two runs. Non-finite values (a run without the
    metric) are left out."""
    values = np.asarray(values, dtype=np.float64)
    return ratio_interval(values, np.ones_like(values), splits)


def median_interval(values: Sequence[float], splits: Sequence | None = None) -> Interval | None:
    """The 95% bootstrap interval of the median of ``values`` (one per run), resampled as
    :func:`mean_interval`."""
    values = np.asarray(values, dtype=np.float64)
    keep = np.isfinite(values)
    values = values[keep]
    if len(values) < 2:
        return None
    groups, unit = _groups(len(values), None if splits is None else np.asarray(splits, dtype=object)[keep])
    if np.ptp(values) == 0:
        return Interval(float(values[0]), float(values[0]), len(groups), unit)
    return _median_interval(tuple(tuple(float(v) for v in values[g]) for g in groups), unit)


def resampled_means(values: np.ndarray, splits: Sequence, rng: np.random.Generator,
                    n_resamples: int = N_RESAMPLES) -> np.ndarray:
    """Column means of ``values`` [runs, C] over the runs of resampled splits, ``n_resamples`` times: [n_resamples, C].

    The same resampling unit as :func:`mean_interval` (whole splits, the runs one by one where fewer than two splits
    are named), for a statistic of several columns at once (e.g. the ranks of several calibrators on the same runs,
    :mod:`simcalib.report.leaderboard`). Each resample draws as many units as there are, with replacement, from
    ``rng``; the mean is over every run of the drawn units.
    """
    values = np.asarray(values, dtype=np.float64)
    groups, _ = _groups(len(values), splits)
    sums = np.stack([values[g].sum(axis=0) for g in groups])  # [units, C]
    counts = np.array([len(g) for g in groups], dtype=np.float64)  # [units]
    drawn = rng.integers(0, len(groups), size=(n_resamples, len(groups)))  # [n_resamples, units]
    return sums[drawn].sum(axis=1) / counts[drawn].sum(axis=1)[:, None]


def split_icc(values: Sequence[float], splits: Sequence) -> float:
    """The share of the variance of ``values`` (one per run) that lies between splits: the one-way ANOVA
    estimate of the intraclass correlation with the split as the group (unequal group sizes: Searle's n0),
    clipped at 0; NaN for fewer than two splits or no within-split replication."""
    values = np.asarray(values, dtype=np.float64)
    labels = np.asarray(splits, dtype=object).astype(str)
    groups = [values[labels == s] for s in sorted(set(labels))]
    k, n = len(groups), len(values)
    if k < 2 or n <= k:
        return float("nan")
    sizes = np.array([len(g) for g in groups], dtype=np.float64)
    grand = values.mean()
    between_ms = sum(len(g) * (g.mean() - grand) ** 2 for g in groups) / (k - 1)
    within_ms = sum(((g - g.mean()) ** 2).sum() for g in groups) / (n - k)
    n0 = (n - (sizes**2).sum() / n) / (k - 1)
    between = max((between_ms - within_ms) / n0, 0.0)
    return float(between / (between + within_ms)) if between + within_ms > 0 else float("nan")


__all__ = ["CONFIDENCE", "Interval", "METHOD", "N_RESAMPLES", "SEED", "fixed_digits", "interval_text", "mean_interval", "median_interval",
           "ratio_interval", "resampled_means", "split_icc"]
