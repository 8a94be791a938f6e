"""Dirichlet, IRM, Spline and OrderInvariant against float64 NumPy or hand-computed references (GETS:
test_gets.py).

The properties every registered calibrator must have (argmax kept where claimed, poisoned test labels give
an identical fit, same seed same fit, node permutation) run on these five in test_graph_calibrators.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from graph_fixtures import single_thread, tiny_graph

from simcalib.calibrators import (
    IRM,
    CalibrationGraph,
    Dirichlet,
    OrderInvariant,
    Spline,
    build_calibrator,
)
from simcalib.calibrators.training import fit_nll
from simcalib.errors import ConfigError
from simcalib.seeding import seed_everything

pytestmark = pytest.mark.usefixtures(single_thread.__name__)

EXTRA = ["Dirichlet", "IRM", "Spline", "OrderInvariant", "GETS"]


def overconfident_graph(n: int = 900, k: int = 4, seed: int = 0) -> CalibrationGraph:
    """Labels drawn from softmax(z / 2): the logits are overconfident; 300 calibration nodes."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, k, generator=g) * 3
    y = torch.multinomial(torch.softmax(logits / 2, -1), 1, generator=g).squeeze(1)
    edges = torch.stack([torch.arange(n - 1), torch.arange(1, n)])
    perm = torch.randperm(n, generator=g)
    return CalibrationGraph.from_run(logits, torch.randn(n, 5, generator=g), torch.cat([edges, edges.flip(0)], 1),
                                     y, perm[:300], perm[300:600])


def test_the_five_are_registered_with_their_argmax_flags():
    flags = {name: build_calibrator(name, 3).accuracy_preserving for name in EXTRA}
    assert flags == {"Dirichlet": False, "IRM": True, "Spline": True, "OrderInvariant": True, "GETS": False}


# ------------------------------------------------------------------------------------------------ IRM


def pool_adjacent_violators(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares non-decreasing fit: (distinct x ascending, fitted value at each), ties in x averaged."""
    xs, inverse = np.unique(x, return_inverse=True)
    weights = np.bincount(inverse).astype(float)
    means = np.bincount(inverse, weights=y) / weights
    blocks = []  # [mean, weight, count of distinct x]
    for mean, weight in zip(means, weights):
        blocks.append([mean, weight, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, w2, c2 = blocks.pop()
            m1, w1, c1 = blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, c1 + c2])
    return xs, np.concatenate([[m] * c for m, _, c in blocks])


def test_irm_matches_a_numpy_pool_adjacent_violators_reference():
    graph = overconfident_graph()
    model = IRM(graph.num_classes).fit(graph)
    probs = torch.softmax(graph.logits.double(), -1).numpy()
    cal = graph.cal_idx.numpy()
    indicators = np.eye(graph.num_classes)[graph.labels[cal].numpy()]
    xs, fitted = pool_adjacent_violators(probs[cal].ravel(), indicators.ravel())
    mapped = np.interp(probs, xs, fitted) + 1e-9 * probs  # np.interp is constant beyond the ends
    expected = mapped / mapped.sum(1, keepdims=True)
    got = model.predict_proba(graph).double().numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)


def test_irm_two_nodes_by_hand():
    # calibration pairs (p, indicator): (0.8, 1), (0.2, 0) and (0.6, 0), (0.4, 1): PAV pools 0.4 and 0.6 to 0.5
    logits = torch.log(torch.tensor([[0.8, 0.2], [0.4, 0.6], [0.7, 0.3]]))
    graph = CalibrationGraph.from_run(logits, torch.zeros(3, 1), torch.zeros(2, 0, dtype=torch.long),
                                      torch.tensor([0, 0, 1]), torch.tensor([], dtype=torch.long), torch.tensor([0, 1]))
    model = IRM(2).fit(graph)
    # g(0.2) = 0, g(0.4) = g(0.6) = 0.5, g(0.8) = 1; the third node: g(0.7) = 0.75, g(0.3) = 0.25 (linear)
    expected = torch.tensor([0.75 + 0.7e-9, 0.25 + 0.3e-9], dtype=torch.float64)
    got = model.predict_proba(graph)[2].double()
    assert torch.allclose(got, expected / expected.sum(), atol=1e-7)


# --------------------------------------------------------------------------------------------- Spline


def natural_spline_design(knots: np.ndarray, x: np.ndarray, derivative: int = 0) -> np.ndarray:
    """The truncated-power basis of natural cubic splines (Hastie et al., ESL eq. 5.4-5.5), or its derivative."""
    def d(k):
        last = knots[-1]
        if derivative == 0:
            return (np.clip(x - knots[k], 0, None) ** 3 - np.clip(x - last, 0, None) ** 3) / (last - knots[k])
        return 3 * (np.clip(x - knots[k], 0, None) ** 2 - np.clip(x - last, 0, None) ** 2) / (last - knots[k])
    columns = [np.ones_like(x) if derivative == 0 else np.zeros_like(x), x if derivative == 0 else np.ones_like(x)]
    columns += [d(k) - d(len(knots) - 2) for k in range(len(knots) - 2)]
    return np.stack(columns, 1)


def test_spline_fit_matches_a_truncated_power_basis_reference():
    graph = overconfident_graph()
    model = Spline(graph.num_classes, knots=6).fit(graph)
    confidence, prediction = torch.softmax(graph.logits.double(), -1)[graph.cal_idx].max(1)
    correct = (prediction == graph.labels[graph.cal_idx]).double().numpy()
    scores = confidence.numpy()
    order = np.argsort(scores)
    scores, correct = scores[order], correct[order]  # confidences are distinct here
    n = len(scores)
    error = np.cumsum(correct - scores) / n
    rank = np.linspace(0, 1, n)
    knots = np.linspace(0, 1, 6)
    coefficients = np.linalg.lstsq(natural_spline_design(knots, rank), error, rcond=None)[0]
    expected = scores + natural_spline_design(knots, rank, derivative=1) @ coefficients
    np.testing.assert_allclose(model.scores.numpy(), scores)
    np.testing.assert_allclose(model.recalibrated.numpy(), expected, atol=1e-9)


def test_spline_moves_overconfident_scores_down_and_keeps_the_other_classes_proportional():
    graph = overconfident_graph()
    model = Spline(graph.num_classes).fit(graph)
    before = torch.softmax(graph.logits, -1)
    after = model.predict_proba(graph)
    test = torch.ones(graph.num_nodes, dtype=torch.bool)
    test[graph.train_idx] = test[graph.cal_idx] = False
    assert after.max(1).values[test].mean() < before.max(1).values[test].mean() - 0.05
    is_top = torch.zeros_like(before, dtype=torch.bool).scatter(1, before.argmax(1, keepdim=True), True)
    ratio = after / before
    spread = ratio.masked_fill(is_top, -math.inf).amax(1) - ratio.masked_fill(is_top, math.inf).amin(1)
    relative = spread / ratio.masked_fill(is_top, -math.inf).amax(1)
    assert relative.max() < 1e-4  # every other class scaled by the same factor (1 - c') / (1 - c)


def test_spline_never_lets_a_recalibrated_top_label_fall_below_the_runner_up():
    model = Spline(3)
    model.scores = torch.tensor([0.0, 1.0], dtype=torch.float64)
    model.recalibrated = torch.tensor([0.0, 0.0], dtype=torch.float64)  # a map that sends everything to 0
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2], [0.2, 0.7, 0.1]]))
    graph = CalibrationGraph.from_run(logits, torch.zeros(2, 1), torch.zeros(2, 0, dtype=torch.long),
                                      torch.tensor([0, 1]), torch.tensor([], dtype=torch.long), torch.tensor([0]))
    probs = model.predict_proba(graph)
    assert torch.equal(probs.argmax(1), torch.tensor([0, 1]))
    # others' shares q = (0.6, 0.4) then (2/3, 1/3): the floor is q_max / (1 + q_max) (+ 1e-5)
    assert probs[0, 0].item() == pytest.approx(0.6 / 1.6 + 1e-5, abs=1e-6)
    assert probs[1, 1].item() == pytest.approx((2 / 3) / (5 / 3) + 1e-5, abs=1e-6)


def test_spline_rejects_too_few_knots():
    with pytest.raises(ConfigError, match="knots"):
        build_calibrator("Spline", 3, knots=2)


# ------------------------------------------------------------------------------------------ Dirichlet


def test_dirichlet_map_and_odir_penalty_by_hand():
    model = Dirichlet(3, odir=2.0)
    weight = torch.tensor([[1.0, 0.5, 0.0], [0.0, 2.0, -1.0], [0.25, 0.0, 1.0]])
    bias = torch.tensor([0.1, -0.2, 0.3])
    with torch.no_grad():
        model.weight.copy_(weight)
        model.bias.copy_(bias)
    graph = tiny_graph()
    log_p = np.log(torch.softmax(graph.logits.double(), -1).numpy())
    scores = log_p @ weight.double().numpy().T + bias.double().numpy()
    expected = np.exp(scores) / np.exp(scores).sum(1, keepdims=True)
    np.testing.assert_allclose(model.predict_proba(graph).numpy(), expected, rtol=1e-5, atol=1e-6)
    # off-diagonal squares 0.25 + 1 + 0.0625 = 1.3125 over K(K-1) = 6; mean bias square 0.14 / 3
    assert model.odir_penalty().item() == pytest.approx(2.0 * (1.3125 / 6 + 0.14 / 3), rel=1e-6)


def test_dirichlet_starts_at_the_identity_and_two_class_diagonal_is_temperature_scaling():
    graph = overconfident_graph(k=2)
    model = Dirichlet(2)
    assert torch.allclose(model.predict_proba(graph), torch.softmax(graph.logits, -1), atol=1e-6)
    with torch.no_grad():
        model.weight.copy_(torch.eye(2) * 0.5)  # softmax(0.5 log softmax(z)) = softmax(z / 2)
    assert torch.allclose(model.predict_proba(graph), torch.softmax(graph.logits / 2, -1), atol=1e-6)


def test_dirichlet_can_change_the_argmax():
    graph = tiny_graph()
    model = Dirichlet(3)
    with torch.no_grad():
        model.weight.copy_(torch.eye(3)[[1, 0, 2]])  # swaps classes 0 and 1
    assert not torch.equal(model.predict_proba(graph).argmax(1), graph.logits.argmax(1))


def test_dirichlet_odir_follows_the_benchmark_and_penalises_the_fit():
    assert build_calibrator("Dirichlet", 70, "CoraFull", "GAT").odir == 1e5
    assert build_calibrator("Dirichlet", 7, "Cora", "GCN").odir == 5e-4
    graph = overconfident_graph()
    seed_everything(0)
    weak = Dirichlet(graph.num_classes, odir=0.0).fit(graph)
    strong = Dirichlet(graph.num_classes, odir=1e4).fit(graph)

    def off_diagonal(model):
        return (model.weight - torch.diag(model.weight.diagonal())).abs().sum().item()

    assert off_diagonal(strong) < 0.1 * off_diagonal(weak)
    with pytest.raises(ConfigError, match="odir"):
        Dirichlet(3, odir=-1.0)


def test_penalised_fit_without_penalty_is_the_common_rule():
    graph = tiny_graph()
    plain, penalised = Dirichlet(3), Dirichlet(3)
    info_plain = fit_nll(plain, graph, graph.cal_idx, graph.train_idx)
    info_penalised = fit_nll(penalised, graph, graph.cal_idx, graph.train_idx, penalty=lambda: torch.zeros(()))
    assert info_plain == info_penalised
    assert torch.equal(plain.weight, penalised.weight)


# ------------------------------------------------------------------------------------- OrderInvariant


def inverse_softplus(v: float) -> float:
    return math.log(math.expm1(v))


def test_order_invariant_by_hand():
    model = OrderInvariant(3)
    with torch.no_grad():
        last = model.gap_scales[-1]
        last.weight.zero_()
        last.bias.copy_(torch.tensor([inverse_softplus(2.0), inverse_softplus(0.5)]))
    # logits (3, 1, 2): sorted (3, 2, 1), gaps (1, 1), steps (2, 0.5): sorted new logits (2.5, 0.5, 0)
    logits = torch.tensor([[3.0, 1.0, 2.0]])
    graph = CalibrationGraph.from_run(logits, torch.zeros(1, 1), torch.zeros(2, 0, dtype=torch.long),
                                      torch.tensor([0]), torch.tensor([], dtype=torch.long), torch.tensor([0]))
    expected = torch.log_softmax(torch.tensor([[2.5, 0.0, 0.5]]), -1)
    assert torch.allclose(model(graph), expected, atol=1e-6)


def test_order_invariant_is_equivariant_to_class_permutations():
    graph = tiny_graph()
    seed_everything(0)
    model = build_calibrator("OrderInvariant", graph.num_classes, max_epochs=30, patience=10).fit(graph)
    perm = torch.tensor([2, 0, 1])
    permuted = CalibrationGraph(graph.logits[:, perm], graph.hidden, graph.edge_index, graph.labels,
                                graph.train_idx, graph.cal_idx)
    with torch.no_grad():
        assert torch.allclose(model(permuted), model(graph)[:, perm], atol=1e-6)


def test_order_invariant_weight_decay_follows_the_gats_configs():
    assert build_calibrator("OrderInvariant", 7, "Cora", "GAT").weight_decay == pytest.approx(0.005)
    assert build_calibrator("OrderInvariant", 7, "Cora", "GCN").weight_decay == pytest.approx(5e-4)


# ------------------------------------------------------------------------------- node-wise fitting path


@pytest.mark.parametrize("name", ["OrderInvariant", "Dirichlet"])
def test_a_nodewise_calibrator_fitted_on_the_labelled_rows_equals_its_fit_on_the_whole_graph(name):
    """The node-wise path cuts the graph to the fit and early-stopping rows (their logits alone); with
    explicit nodes (early stopping on part of the training folds) it must fit what the same rule fits on the
    whole graph, and stopping on other nodes must change the fit (else the comparison could not fail)."""
    from simcalib.calibrators.base import Calibrator

    graph = overconfident_graph()
    fit_idx, stop_idx = graph.cal_idx[:250], graph.train_idx[:150]  # not the defaults

    def fitted(whole_graph: bool, stop: torch.Tensor) -> torch.Tensor:
        seed_everything(0)
        model = build_calibrator(name, graph.num_classes)
        if not whole_graph:
            model.fit(graph, fit_idx, stop)
        elif name == "Dirichlet":  # its own rule, given the whole graph
            model.fit_labelled(graph, fit_idx, stop)
        else:
            Calibrator.fit(model, graph, fit_idx, stop)
        return model.predict_proba(graph)

    cut = fitted(False, stop_idx)
    torch.testing.assert_close(cut, fitted(True, stop_idx), rtol=1e-5, atol=1e-6)
    assert (cut - fitted(False, fit_idx)).abs().max() > 1e-4  # early stopping on the fit nodes is another fit
