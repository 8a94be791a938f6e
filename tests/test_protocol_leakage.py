"""Test labels never reach a run's numbers: the protocol end to end (backbone, calibrators, rows) on a small
generated graph, each backbone trained afresh in its own empty cache (the cache key holds no labels, so a
shared cache would hide a leak by reusing the clean backbone). Runs without the dataset mirror."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
import torch
from synthetic_graphs import make_sbm_graph

from simcalib.calibrators import calibrator_names
from simcalib.experiment import protocol
from simcalib.experiment.protocol import (
    ProtocolSettings,
    Run,
    evaluate_calibrator,
    fit_calibrator,
    train_run_backbone,
)
from simcalib.experiment.splits import generate_split

RUN = Run("Cora", "GCN", 0, 0, 1)  # "Cora" names the protocol defaults only: the graph is generated
QUICK = {"max_epochs": 40, "patience": 10}
# The backbone must run long enough that early stopping picks its checkpoint on the calibration fold.
BACKBONE = (("max_epochs", 60), ("patience", 20))
LABEL_FREE = {"UnCal"}  # the calibrators that read no label at all
FRESH = itertools.count()  # one new cache folder per protocol run


@pytest.fixture(scope="module")
def graph():
    return make_sbm_graph(num_nodes=240, num_classes=3, num_features=32, seed=5, p_in=0.06, p_out=0.015)


@pytest.fixture(scope="module")
def split(graph):
    # As a fixed split file: drawn once from the clean labels, so poisoning labels cannot move it.
    return generate_split(graph.y.numpy(), seed=3)


@pytest.fixture
def single_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def with_labels(graph, nodes):
    """``graph`` with every label of ``nodes`` replaced by a wrong one."""
    y = graph.y.clone()
    y[nodes] = (y[nodes] + 1) % graph.num_classes
    return dataclasses.replace(graph, y=y)


def run_protocol(monkeypatch, tmp_path, graph, split, seen, clean, calibrators, backbone=None):
    """The protocol's backbone and fitted calibrators of RUN when the labels it is given are ``seen``'s, and
    each calibrator's row with metrics on ``clean``'s test labels. A fresh, empty backbone cache each call."""
    settings = ProtocolSettings(cache_dir=str(tmp_path / f"cache-{next(FRESH)}"), device="cpu",
                                backbone_overrides=BACKBONE)
    monkeypatch.setattr(protocol, "run_split", lambda run, s, g=None: split)
    monkeypatch.setattr(protocol, "load_graph", lambda dataset, s: seen)
    output = backbone if backbone is not None else train_run_backbone(RUN, settings)
    fitted = {name: fit_calibrator(RUN, settings, name, QUICK, output) for name in calibrators}
    monkeypatch.setattr(protocol, "load_graph", lambda dataset, s: clean)  # the metrics read the clean labels
    rows = {name: evaluate_calibrator(RUN, settings, name, QUICK, output, fitted=model)
            for name, model in fitted.items()}
    probs = {name: model.model.predict_proba(model.graph) for name, model in fitted.items()}
    return output, probs, rows


def same_row(a: dict, b: dict) -> bool:
    keep = [key for key in a if key != "fit_seconds"]
    return all(a[key] == b[key] or (a[key] != a[key] and b[key] != b[key]) for key in keep)  # NaN == NaN


def test_poisoned_test_labels_leave_the_backbone_every_calibrator_and_every_row_unchanged(
        monkeypatch, tmp_path, graph, split, single_thread):
    _, cal_idx, test_idx = split.fold_indices(RUN.fold)
    names = calibrator_names()
    clean = run_protocol(monkeypatch, tmp_path, graph, split, graph, graph, names)
    poisoned = run_protocol(monkeypatch, tmp_path, graph, split, with_labels(graph, test_idx), graph, names)
    assert torch.equal(clean[0].logits, poisoned[0].logits) and torch.equal(clean[0].hidden, poisoned[0].hidden)
    for name in names:
        assert torch.equal(clean[1][name], poisoned[1][name]), name
        assert same_row(clean[2][name], poisoned[2][name]), name
    # AutoCal among them: its cross-fitting reads the calibration fold only, and its row names its choice
    assert "AutoCal" in names and clean[2]["AutoCal"]["selected"] in names
    # Positive controls, so the comparison above can fail. Wrong labels on the backbone's training folds: another
    # backbone, hence other rows for every calibrator.
    train_idx, _, _ = split.fold_indices(RUN.fold)
    trained_wrong = run_protocol(monkeypatch, tmp_path, graph, split, with_labels(graph, train_idx), graph, names)
    assert not torch.equal(clean[0].logits, trained_wrong[0].logits)
    for name in names:
        assert not same_row(clean[2][name], trained_wrong[2][name]), name
    # Wrong labels on the calibration fold, the clean backbone kept: every calibrator that reads labels changes.
    fitted_wrong = run_protocol(monkeypatch, tmp_path, graph, split, with_labels(graph, cal_idx), graph, names,
                                backbone=clean[0])
    for name in names:
        changed = not torch.equal(clean[1][name], fitted_wrong[1][name])
        assert changed == (name not in LABEL_FREE), name


def test_a_run_recomputed_from_an_empty_cache_gives_the_same_rows(monkeypatch, tmp_path, graph, split, single_thread):
    names = ["UnCal", "TS", "GATS", "SimCalib"]
    first = run_protocol(monkeypatch, tmp_path, graph, split, graph, graph, names)
    second = run_protocol(monkeypatch, tmp_path, graph, split, graph, graph, names)
    assert len(list(tmp_path.iterdir())) == 2  # two caches: the second backbone was trained, not loaded
    assert first[2]["UnCal"]["backbone_digest"] == second[2]["UnCal"]["backbone_digest"]
    for name in names:
        assert same_row(first[2][name], second[2][name]), name
    assert np.isfinite(first[2]["SimCalib"]["ece"])


def test_poisoned_test_labels_leave_the_batched_trainers_backbones_unchanged(monkeypatch, tmp_path, graph, split,
                                                                               single_thread):
    train_idx, _, test_idx = split.fold_indices(RUN.fold)
    monkeypatch.setattr(protocol, "run_split", lambda run, s, g=None: split)
    runs = [dataclasses.replace(RUN, init=init) for init in (0, 1)]

    def backbones(seen):
        monkeypatch.setattr(protocol, "load_graph", lambda dataset, s: seen)
        settings = ProtocolSettings(cache_dir=str(tmp_path / f"cache-{next(FRESH)}"), device="cpu",
                                    backbone_overrides=BACKBONE, batch_runs=True)
        return [output.logits for output in protocol.train_split_backbones(runs, settings)]

    clean = backbones(graph)
    assert all(torch.equal(a, b) for a, b in zip(clean, backbones(with_labels(graph, test_idx))))
    assert not any(torch.equal(a, b) for a, b in zip(clean, backbones(with_labels(graph, train_idx))))
