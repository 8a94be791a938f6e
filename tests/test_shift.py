"""Shift splits (simcalib.experiment.shift): no OOD node in the training folds or the calibration fold, the declared
ID share, the direction of each property, determinism in the seed, and the ID/OOD metric columns."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import torch
from synthetic_graphs import make_sbm_graph

from simcalib.errors import ConfigError, UnknownNameError
from simcalib.experiment.shift import (
    SHIFT_PROPERTIES,
    generate_shift_split,
    property_masks,
    shift_metrics,
    shift_seed,
)


@pytest.fixture(scope="module")
def graph():
    return make_sbm_graph(num_nodes=240, num_classes=4, seed=5, p_in=0.06, p_out=0.01)


def _networkx(graph):
    g = nx.Graph()
    g.add_nodes_from(range(graph.num_nodes))
    g.add_edges_from((int(a), int(b)) for a, b in graph.edge_index.T if a != b)
    return g


@pytest.mark.parametrize("prop", SHIFT_PROPERTIES)
def test_no_ood_node_is_in_a_training_or_calibration_fold(graph, prop):
    split = generate_shift_split(graph.edge_index, graph.y.numpy(), prop, seed=11)
    ood = set(split.ood_test.tolist())
    assert ood and len(split.id_test)
    for fold in range(3):
        train, cal, id_test, ood_test = split.fold_indices(fold)
        assert not ood & set(train.tolist()) and not ood & set(cal.tolist())
        assert not ood & set(id_test.tolist())
        assert not set(train.tolist()) & set(cal.tolist()) and not set(id_test.tolist()) & set(cal.tolist())
        assert np.array_equal(ood_test, split.ood_test)
    assert np.array_equal(np.sort(np.concatenate([split.id_nodes, split.ood_nodes])), np.arange(graph.num_nodes))
    labelled = np.concatenate(split.folds)
    assert set(labelled.tolist()) <= set(split.id_nodes.tolist())


@pytest.mark.parametrize("id_fraction", [0.5, 0.3, 0.75])
def test_the_declared_id_share_is_kept(graph, id_fraction):
    split = generate_shift_split(graph.edge_index, graph.y.numpy(), "popularity", seed=3, id_fraction=id_fraction)
    assert len(split.id_nodes) == round(graph.num_nodes * id_fraction)
    assert len(split.ood_nodes) == graph.num_nodes - len(split.id_nodes)
    labels = graph.y.numpy()
    for c in range(4):  # the GATS rule inside the ID part: int(0.15 * n_c) labelled nodes of class c
        n_c = int((labels[split.id_nodes] == c).sum())
        assert int((labels[np.concatenate(split.folds)] == c).sum()) == int(0.05 * 3 * n_c)


@pytest.mark.parametrize("prop", ["popularity", "density"])
def test_ood_nodes_have_the_smallest_property_values(graph, prop):
    g = _networkx(graph)
    values = nx.pagerank(g) if prop == "popularity" else nx.clustering(g)
    values = np.array([values[v] for v in range(graph.num_nodes)])
    id_nodes, ood_nodes = property_masks(graph.edge_index, graph.num_nodes, prop, seed=2)
    assert values[ood_nodes].max() <= values[id_nodes].min()
    assert values[ood_nodes].mean() < values[id_nodes].mean()


def test_the_split_is_a_pure_function_of_its_seed_and_leaves_the_global_generator_alone(graph):
    torch.manual_seed(0)
    before = torch.rand(3)
    torch.manual_seed(0)
    first = generate_shift_split(graph.edge_index, graph.y.numpy(), "density", seed=shift_seed(10, "SBM", "density",
                                                                                              0, 0.5, 0.05, 3))
    assert torch.equal(torch.rand(3), before)
    again = generate_shift_split(graph.edge_index, graph.y.numpy(), "density", seed=shift_seed(10, "SBM", "density",
                                                                                              0, 0.5, 0.05, 3))
    for a, b in zip((*first.folds, first.id_test, first.ood_test), (*again.folds, again.id_test, again.ood_test)):
        assert np.array_equal(a, b)
    other = generate_shift_split(graph.edge_index, graph.y.numpy(), "density", seed=shift_seed(10, "SBM", "density",
                                                                                              1, 0.5, 0.05, 3))
    assert not np.array_equal(first.folds[0], other.folds[0])
    assert len({shift_seed(10, "SBM", p, 0, 0.5, 0.05, 3) for p in SHIFT_PROPERTIES}) == 3


def test_shift_metrics_give_id_ood_and_their_difference(graph):
    split = generate_shift_split(graph.edge_index, graph.y.numpy(), "locality", seed=1)
    probs = torch.softmax(torch.randn(graph.num_nodes, 4, generator=torch.Generator().manual_seed(0)), dim=1)
    columns = shift_metrics(probs, graph.y, split.id_test, split.ood_test)
    assert set(columns) == {f"{p}_{m}" for p in ("id", "ood", "ood_minus_id") for m in ("ece", "nll", "brier",
                                                                                      "accuracy")}
    assert columns["ood_minus_id_ece"] == pytest.approx(columns["ood_ece"] - columns["id_ece"])
    with pytest.raises(ConfigError, match="no OOD test nodes"):
        shift_metrics(probs, graph.y, split.id_test, np.array([], dtype=np.int64))


def test_bad_shift_input_is_refused(graph):
    with pytest.raises(UnknownNameError, match="valid shift propertys|valid shift property"):
        property_masks(graph.edge_index, graph.num_nodes, "betweenness")
    with pytest.raises(ConfigError, match="id_fraction"):
        property_masks(graph.edge_index, graph.num_nodes, "popularity", id_fraction=1.0)
