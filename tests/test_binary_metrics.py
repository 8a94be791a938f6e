"""Metrics of p(y = 1) on binary graphs, against hand computations and scikit-learn."""

import numpy as np
import pytest
from sklearn.metrics import brier_score_loss, roc_auc_score

from simcalib import metrics


def _binary(p1):
    p1 = np.asarray(p1, dtype=np.float64)
    return np.stack([1 - p1, p1], axis=1)


def test_positive_ece_by_hand():
    # p(y=1) = 0.05, 0.05, 0.05, 0.05 (bin 1), 0.5, 0.5 (bin 8), 0.9 (bin 14)
    p = _binary([0.05, 0.05, 0.05, 0.05, 0.5, 0.5, 0.9])
    y = np.array([0, 0, 0, 1, 1, 1, 0])
    # bins: |0.05 - 1/4| * 4, |0.5 - 1| * 2, |0.9 - 0| * 1, over 7 nodes
    want = (0.2 * 4 + 0.5 * 2 + 0.9 * 1) / 7
    assert metrics.positive_ece(p, y) == pytest.approx(want, abs=1e-12)
    # 0.12 and 0.18 lie in bins 2 and 3 of 15 (in one bin of 10): (|0.12 - 1| + |0.18 - 0|) / 2
    assert metrics.positive_ece(_binary([0.12, 0.18]), np.array([1, 0])) == pytest.approx(0.53, abs=1e-12)


def test_positive_ece_scores_a_majority_predictor_by_its_positive_rate_where_top_label_ece_is_small():
    rng = np.random.default_rng(0)
    y = (rng.random(5000) < 0.2).astype(np.int64)
    p = _binary(np.full(5000, 0.02))  # predicts class 0 with confidence 0.98
    top = metrics.ece(p, y)
    assert top == pytest.approx(abs(0.98 - (y == 0).mean()), abs=1e-12)
    assert metrics.positive_ece(p, y) == pytest.approx(abs(0.02 - y.mean()), abs=1e-12)
    assert metrics.roc_auc(p, y) == 0.5  # one score for every node: all ties


def test_positive_ece_equals_the_classwise_ece_on_two_classes_off_bin_edges():
    rng = np.random.default_rng(1)
    p1 = rng.random(2000)
    y = (rng.random(2000) < p1 ** 2).astype(np.int64)
    p = _binary(p1)
    assert metrics.positive_ece(p, y) == pytest.approx(metrics.classwise_ece(p, y), abs=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_roc_auc_matches_scikit_learn_with_ties(seed):
    rng = np.random.default_rng(seed)
    p1 = np.round(rng.random(300), 1)  # many ties
    y = (rng.random(300) < 0.3 + 0.4 * p1).astype(np.int64)
    assert metrics.roc_auc(_binary(p1), y) == pytest.approx(roc_auc_score(y, p1), abs=1e-12)


def test_roc_auc_by_hand_and_nan_for_one_class():
    p = _binary([0.1, 0.4, 0.35, 0.8])
    y = np.array([0, 0, 1, 1])
    # positive pairs (pos, neg): (0.35 > 0.1), (0.35 < 0.4), (0.8 > 0.1), (0.8 > 0.4): 3 of 4
    assert metrics.roc_auc(p, y) == pytest.approx(0.75)
    assert np.isnan(metrics.roc_auc(p, np.zeros(4, dtype=np.int64)))


def test_brier_on_two_classes_is_twice_scikit_learns_binary_brier():
    rng = np.random.default_rng(2)
    p1 = rng.random(500)
    y = (rng.random(500) < p1).astype(np.int64)
    assert metrics.brier(_binary(p1), y) == pytest.approx(2 * brier_score_loss(y, p1), rel=1e-12)


def test_binary_columns_are_empty_for_more_classes_and_in_percent_for_two():
    p3 = np.array([[0.7, 0.2, 0.1], [0.2, 0.5, 0.3]])
    out = metrics.compute_metrics(p3, np.array([0, 2]))
    assert all(np.isnan(out[m]) for m in metrics.BINARY_METRIC_NAMES)
    p = _binary([0.1, 0.4, 0.35, 0.8])
    y = np.array([0, 0, 1, 1])
    out = metrics.compute_metrics(p, y)
    assert out["roc_auc"] == pytest.approx(75.0) and out["positive_ece"] == pytest.approx(100 * metrics.positive_ece(p, y))
    with pytest.raises(ValueError, match="needs 2 classes"):
        metrics.positive_ece(p3, np.array([0, 2]))
