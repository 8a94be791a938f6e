"""A GCN's training forward takes the first layer of the last early-stopping forward
(:mod:`simcalib.backbones.first_layer`): the trained backbone is bit for bit the one computed without it (its private
switch ``_reuse_first_layer`` off), per run and batched, and the reuse is real (one first layer per epoch)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "calibrators"))
from graph_fixtures import single_thread  # noqa: E402

from simcalib.backbones import BackboneConfig, train_backbone  # noqa: E402
from simcalib.backbones.batched import train_backbones_batched  # noqa: E402
from simcalib.backbones.first_layer import SharedFirstLayer, keep_first_layers  # noqa: E402
from simcalib.backbones.models import GCN  # noqa: E402
from simcalib.backbones.training import graph_inputs  # noqa: E402

pytestmark = pytest.mark.usefixtures(single_thread.__name__)
SEEDS = [11, 12, 13]


def _folds(graph, count: int):
    perm = torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(0))
    third = graph.num_nodes // 3
    parts = [perm[:third], perm[third:2 * third], perm[2 * third:]]
    return [(parts[m % 3], parts[(m + 1) % 3]) for m in range(count)]


def assert_same_backbone(a, b):
    assert torch.equal(a.logits, b.logits)
    assert torch.equal(a.hidden, b.hidden)
    assert (a.best_epoch, a.epochs, a.val_accuracy, a.val_nll) == (b.best_epoch, b.epochs, b.val_accuracy, b.val_nll)


def test_a_gcn_with_the_shared_first_layer_is_the_gcn_without(sbm_graph, monkeypatch):
    train, val = _folds(sbm_graph, 1)[0]
    config = BackboneConfig("GCN", max_epochs=120, patience=15)
    shared = train_backbone(sbm_graph, train, val, config, seed=5, device="cpu")
    monkeypatch.setattr(SharedFirstLayer, "_reuse_first_layer", False)
    fresh = train_backbone(sbm_graph, train, val, config, seed=5, device="cpu")
    assert 5 < shared.best_epoch < shared.epochs  # it trained and kept an epoch before the last
    assert_same_backbone(shared, fresh)


def test_batched_gcns_with_the_shared_first_layer_are_the_gcns_without(sbm_graph, monkeypatch):
    # short patience: the models stop at different epochs, so the batch is sliced (other parameter tensors) mid-run
    config = BackboneConfig("GCN", max_epochs=150, patience=5)
    folds = _folds(sbm_graph, len(SEEDS))
    shared = train_backbones_batched(sbm_graph, folds, SEEDS, config, "cpu")
    monkeypatch.setattr(SharedFirstLayer, "_reuse_first_layer", False)
    fresh = train_backbones_batched(sbm_graph, folds, SEEDS, config, "cpu")
    assert len({out.epochs for out in shared}) > 1  # stopped at different epochs
    for a, b in zip(shared, fresh):
        assert_same_backbone(a, b)


@pytest.mark.parametrize("reuse", [True, False])
def test_the_training_forward_takes_the_kept_first_layer(sbm_graph, monkeypatch, reuse):
    """With the reuse one first layer is computed per epoch, plus the first training forward's; without it two."""
    calls = {"n": 0}
    original = SharedFirstLayer._first_layer

    def counting(self, inputs, parameters, compute):
        def counted():
            calls["n"] += 1
            return compute()
        return original(self, inputs, parameters, counted)

    monkeypatch.setattr(SharedFirstLayer, "_first_layer", counting)
    monkeypatch.setattr(SharedFirstLayer, "_reuse_first_layer", reuse)
    train, val = _folds(sbm_graph, 1)[0]
    out = train_backbone(sbm_graph, train, val, BackboneConfig("GCN", max_epochs=30, patience=30), seed=5, device="cpu")
    assert out.epochs == 30
    assert calls["n"] == (out.epochs + 1 if reuse else 2 * out.epochs)


def test_a_parameter_changed_in_place_after_the_evaluation_forward_means_recomputing(sbm_graph):
    """The kept first layer is keyed on each parameter's in-place version: an optimiser step (in place) after the
    evaluation forward makes the training forward compute the layer with the stepped parameters."""
    x, adj = graph_inputs(sbm_graph, "GCN", torch.device("cpu"))
    model = keep_first_layers(GCN(sbm_graph.num_features, sbm_graph.num_classes))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model.train()
    model(x, adj)[0].square().sum().backward()
    model.eval()
    with torch.no_grad():
        model(x, adj)  # keeps its first layer
    optimizer.step()  # W1, b1 change in place
    model.train()
    _, hidden = model(x, adj)
    with torch.no_grad():
        expected = torch.relu(adj.matmul(x.matmul(model.weight1)) + model.bias1)
    assert torch.equal(hidden, expected)
