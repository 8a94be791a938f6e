"""GETS (simcalib/calibrators/gets.py) and its presets GETS_ap and GETS_holdout: the parts of the GETS code's
model (per-class scaling, raw features, a fixed degree table, the configs), the gate and the fit nodes.

The properties every registered calibrator must have (argmax kept where claimed, poisoned test labels give an
identical fit, same seed same fit, node permutation) run on the three presets in test_graph_calibrators.py.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from graph_fixtures import single_thread, tiny_graph

import simcalib.calibrators.gets as gets_module
from simcalib.calibrators import GETS, build_calibrator, calibrator_seed_name
from simcalib.calibrators.gets import EXPERT_INPUTS
from simcalib.errors import ConfigError
from simcalib.seeding import seed_everything

pytestmark = pytest.mark.usefixtures(single_thread.__name__)

QUICK = {"max_epochs": 60, "patience": 60, "lr": 0.05}


def prepared(name: str, graph, **options) -> GETS:
    seed_everything(0)
    model = build_calibrator(name, graph.num_classes, **options)
    model.prepare(graph)
    with torch.no_grad():  # a non-trivial gate: W_g starts at 0
        model.gate_weight.normal_()
    return model


def fitted(name: str, graph, seed: int = 0, **options) -> GETS:
    seed_everything(seed)
    return build_calibrator(name, graph.num_classes, **{**QUICK, **options}).fit(graph)


# ----------------------------------------------------------------------------- the GETS code's model


def test_the_degree_embedding_is_a_fixed_table_never_trained():
    graph = tiny_graph()
    seed_everything(0)
    model = build_calibrator("GETS", graph.num_classes, **QUICK)
    model.prepare(graph)
    before = {key: table.clone() for key, table in model.degree_tables().items()}
    assert sorted(before) == [str(e) for e, kinds in enumerate(EXPERT_INPUTS) if "degree" in kinds]
    model.fit(graph)
    assert model.fit_info["epochs"] > 1  # it trained
    for key, table in model.degree_tables().items():
        assert torch.equal(table, before[key])
        assert not table.requires_grad
    names = [name for name, _ in model.named_parameters()]
    assert not any("degree" in name for name in names)
    assert all(f"degree_table_{key}" in model.state_dict() for key in before)  # saved with the model
    # the ablation that trains it: same shapes, and the tables move
    trained = fitted("GETS", graph, degree_embedding="trained")
    moved = [not torch.equal(trained.degree_tables()[k], t) for k, t in trained_start_tables(graph).items()]
    assert all(moved)


def trained_start_tables(graph) -> dict[str, torch.Tensor]:
    seed_everything(0)
    model = build_calibrator("GETS", graph.num_classes, **QUICK, degree_embedding="trained")
    model.prepare(graph)
    return {key: table.detach().clone() for key, table in model.degree_tables().items()}


def test_the_fixed_table_is_drawn_from_the_seed_and_is_standard_normal():
    graph = tiny_graph()
    first = prepared("GETS", graph, degree_dim=512).degree_tables()
    second = prepared("GETS", graph, degree_dim=512).degree_tables()
    assert all(torch.equal(first[key], second[key]) for key in first)
    values = torch.cat([table.flatten() for table in first.values()])
    assert abs(values.mean().item()) < 0.05 and abs(values.std().item() - 1.0) < 0.05


def test_experts_output_one_scaling_per_class():
    graph = tiny_graph()
    model = fitted("GETS", graph)
    model.eval()
    with torch.no_grad():
        scaling = model.scaling(graph)  # [N, K]
        outputs = model.expert_outputs(graph)
    assert scaling.shape == (graph.num_nodes, graph.num_classes)
    assert outputs.shape == (graph.num_nodes, len(EXPERT_INPUTS), graph.num_classes)
    spread = scaling.max(1).values - scaling.min(1).values
    assert (spread > 1e-3).any()  # some node's classes are scaled differently
    expected = F.log_softmax(graph.logits * scaling, dim=-1)
    assert torch.allclose(model(graph), expected, atol=1e-6)
    assert not model.accuracy_preserving
    with pytest.raises(ConfigError, match="no temperature"):
        model.temperature(graph)


def test_gets_ap_has_one_temperature_per_node_and_keeps_the_argmax():
    graph = tiny_graph()
    model = fitted("GETS_ap", graph)
    assert model.accuracy_preserving
    with torch.no_grad():
        temperature = model.temperature(graph)
        assert temperature.shape == (graph.num_nodes, 1) and (temperature > 0).all()
        assert torch.equal(model.predict_proba(graph).argmax(1), graph.logits.argmax(1))


def test_raw_features_feed_the_experts_and_the_gate_and_the_hidden_layer_does_not():
    graph = tiny_graph()
    model = prepared("GETS", graph)
    model.eval()
    other_x = dataclasses.replace(graph, features=graph.features.flip(0), _cache={})
    other_hidden = dataclasses.replace(graph, hidden=graph.hidden.flip(0) + 1.0, _cache={})
    with torch.no_grad():
        out = model(graph)
        assert not torch.allclose(model(other_x), out)
        assert torch.equal(model(other_hidden), out)
        assert not torch.allclose(model.gates(other_x)[0], model.gates(graph)[0])
    # GETS_ap reads the backbone's first layer instead
    ap = prepared("GETS_ap", graph)
    ap.eval()
    with torch.no_grad():
        assert torch.equal(ap(other_x), ap(graph))
        assert not torch.allclose(ap(other_hidden), ap(graph))


def test_sparse_and_dense_features_give_the_same_model():
    graph = tiny_graph()
    sparse = dataclasses.replace(graph, features=graph.features.to_sparse_csr(), _cache={})
    model = prepared("GETS", graph)
    model.eval()
    with torch.no_grad():
        assert torch.allclose(model(sparse), model(graph), atol=1e-6)


def test_missing_raw_features_is_a_config_error_and_gets_ap_needs_none():
    graph = dataclasses.replace(tiny_graph(), features=None, _cache={})
    for name in ("GETS", "GETS_holdout"):
        with pytest.raises(ConfigError, match="node features"):
            build_calibrator(name, graph.num_classes, **QUICK).fit(graph)
    fitted("GETS_ap", graph)  # the backbone's first layer: no X needed


def test_builds_one_expert_per_input_combination():
    graph = tiny_graph()
    model = prepared("GETS", graph)
    assert len(model.experts) == len(EXPERT_INPUTS) == 7
    assert sorted(model.feature_projections) == [str(e) for e, s in enumerate(EXPERT_INPUTS) if "features" in s]
    k, f, d = graph.num_classes, model.feature_dim, model.degree_dim
    assert [expert.weight1.shape[0] for expert in model.experts] == [k, f, d, k + f, f + d, k + d, k + f + d]
    assert {expert.weight2.shape[1] for expert in model.experts} == {k}
    assert model.feature_projections["1"].in_features == graph.features.shape[1]  # raw X, its own map
    assert {expert.weight2.shape[1] for expert in prepared("GETS_ap", graph).experts} == {1}


# -------------------------------------------------------------------------------------------- the gate


def test_gate_keeps_k_experts_per_node_and_the_scaling_is_their_mixture():
    graph = tiny_graph()
    model = prepared("GETS", graph, top_k=2)
    model.eval()
    with torch.no_grad():
        gates, _ = model.gates(graph)
        assert torch.equal((gates > 0).sum(1), torch.full((graph.num_nodes,), 2))
        assert torch.allclose(gates.sum(1), torch.ones(graph.num_nodes))
        # the two kept experts are the two largest clean gate scores, weighted by their softmax
        scores = torch.cat([graph.logits, model.gate_projection(graph.features)], 1) @ model.gate_weight
        top_values, top_index = scores.topk(2, dim=1)
        expected = torch.zeros_like(scores).scatter(1, top_index, torch.softmax(top_values, 1))
        assert torch.allclose(gates, expected, atol=1e-6)
        mixed = (expected.unsqueeze(-1) * model.expert_outputs(graph)).sum(1)  # [N, K]
        assert torch.allclose(model.scaling(graph), F.softplus(mixed), rtol=1e-5)


def test_gets_ap_temperature_is_the_inverse_softplus_of_the_mixture():
    graph = tiny_graph()
    model = prepared("GETS_ap", graph)
    model.eval()
    with torch.no_grad():
        gates, _ = model.gates(graph)
        mixed = (gates * model.expert_outputs(graph)[..., 0]).sum(1, keepdim=True)
        assert torch.allclose(model.temperature(graph), 1.0 / F.softplus(mixed), rtol=1e-5)


def test_balance_loss_is_the_cv_squared_of_importance_and_load_without_noise():
    graph = tiny_graph()
    model = prepared("GETS", graph, noisy_gating=False, balance=0.5)
    model.train()
    gates, balance = model.gates(graph)
    importance, load = gates.sum(0).detach().numpy(), (gates > 0).sum(0).double().numpy()

    def cv2(x):
        return x.var(ddof=1) / (x.mean() ** 2 + 1e-10)

    assert balance.item() == pytest.approx(0.5 * (cv2(importance) + cv2(load)), rel=1e-5)


@pytest.mark.parametrize("name", ["GETS", "GETS_ap"])
def test_gate_projection_learns_from_the_second_step(name):
    # W_g and W_n start at 0 (as in GETS), so the projection feeding them gets its first gradient on step 2
    graph = tiny_graph()
    seed_everything(0)
    model = build_calibrator(name, graph.num_classes)
    model.prepare(graph)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    gradients = []
    for _ in range(2):
        optimizer.zero_grad()
        loss = F.nll_loss(model(graph)[graph.cal_idx], graph.labels[graph.cal_idx]) + model.balance_loss
        loss.backward()
        gradients.append(model.gate_projection.weight.grad.abs().sum().item())
        optimizer.step()
    assert gradients[0] == 0 and gradients[1] > 0


# ----------------------------------------------------------------------------------- configs and fitting

# PROTOCOL section 8's table of the GETS configs (gets_config/<dataset>.yaml)
CONFIG_TABLE = {
    "Cora": (0.001, 0.0, 0.5, 16, 16, 16, 2, 1.0, True),
    "Citeseer": (0.1, 0.01, 0.2, 16, 32, 64, 2, 1.0, True),
    "Computers": (0.1, 0.0, 0.8, 16, 64, 16, 2, 1.0, False),
    "Photo": (0.1, 0.001, 0.8, 32, 64, 32, 2, 0.1, False),
    "CS": (0.1, 0.0, 0.8, 16, 64, 32, 1, 1.0, False),
    "Physics": (0.1, 0.001, 0.2, 16, 64, 64, 1, 1.0, False),
}


@pytest.mark.parametrize("dataset", sorted(CONFIG_TABLE))
@pytest.mark.parametrize("name", ["GETS", "GETS_ap", "GETS_holdout"])
def test_the_gets_configs_hold_for_all_six_datasets(name, dataset):
    model = build_calibrator(name, 5, dataset, "GCN")
    got = (model.lr, model.weight_decay, model.dropout, model.hidden, model.feature_dim, model.degree_dim,
           model.top_k, model.balance, model.self_loops)
    assert got == CONFIG_TABLE[dataset]
    assert (model.max_epochs, model.patience) == (1000, 50)


def test_other_datasets_get_the_documented_default_and_bad_options_are_refused():
    model = build_calibrator("GETS", 5, "Pubmed", "GCN")
    assert (model.lr, model.max_epochs, model.patience, model.hidden, model.top_k, model.self_loops) == \
        (0.01, 2000, 100, 16, 2, True)
    with pytest.raises(ConfigError, match="top_k"):
        build_calibrator("GETS", 3, top_k=8)
    with pytest.raises(ConfigError, match="expert_output"):
        build_calibrator("GETS", 3, expert_output="vector")
    with pytest.raises(ConfigError, match="stopping"):
        build_calibrator("GETS", 3, stopping="test")


def test_the_adjacency_without_self_loops_leaves_isolated_nodes_out():
    graph = tiny_graph()
    model = prepared("GETS", graph, self_loops=False)
    adj = model.graph_inputs(graph).adj.matrix.to_dense()
    assert torch.equal(adj.diagonal(), torch.zeros(graph.num_nodes))
    assert adj[graph.num_nodes - 3].abs().sum() == 0  # tiny_problem's isolated node
    with_loops = prepared("GETS", graph).graph_inputs(graph).adj.matrix.to_dense()
    assert (with_loops.diagonal() > 0).all()


@pytest.fixture
def fit_nodes(monkeypatch) -> dict:
    """The fit and early-stopping nodes GETS hands to the common training rule, recorded as it calls it."""
    seen = {}
    original = gets_module.fit_nll

    def spy(calibrator, graph, fit_idx, stop_idx, penalty=None):
        seen["fit"], seen["stop"] = fit_idx.clone(), stop_idx.clone()
        return original(calibrator, graph, fit_idx, stop_idx, penalty)

    monkeypatch.setattr(gets_module, "fit_nll", spy)
    return seen


@pytest.mark.parametrize("name", ["GETS", "GETS_ap"])
def test_fitted_on_the_calibration_fold_and_stopped_on_the_training_folds(name, fit_nodes):
    graph = tiny_graph()
    seen = fit_nodes
    model = fitted(name, graph)
    assert torch.equal(seen["fit"], graph.cal_idx) and torch.equal(seen["stop"], graph.train_idx)
    assert 0 <= model.fit_info["best_epoch"] < model.fit_info["epochs"]
    test_node = graph.num_nodes - 1  # neither training nor calibration: its label is hidden
    assert test_node not in graph.labelled_idx()
    with pytest.raises(ConfigError, match="hidden"):
        build_calibrator(name, graph.num_classes).fit(graph, torch.cat([graph.cal_idx, torch.tensor([test_node])]))


def test_holdout_fits_on_one_half_of_each_class_of_the_calibration_fold_and_stops_on_the_other(fit_nodes):
    graph = tiny_graph()
    seen = fit_nodes
    fitted("GETS_holdout", graph)
    fit, stop = seen["fit"], seen["stop"]
    assert set(fit.tolist()).isdisjoint(stop.tolist())
    assert sorted(torch.cat([fit, stop]).tolist()) == sorted(graph.cal_idx.tolist())
    for k in graph.labels[graph.cal_idx].unique():
        members = int((graph.labels[graph.cal_idx] == k).sum())
        assert int((graph.labels[stop] == k).sum()) == (members + 1) // 2  # a half of each class


def test_gets_ap_draws_from_the_stream_of_the_name_gets():
    # its rows reproduce the rows written as GETS before GETS followed the GETS code (docs/decisions.md)
    assert calibrator_seed_name("GETS_ap") == "GETS"
    assert calibrator_seed_name("GETS_holdout") == "GETS_holdout"
    assert calibrator_seed_name("gets") == "GETS"
