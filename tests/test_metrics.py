import numpy as np
import pytest
import torch

from simcalib import metrics


def probs_from(conf_top, pred, k=3):
    """Rows with the given top-1 confidence on class ``pred`` and the rest spread evenly."""
    p = np.full((len(conf_top), k), 0.0)
    for i, (c, j) in enumerate(zip(conf_top, pred)):
        p[i] = (1 - c) / (k - 1)
        p[i, j] = c
    return p


def test_ece_hand_computed():
    # bin (0.6, 0.667]: confidences 0.62, 0.64, 0.65, accuracy 2/3; bin (0.933, 1]: confidences 0.95, 1.0,
    # accuracy 1. Unequal counts (3 and 2): each bin's gap weighs by its share of the nodes.
    p = probs_from([0.62, 0.64, 0.65, 0.95, 1.0], [0, 0, 1, 1, 2])
    y = np.array([0, 1, 1, 1, 2])
    low, high = abs(2 / 3 - (0.62 + 0.64 + 0.65) / 3), abs(1.0 - 0.975)
    assert metrics.ece(p, y) == pytest.approx(3 / 5 * low + 2 / 5 * high)
    assert metrics.ece(p, y) != pytest.approx((low + high) / 2)  # not an unweighted mean over bins
    assert metrics.mce(p, y) == pytest.approx(max(low, high))


def test_confidence_exactly_on_a_bin_edge_goes_to_the_lower_bin_and_one_to_the_last():
    assert metrics.bin_index(np.array([1 / 15, 2 / 15, 1.0, 0.5])).tolist() == [0, 1, 14, 7]


def test_ece_matches_torchmetrics():
    torchmetrics = pytest.importorskip("torchmetrics")
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(500, 6)) * 2
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    y = rng.integers(0, 6, 500)
    ref = torchmetrics.functional.calibration_error(torch.tensor(p, dtype=torch.float64), torch.tensor(y),
                                                    task="multiclass", num_classes=6, n_bins=15, norm="l1")
    assert metrics.ece(p, y) == pytest.approx(float(ref), abs=1e-6)
    ref_max = torchmetrics.functional.calibration_error(torch.tensor(p, dtype=torch.float64), torch.tensor(y),
                                                        task="multiclass", num_classes=6, n_bins=15, norm="max")
    assert metrics.mce(p, y) == pytest.approx(float(ref_max), abs=1e-6)


def test_ace_uses_equal_mass_bins():
    p = probs_from([0.5, 0.6, 0.7, 0.8], [0, 0, 0, 0], k=2)
    y = np.array([0, 1, 0, 0])
    # two bins of two nodes: {0.5, 0.6} acc 0.5, {0.7, 0.8} acc 1.0
    assert metrics.ace(p, y, n_bins=2) == pytest.approx(0.5 * abs(0.5 - 0.55) + 0.5 * abs(1 - 0.75))


def test_classwise_ece_hand_computed():
    p = np.array([[0.9, 0.1], [0.3, 0.7]])
    y = np.array([0, 0])
    # class 0: bins hold p=0.9 (hit) and p=0.3 (hit) -> |1-0.9|/2 + |1-0.3|/2; class 1: p=0.1, 0.7, no hits
    c0 = 0.5 * 0.1 + 0.5 * 0.7
    c1 = 0.5 * 0.1 + 0.5 * 0.7
    assert metrics.classwise_ece(p, y) == pytest.approx((c0 + c1) / 2)


def test_nll_brier_accuracy():
    p = np.array([[0.8, 0.2], [0.4, 0.6]])
    y = np.array([0, 0])
    assert metrics.nll(p, y) == pytest.approx(-(np.log(0.8) + np.log(0.4)) / 2)
    assert metrics.brier(p, y) == pytest.approx(((0.2**2 + 0.2**2) + (0.6**2 + 0.6**2)) / 2)
    assert metrics.accuracy(p, y) == 0.5


def test_kde_ece_is_small_when_calibrated_and_large_when_overconfident():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(4000, 5)) * 2
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    y = np.array([rng.choice(5, p=row) for row in p])  # labels drawn from p: perfectly calibrated
    over = p**3 / (p**3).sum(1, keepdims=True)
    assert metrics.kde_ece(p, y) < 0.03
    assert metrics.kde_ece(over, y) > 0.1
    assert abs(metrics.kde_ece(over, y) - metrics.ece(over, y)) < 0.03


def test_compute_metrics_reports_percent_and_rejects_nan():
    p = probs_from([0.9, 0.8], [0, 1])
    out = metrics.compute_metrics(p, np.array([0, 1]))
    assert set(out) == set(metrics.METRIC_NAMES)
    assert out["accuracy"] == pytest.approx(100.0)
    assert out["ece"] == pytest.approx(100 * metrics.ece(p, np.array([0, 1])))
    p[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        metrics.compute_metrics(p, np.array([0, 1]))


def test_reliability_bins_count_every_node():
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(300, 4))
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    y = rng.integers(0, 4, 300)
    bins = metrics.reliability_bins(p, y)
    assert bins.count.sum() == 300
    nonempty = bins.count > 0
    weighted_gap = (bins.count[nonempty] * np.abs(bins.accuracy[nonempty] - bins.confidence[nonempty])).sum() / 300
    assert weighted_gap == pytest.approx(metrics.ece(p, y))
