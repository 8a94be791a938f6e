"""A tiny synthetic calibration problem for the calibrator tests (seconds, no data files)."""

from __future__ import annotations

import pytest
import torch

from simcalib.calibrators import CalibrationGraph

NUM_CLASSES = 3


@pytest.fixture(autouse=False)
def single_thread():
    """One torch thread: on tiny graphs and shared cores a second thread makes each step many times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny_problem(seed: int = 0, num_nodes: int = 48, hidden_dim: int = 6):
    """(logits, hidden, edge_index, y, train_idx, cal_idx) of a small homophilous graph.

    It has what real graphs have and calibrators must survive: misclassified nodes, a dead (all-zero)
    hidden unit, an isolated node and a two-node component without training nodes (unreachable).
    """
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(num_nodes) % NUM_CLASSES
    logits = 2.0 * torch.nn.functional.one_hot(y, NUM_CLASSES).float() + 1.5 * torch.randn(num_nodes, NUM_CLASSES, generator=g)
    means = torch.randn(NUM_CLASSES, hidden_dim, generator=g)
    hidden = torch.relu(means[y] + 0.7 * torch.randn(num_nodes, hidden_dim, generator=g))
    hidden[:, -1] = 0.0  # a dead ReLU unit: the covariance is singular
    core = num_nodes - 3  # nodes core.. are: one isolated node, then a 2-node component
    same = y[:core, None] == y[None, :core]
    probability = torch.where(same, torch.tensor(0.25), torch.tensor(0.03))
    upper = torch.triu(torch.rand(core, core, generator=g) < probability, diagonal=1)
    src, dst = torch.nonzero(upper | upper.T, as_tuple=True)
    pair = torch.tensor([[core + 1, core + 2], [core + 2, core + 1]])
    edge_index = torch.cat([torch.stack([src, dst]), pair], dim=1)
    order = torch.randperm(core, generator=g)
    train_idx, cal_idx = order[:15], order[15:27]
    return logits, hidden, edge_index, y, train_idx, cal_idx


def tiny_features(seed: int = 0, num_nodes: int = 48, width: int = 10) -> torch.Tensor:
    """Node features X [N, width] of :func:`tiny_problem`'s graph: non-negative, rows summing to 1 (as the
    loaders' row-normalised bags of words), class-dependent; their own generator (the problem is unchanged)."""
    g = torch.Generator().manual_seed(1000 + seed)
    y = torch.arange(num_nodes) % NUM_CLASSES
    means = torch.rand(NUM_CLASSES, width, generator=g)
    x = torch.relu(means[y] + 0.5 * torch.randn(num_nodes, width, generator=g)) + 1e-3
    return x / x.sum(1, keepdim=True)


def tiny_graph(seed: int = 0) -> CalibrationGraph:
    return CalibrationGraph.from_run(*tiny_problem(seed), features=tiny_features(seed))


def permuted(graph: CalibrationGraph, perm: torch.Tensor) -> CalibrationGraph:
    """The same graph with node ``i`` renamed ``inverse[i]`` (so new node ``k`` is old node ``perm[k]``)."""
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(perm.numel())
    return CalibrationGraph(graph.logits[perm], graph.hidden[perm], inverse[graph.edge_index], graph.labels[perm],
                            inverse[graph.train_idx], inverse[graph.cal_idx],
                            None if graph.features is None else graph.features[perm])
