"""WATS: wavelet features against hand computations, its coefficients, and its fit."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special
import torch
from graph_fixtures import tiny_graph

from simcalib.calibrators import HIDDEN_LABEL, CalibrationGraph, build_calibrator
from simcalib.calibrators.wats import WATS, chebyshev_coefficients, wavelet_features
from simcalib.errors import ConfigError

R2, R3 = math.sqrt(2.0), math.sqrt(3.0)


def undirected(pairs) -> torch.Tensor:
    """edge_index [2, 2P] holding both directions of every pair."""
    pairs = torch.tensor(pairs).T
    return torch.cat([pairs, pairs.flip(0)], dim=1)


def heat(k: int, s: float) -> float:
    return 2.0 * math.exp(-s) * (-1) ** k * scipy.special.iv(k, s)


def hand_features(shifted: np.ndarray, x0: np.ndarray, coefficients: list[float]) -> np.ndarray:
    """Chebyshev terms of a hand-written L^ (dense), scaled, L1-normalised per node."""
    terms = [x0, shifted @ x0]
    while len(terms) < len(coefficients):
        terms.append(2.0 * shifted @ terms[-1] - terms[-2])
    f = np.stack(terms, axis=1) * np.array(coefficients)
    return f / np.abs(f).sum(axis=1, keepdims=True)


# 0 - 1 - 2: degrees 1, 2, 1; D^-1/2 A D^-1/2 has 1/sqrt(1 * 2) on every edge, and L^ = L - I = -D^-1/2 A D^-1/2
PATH_SHIFTED = -np.array([[0, 1 / R2, 0],
                          [1 / R2, 0, 1 / R2],
                          [0, 1 / R2, 0]])
# star: centre 0 (degree 3), leaves 1, 2, 3 (degree 1): 1/sqrt(3 * 1) on every edge
STAR_SHIFTED = -np.array([[0, 1 / R3, 1 / R3, 1 / R3],
                          [1 / R3, 0, 0, 0],
                          [1 / R3, 0, 0, 0],
                          [1 / R3, 0, 0, 0]])


def test_heat_coefficients_are_the_bessel_series_of_the_heat_kernel():
    for order, s in ((2, 1.2), (5, 0.4), (3, 2.0)):
        expected = [heat(k, s) for k in range(order + 1)]
        assert np.allclose(chebyshev_coefficients("heat", order, s), expected, rtol=1e-12, atol=0)
    assert np.allclose(chebyshev_coefficients("heat", 2, 1.2), [0.8396, -0.4305, 0.1220], atol=5e-5)
    # and they are the Chebyshev projection of exp(-s (x + 1)), x = cos(theta), that the WATS code integrates
    theta = np.linspace(0, np.pi, 200001)
    for k, c in enumerate(chebyshev_coefficients("heat", 3, 1.2)):
        integral = np.trapezoid(np.cos(k * theta) * np.exp(-1.2 * (np.cos(theta) + 1)), theta)
        assert abs(2 / np.pi * integral - c) < 1e-9


def test_exp_coefficients():
    assert np.allclose(chebyshev_coefficients("exp", 4, 0.4), [math.exp(-0.4 * k) for k in range(5)], rtol=1e-14)


def test_path_graph_features_by_hand():
    edge_index = undirected([[0, 1], [1, 2]])
    x0 = np.log1p(2.0 * np.array([1.0, 2.0, 1.0]))  # each undirected edge counted in and out
    expected = hand_features(PATH_SHIFTED, x0, [heat(k, 1.2) for k in range(3)])
    got = wavelet_features(edge_index, 3, order=2, scale=1.2, kernel="heat").double().numpy()
    assert np.allclose(got, expected, atol=1e-7)
    # node 0 written out: T1 = -x0[1] / sqrt2, T2 = 2 * (-1/sqrt2) * T1[1] - x0[0], T1[1] = -(x0[0] + x0[2]) / sqrt2
    t1_0, t1_1 = -x0[1] / R2, -(x0[0] + x0[2]) / R2
    t2_0 = 2 * (-1 / R2) * t1_1 - x0[0]
    raw = np.array([heat(0, 1.2) * x0[0], heat(1, 1.2) * t1_0, heat(2, 1.2) * t2_0])
    assert np.allclose(got[0], raw / np.abs(raw).sum(), atol=1e-7)
    assert np.allclose(np.abs(got).sum(1), 1.0, atol=1e-6)


def test_star_graph_features_by_hand_with_both_kernels_and_the_self_loop_count():
    edge_index = undirected([[0, 1], [0, 2], [0, 3]])
    degree = np.array([3.0, 1.0, 1.0, 1.0])
    for kernel, order, s in (("heat", 2, 1.2), ("exp", 4, 0.4), ("heat", 4, 0.7)):
        for self_loop in (False, True):
            x0 = np.log1p(2.0 * (degree + self_loop))
            coefficients = [heat(k, s) if kernel == "heat" else math.exp(-s * k) for k in range(order + 1)]
            expected = hand_features(STAR_SHIFTED, x0, coefficients)
            got = wavelet_features(edge_index, 4, order, s, kernel, degree_self_loop=self_loop).double().numpy()
            assert got.shape == (4, order + 1)
            assert np.allclose(got, expected, atol=1e-7), (kernel, order, self_loop)
    # the leaves are alike
    got = wavelet_features(edge_index, 4, 2, 1.2).numpy()
    assert np.allclose(got[1], got[2]) and np.allclose(got[1], got[3])


def test_self_loops_in_the_edges_change_neither_the_laplacian_nor_the_count():
    edge_index = undirected([[0, 1], [1, 2]])
    looped = torch.cat([edge_index, torch.tensor([[0, 1, 2], [0, 1, 2]])], dim=1)
    assert torch.equal(wavelet_features(edge_index, 3, 2, 1.2), wavelet_features(looped, 3, 2, 1.2))


def test_an_isolated_node_gets_finite_features():
    edge_index = undirected([[0, 1], [1, 2]])  # node 3 isolated: L_33 = 0, so L^_33 = -1
    c = chebyshev_coefficients("heat", 2, 1.2)
    for self_loop in (False, True):
        got = wavelet_features(edge_index, 4, 2, 1.2, degree_self_loop=self_loop)
        assert torch.isfinite(got).all()
        # T0 = x0, T1 = -x0, T2 = 2 (-1)(-x0) - x0 = x0 (x0 = log1p(1e-6) or log 3 > 0): [c0, -c1, c2] / L1
        expected = np.array([c[0], -c[1], c[2]]) / np.abs(c).sum()
        assert np.allclose(got[3].double().numpy(), expected, atol=1e-7)
        # the connected nodes are as without the isolated node
        assert torch.allclose(got[:3], wavelet_features(edge_index, 3, 2, 1.2, degree_self_loop=self_loop))


def test_temperatures_positive_and_argmax_kept():
    graph = tiny_graph()
    torch.manual_seed(0)
    model = build_calibrator("WATS", graph.num_classes, max_epochs=60).fit(graph)
    temperature = model.temperature(graph)
    assert temperature.shape == (graph.num_nodes, 1) and (temperature > 0).all() and torch.isfinite(temperature).all()
    assert torch.equal(model.predict_proba(graph).argmax(1), graph.logits.argmax(1))
    assert temperature.std() > 0  # node-wise
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.fill_(-1e4)  # softplus underflows to 0: T = 1e-6
    assert (model.temperature(graph) > 0).all() and torch.isfinite(model(graph)).all()


def fitted_state(graph: CalibrationGraph, stop_idx=None) -> dict:
    torch.manual_seed(5)
    model = build_calibrator("WATS", graph.num_classes, "Cora", "GCN", max_epochs=80)
    model.fit(graph, stop_idx=stop_idx)
    return {k: v.clone() for k, v in model.state_dict().items()}


def same(a: dict, b: dict) -> bool:
    return all(torch.equal(a[k], b[k]) for k in a)


def test_fit_reads_the_calibration_labels_and_early_stops_on_the_training_labels_only():
    base = tiny_graph()
    other = torch.ones(base.num_nodes, dtype=torch.bool)
    other[base.train_idx] = other[base.cal_idx] = False
    # every label visible, the test nodes' changed: the same model as with them hidden
    visible = base.labels.clone()
    visible[other] = (torch.arange(int(other.sum())) % base.num_classes)
    shown = CalibrationGraph(base.logits, base.hidden, base.edge_index, visible, base.train_idx, base.cal_idx)
    reference = fitted_state(base)
    assert same(fitted_state(shown), reference)
    # early stopping on the calibration fold too: the training folds' labels are not read at all
    cal_only = fitted_state(base, stop_idx=base.cal_idx)
    hidden_train = base.labels.clone()
    hidden_train[base.train_idx] = HIDDEN_LABEL
    no_train = CalibrationGraph(base.logits, base.hidden, base.edge_index, hidden_train, base.train_idx, base.cal_idx)
    assert same(fitted_state(no_train, stop_idx=base.cal_idx), cal_only)
    # while a calibration label changes the fit
    moved = base.labels.clone()
    moved[base.cal_idx[0]] = (moved[base.cal_idx[0]] + 1) % base.num_classes
    changed = CalibrationGraph(base.logits, base.hidden, base.edge_index, moved, base.train_idx, base.cal_idx)
    assert not same(fitted_state(changed, stop_idx=base.cal_idx), cal_only)


def test_registered_name_builds_with_the_per_dataset_settings():
    expected = {"Cora": (8, 0.95, True), "Citeseer": (32, 0.4, True), "Pubmed": (32, 0.4, True),
                "Computers": (64, 0.4, False), "Photo": (32, 0.4, False), "CoraFull": (128, 0.2, True),
                "CS": (32, 0.4, False), "Physics": (32, 0.4, False), None: (32, 0.4, False)}
    for dataset, (hidden, dropout, self_loop) in expected.items():
        model = build_calibrator("wats", 5, dataset, "GCN")
        assert isinstance(model, WATS)
        assert (model.hidden, model.dropout, model.degree_self_loop) == (hidden, dropout, self_loop), dataset
        assert model.lin1.out_features == hidden and model.lin1.in_features == 3
        assert (model.order, model.scale, model.kernel) == (2, 1.2, "heat")
        assert (model.lr, model.weight_decay, model.max_epochs, model.patience) == (0.01, 0.0, 1000, 50)
    later = build_calibrator("WATS", 5, "Cora", "GCN", kernel="exp", order=4, scale=0.4, hidden=16)
    assert later.lin1.in_features == 5 and later.hidden == 16 and later.dropout == 0.95


@pytest.mark.parametrize("options, named", [
    ({"order": 0}, "order"), ({"order": -1}, "order"), ({"order": 1.5}, "order"), ({"kernel": "gauss"}, "kernel"),
    ({"scale": 0.0}, "scale"), ({"hidden": 0}, "hidden"), ({"dropout": 1.0}, "dropout")])
def test_bad_options_raise_a_config_error_naming_the_option(options, named):
    with pytest.raises(ConfigError, match=named):
        build_calibrator("WATS", 3, **options)


def test_features_are_computed_once_per_graph_and_shared():
    graph = tiny_graph()
    first, second = build_calibrator("WATS", 3), build_calibrator("WATS", 3, hidden=4)
    assert first.features(graph) is second.features(graph)
    assert build_calibrator("WATS", 3, kernel="exp").features(graph) is not first.features(graph)


def test_temperature_is_the_mlp_of_the_features_with_dropout_while_training():
    graph = tiny_graph()
    torch.manual_seed(0)
    model = build_calibrator("WATS", graph.num_classes, hidden=6, dropout=0.5)
    f = model.features(graph)
    model.eval()
    by_hand = torch.nn.functional.softplus(
        torch.relu(f @ model.lin1.weight.T + model.lin1.bias) @ model.lin2.weight.T + model.lin2.bias) + 1e-6
    assert torch.allclose(model.temperature(graph), by_hand, atol=1e-7, rtol=0)
    assert torch.allclose(model(graph), torch.log_softmax(graph.logits / by_hand, dim=1), atol=1e-6)
    model.train()
    torch.manual_seed(1)
    first = model.temperature(graph)
    second = model.temperature(graph)
    assert not torch.equal(first, second)  # a fresh dropout mask per call while training
