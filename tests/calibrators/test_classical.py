import pytest
import torch

from simcalib.calibrators import ETS, TS, VS, CalibrationGraph, UnCal, build_calibrator
from simcalib.calibrators.ts import fit_log_temperature, nll_temperature
from simcalib.errors import ConfigError


def synthetic_graph(temperature: float = 3.0, n: int = 600, k: int = 4, seed: int = 0) -> CalibrationGraph:
    """Labels drawn from softmax(z / temperature): TS should recover the temperature."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, k, generator=g) * 4
    y = torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=g).squeeze(1)
    edge_index = torch.stack([torch.arange(n - 1), torch.arange(1, n)])
    edge_index = torch.cat([edge_index, edge_index.flip(0)], 1)
    perm = torch.randperm(n, generator=g)
    return CalibrationGraph.from_run(logits, torch.randn(n, 8, generator=g), edge_index, y, perm[:200], perm[200:400])


def test_ts_recovers_the_generating_temperature():
    graph = synthetic_graph(temperature=3.0)
    ts = TS(graph.num_classes).fit(graph)
    assert ts.temperature(graph).item() == pytest.approx(3.0, rel=0.25)


def test_fit_log_temperature_recovers_one_temperature_per_group_and_the_ts_optimum():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6000, 4, generator=g) * 4
    group = torch.arange(6000) % 2
    truth = torch.tensor([0.5, 2.5])
    labels = torch.multinomial(torch.softmax(logits / truth[group][:, None], -1), 1, generator=g).squeeze(1)
    start = torch.zeros(2, dtype=torch.float64)
    fitted = fit_log_temperature(logits, labels, start, lambda p: p[group][:, None], max_iter=200).exp()
    assert torch.equal(start, torch.zeros(2, dtype=torch.float64))  # the caller's start is not moved
    assert fitted.tolist() == pytest.approx(truth.tolist(), rel=0.1)
    one = nll_temperature(logits[group == 1], labels[group == 1])
    assert one == pytest.approx(2.5, rel=0.1)
    assert one == pytest.approx(float(fitted[1]), rel=1e-4)  # the same optimum: the groups separate


@pytest.mark.parametrize("cls", [UnCal, TS, VS, ETS])
def test_outputs_are_probabilities_and_deterministic(cls):
    graph = synthetic_graph()
    torch.manual_seed(0)
    p1 = cls(graph.num_classes).fit(graph).predict_proba(graph)
    torch.manual_seed(0)
    p2 = cls(graph.num_classes).fit(graph).predict_proba(graph)
    assert torch.allclose(p1.sum(1), torch.ones(graph.num_nodes), atol=1e-5)
    assert (p1 >= 0).all() and torch.isfinite(p1).all()
    assert torch.equal(p1, p2)


@pytest.mark.parametrize("cls", [UnCal, TS, ETS])
def test_accuracy_preserving_calibrators_keep_the_argmax(cls):
    graph = synthetic_graph(temperature=0.5)
    probs = cls(graph.num_classes).fit(graph).predict_proba(graph)
    assert cls.accuracy_preserving
    assert torch.equal(probs.argmax(1), graph.logits.argmax(1))


def test_vs_is_flagged_as_not_accuracy_preserving():
    assert VS.accuracy_preserving is False


def test_ets_weights_lie_on_the_simplex_and_favour_ts_when_ts_is_right():
    graph = synthetic_graph(temperature=3.0)
    ets = ETS(graph.num_classes).fit(graph)
    w = ets.weights
    assert (w >= 0).all() and w.sum().item() == pytest.approx(1.0)
    assert w[0] > w[1]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ets_weights_do_not_depend_on_the_blas_thread_count(seed):
    """An interior optimum (labels from T = 2 with 20% noise): with the BLAS thread count left to the
    environment, the fitted weights differed between 1 and 2 threads in each of these seeds."""
    from threadpoolctl import threadpool_limits

    g = torch.Generator().manual_seed(seed)
    n, k = 335, 7
    logits = torch.randn(n, k, generator=g) * 4
    y = torch.multinomial(torch.softmax(logits / 2.0, -1), 1, generator=g).squeeze(1)
    noisy = torch.rand(n, generator=g) < 0.2
    y[noisy] = torch.randint(0, k, (int(noisy.sum()),), generator=g)
    chain = torch.stack([torch.arange(n - 1), torch.arange(1, n)])
    perm = torch.randperm(n, generator=g)
    graph = CalibrationGraph.from_run(logits, torch.randn(n, 8, generator=g), torch.cat([chain, chain.flip(0)], 1), y,
                                      perm[:100], perm[100:235])
    weights = []
    for threads in (1, 2):
        with threadpool_limits(limits=threads, user_api="blas"):
            weights.append(ETS(k).fit(graph).weights)
    assert 0.05 < float(weights[0].min())  # an interior optimum, where the summation order matters
    assert torch.equal(weights[0], weights[1])


def test_fit_refuses_nodes_with_hidden_labels():
    graph = synthetic_graph()
    test_nodes = torch.arange(graph.num_nodes)[graph.labels < 0][:10]
    with pytest.raises(ConfigError, match="hidden"):
        TS(graph.num_classes).fit(graph, fit_idx=test_nodes)


def test_build_calibrator_rejects_unknown_options():
    with pytest.raises(ConfigError, match="invalid options for calibrator TS"):
        build_calibrator("ts", 3, temperature_init=2)
