r"""SimCalib's output against the paper's equation, through the public API only:

.. math:: \hat p_i = w\, \mathrm{softmax}(z_i / T_{feat,i}) + (1 - w)\, \mathrm{softmax}(z_i / T_{move,i}),

with the temperatures the fitted model reports (``feature_temperature``, ``movement_temperature``) and its
chosen ``w``; and T_feat a node-wise temperature that a graph needing one gets."""

from __future__ import annotations

import pytest
import torch
from graph_fixtures import single_thread, tiny_graph

from simcalib.calibrators import CalibrationGraph, build_calibrator
from simcalib.calibrators.signals import NodeSignals
from simcalib.seeding import seed_everything
from simcalib.similarity import nearest_prototype_distance

pytestmark = pytest.mark.usefixtures(single_thread.__name__)

QUICK = {"max_epochs": 40, "patience": 10}


def fitted(graph: CalibrationGraph, seed: int = 0, **options):
    seed_everything(seed)
    return build_calibrator("SimCalib", graph.num_classes, **{**QUICK, **options}).fit(graph)


def mixture(z: torch.Tensor, t_feat: torch.Tensor, t_move: torch.Tensor, w: float) -> torch.Tensor:
    """The paper's p_i, written out: softmax(v)_k = exp(v_k) / sum_j exp(v_j) per node."""
    def softmax(v):
        e = torch.exp(v - v.max(dim=1, keepdim=True).values)
        return e / e.sum(dim=1, keepdim=True)

    return w * softmax(z.double() / t_feat.double()) + (1 - w) * softmax(z.double() / t_move.double())


@pytest.mark.parametrize("options", [{}, {"w": 0.7, "t": 0.5}, {"w": 0.7, "t": 0.5, "feat_gnn": "gat"}],
                         ids=["paper-grid", "fixed-w", "gat"])
def test_predict_proba_is_the_w_mixture_of_the_feature_and_movement_softmaxes(options):
    graph = tiny_graph()
    model = fitted(graph, **options)
    with torch.no_grad():
        t_feat, t_move = model.feature_temperature(graph), model.movement_temperature(graph)
        probs = model.predict_proba(graph).double()
    assert t_feat.shape == t_move.shape == (graph.num_nodes, 1)
    assert 0 < model.w < 1 and model.w != 0.5
    want = mixture(graph.logits, t_feat, t_move, model.w)
    assert torch.allclose(probs, want, atol=1e-6, rtol=0)
    # The equation decides: the mixture with w and 1 - w swapped is another output on this graph.
    swapped = mixture(graph.logits, t_feat, t_move, 1 - model.w)
    assert (probs - swapped).abs().max() > 1e-3


def test_without_the_movement_branch_the_output_is_the_feature_softmax():
    graph = tiny_graph()
    model = fitted(graph, w=1.0)
    with torch.no_grad():
        want = torch.softmax(graph.logits / model.feature_temperature(graph), dim=1)
        assert torch.allclose(model.predict_proba(graph), want, atol=1e-6)


def test_the_movement_branch_alone_is_the_movement_softmax():
    graph = tiny_graph()
    model = fitted(graph, w=0.0, t=0.5)
    with torch.no_grad():
        want = torch.softmax(graph.logits / model.movement_temperature(graph), dim=1)
        assert torch.allclose(model.predict_proba(graph), want, atol=1e-6)


def two_kinds_of_nodes(seed: int = 0, n: int = 150, k: int = 3, h: int = 4) -> tuple[CalibrationGraph, torch.Tensor]:
    """A graph that needs node-wise temperatures: half the nodes lie on their class prototype and are always
    right, the other half lie between the prototypes and are right half the time, with the same logits
    (a margin of 3). Edges join nodes of one kind and class only (rings), so G_feat can tell the kinds apart.
    Returns the graph and the mask of the between-prototype nodes."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % k
    between = torch.arange(n) >= n // 2
    centres = 4.0 * torch.eye(k, h)
    hidden = centres[y] + 0.3 * torch.randn(n, h, generator=g)
    hidden[between] = centres.mean(0) + 0.3 * torch.randn(int(between.sum()), h, generator=g)
    wrong = between & (torch.rand(n, generator=g) < 0.5)
    logits = 3.0 * torch.nn.functional.one_hot(torch.where(wrong, (y + 1) % k, y), k).float()
    src, dst = [], []
    for kind in (False, True):
        for c in range(k):
            members = torch.nonzero((between == kind) & (y == c)).flatten()
            src += [*members.tolist(), *members.roll(1).tolist()]
            dst += [*members.roll(1).tolist(), *members.tolist()]
    order = torch.randperm(n, generator=g)
    graph = CalibrationGraph.from_run(logits, hidden, torch.tensor([src, dst]), y, order[:45], order[45:90])
    return graph, between


def test_feature_temperatures_are_node_wise_where_the_graph_needs_them():
    graph, between = two_kinds_of_nodes()
    model = fitted(graph, w=1.0, weight_decay=0.0, feat_dropout=0.0, max_epochs=300, patience=300)
    with torch.no_grad():
        t_feat = model.feature_temperature(graph).flatten()
    # the nodes that are right half the time get the softer temperatures
    assert t_feat[between].median() > 2 * t_feat[~between].median()
    row = model.audit(graph, torch.arange(graph.num_nodes))
    assert row["t_feat_std"] == pytest.approx(float(t_feat.std(unbiased=False)), rel=1e-5)
    assert row["t_feat_std"] > 0.5


def test_the_audit_reports_the_temperatures_on_the_nodes_it_is_given():
    graph = tiny_graph()
    model = fitted(graph)
    with torch.no_grad():
        t_feat = model.feature_temperature(graph)[graph.cal_idx].flatten()
        t_move = model.movement_temperature(graph)[graph.cal_idx].flatten()
    row = model.audit(graph, graph.cal_idx)
    assert (row["w"], row["t"]) == (model.w, model.t)
    assert row["t_feat_mean"] == pytest.approx(float(t_feat.mean()), rel=1e-6)
    assert row["t_move_mean"] == pytest.approx(float(t_move.mean()), rel=1e-6)
    assert row["t_feat_std"] == pytest.approx(float(t_feat.std(unbiased=False)), rel=1e-5)
    assert row["t_move_std"] == pytest.approx(float(t_move.std(unbiased=False)), rel=1e-5)
    assert row["t_feat_std"] > 1e-3 and row["t_move_std"] > 1e-3  # node-wise, not one value for all


def test_the_audit_reads_t_feat_and_the_distance_from_the_rows_signals_computed_once():
    graph = tiny_graph()
    model = fitted(graph)
    alone = model.audit(graph, graph.cal_idx)
    calls = []
    forward = model.nodewise_feature_temperature
    model.nodewise_feature_temperature = lambda g: calls.append(1) or forward(g)
    signals = NodeSignals(model, graph, graph.cal_idx)
    assert model.audit(graph, graph.cal_idx, signals) == alone
    figure_t_feat, figure_distance = signals.feature_temperature, signals.prototype_distance()  # the figure's reads
    assert len(calls) == 1 and len(signals._distances) == 1  # one T_feat pass, one distance (the default ridge)
    assert torch.equal(figure_distance, nearest_prototype_distance(graph.hidden, graph.labels, graph.train_idx,
                                                                   graph.num_classes, graph.cal_idx))
    with torch.no_grad():
        assert torch.equal(figure_t_feat, forward(graph)[graph.cal_idx])


def test_the_default_stops_on_half_of_the_calibration_fold_and_never_on_the_nodes_passed_to_stop_on():
    """SimCalib's default (``stopping="holdout"``) early-stops on a per-class half of the fit nodes, so the
    stopping nodes it is given do not change its fit; ``stopping="train"`` stops on them (the control)."""
    graph, between = two_kinds_of_nodes()
    other_stop = graph.train_idx[~between[graph.train_idx]]  # training nodes on their prototypes only

    def fit(stop_idx, **options):
        seed_everything(0)
        model = build_calibrator("SimCalib", graph.num_classes, **{**QUICK, "max_epochs": 200, "patience": 5, **options})
        return model.fit(graph, stop_idx=stop_idx).predict_proba(graph)

    assert torch.equal(fit(None), fit(other_stop))
    assert not torch.equal(fit(None, stopping="train"), fit(other_stop, stopping="train"))


def test_the_default_trains_on_one_half_of_the_calibration_fold_and_stops_on_the_other():
    """Under ``stopping="holdout"`` the nodes the parameters are trained on and the early-stopping nodes are a
    per-class split of the calibration fold: disjoint, together the whole fold, every class in both."""
    graph = tiny_graph()
    model = build_calibrator("SimCalib", graph.num_classes, **QUICK)
    seen = []
    train = model.train_parameters
    model.train_parameters = lambda g, fit_idx, stop_idx: seen.append((fit_idx, stop_idx)) or train(g, fit_idx, stop_idx)
    seed_everything(0)
    model.fit(graph)
    ((fit_idx, stop_idx),) = seen
    assert set(fit_idx.tolist()).isdisjoint(stop_idx.tolist())
    assert sorted(fit_idx.tolist() + stop_idx.tolist()) == sorted(graph.cal_idx.tolist())
    for nodes in (fit_idx, stop_idx):
        assert set(graph.labels[nodes].tolist()) == set(graph.labels[graph.cal_idx].tolist())


def test_without_relative_degree_the_movement_messages_are_those_of_t_zero():
    """Ablation n (``relative_degree=False``) drops the factor ((d_i + 1) / (d_j + 1))^t: its messages are the
    full model's at t = 0, and differ from those at the grid's t > 0 on a graph of unequal degrees."""
    graph = tiny_graph()
    with torch.no_grad():
        without = build_calibrator("SimCalib", graph.num_classes, relative_degree=False).compute_inputs(graph).messages
        at_zero = build_calibrator("SimCalib", graph.num_classes, t=0.0).compute_inputs(graph).messages
        at_one = build_calibrator("SimCalib", graph.num_classes, t=1.0).compute_inputs(graph).messages
    torch.testing.assert_close(without, at_zero)
    assert not torch.allclose(without, at_one)


@pytest.mark.parametrize("feat_gnn", ["gcn", "gat"])
def test_the_softplus_feature_temperatures_output_bias_starts_at_init_temperature(feat_gnn):
    """The softplus form: G_feat's output bias starts at softplus^-1(init_temperature) at every grid point, so
    T_feat starts around init_temperature (the output weights are drawn, not zeroed as in the anchored form)."""
    model = build_calibrator("SimCalib", 3, feat_gnn=feat_gnn, feature_temperature="softplus", init_temperature=2.5)
    from simcalib.calibrators.layers import softplus_temperature

    bias = model.feature_gnn.output_bias().detach()  # [P, 1]
    torch.testing.assert_close(softplus_temperature(bias), torch.full_like(bias, 2.5))


def test_only_the_branches_the_grid_can_use_are_built():
    """w fixed at 1 builds no movement branch, w fixed at 0 no feature network (no parameter is dead), and
    the GAT feature network has the heads it is given."""
    assert build_calibrator("SimCalib", 3, w=1.0).movement_weight is None
    assert build_calibrator("SimCalib", 3, w=0.0).feature_gnn is None
    both = build_calibrator("SimCalib", 3, w=0.6)
    assert both.movement_weight is not None and both.feature_gnn is not None
    assert build_calibrator("SimCalib", 3, feat_gnn="gat", feat_heads=2).feature_gnn.nets[0].conv1.heads == 2


def test_the_anchored_feature_temperature_is_t0_exp_c_tanh_of_g_feat_over_c():
    graph = tiny_graph()
    model = fitted(graph, feature_bound=0.5)
    with torch.no_grad():
        for parameter in model.feature_gnn.parameters():  # away from the fit's near-zero output
            parameter.add_(torch.randn(parameter.shape, generator=torch.Generator().manual_seed(1)))
        inputs, _ = model._feature_inputs(graph, None)
        raw = model.feature_gnn(inputs, None)  # [P, N, 1]
        want = model.log_anchor.exp() * torch.exp(0.5 * torch.tanh(raw / 0.5))
        got = model.grid_feature_temperature(graph)
    assert raw.abs().max() > 0.1  # G_feat moved off zero, so the form is tested, not only T_0
    torch.testing.assert_close(got, want)


def test_weight_decay_falls_on_weight_matrices_and_attention_vectors_only_by_default():
    model = build_calibrator("SimCalib", 3, feat_gnn="gat")
    decayed, free = (set(map(id, group["params"])) for group in model.parameter_groups())
    names = {id(p): n for n, p in model.named_parameters() if p.requires_grad}
    decayed_names, free_names = sorted(names[i] for i in decayed), sorted(names[i] for i in free)
    assert decayed_names and free_names
    assert all(n.rsplit(".", 1)[-1].startswith(("weight", "att_")) or n.endswith("_weight") for n in decayed_names)
    assert any(".att_" in n for n in decayed_names)  # GAT attention vectors, nested names included
    assert all("bias" in n or "log_" in n for n in free_names), free_names
    every = build_calibrator("SimCalib", 3, feat_gnn="gat", decay="all").parameter_groups()
    assert len(every[1]["params"]) == 0 and len(every[0]["params"]) == len(names)


def test_simcalibs_defaults_are_the_documented_ones():
    """Each default defines the study's SimCalib (the choices and their evidence: docs/decisions.md); changing
    one silently would change every committed number. Read from a model built with the defaults (not from the
    signature), so the test sees what the constructor does with them."""
    from simcalib.calibrators.defaults import default_weight_decay
    from simcalib.calibrators.simcalib import SimCalib

    model = SimCalib(3)
    expected = {"init_temperature": 1.0, "feature_bound": 1.0, "movement_bias_init": 1.0, "homophily": True,
                "eta_offset": 1.0, "self_loops": True, "negative_slope": 0.2, "stopping": "holdout",
                "decay": "weights", "feature_temperature_form": "anchored", "covariance_ridge": 0.0,
                "standardize_similarity": True, "relative_degree": True, "unreachable_hops": None,
                "feature_input": "mahalanobis", "w_grid": (0.6, 0.8, 0.9), "t_grid": (0.3, 0.5, 1.0),
                "weight_decay": default_weight_decay("SimCalib")}
    assert {k: getattr(model, k) for k in expected} == expected
    assert model.movement_weight.shape == (9, 3, 2)  # [P, K, H]: two movement heads
    feature_gat = SimCalib(3, feat_gnn="gat").feature_gnn.nets[0]
    assert feature_gat.conv1.heads == 1 and feature_gat.conv1.out_channels == 16  # feat_heads, feat_hidden


def test_the_similarity_input_is_standardised_per_coordinate():
    """G_feat reads s with each class coordinate at mean 0 and std 1 over the nodes, not one std for all."""
    graph = tiny_graph()
    model = build_calibrator("SimCalib", graph.num_classes)
    seen = []
    prepare = model.feature_gnn.prepare
    model.feature_gnn.prepare = lambda s, *rest: seen.append(s) or prepare(s, *rest)
    model.compute_inputs(graph)
    (s,) = seen
    torch.testing.assert_close(s.mean(dim=0), torch.zeros(graph.num_classes), atol=1e-5, rtol=0)
    torch.testing.assert_close(s.std(dim=0), torch.ones(graph.num_classes), atol=1e-5, rtol=0)


@pytest.mark.parametrize("self_loops,homophily", [(True, True), (False, True), (True, False), (False, False)])
def test_the_movement_messages_follow_the_self_loop_and_homophily_options(self_loops, homophily):
    """m_i = sum_j alpha_ij eta_j ((d_i+1)/(d_j+1))^t sort(z_j) over the edges the options name, alpha uniform
    without the homophily term: SimCalib's messages equal the composition of the movement functions (each
    tested on its own in test_similarity) under the options it was given."""
    from simcalib.calibrators.layers import SortedEdges, edges_with_self_loops
    from simcalib.calibrators.movement import (
        eta_from_hops,
        homophily_attention,
        logit_products,
        minmax_rows,
        movement_messages,
    )

    graph = tiny_graph()
    model = build_calibrator("SimCalib", graph.num_classes, self_loops=self_loops, homophily=homophily)
    got = model.compute_inputs(graph).messages  # [P, N, K]
    edges = SortedEdges(edges_with_self_loops(graph.edge_index, graph.num_nodes, self_loops), graph.num_nodes)
    eta = eta_from_hops(graph.hops_to_train())
    alpha = homophily_attention(logit_products(graph.logits, edges), eta, edges, 0.2, homophily)
    sorted_logits = minmax_rows(graph.logits).sort(dim=1).values
    want = torch.stack([movement_messages(sorted_logits, alpha, eta, graph.degree(), edges, t) for _, t in model.points])
    torch.testing.assert_close(got, want)
    other = build_calibrator("SimCalib", graph.num_classes, self_loops=not self_loops, homophily=not homophily)
    assert (other.compute_inputs(graph).messages - got).abs().max() > 1e-3  # the options change the messages


def test_unit_losses_score_the_labels_they_are_given():
    """The grid's NLL against the labels passed (e.g. another fold's), not the graph's own."""
    graph = tiny_graph()
    model = fitted(graph)
    nodes = graph.cal_idx
    other = (graph.labels + 1) % graph.num_classes
    with torch.no_grad():
        log_probs = model.grid_log_probs(graph, nodes)  # [P, n, K]
        own, shifted = model.unit_losses(graph, nodes, graph.labels), model.unit_losses(graph, nodes, other)
    torch.testing.assert_close(own, -log_probs.gather(2, graph.labels[nodes].expand(len(own), -1)[..., None]).squeeze(2).mean(1))
    torch.testing.assert_close(shifted, -log_probs.gather(2, other[nodes].expand(len(own), -1)[..., None]).squeeze(2).mean(1))
