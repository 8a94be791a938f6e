"""Reuses that skip repeated work give the same model bit for bit: each fit is compared with the same fit with the
reuse switched off (its private flag), probabilities with ``torch.equal``.

- GETS keeps the feature products of the early-stopping forward for the next training forward
  (``GETS._reuse_products``);
- structures of the graph's constant tensors (GETS's adjacency and sparse features) are built once per tensor
  object and shared by every fit on that graph (:mod:`simcalib.calibrators.graph_cache`).
"""

from __future__ import annotations

import pytest
import torch
from graph_fixtures import single_thread, tiny_graph

from simcalib.calibrators import CalibrationGraph, build_calibrator, graph_cache
from simcalib.calibrators.gets import GETS
from simcalib.seeding import seed_everything

pytestmark = pytest.mark.usefixtures(single_thread.__name__)

QUICK = {"max_epochs": 40, "patience": 40, "lr": 0.05}


def fit(name: str, graph: CalibrationGraph, **options):
    seed_everything(3)
    model = build_calibrator(name, graph.num_classes, **{**QUICK, **options}).fit(graph)
    return model, model.predict_proba(graph)


def sparse_features(graph: CalibrationGraph) -> CalibrationGraph:
    return CalibrationGraph.from_run(graph.logits, graph.hidden, graph.edge_index, graph.labels.clamp(min=0),
                                     graph.train_idx, graph.cal_idx, features=graph.features.to_sparse_csr())


@pytest.mark.parametrize("name, options, sparse", [
    ("GETS", {}, False), ("GETS", {}, True), ("GETS_ap", {}, False), ("GETS_holdout", {}, False),
    ("GETS", {"features": "hidden"}, False), ("GETS", {"self_loops": False}, True),
])
def test_gets_reusing_the_feature_products_gives_the_same_fit(monkeypatch, name, options, sparse):
    graph = tiny_graph()
    graph = sparse_features(graph) if sparse else graph
    reused, p_reused = fit(name, graph, **options)
    monkeypatch.setattr(GETS, "_reuse_products", False)
    fresh, p_fresh = fit(name, graph, **options)
    assert reused.fit_info["epochs"] > 5  # it trained
    assert reused.fit_info == fresh.fit_info
    assert torch.equal(p_reused, p_fresh)
    for (key, a), (_, b) in zip(reused.state_dict().items(), fresh.state_dict().items()):
        assert torch.equal(a, b), key


def test_gets_takes_the_kept_products_in_the_training_forward(monkeypatch):
    """The reuse is real: with it, every training forward after the first takes the evaluation forward's
    products (one computation of X W_p per epoch, plus the first)."""
    graph = tiny_graph()
    calls = {"n": 0}
    original = GETS._reused

    def counting(self, slot, inputs, parameters, compute):
        def counted():
            calls["n"] += slot == "gate"
            return compute()
        return original(self, slot, inputs, parameters, counted)

    monkeypatch.setattr(GETS, "_reused", counting)
    model, _ = fit("GETS", graph)
    epochs = model.fit_info["epochs"]
    # per epoch: one training and one evaluation forward; all but the first training forward reuse
    assert calls["n"] == epochs + 1 + 1  # + the predict_proba forward after the fit


def test_graph_structures_are_shared_across_fits_and_equal_to_a_fresh_build(monkeypatch):
    graph = sparse_features(tiny_graph())
    first, p_first = fit("GETS", graph)
    # another CalibrationGraph over the same tensors (as a benchmark builds one per fit): the same objects
    again = CalibrationGraph(graph.logits, graph.hidden, graph.edge_index, graph.labels, graph.train_idx,
                             graph.cal_idx, graph.features)
    second, p_second = fit("GETS", again)
    assert second.graph_inputs(again).adj is first.graph_inputs(graph).adj
    assert second.graph_inputs(again).features is first.graph_inputs(graph).features
    monkeypatch.setattr(graph_cache, "_enabled", False)
    fresh, p_fresh = fit("GETS", graph)
    assert fresh.graph_inputs(graph).adj is not first.graph_inputs(graph).adj
    assert torch.equal(p_first, p_fresh) and torch.equal(p_second, p_fresh)


def test_an_entry_dies_with_its_tensor():
    edge_index = tiny_graph().edge_index.clone()
    graph_cache.shared(edge_index, "k", lambda: 1)
    ident = id(edge_index)
    assert ident in graph_cache._ENTRIES
    del edge_index
    assert ident not in graph_cache._ENTRIES


def test_a_changed_parameter_is_never_served_from_the_kept_products():
    graph = tiny_graph()
    seed_everything(0)
    model = build_calibrator("GETS", graph.num_classes, **QUICK)
    model.prepare(graph)
    model._fitting = True  # keep products as the early-stopping forward of a fit does
    model.eval()
    with torch.no_grad():
        model.gate_weight.normal_()  # a gate that reads X W_p
        before = model(graph)
        model.gate_projection.weight.add_(0.5)  # an in-place change (as an optimiser step)
        for projection in model.feature_projections.values():
            projection.weight.add_(0.5)
        after = model(graph)
        model._reuse_products = False
        fresh = model(graph)
    assert not torch.equal(before, after)
    assert torch.equal(after, fresh)


VARIANTS = ["SimCalib", "SimCalib_decay_all", "SimCalib_l", "SimCalib_m", "SimCalib_h", "SimCalib_r", "SimCalib_n",
            "WATS", "GATS", "CaGCN"]


def per_fit_graph(graph: CalibrationGraph) -> CalibrationGraph:
    """A fresh CalibrationGraph over the same tensors (its own ``_cache``), as a benchmark builds one per fit;
    the training nodes a fresh tensor with the same values."""
    return CalibrationGraph(graph.logits, graph.hidden, graph.edge_index, graph.labels.clone(),
                            graph.train_idx.clone(), graph.cal_idx.clone(), graph.features)


def test_the_variants_share_their_inputs_and_fit_as_with_inputs_built_per_fit(monkeypatch):
    graph = tiny_graph()
    graph_cache.clear()
    fitted = {name: fit(name, per_fit_graph(graph), max_epochs=15, patience=15) for name in VARIANTS}
    shared = {name: probs for name, (_, probs) in fitted.items()}
    # the run's parts were built once: one movement graph and one BFS for the same edges and training nodes,
    # one similarity per distinct option set
    kinds = [key[0] for _, structures, _ in graph_cache._ENTRIES.values() for key in structures]
    assert kinds.count("simcalib_movement") == 1 and kinds.count("hops_to_train") == 1
    options = {(m.feature_input, m.covariance_ridge, m.standardize_similarity) for m, _ in fitted.values()
               if getattr(m, "feature_gnn", None) is not None}
    assert kinds.count("simcalib_similarity") == len(options) < len(VARIANTS) - 3
    monkeypatch.setattr(graph_cache, "_enabled", False)
    for name in VARIANTS:
        alone = fit(name, per_fit_graph(graph), max_epochs=15, patience=15)[1]
        assert torch.equal(shared[name], alone), name


def test_other_training_nodes_get_their_own_inputs():
    graph = tiny_graph()
    other = CalibrationGraph(graph.logits, graph.hidden, graph.edge_index, graph.labels, graph.cal_idx,
                             graph.train_idx, graph.features)  # folds swapped: other prototypes, other hops
    a = fit("SimCalib", graph, max_epochs=5, patience=5)[0]
    b = fit("SimCalib", other, max_epochs=5, patience=5)[0]
    assert not torch.equal(a.graph_inputs(graph).messages, b.graph_inputs(other).messages)
    assert not torch.equal(graph.hops_to_train(), other.hops_to_train())
