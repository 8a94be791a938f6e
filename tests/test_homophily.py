"""Local-homophily groups of the test nodes: definitions by hand, and that no calibrator ever sees them."""

import dataclasses

import numpy as np
import pytest
import torch

from simcalib import metrics
from simcalib.analysis import homophily
from simcalib.calibrators import CalibrationGraph, build_calibrator
from simcalib.experiment.protocol import (
    ProtocolSettings,
    Run,
    calibration_graph,
    evaluate_calibrator,
    fit_calibrator,
    load_graph,
    train_run_backbone,
)
from simcalib.seeding import derive_seed, seed_everything


def _undirected(pairs):
    src, dst = zip(*pairs)
    return torch.tensor([src + dst, dst + src])


def test_local_homophily_by_hand_with_an_isolated_node():
    # 0-1, 0-2, 0-3, 1-2; node 4 isolated. labels 0: a, 1: a, 2: b, 3: a
    edge_index = _undirected([(0, 1), (0, 2), (0, 3), (1, 2)])
    y = torch.tensor([0, 0, 1, 0, 1])
    h = homophily.local_homophily(edge_index, y, 5)
    assert h[:4] == pytest.approx([2 / 3, 1 / 2, 0.0, 1.0]) and np.isnan(h[4])


def test_groups_are_half_open_with_one_closed_at_one_and_isolated_nodes_apart():
    h = np.array([0.0, 0.1999, 0.2, 0.5, 0.7999, 0.8, 0.95, 1.0, np.nan])
    assert homophily.group_index(h).tolist() == [0, 0, 1, 2, 3, 4, 4, 4, 5]
    assert homophily.group_names() == ["[0,0.2)", "[0.2,0.4)", "[0.4,0.6)", "[0.6,0.8)", "[0.8,1]", "isolated"]


def test_group_ece_and_counts_are_those_of_each_groups_nodes():
    rng = np.random.default_rng(0)
    n = 600
    probs = rng.dirichlet(np.ones(3), size=n)
    y = rng.integers(0, 3, n)
    h = rng.random(n)
    h[:7] = np.nan
    summary = homophily.summarise(probs, y, h)
    group = homophily.group_index(h)
    assert sum(summary["count"]) == n and summary["count"][-1] == 7
    for g in range(6):
        members = group == g
        assert summary["count"][g] == members.sum()
        assert summary["ece"][g] == pytest.approx(100 * metrics.ece(probs[members], y[members]))
        assert summary["accuracy"][g] == pytest.approx(100 * (probs[members].argmax(1) == y[members]).mean())
    assert "positive_ece" not in summary
    back = homophily.from_json(homophily.to_json(summary))
    assert back["count"] == summary["count"] and back["ece"] == pytest.approx(summary["ece"])


def test_an_empty_group_is_nan_and_binary_graphs_get_the_positive_calibration_error():
    probs = np.array([[0.9, 0.1], [0.3, 0.7], [0.6, 0.4]])
    y = np.array([0, 1, 1])
    summary = homophily.summarise(probs, y, np.array([0.1, 0.1, 0.9]))
    assert summary["count"] == [2, 0, 0, 0, 1, 0] and np.isnan(summary["ece"][1])
    assert summary["positive_ece"][0] == pytest.approx(100 * metrics.positive_ece(probs[:2], y[:2]))
    assert homophily.from_json(homophily.to_json(summary))["ece"][1] != homophily.from_json(
        homophily.to_json(summary))["ece"][1]  # NaN survives the JSON round trip (as null)


@pytest.fixture
def hetero_settings(tmp_path, mirror_dir):
    return ProtocolSettings(data_root=str(tmp_path / "data"), mirror=str(mirror_dir), splits_dir="none",
                            cache_dir=str(tmp_path / "cache"), device="cpu", generated_splits=True,
                            backbone_overrides=(("max_epochs", 30),))


def test_the_row_records_homophily_groups_from_the_true_labels(hetero_settings):
    run = Run("chameleon_filtered", "GCN", 0, 0, 0)
    row = evaluate_calibrator(run, hetero_settings, "TS")
    graph = load_graph(run.dataset, hetero_settings)
    output = train_run_backbone(run, hetero_settings)
    fitted = fit_calibrator(run, hetero_settings, "TS", output=output)
    probs = fitted.model.predict_proba(fitted.graph)[fitted.test_idx].detach().numpy()
    h = homophily.local_homophily(graph.edge_index, graph.y, graph.num_nodes)[fitted.test_idx]
    want = homophily.summarise(probs, graph.y[fitted.test_idx].numpy(), h)
    got = homophily.from_json(row["homophily_bins"])
    assert got["count"] == want["count"] and sum(got["count"]) == len(fitted.test_idx)
    assert np.allclose(got["ece"], want["ece"], equal_nan=True, atol=1e-5)
    # the same numbers from the calibrator's view of the graph (test labels hidden) would differ: it cannot
    # compute them
    assert (fitted.graph.labels[torch.from_numpy(fitted.test_idx)] == -1).all()


@pytest.mark.parametrize("name", ["CaGCN", "GATS", "SimCalib"])
def test_graph_calibrators_fit_the_same_model_with_the_test_labels_hidden_or_given(name, hetero_settings):
    run = Run("chameleon_filtered", "GCN", 0, 0, 1)
    output = train_run_backbone(run, hetero_settings)
    hidden, test_idx = calibration_graph(run, hetero_settings, output)
    graph = load_graph(run.dataset, hetero_settings)
    given = dataclasses.replace(hidden, labels=graph.y.clone(), _cache={})  # every label, test nodes' included
    options = {"max_epochs": 40, "patience": 10}
    probs = []
    for cg in (hidden, given):
        seed_everything(derive_seed(run.seed(hetero_settings), name))
        model = build_calibrator(name, cg.num_classes, run.dataset, run.backbone, **options).fit(cg)
        with torch.no_grad():
            probs.append(model.predict_proba(cg)[torch.from_numpy(test_idx)])
    assert torch.equal(probs[0], probs[1])
    assert not {"homophily", "local_homophily"} & ({f.name for f in dataclasses.fields(CalibrationGraph)} | set(hidden._cache))


def test_binary_graph_rows_carry_roc_auc_positive_ece_and_the_one_class_flag(hetero_settings, tmp_path):
    from simcalib.report.results import load_study_results
    from simcalib.store.results_store import append_rows

    run = Run("minesweeper", "GCN", 0, 0, 0)
    row = evaluate_calibrator(run, hetero_settings, "UnCal")
    output = train_run_backbone(run, hetero_settings)
    _, test_idx = calibration_graph(run, hetero_settings, output)
    predicted = output.logits[torch.from_numpy(test_idx)].argmax(1)
    assert row["one_class_backbone"] == (predicted.unique().numel() == 1)
    probs = torch.softmax(output.logits[torch.from_numpy(test_idx)], 1).numpy()
    y = load_graph(run.dataset, hetero_settings).y[test_idx].numpy()
    assert row["roc_auc"] == pytest.approx(100 * metrics.roc_auc(probs, y), rel=1e-6)
    assert row["positive_ece"] == pytest.approx(100 * metrics.positive_ece(probs, y), rel=1e-5)
    assert "positive_ece" in homophily.from_json(row["homophily_bins"])
    # the report reads the flag and the columns back from results.csv
    append_rows(tmp_path / "out" / "results.csv", [row])
    rows = load_study_results(tmp_path / "out").rows
    assert rows["one_class_backbone"].tolist() == [row["one_class_backbone"]]
    assert rows["roc_auc"].tolist() == pytest.approx([row["roc_auc"]])
    assert homophily.from_json(rows["homophily_bins"][0])["count"] == homophily.from_json(row["homophily_bins"])["count"]


def test_one_class_flag_is_set_for_a_backbone_that_predicts_the_majority_class_only():
    from simcalib.backbones import BackboneOutput
    from simcalib.experiment.protocol import one_class_backbone

    logits = torch.tensor([[2.0, -1.0], [1.5, 0.0], [0.1, 0.0], [-1.0, 3.0]])
    output = BackboneOutput(logits, torch.zeros(4, 2), 1.0, 0.0, 0, 1, 0.0)
    assert one_class_backbone(output, np.array([0, 1, 2]))
    assert not one_class_backbone(output, np.array([0, 3]))
