"""simcalib.analysis.figure_bins: what the figures keep of one run's test predictions, checked against direct computations."""

from __future__ import annotations

import numpy as np
import pytest

from simcalib.analysis.figure_bins import HIST_BINS, from_json, pool, summarise, to_json
from simcalib.metrics import ece, reliability_bins


def _run(seed: int, n: int = 403, k: int = 4):
    rng = np.random.default_rng(seed)
    probs = rng.dirichlet(np.ones(k) * 0.7, n)
    labels = rng.integers(0, k, n)
    return probs, labels, rng.gamma(2.0, 1.0, n)


def test_bins_give_the_ece_and_reliability_bins_of_the_predictions():
    probs, labels, distance = _run(0)
    bins = summarise(probs, labels, distance)
    assert bins.ece() == pytest.approx(100 * ece(probs, labels), abs=1e-9)
    count, conf, correct = bins.reliability()
    direct = reliability_bins(probs, labels)
    np.testing.assert_array_equal(count, direct.count)
    filled = count > 0
    np.testing.assert_allclose(conf[filled] / count[filled], direct.confidence[filled])
    np.testing.assert_allclose(correct[filled] / count[filled], direct.accuracy[filled])
    np.testing.assert_array_equal(bins.hist, np.histogram(probs.max(1), bins=HIST_BINS, range=(0, 1))[0])


def test_distance_groups_are_equal_sized_by_rank_with_their_own_ece():
    probs, labels, distance = _run(1)
    bins = summarise(probs, labels, distance, groups=5)
    sizes = bins.count.sum(1)
    assert sizes.max() - sizes.min() <= 1 and sizes.sum() == len(labels)
    order = np.argsort(distance, kind="stable")
    closest = order[: int(sizes[0])]
    assert bins.distance[0] == pytest.approx(distance[closest].mean())
    assert bins.ece(0) == pytest.approx(100 * ece(probs[closest], labels[closest]), abs=1e-9)
    assert np.all(np.diff(bins.distance) > 0)
    assert summarise(probs, labels).count.shape[0] == 1  # without distances: one group


def test_json_round_trip_and_pooling_over_runs():
    runs = [summarise(*_run(seed)) for seed in range(3)]
    back = [from_json(to_json(b)) for b in runs]
    for a, b in zip(runs, back):
        np.testing.assert_array_equal(a.count, b.count)
        np.testing.assert_allclose(a.confidence, b.confidence, atol=1e-6)
        np.testing.assert_allclose(a.distance, b.distance, rtol=1e-5)
    pooled = pool(back)
    probs, labels = (np.concatenate(parts) for parts in zip(*[_run(seed)[:2] for seed in range(3)]))
    assert pooled.runs == 3 and pooled.nodes == len(labels)
    assert pooled.ece() == pytest.approx(100 * ece(probs, labels), abs=1e-4)
    assert pool([]) is None


def test_feature_temperatures_are_group_means_kept_through_json_and_pooled_over_the_runs_that_have_them():
    probs, labels, distance = _run(4)
    t_feat = 0.5 + distance  # grows with the distance: group means must grow too
    bins = summarise(probs, labels, distance, t_feat=t_feat)
    closest = np.argsort(distance, kind="stable")[: int(bins.count[0].sum())]
    assert bins.t_feat[0] == pytest.approx(t_feat[closest].mean())
    assert np.all(np.diff(bins.t_feat) > 0) and bins.t_feat_runs == 1
    back = from_json(to_json(bins))
    np.testing.assert_allclose(back.t_feat, bins.t_feat, rtol=1e-5)
    without = from_json(to_json(summarise(*_run(5))))
    assert without.t_feat is None and without.t_feat_runs == 0  # rows without it read as not recorded
    other = summarise(*_run(6), t_feat=np.full(len(labels), 2.0))
    pooled = pool([back, without, other])
    assert pooled.runs == 3 and pooled.t_feat_runs == 2
    np.testing.assert_allclose(pooled.t_feat, (back.t_feat + 2.0) / 2)


@pytest.mark.parametrize("text", ["{", '{"v": 99}', '{"v": 1, "count": [[1]]}', "[]"])
def test_anything_else_is_refused_by_name(text):
    with pytest.raises(ValueError, match="not a figure_bins value"):
        from_json(text)
