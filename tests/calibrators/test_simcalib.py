r"""SimCalib's output against the paper's equation, through the public API only:

.. math:: \hat p_i = w\, \mathrm{softmax}(z_i / T_{feat,i}) + (1 - w)\, \mathrm{softmax}(z_i / T_{move,i}),

with the temperatures the fitted model reports (``feature_temperature``, ``movement_temperature``) and its
chosen ``w``; and T_feat a node-wise temperature that a graph needing one gets."""

from __future__ import annotations

import pytest
import torch
from graph_fixtures import single_thread, tiny_graph

from simcalib.calibrators import CalibrationGraph, build_calibrator
from simcalib.seeding import seed_everything

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
