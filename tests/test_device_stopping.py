"""Early stopping kept on the device (simcalib.early_stopping) takes the decisions of a loop that reads every
loss on the host: the same backbone weights, kept outputs and calibrated probabilities, bit for bit, whatever
the number of epochs between two host reads.

The reference loops below read each epoch's losses with ``.item()`` and copy the kept state with
``deepcopy``, as the GATS code does; the library's loops must match them exactly on CPU.
"""

from __future__ import annotations

import copy
import functools
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent / "calibrators"))
from graph_fixtures import single_thread, tiny_graph  # noqa: E402

import simcalib.calibrators.simcalib as simcalib_module  # noqa: E402
import simcalib.calibrators.training as calibrator_training  # noqa: E402
from simcalib.backbones import BackboneConfig, train_backbone  # noqa: E402
from simcalib.backbones.batched import train_backbones_batched  # noqa: E402
from simcalib.backbones.models import BACKBONES  # noqa: E402
from simcalib.backbones.training import graph_inputs  # noqa: E402
from simcalib.calibrators import build_calibrator  # noqa: E402
from simcalib.early_stopping import check_interval, python_max, python_min  # noqa: E402
from simcalib.seeding import seed_everything  # noqa: E402

pytestmark = pytest.mark.usefixtures(single_thread.__name__)

CONFIG = BackboneConfig(name="GCN", max_epochs=300, patience=15)


def reference_train_backbone(data, train_idx, val_idx, config, seed):
    """The GATS rule with a host read of every epoch's losses: (logits, hidden, acc, loss, best epoch, epochs, model)."""
    seed_everything(seed)
    model = BACKBONES[config.name](data.num_features, data.num_classes, dropout=config.dropout,
                                   **config.model_options())
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    x, adj = graph_inputs(data, config.name, torch.device("cpu"), **config.model_options())
    y = data.y
    best_acc, best_loss, patience_left, kept, epoch = -1.0, float("inf"), config.patience, None, 0
    for epoch in range(config.max_epochs):
        model.train()
        optimizer.zero_grad()
        logits, _ = model(x, adj)
        loss = F.cross_entropy(logits[train_idx], y[train_idx])
        assert torch.isfinite(loss)
        loss.backward()
        optimizer.step()
        model.eval()
        with torch.no_grad():
            logits, hidden = model(x, adj)
            val_loss = F.cross_entropy(logits[val_idx], y[val_idx]).item()
            val_acc = (logits[val_idx].argmax(1) == y[val_idx]).float().mean().item()
        if val_acc >= best_acc or val_loss <= best_loss:
            if val_acc >= best_acc and val_loss <= best_loss:
                kept = (logits, hidden, val_acc, val_loss, epoch)
            best_acc, best_loss = max(val_acc, best_acc), min(val_loss, best_loss)
            patience_left = config.patience
        else:
            patience_left -= 1
            if patience_left <= 0:
                break
    return (*kept, epoch + 1)


def reference_fit_nll(calibrator, graph, fit_idx, stop_idx, penalty=None):
    """The calibrators' rule with ``.item()`` and ``deepcopy(state_dict)`` on every improvement."""
    optimizer = torch.optim.Adam(calibrator.parameter_groups(), lr=calibrator.lr)
    labels = graph.labels
    best_loss, best_state, best_epoch, waited, epoch = float("inf"), None, -1, 0, 0
    for epoch in range(calibrator.max_epochs):
        calibrator.train()
        optimizer.zero_grad()
        loss = F.nll_loss(calibrator(graph)[fit_idx], labels[fit_idx])
        if penalty is not None:
            loss = loss + penalty()
        assert torch.isfinite(loss)
        loss.backward()
        optimizer.step()
        calibrator.eval()
        with torch.no_grad():
            stop_loss = F.nll_loss(calibrator(graph)[stop_idx], labels[stop_idx]).item()
        if stop_loss <= best_loss:
            best_loss, best_epoch, waited = stop_loss, epoch, 0
            best_state = copy.deepcopy(calibrator.state_dict())
        else:
            waited += 1
            if waited >= calibrator.patience:
                break
    calibrator.load_state_dict(best_state)
    return {"epochs": epoch + 1, "best_epoch": best_epoch, "stop_nll": best_loss}


def _folds(graph):
    perm = torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(0))
    third = graph.num_nodes // 3
    return perm[:third], perm[third:2 * third]


@pytest.mark.parametrize("check_every", [1, 7])
def test_backbone_outputs_equal_the_per_epoch_host_loop(sbm_graph, check_every):
    train_idx, val_idx = _folds(sbm_graph)
    logits, hidden, acc, loss, best_epoch, epochs = reference_train_backbone(sbm_graph, train_idx, val_idx, CONFIG, 3)
    out = train_backbone(sbm_graph, train_idx, val_idx, CONFIG, 3, device="cpu", check_every=check_every)
    assert epochs < CONFIG.max_epochs  # the rule stopped the training, so the stopping decision is compared
    assert (out.best_epoch, out.epochs, out.val_accuracy, out.val_nll) == (best_epoch, epochs, acc, loss)
    assert torch.equal(out.logits, logits) and torch.equal(out.hidden, hidden)


def test_batched_backbones_do_not_depend_on_the_check_interval(sbm_graph):
    perm = torch.randperm(sbm_graph.num_nodes, generator=torch.Generator().manual_seed(0))
    folds = [(perm[10 * i:10 * i + 20], perm[40 + 10 * i:60 + 10 * i]) for i in range(3)]
    config = BackboneConfig(name="GAT", max_epochs=150, patience=15)
    each = train_backbones_batched(sbm_graph, folds, [1, 2, 3], config, device="cpu", check_every=1)
    sparse = train_backbones_batched(sbm_graph, folds, [1, 2, 3], config, device="cpu", check_every=5)
    assert any(out.epochs < config.max_epochs for out in each)  # a model left the batch early
    # A stopped model leaves the batch at the next host read, so the two runs compute batches of other widths for
    # a few epochs; some CPU models sum those in another order (the last float32 bits of val_nll moved by 7e-9 on
    # one): the decisions must be equal, the numbers equal up to that rounding.
    for a, b in zip(each, sparse):
        assert (a.best_epoch, a.epochs, a.val_accuracy) == (b.best_epoch, b.epochs, b.val_accuracy)
        assert a.val_nll == pytest.approx(b.val_nll, rel=1e-5)
        assert torch.allclose(a.logits, b.logits, rtol=1e-4, atol=1e-5)
        assert torch.allclose(a.hidden, b.hidden, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("check_every", [1, 6])
def test_calibrator_probabilities_equal_the_per_epoch_host_loop(monkeypatch, check_every):
    graph = tiny_graph()
    options = {"max_epochs": 400, "patience": 20}

    def fit(rule):
        monkeypatch.setattr(calibrator_training, "fit_nll", rule)
        seed_everything(5)
        model = build_calibrator("CaGCN", graph.num_classes, **options).fit(graph)  # dropout: the RNG is in play
        return model.predict_proba(graph), model.fit_info, model.state_dict()

    library = functools.partial(calibrator_training.fit_nll, check_every=check_every)
    expected, expected_info, expected_state = fit(reference_fit_nll)
    probs, info, state = fit(library)
    assert expected_info["epochs"] < options["max_epochs"]
    assert info == expected_info
    assert all(torch.equal(state[name], expected_state[name]) for name in expected_state)
    assert torch.equal(probs, expected)


def test_grid_fit_does_not_depend_on_the_check_interval(monkeypatch):
    graph = tiny_graph()

    def fit(check_every):
        rule = functools.partial(calibrator_training.fit_nll_grid, check_every=check_every)
        monkeypatch.setattr(simcalib_module, "fit_nll_grid", rule)
        seed_everything(0)
        model = build_calibrator("SimCalib", graph.num_classes, max_epochs=300, patience=10).fit(graph)
        return model.predict_proba(graph), model.fit_info

    probs, info = fit(1)
    for interval in (4, 9):
        other, other_info = fit(interval)
        assert other_info == info
        assert torch.equal(other, probs)


def test_python_max_and_min_keep_pythons_nan_order():
    def same(a: torch.Tensor, b: float) -> bool:
        return (a.isnan() and b != b) or a.item() == b

    for a, b in [(float("nan"), 1.0), (1.0, float("nan")), (1.0, 2.0), (2.0, 1.0)]:
        assert same(python_max(torch.tensor(a), torch.tensor(b)), max(a, b))
        assert same(python_min(torch.tensor(a), torch.tensor(b)), min(a, b))


def test_check_interval_is_one_on_cpu_and_refuses_zero():
    assert check_interval("cpu") == 1
    assert check_interval("cuda") > 1
    assert check_interval("cpu", 5) == 5
    with pytest.raises(ValueError, match="at least 1"):
        check_interval("cpu", 0)
