import math

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


def test_ece_matches_torchmetrics_binary_on_top1_confidence_and_correctness():
    """Top-label ECE is the binary ECE of (top-1 confidence, correct): torchmetrics' binary task, 15 bins, l1."""
    torchmetrics = pytest.importorskip("torchmetrics")
    assert metrics.N_BINS == 15
    for seed in range(3):
        p, y = random_sample(600, 5, 3.0, seed=seed)
        y[: 200] = (p[: 200].argmax(1) + 1) % 5  # a third always wrong: overconfident there
        conf, correct = p.max(1), (p.argmax(1) == y).astype(np.int64)
        ref = torchmetrics.functional.calibration_error(torch.tensor(conf), torch.tensor(correct), task="binary",
                                                        n_bins=15, norm="l1")
        assert metrics.ece(p, y) == pytest.approx(float(ref), abs=1e-6)


def test_smooth_ece_is_relplots_smece_of_the_top1_confidence():
    relplot = pytest.importorskip("relplot")
    p, y = random_sample(500, 4, 3.0, seed=5)
    conf, correct = relplot.multiclass_logits_to_confidences(p, y, probs=True)  # relplot's own top-1 reduction
    assert metrics.smooth_ece(p, y) == pytest.approx(float(relplot.smECE(conf, correct)), abs=1e-12)
    assert metrics.smooth_ece(p, y) < 0.05  # labels drawn from p: calibrated


def test_smooth_ece_of_one_confidence_is_its_gap_to_the_accuracy():
    # every node at confidence 0.9, 6 of 10 right: the smoothed residual is 0.3 everywhere, so smECE = 0.3
    p = probs_from([0.9] * 10, [0] * 10)
    y = np.array([0] * 6 + [1] * 4)
    assert metrics.smooth_ece(p, y) == pytest.approx(0.3, abs=2e-3)
    assert metrics.compute_metrics(p, y)["smece"] == pytest.approx(30.0, abs=0.2)


def test_debiased_ce_subtracts_each_bins_accuracy_variance_hand_computed():
    # two equal-mass bins of four nodes: {0.9 x 4, 1 right} and {0.95 x 4, all right}
    p = probs_from([0.9] * 4 + [0.95] * 4, [0] * 8)
    y = np.array([0, 1, 1, 1, 0, 0, 0, 0])
    low = (0.9 - 0.25) ** 2 - 0.25 * 0.75 / 3  # plug-in squared gap minus acc (1 - acc) / (n_b - 1)
    high = (0.95 - 1.0) ** 2 - 0.0
    assert metrics.debiased_ce(p, y, n_bins=2) == pytest.approx(np.sqrt(0.5 * low + 0.5 * high), abs=1e-12)
    plug_in = np.sqrt(0.5 * (0.9 - 0.25) ** 2 + 0.5 * 0.05**2)
    assert metrics.debiased_ce(p, y, n_bins=2) < plug_in - 0.03  # the correction is there
    # a negative corrected square is clipped at 0: one bin, 2 of 4 right at confidence 0.55
    assert metrics.debiased_ce(probs_from([0.55] * 4, [0] * 4), np.array([0, 0, 1, 1]), n_bins=1) == 0.0


def test_debiased_ce_is_the_packages_top_label_l2_estimate():
    calibration = pytest.importorskip("calibration")
    for seed in range(3):
        p, y = random_sample(800, 5, 2.5, seed=seed)
        over = p**2 / (p**2).sum(1, keepdims=True)
        for probs in (p, over):
            want = calibration.get_calibration_error(probs, y, p=2, debias=True, mode="top-label")
            assert metrics.debiased_ce(probs, y) == pytest.approx(want, abs=1e-12)


def test_signed_ce_is_mean_confidence_minus_accuracy():
    p = probs_from([0.9, 0.8, 0.6, 0.7], [0, 1, 0, 2])
    assert metrics.signed_ce(p, np.array([0, 0, 0, 0])) == pytest.approx(0.75 - 0.5)  # over-confident: positive
    assert metrics.signed_ce(p, np.array([0, 1, 0, 2])) == pytest.approx(0.75 - 1.0)  # under-confident: negative
    assert metrics.compute_metrics(p, np.array([0, 1, 0, 2]))["signed_ce"] == pytest.approx(-25.0)


def test_degree_ece_bins_nodes_by_degree_not_confidence_hand_computed():
    p = probs_from([0.9, 0.6, 0.8, 0.7, 0.5], [0, 0, 0, 0, 0])
    y = np.array([0, 1, 0, 0, 1])  # nodes 0, 2, 3 right
    degree = np.array([1, 7, 2, 3, 1])  # sorted: nodes 0, 4, 2 (degrees 1, 1, 2) | nodes 3, 1 (3, 7)
    assert metrics.degree_bin_index(degree, 2).tolist() == [0, 1, 0, 1, 0]  # ceil(5 / 2) = 3 nodes per bin
    low = abs((0.9 + 0.5 + 0.8) / 3 - 2 / 3)
    high = abs((0.7 + 0.6) / 2 - 1 / 2)
    assert metrics.degree_ece(p, y, degree, n_bins=2) == pytest.approx(3 / 5 * low + 2 / 5 * high)
    # the same two bin sizes by confidence ({0.5, 0.6, 0.7} | {0.8, 0.9}) give another number
    by_confidence = 3 / 5 * abs(0.6 - 1 / 3) + 2 / 5 * abs(0.85 - 1.0)
    assert metrics.degree_ece(p, y, degree, n_bins=2) != pytest.approx(by_confidence)
    # one group of every node: the gap of the means, where the confidence-binned ECE sees each confidence apart
    assert metrics.degree_ece(p, y, degree, n_bins=1) == pytest.approx(abs(0.7 - 0.6))
    assert metrics.ece(p, y) != pytest.approx(metrics.degree_ece(p, y, degree, n_bins=1))
    # ties keep the nodes' order: degrees all equal -> the first three, then the last two
    assert metrics.degree_bin_index(np.ones(5), 2).tolist() == [0, 0, 0, 1, 1]
    assert metrics.DEGREE_BINS == 10 and metrics.degree_bin_index(np.arange(25)[::-1]).max() == 8  # 9 bins of 3


def test_degree_ece_needs_the_degrees_and_is_nan_without_them():
    p, y = random_sample(50)
    degree = np.arange(50) % 7
    assert np.isnan(metrics.compute_metrics(p, y)["degree_ece"])
    assert metrics.compute_metrics(p, y, degree=torch.tensor(degree))["degree_ece"] == pytest.approx(
        100 * metrics.degree_ece(p, y, degree))
    with pytest.raises(ValueError, match=r"expected degree \[N\]"):
        metrics.degree_ece(p, y, degree[:49])


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


# ------------------------------------------------------------------------------------------------------------
# Properties of the binned metrics on any sample (hypothesis)

from hypothesis import example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra.numpy import arrays  # noqa: E402

ANY = settings(deadline=None, max_examples=150)


@st.composite
def samples(draw, max_nodes: int = 60):
    """(probs [N, K], labels [N]): softmax of arbitrary logits, some rows one-hot (confidence exactly 1)."""
    n = draw(st.integers(1, max_nodes))
    k = draw(st.integers(2, 6))
    logits = draw(arrays(np.float64, (n, k), elements=st.floats(-8, 8, allow_nan=False)))
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    one_hot = draw(arrays(np.bool_, (n,)))
    p[one_hot] = np.eye(k)[p[one_hot].argmax(1)]
    labels = draw(arrays(np.int64, (n,), elements=st.integers(0, k - 1)))
    return p, labels


@ANY
@given(samples())
def test_ece_lies_between_zero_and_the_largest_bin_gap(sample):
    p, y = sample
    ece, mce = metrics.ece(p, y), metrics.mce(p, y)
    assert 0.0 <= ece <= mce + 1e-12 <= 1.0 + 1e-12
    assert 0.0 <= metrics.compute_metrics(p, y)["ece"] <= 100.0


@ANY
@given(samples(), st.randoms(use_true_random=False))
def test_binned_metrics_do_not_depend_on_the_order_of_the_nodes(sample, rnd):
    p, y = sample
    order = np.array(rnd.sample(range(len(y)), len(y)))
    for metric in (metrics.ece, metrics.mce, metrics.classwise_ece):
        assert metric(p[order], y[order]) == pytest.approx(metric(p, y), abs=1e-12)


@ANY
@given(st.lists(st.tuples(st.floats(0.34, 1.0), st.integers(1, 40)), min_size=1, max_size=8))
def test_a_sample_calibrated_up_to_rounding_has_an_ece_within_that_rounding(groups):
    """Groups of n nodes at confidence c (on class 0, above the other two classes' share) with round(c * n) of
    them right: ECE <= sum_g |right_g - c_g n_g| / N."""
    k = 3
    probs, labels, slack = [], [], 0.0
    for c, n in groups:
        right = round(c * n)
        slack += abs(right - c * n)
        probs += [probs_from([c], [0], k)[0]] * n
        labels += [0] * right + [1] * (n - right)
    total = sum(n for _, n in groups)
    assert metrics.ece(np.array(probs), np.array(labels)) <= slack / total + 1e-9


def test_every_edge_of_the_studys_fifteen_bins_goes_to_the_bin_below():
    edges = np.arange(1, metrics.N_BINS + 1) / metrics.N_BINS
    assert metrics.bin_index(edges).tolist() == list(range(metrics.N_BINS))
    assert metrics.bin_index(edges[:-1] + 1e-9).tolist() == list(range(1, metrics.N_BINS))


@ANY
@given(st.integers(1, 60), st.floats(0.0, 1.0))
def test_a_confidence_goes_to_the_bin_that_holds_it_and_one_to_the_last(n_bins, c):
    """Bin m-1 holds (m-1)/M < c <= m/M, in exact arithmetic, for c not within float rounding of an edge."""
    from fractions import Fraction

    exact = Fraction(c) * n_bins
    if c > 0 and abs(exact - round(exact)) < Fraction(1, 10**9):
        return  # on an edge: c * M may round to either side (the study's 15 edges are checked above)
    want = min(max(math.ceil(exact) - 1, 0), n_bins - 1)
    assert metrics.bin_index(np.array([c]), n_bins)[0] == want
    assert metrics.bin_index(np.array([1.0, 0.0]), n_bins).tolist() == [n_bins - 1, 0]


@ANY
@given(st.integers(1, 30), st.integers(2, 5))
def test_confident_and_right_everywhere_is_perfectly_calibrated(n, k):
    p = np.eye(k)[np.arange(n) % k]  # confidence exactly 1
    y = np.arange(n) % k
    assert metrics.ece(p, y) == 0.0 and metrics.mce(p, y) == 0.0
    assert metrics.ece(p, (y + 1) % k) == 1.0  # confident and always wrong: the largest ECE


# ------------------------------------------------------------------------------------------------------------
# The metrics against references written out directly, and what they accept


def random_sample(n: int = 400, k: int = 4, scale: float = 2.0, seed: int = 0):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, k)) * scale
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    return p, np.array([rng.choice(k, p=row) for row in p])  # calibrated labels: gaps of both signs


def binned_reference(conf: np.ndarray, hit: np.ndarray, n_bins: int) -> tuple[float, float]:
    """(ECE, MCE) by the definition: bin m holds m/M < c <= (m+1)/M (bin 0 also c = 0), gaps weighted by counts."""
    total, largest = 0.0, 0.0
    for m in range(n_bins):
        members = (conf > m / n_bins) & (conf <= (m + 1) / n_bins) | ((m == 0) & (conf <= 0))
        if members.any():
            gap = abs(hit[members].mean() - conf[members].mean())
            total += members.sum() / len(conf) * gap
            largest = max(largest, gap)
    return total, largest


@ANY
@given(samples(max_nodes=80), st.sampled_from([5, 10, 15]))
@example((probs_from([0.9, 0.97, 0.5], [0, 0, 1], k=2), np.array([1, 0, 1])), 15)  # the top two bins differ
def test_ece_mce_and_classwise_ece_follow_their_definitions(sample, n_bins):
    p, y = sample
    conf, hit = p.max(1), (p.argmax(1) == y).astype(float)
    ece, mce = binned_reference(conf, hit, n_bins)
    assert metrics.ece(p, y, n_bins) == pytest.approx(ece, abs=1e-12)
    assert metrics.mce(p, y, n_bins) == pytest.approx(mce, abs=1e-12)
    classwise = np.mean([binned_reference(p[:, c], (y == c).astype(float), n_bins)[0] for c in range(p.shape[1])])
    assert metrics.classwise_ece(p, y, n_bins) == pytest.approx(classwise, abs=1e-12)


def kde_ece_reference(p: np.ndarray, y: np.ndarray, grid_size: int = 2048) -> float:
    """Top-label KDE-ECE with the triweight kernel evaluated exactly at every grid point (no binning), samples
    reflected at 0 and 1, bandwidth 1.06 std N^(-1/5): integral |c - acc(c)| f(c) dc / integral f."""
    conf, correct = p.max(1), p.argmax(1) == y
    bandwidth = max(1.06 * conf.std() * len(conf) ** (-0.2), 1e-3)
    grid = np.linspace(0.0, 1.0, grid_size)

    def kernel_sums(samples):
        u = (grid[:, None] - np.concatenate([samples, -samples, 2.0 - samples])[None, :]) / bandwidth
        return np.where(np.abs(u) <= 1, (1 - u**2) ** 3, 0.0).sum(1)

    f, f_correct = kernel_sums(conf), kernel_sums(conf[correct])
    acc = np.divide(f_correct, f, out=np.zeros_like(f), where=f > 0)
    return float(np.trapezoid(np.abs(grid - acc) * f, grid) / np.trapezoid(f, grid))


@pytest.mark.parametrize("case", ["spread", "overconfident", "all-wrong", "two-nodes"])
def test_kde_ece_is_the_kernel_estimate_written_out(case):
    p, y = random_sample(300, 4, 2.0, seed=3)
    if case == "overconfident":  # most confidences near 1: the reflection at 1 matters
        p, y = random_sample(300, 3, 8.0, seed=4)
    elif case == "all-wrong":  # no correct node: acc(c) = 0 everywhere
        y = (p.argmax(1) + 1) % p.shape[1]
    elif case == "two-nodes":
        p, y = probs_from([0.6, 0.9], [0, 1]), np.array([0, 0])
    assert metrics.kde_ece(p, y) == pytest.approx(kde_ece_reference(p, y), abs=1e-5)  # binning error ~1e-6


def test_torch_tensors_and_any_number_types_give_the_float64_numbers():
    p, y = random_sample()
    want = metrics.compute_metrics(p, y)  # degree_ece NaN (no degrees): assert_equal counts NaN == NaN
    np.testing.assert_equal(metrics.compute_metrics(torch.tensor(p), torch.tensor(y)), want)
    np.testing.assert_equal(metrics.compute_metrics(p, y.astype(np.float64)), want)  # labels from a CSV: floats
    p32 = p.astype(np.float32)
    np.testing.assert_equal(metrics.compute_metrics(p32, y), metrics.compute_metrics(p32.astype(np.float64), y))


def test_compute_metrics_passes_the_bin_count_on_and_keeps_nll_and_brier_as_they_are():
    p, y = random_sample()
    out = metrics.compute_metrics(p, y, n_bins=5)
    for name in ("ece", "ace", "mce", "classwise_ece"):
        assert out[name] == pytest.approx(100 * getattr(metrics, name)(p, y, 5)), name
        assert out[name] != pytest.approx(100 * getattr(metrics, name)(p, y)), name  # 5 bins are not 15
    assert out["nll"] == metrics.nll(p, y) and out["brier"] == metrics.brier(p, y)
    bins = metrics.reliability_bins(p, y, 5)
    assert bins.count.shape == (5,) and bins.count.dtype == np.int64 and bins.count.sum() == len(y)
    np.testing.assert_array_equal(bins.edges, np.linspace(0, 1, 6))


def test_malformed_inputs_are_refused_with_the_reason():
    p, y = random_sample(10)
    with pytest.raises(ValueError, match=r"expected probs \[N, K\] and labels \[N\], got \(10, 4\) and \(9,\)"):
        metrics.ece(p, y[:9])
    with pytest.raises(ValueError, match=r"expected probs \[N, K\]"):
        metrics.ece(p[:, 0], y)
    p[0, 0] = np.inf
    with pytest.raises(ValueError, match=r"^probabilities contain NaN or infinite values$"):
        metrics.compute_metrics(p, y)


def test_edge_cases_of_the_binned_metrics_and_nll():
    assert metrics.bin_index(np.array([1.0 + 1e-7, 1.0])).tolist() == [14, 14]  # float32 rounding above 1
    assert metrics.mce(np.zeros((0, 3)), np.zeros(0, dtype=np.int64)) == 0.0  # no nodes, no gap
    p = np.array([[1.0, 0.0], [0.5, 0.5]])
    assert metrics.nll(p, np.array([1, 0])) == pytest.approx((-np.log(1e-12) - np.log(0.5)) / 2)  # finite


def test_empty_bins_and_empty_densities_raise_no_warning():
    import warnings

    p = probs_from([0.95, 0.99, 0.97], [0, 1, 0])  # most bins empty
    y = np.array([1, 0, 1])  # no node right: the correct-node density is empty
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        metrics.reliability_bins(p, y)
        metrics.kde_ece(p, y)


def test_ace_deals_tied_confidences_to_its_bins_in_node_order():
    """A stable sort: the value does not depend on how a sort orders ties (NumPy's default sort reorders them)."""
    conf = np.array([0.6, 0.8] * 30)  # interleaved ties
    p = probs_from(conf, [0] * 60, k=2)
    y = np.zeros(60, dtype=np.int64)
    y[np.flatnonzero(conf == 0.8)[15:]] = 1  # of the nodes at 0.8, the first 15 right, the last 15 wrong
    # four bins of 15: the 0.6 nodes (all right) fill two, then the 0.8 nodes in node order
    assert metrics.ace(p, y, n_bins=4) == pytest.approx((15 * 0.4 + 15 * 0.4 + 15 * 0.2 + 15 * 0.8) / 60)
