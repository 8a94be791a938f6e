"""Calibration metrics (PROTOCOL section 6).

All functions take probabilities ``probs`` [N, K] and integer labels [N] (numpy or torch) of the nodes to
evaluate (the test nodes in the benchmark) and compute in float64. ECE-type metrics are returned as
fractions by the single functions and in percent by :func:`compute_metrics`, which is what the results
tables hold.

ECE (Guo et al. 2017; the paper's Eq. for ECE, GATS's binning):

    ECE = sum_m |B_m| / N * |acc(B_m) - conf(B_m)|,   B_m = {i : (m-1)/M < c_i <= m/M},  M = 15,

with c_i the top-1 confidence; a confidence of exactly 1 lies in the last bin.

Beside it, estimators of other quantities or with other biases (:data:`ESTIMATOR_NAMES`, defined in their
functions): smooth ECE (:func:`smooth_ece`), the debiased top-label L2 calibration error
(:func:`debiased_ce`), the signed calibration error (:func:`signed_ce`) and the degree-binned ECE of the GETS
and WATS code (:func:`degree_ece`), which bins nodes by degree, not by confidence.

On binary graphs (K = 2; minesweeper, tolokers, questions) a majority-class predictor has a small top-label
ECE, so the rows also hold metrics of p(y = 1) (:data:`BINARY_METRIC_NAMES`, NaN for K > 2): ROC-AUC
(:func:`roc_auc`) and the calibration error of p(y = 1) (:func:`positive_ece`). The Brier score of
:func:`brier` is the multi-class one: on K = 2 it is twice the binary Brier score mean (p_1 - y)^2.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

N_BINS = 15
# The version of the numbers these metrics compute: bump it when an edit moves a metric's value; every row is
# then computed again (simcalib.experiment.protocol.row_definition). Version 1 stays out of the rows' digests.
METRICS_VERSION = 1
DEGREE_BINS = 10  # the GETS and WATS configs' num_bin
# Every results file has these columns.
BASE_METRIC_NAMES = ("ece", "ace", "mce", "classwise_ece", "kde_ece", "nll", "brier", "accuracy")
# Columns a results file written before them lacks: such rows read them as missing (NaN), never as zero.
ESTIMATOR_NAMES = ("smece", "debiased_ce", "signed_ce", "degree_ece")
# Metrics of p(y = 1) on binary graphs (NaN for more classes), likewise NaN in rows written before them.
BINARY_METRIC_NAMES = ("roc_auc", "positive_ece")
METRIC_NAMES = BASE_METRIC_NAMES + ESTIMATOR_NAMES + BINARY_METRIC_NAMES
PERCENT_METRICS = ("ece", "ace", "mce", "classwise_ece", "kde_ece", "accuracy", *ESTIMATOR_NAMES, *BINARY_METRIC_NAMES)


def _as_numpy(probs, labels) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(probs, torch.Tensor):
        probs = probs.detach().cpu().numpy()
    if isinstance(labels, torch.Tensor):
        labels = labels.detach().cpu().numpy()
    probs = np.asarray(probs, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    if probs.ndim != 2 or labels.shape != (probs.shape[0],):
        raise ValueError(f"expected probs [N, K] and labels [N], got {probs.shape} and {labels.shape}")
    return probs, labels


def bin_index(confidence: np.ndarray, n_bins: int = N_BINS) -> np.ndarray:
    """Equal-width bin of each confidence: bin m-1 holds (m-1)/M < c <= m/M; c = 1 is in the last bin."""
    return np.clip(np.ceil(confidence * n_bins).astype(np.int64) - 1, 0, n_bins - 1)


@dataclass(frozen=True)
class ReliabilityBins:
    """Per-bin data of a reliability diagram (equal-width bins over top-1 confidence)."""

    edges: np.ndarray  # [M + 1]
    accuracy: np.ndarray  # [M], NaN for empty bins
    confidence: np.ndarray  # [M], NaN for empty bins
    count: np.ndarray  # [M]


def _top_label(probs: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(top-1 confidence, 1.0 where the top-1 class is the label) of every node."""
    return probs.max(1), (probs.argmax(1) == labels).astype(np.float64)


def reliability_bins(probs, labels, n_bins: int = N_BINS) -> ReliabilityBins:
    probs, labels = _as_numpy(probs, labels)
    conf, correct = _top_label(probs, labels)
    idx = bin_index(conf, n_bins)
    count = np.bincount(idx, minlength=n_bins).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        acc = np.bincount(idx, weights=correct, minlength=n_bins) / count
        mean_conf = np.bincount(idx, weights=conf, minlength=n_bins) / count
    return ReliabilityBins(np.linspace(0, 1, n_bins + 1), acc, mean_conf, count.astype(np.int64))


def _binned_gaps(conf: np.ndarray, correct: np.ndarray, idx: np.ndarray, n_bins: int):
    count = np.bincount(idx, minlength=n_bins).astype(np.float64)
    acc_sum = np.bincount(idx, weights=correct, minlength=n_bins)
    conf_sum = np.bincount(idx, weights=conf, minlength=n_bins)
    nonempty = count > 0
    gaps = np.abs(acc_sum[nonempty] - conf_sum[nonempty]) / count[nonempty]
    return gaps, count[nonempty]


def ece(probs, labels, n_bins: int = N_BINS) -> float:
    """Expected calibration error with equal-width bins (fraction, not percent)."""
    probs, labels = _as_numpy(probs, labels)
    conf, correct = _top_label(probs, labels)
    gaps, count = _binned_gaps(conf, correct, bin_index(conf, n_bins), n_bins)
    return float((gaps * count).sum() / len(labels))


def mce(probs, labels, n_bins: int = N_BINS) -> float:
    """Maximum calibration error: the largest |acc - conf| over non-empty equal-width bins."""
    probs, labels = _as_numpy(probs, labels)
    conf, correct = _top_label(probs, labels)
    gaps, _ = _binned_gaps(conf, correct, bin_index(conf, n_bins), n_bins)
    return float(gaps.max()) if len(gaps) else 0.0


def ace(probs, labels, n_bins: int = N_BINS) -> float:
    """Adaptive ECE: ``n_bins`` equal-mass bins over the sorted top-1 confidences."""
    probs, labels = _as_numpy(probs, labels)
    conf, correct = _top_label(probs, labels)
    order = np.argsort(conf, kind="stable")
    idx = np.empty(len(conf), dtype=np.int64)
    for b, members in enumerate(np.array_split(order, n_bins)):
        idx[members] = b
    gaps, count = _binned_gaps(conf, correct, idx, n_bins)
    return float((gaps * count).sum() / len(labels))


def classwise_ece(probs, labels, n_bins: int = N_BINS) -> float:
    """Classwise ECE: for each class k, equal-width bins over p_k against the frequency of y = k; mean over k."""
    probs, labels = _as_numpy(probs, labels)
    n, k = probs.shape
    total = 0.0
    for c in range(k):
        p = probs[:, c]
        hit = (labels == c).astype(np.float64)
        idx = np.clip(np.ceil(p * n_bins).astype(np.int64) - 1, 0, n_bins - 1)
        gaps, count = _binned_gaps(p, hit, idx, n_bins)
        total += (gaps * count).sum() / n
    return float(total / k)


def kde_ece(probs, labels, grid_size: int = 2048) -> float:
    """Top-label KDE-ECE (Zhang et al. 2020, "Mix-n-Match"), a binning-free estimate of ECE.

    Densities of the top-1 confidence over all nodes and over the correctly classified ones are estimated
    with a triweight kernel, reflected at 0 and 1 to remove boundary bias, bandwidth
    ``1.06 * std(c) * N^(-1/5)`` (at least 1e-3), evaluated on a grid of ``grid_size`` points by linear
    binning and convolution. With ``acc(c) = pi * f_correct(c) / f(c)``:

        KDE-ECE = integral |c - acc(c)| f(c) dc.
    """
    probs, labels = _as_numpy(probs, labels)
    conf = probs.max(1)
    correct = probs.argmax(1) == labels
    n = len(conf)
    if n < 2:
        return ece(probs, labels)
    bandwidth = max(1.06 * conf.std() * n ** (-0.2), 1e-3)
    step = 1.0 / (grid_size - 1)
    grid = np.linspace(0.0, 1.0, grid_size)
    # Extended grid over [-1, 2] holds the reflected samples; densities are read back on [0, 1].
    ext = np.arange(-(grid_size - 1), 2 * (grid_size - 1) + 1) * step
    offsets = np.arange(-int(np.ceil(bandwidth / step)), int(np.ceil(bandwidth / step)) + 1) * step
    u = offsets / bandwidth
    kernel = np.where(np.abs(u) <= 1, (35.0 / 32.0) * (1 - u**2) ** 3, 0.0)

    def density(samples: np.ndarray) -> np.ndarray:
        """Triweight KDE on the grid: linear binning of the samples, then a convolution (O(grid))."""
        if len(samples) == 0:
            return np.zeros_like(grid)
        mirrored = np.concatenate([samples, -samples, 2.0 - samples])
        pos = (mirrored - ext[0]) / step
        left = np.clip(np.floor(pos).astype(np.int64), 0, len(ext) - 2)
        frac = pos - left
        counts = np.bincount(left, weights=1 - frac, minlength=len(ext)) + np.bincount(left + 1, weights=frac, minlength=len(ext))
        smoothed = np.convolve(counts, kernel, mode="same")
        return smoothed[grid_size - 1: 2 * grid_size - 1] / (len(samples) * bandwidth)

    f_all = density(conf)
    f_correct = density(conf[correct])
    pi = correct.mean()
    with np.errstate(invalid="ignore", divide="ignore"):
        acc = np.where(f_all > 1e-12, pi * f_correct / f_all, 0.0)
    integrand = np.abs(grid - acc) * f_all
    area = np.trapezoid(f_all, grid)
    return float(np.trapezoid(integrand, grid) / area) if area > 0 else 0.0


def nll(probs, labels, eps: float = 1e-12) -> float:
    """Mean negative log-likelihood of the true labels."""
    probs, labels = _as_numpy(probs, labels)
    return float(-np.log(np.clip(probs[np.arange(len(labels)), labels], eps, None)).mean())


def brier(probs, labels) -> float:
    """Brier score: mean over nodes of sum_k (p_k - 1[y = k])^2."""
    probs, labels = _as_numpy(probs, labels)
    onehot = np.zeros_like(probs)
    onehot[np.arange(len(labels)), labels] = 1.0
    return float(((probs - onehot) ** 2).sum(1).mean())


def accuracy(probs, labels) -> float:
    probs, labels = _as_numpy(probs, labels)
    return float((probs.argmax(1) == labels).mean())


def smooth_ece(probs, labels) -> float:
    """Smooth ECE (Blasiok & Nakkiran 2023, "Smooth ECE: principled reliability diagrams via kernel
    smoothing") of the top-1 confidence against correctness, by ``relplot.smECE`` (fraction).

    The residuals c_i - 1[correct_i] are smoothed with a Gaussian kernel reflected at 0 and 1, and
    smECE_sigma = integral |r_sigma(t)| delta_sigma(t) dt over the smoothed density delta_sigma; the bandwidth
    is the fixed point sigma* = smECE_sigma* (found by bisection), so no bin count is chosen.
    """
    from relplot.metrics import smECE  # relplot imports pyplot: loaded only when this runs

    probs, labels = _as_numpy(probs, labels)
    conf, correct = _top_label(probs, labels)
    return float(smECE(conf, correct))


def debiased_ce(probs, labels, n_bins: int = N_BINS) -> float:
    """Debiased top-label L2 calibration error of Kumar, Liang & Ma 2019 ("Verified uncertainty calibration"),
    by the ``calibration`` package (uncertainty-calibration), as a fraction.

    ``calibration.lower_bound_scaling_ce(probs, labels, p=2, debias=True, num_bins=n_bins,
    binning_scheme=get_equal_bins, mode="top-label")``: ``n_bins`` equal-mass bins of the top-1 confidence,
    and in each bin b with n_b >= 2 nodes the plug-in squared gap corrected for the variance of the bin's
    accuracy,

        CE^2 = sum_b n_b / N * ((conf_b - acc_b)^2 - acc_b (1 - acc_b) / (n_b - 1)),   CE = sqrt(max(CE^2, 0)),

    (bins of one node count 0). This is what ``calibration.get_calibration_error(probs, labels, p=2,
    debias=True, mode="top-label")`` computes for continuous probabilities; called directly so that its
    discreteness heuristic never switches the binning, and p = 2 because the package's p = 1 correction
    draws random normal samples.
    """
    from calibration import get_equal_bins, lower_bound_scaling_ce

    probs, labels = _as_numpy(probs, labels)
    return float(lower_bound_scaling_ce(probs, labels, p=2, debias=True, num_bins=n_bins,
                                        binning_scheme=get_equal_bins, mode="top-label"))


def signed_ce(probs, labels) -> float:
    """Signed calibration error: mean top-1 confidence minus accuracy (fraction). Positive: over-confident,
    negative: under-confident. Errors of opposite sign cancel, so it is a direction, not a size."""
    probs, labels = _as_numpy(probs, labels)
    conf, correct = _top_label(probs, labels)
    return float(conf.mean() - correct.mean())


def degree_bin_index(degree, n_bins: int = DEGREE_BINS) -> np.ndarray:
    """Degree bin of each node: the nodes sorted by degree (ties in their given order) and cut into bins of
    ceil(N / n_bins) consecutive nodes (the last one smaller; fewer bins when N is not a multiple)."""
    degree = np.asarray(degree, dtype=np.float64)
    rank = np.empty(len(degree), dtype=np.int64)
    rank[np.argsort(degree, kind="stable")] = np.arange(len(degree))
    return rank // max(int(np.ceil(len(degree) / n_bins)), 1)


def degree_ece(probs, labels, degree, n_bins: int = DEGREE_BINS) -> float:
    """Degree-binned ECE as the GETS and WATS code report it (its ``_get_diff``), a fraction. **Not the ECE**:
    nodes are grouped by degree, not by confidence.

        degree-ECE = sum_b |B_b| / N * |acc(B_b) - conf(B_b)|,

    B_b the b-th group of :func:`degree_bin_index` (``n_bins`` = 10 equal-count groups of the nodes sorted by
    in-degree), acc and conf the accuracy and mean top-1 confidence of the group. Miscalibration in opposite
    directions within a degree group cancels; a model can have degree-ECE 0 and a large ECE.
    """
    probs, labels = _as_numpy(probs, labels)
    degree = np.asarray(degree.detach().cpu().numpy() if isinstance(degree, torch.Tensor) else degree)
    if degree.shape != labels.shape:
        raise ValueError(f"expected degree [N] = {labels.shape}, got {degree.shape}")
    conf, correct = _top_label(probs, labels)
    idx = degree_bin_index(degree, n_bins)
    gaps, count = _binned_gaps(conf, correct, idx, int(idx.max()) + 1 if len(idx) else 1)
    return float((gaps * count).sum() / len(labels))


def _positive_probability(probs: np.ndarray) -> np.ndarray:
    if probs.shape[1] != 2:
        raise ValueError(f"a metric of p(y = 1) needs 2 classes, got {probs.shape[1]}")
    return probs[:, 1]


def positive_ece(probs, labels, n_bins: int = N_BINS) -> float:
    """Calibration error of p(y = 1) on a binary task (fraction), with equal-width bins over p = p(y = 1):

        CE_1 = sum_m |B_m| / N * |mean_{i in B_m} p_i - mean_{i in B_m} 1[y_i = 1]|,   B_m = {i : (m-1)/M < p_i <= m/M},

    p = 0 in the first bin. Unlike the top-label ECE, a predictor of the majority class with p(y = 1) near 0
    for every node is scored by how far that p is from the positive rate. (The classwise ECE's term of class 1;
    on K = 2 the classwise ECE equals it up to nodes on a bin edge.)
    """
    probs, labels = _as_numpy(probs, labels)
    p = _positive_probability(probs)
    gaps, count = _binned_gaps(p, (labels == 1).astype(np.float64), bin_index(p, n_bins), n_bins)
    return float((gaps * count).sum() / len(labels))


def roc_auc(probs, labels) -> float:
    """ROC-AUC of p(y = 1) on a binary task (fraction): the probability that a random node with y = 1 gets a
    higher p(y = 1) than a random node with y = 0, ties counting one half (Mann-Whitney U / (n_1 n_0), from the
    mid-ranks of p). NaN when the nodes hold one class only."""
    from scipy.stats import rankdata

    probs, labels = _as_numpy(probs, labels)
    p = _positive_probability(probs)
    positive = labels == 1
    n1, n0 = int(positive.sum()), int((~positive).sum())
    if n1 == 0 or n0 == 0:
        return float("nan")
    ranks = rankdata(p)  # mid-ranks: ties share their mean rank
    return float((ranks[positive].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def binary_metrics(probs, labels, n_bins: int = N_BINS) -> dict[str, float]:
    """:data:`BINARY_METRIC_NAMES` as fractions: the metrics of p(y = 1) for K = 2, NaN for K > 2."""
    probs, labels = _as_numpy(probs, labels)
    if probs.shape[1] != 2:
        return {name: float("nan") for name in BINARY_METRIC_NAMES}
    return {"roc_auc": roc_auc(probs, labels), "positive_ece": positive_ece(probs, labels, n_bins)}


def compute_metrics(probs, labels, n_bins: int = N_BINS, degree=None) -> dict[str, float]:
    """Every metric of the results table (:data:`METRIC_NAMES`); ECE-type metrics and accuracy in percent.
    ``degree``: each node's degree (for :func:`degree_ece`; NaN without it)."""
    probs, labels = _as_numpy(probs, labels)
    if not np.isfinite(probs).all():
        raise ValueError("probabilities contain NaN or infinite values")
    values = {
        "ece": ece(probs, labels, n_bins),
        "ace": ace(probs, labels, n_bins),
        "mce": mce(probs, labels, n_bins),
        "classwise_ece": classwise_ece(probs, labels, n_bins),
        "kde_ece": kde_ece(probs, labels),
        "nll": nll(probs, labels),
        "brier": brier(probs, labels),
        "accuracy": accuracy(probs, labels),
        "smece": smooth_ece(probs, labels),
        "debiased_ce": debiased_ce(probs, labels, n_bins),
        "signed_ce": signed_ce(probs, labels),
        "degree_ece": float("nan") if degree is None else degree_ece(probs, labels, degree),
        **binary_metrics(probs, labels, n_bins),
    }
    return {k: (100.0 * v if k in PERCENT_METRICS else v) for k, v in values.items()}
