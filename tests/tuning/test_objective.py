"""The search objective: labelled nodes only, held-out scoring, deterministic per-run values."""

import dataclasses

import numpy as np
import pytest
import torch

from simcalib.calibrators import HIDDEN_LABEL, CalibrationGraph
from simcalib.errors import ConfigError
from simcalib.experiment import protocol
from simcalib.experiment.protocol import make_runs
from simcalib.tuning import CalibrationObjective, ObjectiveSettings
from simcalib.tuning.objective import hide_labels, inner_parts, tuning_order

FAST_TS = {"lr": 0.05, "max_epochs": 50, "patience": 10}


def test_inner_parts_partition_the_fold_per_class():
    labels = np.array([0] * 7 + [1] * 5 + [2] * 3)
    nodes = np.arange(15)
    parts = inner_parts(labels, nodes, 2, seed=3)
    assert sorted(np.concatenate(parts).tolist()) == nodes.tolist()  # disjoint and complete
    for c in range(3):
        counts = [int((labels[p] == c).sum()) for p in parts]
        assert max(counts) - min(counts) <= 1  # class balance kept
    assert all(np.array_equal(a, b) for a, b in zip(parts, inner_parts(labels, nodes, 2, seed=3)))
    assert not all(np.array_equal(a, b) for a, b in zip(parts, inner_parts(labels, nodes, 2, seed=4)))


def test_hide_labels_leaves_nothing_of_the_scored_part_visible():
    y = torch.arange(10) % 2
    graph = CalibrationGraph.from_run(torch.randn(10, 2), torch.randn(10, 3), torch.empty(2, 0, dtype=torch.long), y,
                                      torch.tensor([0, 1]), torch.tensor([2, 3, 4, 5]))
    view = hide_labels(graph, torch.tensor([2, 4]))
    assert view.cal_idx.tolist() == [2, 4]
    assert view.labels[[3, 5]].tolist() == [HIDDEN_LABEL, HIDDEN_LABEL]
    assert view.labels[[0, 1, 2, 4]].tolist() == y[[0, 1, 2, 4]].tolist()
    assert graph.labels[3] == y[3]  # the original graph is untouched


def test_settings_are_validated():
    with pytest.raises(ConfigError, match="unknown objective metric 'acc'"):
        ObjectiveSettings("acc")
    with pytest.raises(ConfigError, match="unknown objective evaluation"):
        ObjectiveSettings(evaluation="test")


def test_values_are_per_run_deterministic_and_differ_by_evaluation(tiny_protocol):
    runs = make_runs("cora", "gcn", [0], [0], [0, 1])
    objective = CalibrationObjective("ts", runs, tiny_protocol)
    values = list(objective.run_values(FAST_TS))
    assert len(values) == 2 and all(np.isfinite(values)) and values[0] != values[1]
    assert list(CalibrationObjective("TS", runs, tiny_protocol).run_values(FAST_TS)) == values  # fresh object, same numbers
    insample = CalibrationObjective("ts", runs, tiny_protocol, ObjectiveSettings(evaluation="insample"))
    assert list(insample.run_values(FAST_TS)) != values
    ece = CalibrationObjective("ts", runs, tiny_protocol, ObjectiveSettings(metric="ece")).mean(FAST_TS)
    assert 0 < ece < 100


def test_poisoned_test_labels_leave_the_objective_unchanged(monkeypatch, tmp_path):
    """Every test-node label replaced by a wrong one: identical values. Poisoning calibration-fold labels
    instead must change them (so this check can fail). On a generated graph, each evaluation training its
    backbone afresh in an empty cache (a backbone cached from the clean labels would hide a leak into it)."""
    from synthetic_graphs import make_sbm_graph

    from simcalib.experiment.protocol import ProtocolSettings, Run
    from simcalib.experiment.splits import generate_split

    graph = make_sbm_graph(num_nodes=240, num_classes=3, num_features=32, seed=5, p_in=0.06, p_out=0.015)
    split = generate_split(graph.y.numpy(), seed=3)  # as a fixed split file: the labels cannot move it
    run = Run("Cora", "GCN", 0, 0, 0)  # "Cora" names the protocol defaults only
    _, cal_idx, test_idx = split.fold_indices(run.fold)
    monkeypatch.setattr(protocol, "run_split", lambda r, s, g=None: split)
    caches = iter(range(10))

    def values(wrong_nodes):
        y = graph.y.clone()
        y[wrong_nodes] = (y[wrong_nodes] + 1) % graph.num_classes
        monkeypatch.setattr(protocol, "load_graph", lambda dataset, settings: dataclasses.replace(graph, y=y))
        settings = ProtocolSettings(cache_dir=str(tmp_path / f"cache-{next(caches)}"), device="cpu",
                                    backbone_overrides=(("max_epochs", 60), ("patience", 20)))
        return list(CalibrationObjective("ts", [run], settings).run_values(FAST_TS))

    clean = values(test_idx[:0])
    assert values(test_idx) == clean
    assert values(cal_idx) != clean


def test_tuning_order_alternates_splits():
    runs = tuning_order(make_runs("cora", "gcn", [0, 1, 2], [0], [0, 1, 2]))
    assert [(r.split, r.fold) for r in runs[:4]] == [(0, 0), (1, 0), (2, 0), (0, 1)]
    assert sorted(runs, key=lambda r: r.tag()) == sorted(make_runs("cora", "gcn", [0, 1, 2], [0], [0, 1, 2]), key=lambda r: r.tag())
