"""Feature similarity (simcalib.similarity) and the movement-similarity terms against plain references."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from graph_fixtures import single_thread, tiny_graph

from simcalib.calibrators.layers import SortedEdges, edges_with_self_loops
from simcalib.calibrators.movement import (
    confidence_gap,
    eta_from_hops,
    homophily_attention,
    logit_products,
    minmax_rows,
    movement_messages,
)
from simcalib.errors import ConfigError
from simcalib.similarity import mahalanobis_to_prototypes, normalized_similarity

pytestmark = pytest.mark.usefixtures(single_thread.__name__)


def numpy_reference(hidden: np.ndarray, labels: np.ndarray, nodes: np.ndarray, k: int, ridge: float) -> np.ndarray:
    """The paper's equations, written directly in float64 NumPy."""
    x = hidden.astype(np.float64)
    xl, yl = x[nodes], labels[nodes]
    mu = np.stack([xl[yl == c].mean(0) for c in range(k)])
    centred = xl - mu[yl]
    sigma = centred.T @ centred / len(nodes)
    if ridge == 0:
        precision = np.linalg.pinv(sigma, hermitian=True)
    else:
        precision = np.linalg.inv(sigma + ridge * np.trace(sigma) / sigma.shape[0] * np.eye(sigma.shape[0]))
    diff = x[:, None, :] - mu[None, :, :]  # [N, K, h]
    return np.einsum("nkh,hg,nkg->nk", diff, precision, diff)


@pytest.mark.parametrize("ridge", [0.0, 1e-3, 0.5])
@pytest.mark.parametrize("dead_unit", [False, True])
def test_mahalanobis_matches_a_float64_numpy_reference(ridge, dead_unit):
    rng = np.random.default_rng(0)
    n, h, k = 80, 5, 3
    labels = np.arange(n) % k
    hidden = rng.normal(size=(n, h)) + 2 * rng.normal(size=(k, h))[labels]
    if dead_unit:
        hidden[:, 2] = 0.0  # singular covariance: the pseudo-inverse ignores the direction
    nodes = rng.permutation(n)[:40]
    got = mahalanobis_to_prototypes(torch.tensor(hidden, dtype=torch.float32), torch.tensor(labels),
                                    torch.tensor(nodes), k, ridge=ridge)
    want = numpy_reference(hidden.astype(np.float32), labels, nodes, k, ridge)
    assert got.dtype == torch.float64 and got.shape == (n, k)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-7, atol=1e-9)


def test_only_the_labelled_nodes_labels_are_read():
    rng = np.random.default_rng(1)
    hidden = torch.tensor(rng.normal(size=(30, 4)))
    labels = torch.tensor(np.arange(30) % 2)
    nodes = torch.arange(0, 20)
    noisy = labels.clone()
    noisy[20:] = -1  # hidden labels elsewhere
    assert torch.equal(mahalanobis_to_prototypes(hidden, labels, nodes, 2),
                       mahalanobis_to_prototypes(hidden, noisy, nodes, 2))
    with pytest.raises(ConfigError, match="hidden"):
        mahalanobis_to_prototypes(hidden, noisy, torch.arange(30), 2)


def test_a_class_without_labelled_nodes_is_infinitely_far_and_normalises_finitely():
    hidden = torch.randn(12, 3, dtype=torch.float64)
    labels = torch.tensor([0, 1] * 6)
    distances = mahalanobis_to_prototypes(hidden, labels, torch.arange(12), num_classes=3)
    assert torch.isinf(distances[:, 2]).all() and torch.isfinite(distances[:, :2]).all()
    s = normalized_similarity(distances)
    assert torch.isfinite(s).all()
    assert torch.allclose(s.norm(dim=1), torch.ones(12))
    assert torch.allclose(s[:, 2], s[:, :2].max(dim=1).values)  # "as far as the farthest class"


def test_negative_ridge_is_refused():
    with pytest.raises(ConfigError, match="ridge"):
        mahalanobis_to_prototypes(torch.randn(6, 2), torch.tensor([0, 1] * 3), torch.arange(6), 2, ridge=-1.0)


def test_eta_offsets_training_nodes_and_places_unreachable_nodes_beyond_the_farthest():
    hops = torch.tensor([0, 1, 2, 3, -1])
    assert eta_from_hops(hops).tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert eta_from_hops(hops, offset=0.5, unreachable_hops=10).tolist() == [0.5, 1.5, 2.5, 3.5, 10.5]
    with pytest.raises(ConfigError, match="eta_offset"):
        eta_from_hops(hops, offset=0.0)


def test_movement_messages_follow_the_paper_equation():
    """m_i = sum_j alpha_ij eta_j ((d_i+1)/(d_j+1))^t sort(z_j), alpha = softmax_j LeakyReLU(z_i.z_j/(eta_i eta_j))."""
    graph = tiny_graph()
    n, t = graph.num_nodes, 0.5
    edges = SortedEdges(edges_with_self_loops(graph.edge_index, n), n)
    source, target = edges.source, edges.target
    eta = eta_from_hops(graph.hops_to_train())
    z, degree = graph.logits.double(), graph.degree().double()
    alpha = homophily_attention(logit_products(z, edges), eta.double(), edges)
    got = movement_messages(z.sort(dim=1).values, alpha, eta.double(), degree, edges, t)
    for i in range(n):
        neighbours = source[target == i].tolist()
        assert i in neighbours  # self-loop
        scores = torch.stack([z[i] @ z[j] / (eta[i] * eta[j]) for j in neighbours])
        weights = torch.softmax(torch.nn.functional.leaky_relu(scores, 0.2), 0)
        want = sum(a * eta[j] * ((degree[i] + 1) / (degree[j] + 1)) ** t * z[j].sort().values
                   for a, j in zip(weights, neighbours))
        assert torch.allclose(got[i], want, atol=1e-10)


def test_disabled_homophily_averages_the_neighbours_uniformly():
    graph = tiny_graph()
    edges = SortedEdges(edges_with_self_loops(graph.edge_index, graph.num_nodes), graph.num_nodes)
    alpha = homophily_attention(logit_products(graph.logits, edges), torch.ones(graph.num_nodes), edges, enabled=False)
    counts = torch.bincount(edges.target, minlength=graph.num_nodes).float()
    assert torch.allclose(alpha, 1.0 / counts[edges.target])


def test_weighted_sum_and_its_gradients_match_a_dense_reference():
    g = torch.Generator().manual_seed(0)
    n = 7
    edge_index = torch.randint(0, n, (2, 20), generator=g)
    edges = SortedEdges(edge_index, n)
    weight = torch.rand(20, dtype=torch.float64, generator=g, requires_grad=True)
    x = torch.rand(n, 3, dtype=torch.float64, generator=g, requires_grad=True)
    torch.autograd.gradcheck(edges.weighted_sum, (weight, x))
    dense = torch.zeros(n, n, dtype=torch.float64).index_put((edges.target, edges.source), weight.detach(), accumulate=True)
    assert torch.allclose(edges.weighted_sum(weight, x), dense @ x)


def test_gats_confidence_gap_is_the_mean_difference_to_the_neighbours():
    graph = tiny_graph()
    edges = SortedEdges(edges_with_self_loops(graph.edge_index, graph.num_nodes), graph.num_nodes)
    c = torch.softmax(graph.logits, 1).amax(1)
    gap = confidence_gap(graph.logits, edges).squeeze(1)
    for i in (0, 5, graph.num_nodes - 3):  # the last-but-two is isolated: only its self-loop
        neighbours = edges.source[edges.target == i]
        assert gap[i].item() == pytest.approx((c[i] - c[neighbours]).mean().item(), abs=1e-6)


def similarity_by_hand(graph, nodes) -> torch.Tensor:
    """s_i = d_i / ||d_i||, d from prototypes and covariance of ``nodes`` (the NumPy reference above)."""
    d = numpy_reference(graph.hidden.numpy(), graph.labels.numpy(), nodes.numpy(), graph.num_classes, 0.0)
    return torch.tensor(d / np.linalg.norm(d, axis=1, keepdims=True), dtype=torch.float32)


def feature_temperature_of(graph, **options) -> torch.Tensor:
    """SimCalib's T_feat as built from seed 0 (not fitted): a function of G_feat's input s and the graph (the
    softplus form, whose random start already depends on s; the anchored form starts flat at T_0)."""
    from simcalib.calibrators import build_calibrator
    from simcalib.seeding import seed_everything

    seed_everything(0)
    model = build_calibrator("SimCalib", graph.num_classes, w=0.7, t=0.5,
                             **{"feature_temperature": "softplus", **options})
    model.prepare(graph)
    with torch.no_grad():
        return model.eval().feature_temperature(graph)


def test_simcalib_takes_prototypes_and_covariance_from_the_training_folds():
    """G_feat fed the hand-computed s (through the ablation that feeds it its logits) gives SimCalib's T_feat:
    s from the training folds, not from the training folds and the calibration fold."""
    from simcalib.calibrators import CalibrationGraph

    graph = tiny_graph()
    nodes, other = graph.train_idx, graph.labelled_idx()
    got = feature_temperature_of(graph)

    def fed(s):
        graph_of_s = CalibrationGraph(s, graph.hidden, graph.edge_index, graph.labels, graph.train_idx, graph.cal_idx)
        return feature_temperature_of(graph_of_s, feature_input="logits")

    assert torch.allclose(got, fed(similarity_by_hand(graph, nodes)), atol=1e-5)
    assert not torch.allclose(got, fed(similarity_by_hand(graph, other)), atol=1e-5)


def test_simcalibs_prototypes_never_read_the_calibration_folds_labels():
    from simcalib.calibrators import HIDDEN_LABEL, CalibrationGraph

    graph = tiny_graph()
    labels = graph.labels.clone()
    labels[graph.cal_idx] = (labels[graph.cal_idx] + 1) % graph.num_classes  # every calibration label wrong
    wrong = CalibrationGraph(graph.logits, graph.hidden, graph.edge_index, labels, graph.train_idx, graph.cal_idx)
    assert torch.equal(feature_temperature_of(graph), feature_temperature_of(wrong))
    moved = graph.labels.clone()
    moved[graph.train_idx] = (moved[graph.train_idx] + 1) % graph.num_classes  # the training folds' labels: read
    assert not torch.equal(feature_temperature_of(graph), feature_temperature_of(
        CalibrationGraph(graph.logits, graph.hidden, graph.edge_index, moved, graph.train_idx, graph.cal_idx)))
    labels[graph.cal_idx] = HIDDEN_LABEL  # even hidden: SimCalib never asks for them
    hidden = CalibrationGraph(graph.logits, graph.hidden, graph.edge_index, labels, graph.train_idx, graph.cal_idx)
    assert torch.equal(feature_temperature_of(graph), feature_temperature_of(hidden))


def test_a_class_with_one_labelled_node_has_that_node_as_its_prototype():
    hidden = torch.randn(13, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    labels = torch.tensor([0, 1] * 6 + [2])  # class 2: the last node alone
    distances = mahalanobis_to_prototypes(hidden, labels, torch.arange(13), num_classes=3)
    assert torch.isfinite(distances).all() and distances[12, 2] == 0.0


def test_prototype_labels_outside_the_classes_and_no_labelled_nodes_are_refused_by_name():
    hidden, labels = torch.randn(6, 2), torch.tensor([0, 1, 2, 0, 1, 2])
    with pytest.raises(ConfigError, match=r"must lie in 0\.\.1; hidden \(-1\) labels cannot define a prototype"):
        mahalanobis_to_prototypes(hidden, labels, torch.arange(6), num_classes=2)  # label 2 == num_classes
    with pytest.raises(ConfigError, match="^feature similarity needs labelled nodes to build class prototypes; "
                                          "none were given$"):  # the whole message, as the user reads it
        mahalanobis_to_prototypes(hidden, labels, torch.arange(0), num_classes=3)


def test_nearest_prototype_distance_passes_its_ridge_on():
    from simcalib.similarity import DEFAULT_RIDGE, nearest_prototype_distance

    rng = np.random.default_rng(2)
    hidden, labels = torch.tensor(rng.normal(size=(40, 4))), torch.tensor(np.arange(40) % 2)
    nodes = torch.arange(5, 25)
    ridge = DEFAULT_RIDGE * 100 + 0.5
    got = nearest_prototype_distance(hidden, labels, torch.arange(40), 2, nodes, ridge=ridge)
    want = mahalanobis_to_prototypes(hidden, labels, torch.arange(40), 2, ridge=ridge)[nodes].amin(dim=1)
    assert torch.equal(got, want)
    assert not torch.allclose(got, nearest_prototype_distance(hidden, labels, torch.arange(40), 2, nodes))


def test_spearman_needs_three_values_and_reads_ties_as_mean_ranks():
    from scipy import stats

    from simcalib.similarity import spearman

    assert spearman(torch.tensor([1.0, 2.0]), torch.tensor([2.0, 1.0])) is None
    assert spearman(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([3.0, 1.0, 2.0])) == pytest.approx(-0.5)
    a, b = torch.tensor([1.0, 1.0, 2.0, 3.0, 3.0, 3.0]), torch.tensor([0.5, 0.1, 0.7, 0.2, 0.9, 0.9])
    assert spearman(a, b) == pytest.approx(stats.spearmanr(a.numpy(), b.numpy()).statistic)


def test_minmax_rows_scales_each_row_to_zero_one():
    logits = torch.tensor([[-2.0, 0.0, 2.0], [1.0, 4.0, 3.0], [5.0, 5.0, 5.0]])
    expected = torch.tensor([[0.0, 0.5, 1.0], [0.0, 1.0, 2.0 / 3.0], [0.0, 0.0, 0.0]])  # a constant row: zeros
    assert torch.allclose(minmax_rows(logits), expected)


def test_eta_without_any_reachable_node_and_an_explicit_unreachable_distance_of_zero():
    hops = torch.tensor([-1, -1])  # no training node in the graph's components
    assert eta_from_hops(hops, offset=1.0).tolist() == [1.0, 1.0]
    assert eta_from_hops(torch.tensor([0, -1]), offset=0.5, unreachable_hops=0).tolist() == [0.5, 0.5]
    with pytest.raises(ConfigError, match="^unreachable_hops must be >= 0, got -1$"):
        eta_from_hops(hops, unreachable_hops=-1)


def test_gats_confidence_gap_of_a_node_with_one_neighbour_is_the_whole_difference():
    logits = torch.tensor([[3.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    edges = SortedEdges(torch.tensor([[1], [0]]), 3)  # 1 -> 0 only; nodes 1 and 2 have no in-neighbours
    confidence = torch.softmax(logits, dim=1).amax(dim=1)
    gap = confidence_gap(logits, edges).squeeze(1)
    assert torch.allclose(gap, torch.tensor([confidence[0] - confidence[1], 0.0, 0.0]))
