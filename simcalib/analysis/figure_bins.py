"""What the paper's per-node figures need of one run's test predictions, small enough to keep in results.csv.

Reliability diagrams, confidence distributions and the feature-similarity figure read only each test node's
top-1 confidence, whether it is correct and its feature distance. Summed per bin they fit in a short JSON
string, written in the ``figure_bins`` column of ``results.csv`` for every calibrator, so every figure
regenerates from the committed results files, without the test predictions (tens of MB per benchmark, not
committed). The column changes no number of its row; a row without it (the passes of reports/ other than the
figure pass, reports/figures, wrote it for :data:`FIGURE_CALIBRATORS` only) stays a valid row.

For the test nodes of one run, in ``groups`` equal-size groups by feature distance (ranks; group 1 is the
closest to a class prototype) and ``N_BINS`` equal-width confidence bins (:func:`simcalib.metrics.bin_index`,
the ECE's own binning):

* ``count[g, b]``, ``confidence[g, b]`` (sum of top-1 confidences), ``correct[g, b]`` (number correct);
* ``distance[g]``: the group's mean feature distance (NaN without distances; then one group);
* ``hist[h]``: counts of top-1 confidence in ``HIST_BINS`` equal bins of [0, 1] (the confidence distribution);
* ``t_feat[g]``: for a calibrator with a node-wise feature temperature (SimCalib), its mean over the group's
  nodes (absent otherwise, and in rows written before it was recorded).

ECE of any union of groups and runs is then exact: sum over bins of |correct - confidence| / count.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from simcalib.metrics import N_BINS, bin_index

# the calibrators whose rows carry figure_bins in every committed pass (those of the feature-similarity figure)
FIGURE_CALIBRATORS = ("UnCal", "GATS", "SimCalib")
N_GROUPS = 5
HIST_BINS = 30
VERSION = 1


@dataclass(frozen=True)
class FigureBins:
    count: np.ndarray  # [G, B] test nodes per (distance group, confidence bin)
    confidence: np.ndarray  # [G, B] sum of top-1 confidences
    correct: np.ndarray  # [G, B] number of correct top-1 predictions
    distance: np.ndarray  # [G] mean feature distance of the group (NaN: none recorded)
    hist: np.ndarray  # [HIST_BINS] top-1 confidence counts over [0, 1]
    runs: int = 1
    t_feat: np.ndarray | None = None  # [G] mean feature temperature of the group's nodes (None: not recorded)
    t_feat_runs: int = 0  # runs that recorded t_feat (pooled: t_feat is their mean)

    @property
    def nodes(self) -> int:
        return int(self.count.sum())

    def ece(self, group: int | None = None) -> float:
        """ECE (%) of one group (0-based) or of every node; NaN when empty."""
        count, conf, correct = (self.reliability() if group is None else  # bins first summed over the groups
                                (self.count[group], self.confidence[group], self.correct[group]))
        total = count.sum()
        return float(100 * np.abs(correct - conf).sum() / total) if total else float("nan")

    def reliability(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(count, confidence sum, correct count) per bin over every group, each [B]."""
        return self.count.sum(0), self.confidence.sum(0), self.correct.sum(0)


def summarise(probs: np.ndarray, labels: np.ndarray, distance: np.ndarray | None = None,
              groups: int = N_GROUPS, n_bins: int = N_BINS, t_feat: np.ndarray | None = None) -> FigureBins:
    """The figure bins of one run's test predictions ``probs`` [n, K] with ``labels`` [n] and, if given, each
    node's feature distance [n] (grouped by rank into ``groups`` equal groups; without it, one group) and
    each node's feature temperature ``t_feat`` [n] (averaged per group)."""
    probs = np.asarray(probs, dtype=np.float64)
    confidence = probs.max(axis=1)
    correct = (probs.argmax(axis=1) == np.asarray(labels)).astype(np.float64)
    n = len(confidence)
    if distance is None or n < groups:
        group, groups = np.zeros(n, dtype=np.int64), 1
        distance = None
    else:
        distance = np.asarray(distance, dtype=np.float64)
        ranks = np.argsort(np.argsort(distance, kind="stable"), kind="stable")
        group = ranks * groups // n  # equal sizes, 0 = closest
    cell = group * n_bins + bin_index(confidence, n_bins)
    size = groups * n_bins
    shape = (groups, n_bins)
    members = np.maximum(np.bincount(group, minlength=groups), 1)
    mean_distance = (np.full(groups, np.nan) if distance is None else
                     np.bincount(group, weights=distance, minlength=groups) / members)
    group_t_feat = (None if t_feat is None else
                    np.bincount(group, weights=np.asarray(t_feat, dtype=np.float64).reshape(n), minlength=groups) / members)
    return FigureBins(
        count=np.bincount(cell, minlength=size).reshape(shape).astype(np.float64),
        confidence=np.bincount(cell, weights=confidence, minlength=size).reshape(shape),
        correct=np.bincount(cell, weights=correct, minlength=size).reshape(shape),
        distance=mean_distance,
        hist=np.histogram(confidence, bins=HIST_BINS, range=(0.0, 1.0))[0].astype(np.float64),
        t_feat=group_t_feat, t_feat_runs=int(group_t_feat is not None),
    )


def to_json(bins: FigureBins) -> str:
    """Compact JSON of one run's bins (counts as integers, sums to 6 decimals)."""
    as_int = lambda a: np.rint(a).astype(np.int64).tolist()  # noqa: E731
    as_float = lambda a: [None if not np.isfinite(d) else float(f"{d:.6g}") for d in a]  # noqa: E731
    data = {"v": VERSION, "count": as_int(bins.count), "confidence": np.round(bins.confidence, 6).tolist(),
            "correct": as_int(bins.correct), "hist": as_int(bins.hist), "distance": as_float(bins.distance)}
    if bins.t_feat is not None:
        data["t_feat"] = as_float(bins.t_feat)
    return json.dumps(data, separators=(",", ":"))


def from_json(text: str) -> FigureBins:
    """The bins written by :func:`to_json`; a clear error for anything else."""
    as_array = lambda values: np.asarray([np.nan if d is None else d for d in values], dtype=np.float64)  # noqa: E731
    try:
        data = json.loads(text)
        if data.get("v") != VERSION:
            raise ValueError(f"version {data.get('v')!r}, expected {VERSION}")
        t_feat = as_array(data["t_feat"]) if "t_feat" in data else None  # optional: only node-wise calibrators
        return FigureBins(
            count=np.asarray(data["count"], dtype=np.float64), confidence=np.asarray(data["confidence"], dtype=np.float64),
            correct=np.asarray(data["correct"], dtype=np.float64), hist=np.asarray(data["hist"], dtype=np.float64),
            distance=as_array(data["distance"]), t_feat=t_feat, t_feat_runs=int(t_feat is not None))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a figure_bins value of simcalib ({exc}): {str(text)[:60]!r}") from None


def pool(runs: Iterable[FigureBins]) -> FigureBins | None:
    """The bins of several runs summed (group g of every run together); None for no run. Group distances are
    averaged over the runs, and group feature temperatures over the runs that recorded them."""
    runs = list(runs)
    if not runs:
        return None
    shapes = {r.count.shape for r in runs}
    if len(shapes) > 1:  # runs with and without distance groups: pool the confidence bins only
        runs = [FigureBins(r.count.sum(0, keepdims=True), r.confidence.sum(0, keepdims=True),
                           r.correct.sum(0, keepdims=True), np.array([np.nan]), r.hist, r.runs) for r in runs]
    with_t = [r for r in runs if r.t_feat is not None]
    t_runs = sum(r.t_feat_runs for r in with_t)
    return FigureBins(
        count=sum(r.count for r in runs), confidence=sum(r.confidence for r in runs),
        correct=sum(r.correct for r in runs), distance=np.mean([r.distance for r in runs], axis=0),
        hist=sum(r.hist for r in runs), runs=sum(r.runs for r in runs),
        t_feat=sum(r.t_feat * r.t_feat_runs for r in with_t) / t_runs if t_runs else None, t_feat_runs=t_runs)


__all__ = ["FIGURE_CALIBRATORS", "FigureBins", "HIST_BINS", "N_GROUPS", "from_json", "pool", "summarise", "to_json"]
