"""Split-conformal sets (simcalib.conformal): the scores against literal implementations of the papers' definitions
and against torchcp's numbers on a small case, the finite-sample quantile, coverage on exchangeable data within its
exact band (and a quantile read from the test nodes caught), set sizes nested in alpha, the calibration-fold
division."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from scipy import stats

from simcalib import conformal as cp
from simcalib.errors import ConfigError, UnknownNameError

# ------------------------------------------------------------------------------------------------------------
# Literal references: one node and one label at a time, as the papers write the scores.


def reference_aps(probs: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Romano et al. (2020): the mass of the labels ranked at or above y, minus u * pi_y."""
    n, c = probs.shape
    out = np.zeros((n, c))
    for v in range(n):
        order = sorted(range(c), key=lambda label: -probs[v, label])  # stable: ties by label index
        for y in range(c):
            rank = order.index(y) + 1
            out[v, y] = sum(probs[v, order[j]] for j in range(rank)) - u[v, y] * probs[v, y]
    return out


def reference_raps(probs: np.ndarray, u: np.ndarray, penalty: float, k_reg: int) -> np.ndarray:
    """Angelopoulos et al. (2021): APS + penalty * max(rank - k_reg, 0)."""
    out = reference_aps(probs, u)
    n, c = probs.shape
    for v in range(n):
        order = sorted(range(c), key=lambda label: -probs[v, label])
        for y in range(c):
            out[v, y] += penalty * max(order.index(y) + 1 - k_reg, 0)
    return out


def reference_daps(scores: np.ndarray, edges: list[tuple[int, int]], diffusion: float) -> np.ndarray:
    """Zargarbashi et al. (2023): (1 - lambda) s_v + lambda * mean of s_u over the edges u -> v."""
    out = np.zeros_like(scores)
    for v in range(len(scores)):
        neighbours = [u for u, w in edges if w == v]
        if not neighbours:
            out[v] = scores[v]
            continue
        mean = sum(scores[u] for u in neighbours) / len(neighbours)
        out[v] = (1 - diffusion) * scores[v] + diffusion * mean
    return out


def reference_quantile(values: list[float], alpha: float) -> float:
    """The smallest q with #{s <= q} >= (n + 1)(1 - alpha) (exact arithmetic), inf when there is none."""
    need = (len(values) + 1) * (1 - Fraction(str(alpha)))
    for q in sorted(values):
        if sum(1 for s in values if s <= q) >= need:
            return q
    return math.inf


def _case(seed: int = 0, n: int = 25, c: int = 5):
    rng = np.random.default_rng(seed)
    probs = rng.dirichlet(np.ones(c) * 0.7, size=n)
    probs[0] = [0.4, 0.4, 0.1, 0.05, 0.05]  # ties
    probs[1] = [0.2] * 5
    edges = [(int(a), int(b)) for a, b in rng.integers(0, n, (60, 2)) if a != b]
    edges += [(b, a) for a, b in edges]
    edges = [(a, b) for a, b in edges if b != 3]  # node 3 receives no edge
    return probs, edges


def _uniform(seed: int, shape) -> np.ndarray:  # the documented draw of the randomised scores
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).numpy()


@pytest.mark.parametrize("randomised", [False, True])
def test_scores_equal_the_literal_definitions(randomised):
    probs, edges = _case()
    u = _uniform(7, probs.shape) if randomised else np.zeros(probs.shape)
    edge_index = torch.tensor(edges).T
    aps = cp.conformal_scores(probs, "APS", seed=7, randomised=randomised).numpy()
    raps = cp.conformal_scores(probs, "raps", seed=7, randomised=randomised, penalty=0.05, k_reg=2).numpy()
    daps = cp.conformal_scores(probs, "DAPS", edge_index, seed=7, randomised=randomised, diffusion=0.3).numpy()
    np.testing.assert_allclose(aps, reference_aps(probs, u), atol=1e-12)
    np.testing.assert_allclose(raps, reference_raps(probs, u, 0.05, 2), atol=1e-12)
    np.testing.assert_allclose(daps, reference_daps(reference_aps(probs, u), edges, 0.3), atol=1e-12)
    assert not np.allclose(daps, aps)  # the diffusion changes the scores


def test_scores_equal_torchcps_on_a_small_case():
    """Values printed by torchcp 1.2.1 (APS, RAPS with penalty 0.1 and kreg 1, DAPS with neigh_coef 0.3 on a path
    0-1-2-3; all with randomized=False, fed the log-probabilities), computed outside this project's environment."""
    probs = torch.tensor([[0.1, 0.4, 0.5], [0.3, 0.3, 0.4], [0.6, 0.3, 0.1], [0.2, 0.2, 0.6]], dtype=torch.float64)
    torchcp_aps = [[1.0, 0.9, 0.5], [0.7, 1.0, 0.4], [0.6, 0.9, 1.0], [0.8, 1.0, 0.6]]
    torchcp_raps = [[1.2, 1.0, 0.5], [0.8, 1.2, 0.4], [0.6, 1.0, 1.2], [0.9, 1.2, 0.6]]
    torchcp_daps = [[0.91, 0.93, 0.47], [0.73, 0.97, 0.505], [0.645, 0.93, 0.85], [0.74, 0.97, 0.72]]
    path = torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])
    np.testing.assert_allclose(cp.aps_scores(probs, randomised=False), torchcp_aps, atol=1e-6)
    np.testing.assert_allclose(cp.raps_scores(probs, 0.1, 1, randomised=False), torchcp_raps, atol=1e-6)
    np.testing.assert_allclose(cp.conformal_scores(probs, "DAPS", path, randomised=False, diffusion=0.3),
                               torchcp_daps, atol=1e-6)


@pytest.mark.parametrize("n", [1, 9, 10, 19, 99, 100, 1000])
@pytest.mark.parametrize("alpha", [0.1, 0.05, 0.3])
def test_quantile_is_the_finite_sample_order_statistic(n, alpha):
    values = list(np.random.default_rng(n).random(n))
    assert cp.conformal_quantile(values, alpha) == reference_quantile(values, alpha)
    assert cp.quantile_rank(n, alpha) == math.ceil(Fraction(n + 1) * (1 - Fraction(str(alpha))))


def test_quantile_rank_has_no_float_rounding():
    assert cp.quantile_rank(99, 0.1) == 90  # (99 + 1) * (1 - 0.1) is 90.00000000000001 in floats
    assert cp.conformal_quantile([0.5] * 5, 0.1) == math.inf  # ceil(6 * 0.9) = 6 > 5: every label
    with pytest.raises(ConfigError, match="alpha"):
        cp.quantile_rank(10, 1.0)


# ------------------------------------------------------------------------------------------------------------
# Coverage on exchangeable data

N_CAL, N_TEST, REPETITIONS, ALPHA = 100, 1000, 300, 0.1


def coverage_band_failures(covered: np.ndarray, n_cal: int, n_test: int, alpha: float, z: float = 4.0) -> list[str]:
    """Where R repetitions' covered counts leave the exact law of split conformal with continuous scores.

    Given the quantile nodes, the coverage of a fresh node is Beta(k, n + 1 - k), k = ceil((n + 1)(1 - alpha));
    the covered count of n_test test nodes is then BetaBinomial(n_test, k, n + 1 - k). Two checks, each at z
    standard deviations: the mean count, and the number of repetitions below 1 - alpha (Binomial(R, p0)). A
    quantile read from the test nodes always covers at least ceil((n_test + 1)(1 - alpha)) of them: the
    second check sees no repetition below 1 - alpha where 45% are expected.
    """
    k = math.ceil((n_cal + 1) * (1 - Fraction(str(alpha))))  # computed here, not by the code under test
    law = stats.betabinom(n_test, k, n_cal + 1 - k)
    repetitions = len(covered)
    failures = []
    mean_sd = law.std() / math.sqrt(repetitions)
    if abs(covered.mean() - law.mean()) > z * mean_sd:
        failures.append(f"mean covered {covered.mean():.1f} vs {law.mean():.1f} +- {z * mean_sd:.1f}")
    threshold = math.ceil((1 - alpha) * n_test)  # a count below it is coverage below 1 - alpha
    p0 = law.cdf(threshold - 1)
    below = int((covered < threshold).sum())
    band = z * math.sqrt(repetitions * p0 * (1 - p0))
    if abs(below - repetitions * p0) > band:
        failures.append(f"{below} repetitions below 1 - alpha vs {repetitions * p0:.1f} +- {band:.1f}")
    return failures


def _exchangeable_repetition(rng: np.random.Generator, score: str, leak: bool) -> int:
    """One draw of n_cal + n_test exchangeable nodes (Dirichlet probabilities, labels drawn from a tempered version
    of them, an Erdos-Renyi graph); the covered count of the test nodes."""
    n, c = N_CAL + N_TEST, 6
    probs = rng.dirichlet(np.ones(c), size=n)
    tempered = probs ** 0.5 / (probs ** 0.5).sum(1, keepdims=True)  # the model is miscalibrated: still covered
    labels = torch.from_numpy((rng.random((n, 1)) > tempered.cumsum(1)).sum(1).clip(max=c - 1))
    edges = rng.integers(0, n, (2, 4 * n))
    scores = cp.conformal_scores(probs, score, torch.from_numpy(edges), seed=int(rng.integers(2**31)))
    order = rng.permutation(n)
    quantile_idx, test_idx = order[:N_CAL], order[N_CAL:]
    if leak:  # the quantile read from the test nodes' scores at their labels
        threshold = cp.conformal_quantile(scores[test_idx, labels[test_idx]], ALPHA)
        sets = cp.prediction_sets(scores[test_idx], threshold)
        return int(sets[torch.arange(N_TEST), labels[test_idx]].sum())
    result = cp.split_conformal(scores, labels, quantile_idx, test_idx, ALPHA)
    return int(round(result.metrics["coverage"] * N_TEST))


@pytest.mark.parametrize("score", ["APS", "RAPS", "DAPS"])
def test_coverage_on_exchangeable_data_is_within_its_exact_band(score):
    rng = np.random.default_rng({"APS": 1, "RAPS": 2, "DAPS": 3}[score])
    covered = np.array([_exchangeable_repetition(rng, score, leak=False) for _ in range(REPETITIONS)])
    assert coverage_band_failures(covered, N_CAL, N_TEST, ALPHA) == []


def test_a_quantile_read_from_the_test_nodes_fails_the_coverage_band():
    rng = np.random.default_rng(4)
    covered = np.array([_exchangeable_repetition(rng, "APS", leak=True) for _ in range(REPETITIONS)])
    failures = coverage_band_failures(covered, N_CAL, N_TEST, ALPHA)
    assert any("below 1 - alpha" in failure for failure in failures), failures


def test_quantile_nodes_among_the_test_nodes_are_refused():
    probs, _ = _case()
    scores = cp.aps_scores(probs, seed=0)
    labels = torch.zeros(len(probs), dtype=torch.long)
    with pytest.raises(ConfigError, match="quantile node\\(s\\) are also test nodes"):
        cp.split_conformal(scores, labels, np.arange(0, 12), np.arange(10, 25), 0.1)


# ------------------------------------------------------------------------------------------------------------
# Sets, metrics, columns


@pytest.mark.parametrize("score", ["APS", "RAPS", "DAPS"])
def test_sets_are_nested_and_sizes_fall_as_alpha_grows(score):
    probs, edges = _case(n=200)
    labels = torch.from_numpy(probs.argmax(1))
    scores = cp.conformal_scores(probs, score, torch.tensor(edges).T, seed=3)
    alphas = [0.01, 0.05, 0.1, 0.2, 0.3, 0.5]
    results = [cp.split_conformal(scores, labels, np.arange(100), np.arange(100, 200), a) for a in alphas]
    for wider, narrower in zip(results, results[1:]):
        assert wider.threshold >= narrower.threshold
        assert bool((narrower.sets <= wider.sets).all())  # each set within the set of the smaller alpha
    sizes = [r.metrics["set_size"] for r in results]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] > sizes[-1]


def test_set_metrics_count_coverage_size_singletons_and_empty_sets():
    sets = torch.tensor([[1, 0, 0], [0, 1, 1], [0, 0, 0], [0, 1, 0]], dtype=torch.bool)
    labels = torch.tensor([0, 2, 1, 0])
    assert cp.set_metrics(sets, labels) == {"coverage": 0.5, "set_size": 1.0, "singleton_hit": 0.25, "empty": 0.25}


def test_conformal_metrics_gives_a_column_per_score_metric_and_alpha():
    probs, edges = _case(n=80)
    labels = torch.from_numpy(probs.argmax(1))
    columns = cp.conformal_metrics(probs, labels, np.arange(40), np.arange(40, 80), torch.tensor(edges).T, seed=1)
    assert len(columns) == 3 * 2 * 5
    assert 0 <= columns["DAPS_coverage@0.05"] <= 1 and columns["RAPS_set_size@0.1"] >= 0
    again = cp.conformal_metrics(probs, labels, np.arange(40), np.arange(40, 80), torch.tensor(edges).T, seed=1)
    assert again == columns  # seeded


def test_bad_input_is_refused_with_one_line():
    probs, _ = _case()
    with pytest.raises(UnknownNameError, match="valid conformal scores"):
        cp.conformal_scores(probs, "LAC")
    with pytest.raises(ConfigError, match="edge_index"):
        cp.conformal_scores(probs, "DAPS", seed=0)
    with pytest.raises(ConfigError, match="need a seed"):
        cp.aps_scores(probs)
    with pytest.raises(ConfigError, match=r"\[N, C\]"):
        cp.aps_scores(probs[0], randomised=False)
    with pytest.raises(ConfigError, match="another graph"):
        cp.diffuse_scores(cp.aps_scores(probs, randomised=False), torch.tensor([[0], [99]]))


# ------------------------------------------------------------------------------------------------------------
# The calibration fold's division


def test_the_calibration_fold_is_divided_per_class_and_from_the_seed():
    labels = np.repeat(np.arange(4), [30, 21, 10, 3])
    cal = np.random.default_rng(0).permutation(len(labels))[:50]
    fit, quantile = cp.conformal_split(cal, labels, seed=cp.conformal_split_seed(123))
    assert np.array_equal(np.sort(np.concatenate([fit, quantile])), np.sort(cal))
    assert len(np.intersect1d(fit, quantile)) == 0
    for c in np.unique(labels[cal]):
        n_c = int((labels[cal] == c).sum())
        assert int((labels[quantile] == c).sum()) == int(np.floor(0.5 * n_c + 0.5))
    again = cp.conformal_split(cal, labels, seed=cp.conformal_split_seed(123))
    assert all(np.array_equal(a, b) for a, b in zip((fit, quantile), again))
    other = cp.conformal_split(cal, labels, seed=cp.conformal_split_seed(124))
    assert not np.array_equal(quantile, other[1])
    assert cp.conformal_split_seed(123) == cp.conformal_split_seed(123) != cp.conformal_split_seed(123, 0.3)
    with pytest.raises(ConfigError, match="empty part"):
        cp.conformal_split(np.array([0]), labels, seed=0)
