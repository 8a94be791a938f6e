"""Calibrators fitted on several runs of one graph at once (simcalib.calibrators.across_runs)."""

from __future__ import annotations

import pytest
import torch
from graph_fixtures import NUM_CLASSES, single_thread, tiny_problem

from simcalib.calibrators import CalibrationGraph, build_calibrator
from simcalib.calibrators.across_runs import fit_across_runs, generator_after_build, stackable
from simcalib.errors import ConfigError
from simcalib.seeding import seed_everything

STACKED = ["TS", "VS", "ETS", "CaGCN", "GATS"]
QUICK = {"max_epochs": 60, "patience": 15}

pytestmark = pytest.mark.usefixtures(single_thread.__name__)


def runs_of_one_graph(count: int = 3) -> list[CalibrationGraph]:
    """``count`` runs of one graph: the same nodes and edges, each its own logits (another backbone, over-
    confident as trained GNNs are, so that the fits run for a while) and its own folds, of unequal sizes (the
    stacked loss pads them)."""
    logits, hidden, edge_index, y, _, _ = tiny_problem(0)
    graphs = []
    for r in range(count):
        g = torch.Generator().manual_seed(100 + r)
        order = torch.randperm(len(y) - 3, generator=g)  # the last 3 nodes: isolated / unreachable, never labelled
        n_train, n_cal = 15 - r, 12 + r
        run_logits = 2.0 * (logits + 0.8 * torch.randn(logits.shape, generator=g))
        graphs.append(CalibrationGraph.from_run(run_logits, hidden, edge_index, y, order[:n_train],
                                                order[n_train:n_train + n_cal]))
    return graphs


def built(name: str, graphs, seeds):
    """Each run's calibrator built under its seed, and the generator a lone fit would then draw from."""
    models, generators = [], []
    for graph, seed in zip(graphs, seeds):
        seed_everything(seed)
        models.append(build_calibrator(name, NUM_CLASSES, **QUICK))
        generators.append(generator_after_build(graph.device))
    return models, generators


@pytest.mark.parametrize("name", STACKED)
def test_a_run_fitted_with_others_is_the_run_fitted_alone(name):
    graphs, seeds = runs_of_one_graph(), [11, 12, 13]
    together, generators = built(name, graphs, seeds)
    fit_across_runs(together, graphs, generators)
    for graph, seed, model in zip(graphs, seeds, together):
        seed_everything(seed)
        alone = build_calibrator(name, NUM_CLASSES, **QUICK).fit(graph)
        assert model.fit_info["epochs"] == alone.fit_info["epochs"]  # 16 to 60 epochs here, by run
        assert model.fit_info["best_epoch"] == alone.fit_info["best_epoch"]
        assert torch.allclose(model.predict_proba(graph), alone.predict_proba(graph), atol=1e-5)
        for (key, p), (_, q) in zip(model.state_dict().items(), alone.state_dict().items()):
            assert torch.allclose(p, q, atol=1e-5), key
        assert not torch.allclose(model.predict_proba(graph), torch.softmax(graph.logits, -1))  # it did move


def test_the_runs_stop_at_their_own_epochs_and_a_run_does_not_depend_on_its_companions():
    graphs, seeds = runs_of_one_graph(), [21, 22, 23]
    ts, _ = built("TS", graphs, seeds)
    fit_across_runs(ts, graphs)
    assert len({m.fit_info["epochs"] for m in ts}) > 1
    together, generators = built("CaGCN", graphs, seeds)  # dropout: each run's masks from its own stream
    fit_across_runs(together, graphs, generators)
    single, generator = built("CaGCN", graphs[1:2], seeds[1:2])
    fit_across_runs(single, graphs[1:2], generator)
    # equal up to float rounding: the stacked products' reduction order depends on the stack size on some CPUs
    assert single[0].fit_info["epochs"] == together[1].fit_info["epochs"]
    assert torch.allclose(single[0].predict_proba(graphs[1]), together[1].predict_proba(graphs[1]), atol=1e-6)


def test_what_cannot_be_fitted_together_is_refused_in_words():
    graphs = runs_of_one_graph(2)
    models, generators = built("SimCalib", graphs, [1, 2])
    assert not stackable(type(models[0]))
    with pytest.raises(ConfigError, match="no fit across runs for .*SimCalib"):
        fit_across_runs(models, graphs, generators)
    mixed, _ = built("TS", graphs, [1, 2])
    with pytest.raises(ConfigError, match="no fit across runs"):
        fit_across_runs([mixed[0], models[1]], graphs)
    other = CalibrationGraph.from_run(*tiny_problem(1))  # another graph (other edges)
    ts, _ = built("TS", graphs, [1, 2])
    with pytest.raises(ConfigError, match="runs of one graph"):
        fit_across_runs(ts, [graphs[0], other])
    cagcn, _ = built("CaGCN", graphs, [1, 2])
    with pytest.raises(ConfigError, match="one generator per run"):
        fit_across_runs(cagcn, graphs)
    seed_everything(0)
    slow = [build_calibrator("TS", NUM_CLASSES, lr=0.01), build_calibrator("TS", NUM_CLASSES, lr=0.02)]
    with pytest.raises(ConfigError, match="one lr"):
        fit_across_runs(slow, graphs)
