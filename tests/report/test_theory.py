"""Theorem 1 Monte Carlo: the five-scalar reduction is exact, the quadrature is accurate, results are seeded."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, special, stats

from simcalib.report.theory import (
    PAPER_EXAMPLE,
    NoiseDraws,
    estimator_moments,
    gaussian_ece,
    paper_example_row,
    simulate_cell,
    theorem_check,
)


def test_five_scalar_reduction_reproduces_the_full_d_dimensional_estimators():
    rng = np.random.default_rng(0)
    n, d, a = 4, 12, 2.66
    s = (np.sqrt(d * n) / n) ** 0.5
    mu = np.zeros(d)
    mu[0] = np.sqrt(d)  # ||mu||^2 = d, along e_1 (the reduction's frame)
    eps_i, eps_j = s * rng.standard_normal(d), s * rng.standard_normal(d)
    # The scalars the reduction draws, read off these vectors.
    perp_i, perp_j = eps_i[1:] / s, eps_j[1:] / s
    h = perp_j @ perp_i / np.linalg.norm(perp_i)
    noise = NoiseDraws(np.array([eps_i[0] / s]), np.array([eps_j[0] / s]), np.array([perp_i @ perp_i]),
                       np.array([h]), np.array([perp_j @ perp_j - h**2]))
    moments = estimator_moments(noise, n, d, a)
    m_bar = mu + eps_i
    m_hat = mu + (eps_i + a * eps_j) / (1 + a**2)  # the paper's joint estimator with b known
    np.testing.assert_allclose([moments["bar"][0][0], moments["bar"][1][0]], [m_bar @ mu, m_bar @ m_bar])
    np.testing.assert_allclose([moments["hat"][0][0], moments["hat"][1][0]], [m_hat @ mu, m_hat @ m_hat])


@pytest.mark.parametrize("r, loc, scale", [(0.2, 64.0, 72.0), (0.67, 64.0, 39.0), (0.5, 4.0, 4.5), (1.4, 3.0, 0.7),
                                           (-0.3, 10.0, 3.0)])
def test_quadrature_matches_scipy_quad(r, loc, scale):
    def integrand(v):
        return abs(special.expit(2 * r * v) - special.expit(2 * v)) * stats.norm.pdf(v, loc, scale)

    points = sorted({loc - 15 * scale, 0.0, 1.0, 10.0, loc - 3 * scale, loc, loc + 3 * scale, loc + 15 * scale})
    reference = sum(integrate.quad(integrand, lo, hi, limit=500)[0] for lo, hi in zip(points[:-1], points[1:]))
    assert gaussian_ece(np.array([r]), np.array([loc]), np.array([scale]))[0] == pytest.approx(reference, rel=1e-4)


def test_a_perfect_estimator_has_zero_ece():
    assert gaussian_ece(np.array([1.0]), np.array([64.0]), np.array([40.0]))[0] == pytest.approx(0.0, abs=1e-15)


def test_the_papers_example_and_determinism():
    table = theorem_check(n_values=[4], d_values=[64], a_values=[0.25], reps=500, seed=10)
    row = paper_example_row(table)  # the example cell is always included
    assert (row["n"], row["d"], row["a"]) == (PAPER_EXAMPLE["n"], PAPER_EXAMPLE["d"], PAPER_EXAMPLE["a"])
    assert row["p_joint_better_paper"] >= PAPER_EXAMPLE["claimed_lower_bound"]
    weak = table[np.isclose(table["a"], 0.25)].iloc[0]
    assert weak["p_joint_better_paper"] < 0.95  # weak correlation: the joint estimator is not always better
    again = theorem_check(n_values=[4], d_values=[64], a_values=[0.25], reps=500, seed=10)
    assert table.equals(again)
    other = simulate_cell(4, 64, [0.25], reps=500, seed=11)[0]
    assert other["p_joint_better_paper"] != weak["p_joint_better_paper"]
