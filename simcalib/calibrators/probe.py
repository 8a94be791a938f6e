"""The probe of a calibrator from another package: fitted on a small random graph before any run.

At plan time, per number of classes and options, the calibrator is built with the study's options, fitted on
:func:`probe_graph` and applied to it; its output must be finite log-probabilities of shape [N, K], and if it
claims to be accuracy-preserving (``accuracy_preserving = True``, the default):

    argmax_k log p_ik = argmax_k z_ik   for every node i of the probe graph
"""

from __future__ import annotations

import random

import numpy as np
import torch

from simcalib.calibrators import build_calibrator
from simcalib.calibrators.base import CalibrationGraph
from simcalib.errors import ConfigError, SimCalibError

PROBE_NODES_PER_CLASS = 20
PROBE_MAX_EPOCHS = 200  # a cap on the probe's fit only; runs use the calibrator's own max_epochs
PROBE_SEED = 0


def probe_graph(num_classes: int) -> CalibrationGraph:
    """A small random graph with ``num_classes`` classes: logits [N, K], hidden [N, 16], features [N, 8], a ring
    plus random edges (both directions), a third of the nodes labelled for early stopping and a third for the
    fit; drawn from a fixed seed."""
    generator = torch.Generator().manual_seed(PROBE_SEED)
    n = PROBE_NODES_PER_CLASS * num_classes
    logits = 2.0 * torch.randn(n, num_classes, generator=generator)  # [N, K]
    y = logits.argmax(dim=1)  # [N]
    flip = torch.rand(n, generator=generator) < 0.3
    y[flip] = torch.randint(0, num_classes, (int(flip.sum()),), generator=generator)
    ring = torch.stack([torch.arange(n), (torch.arange(n) + 1) % n])  # [2, N]
    extra = torch.randint(0, n, (2, 2 * n), generator=generator)  # [2, 2N]
    edges = torch.cat([ring, extra], dim=1)
    edges = edges[:, edges[0] != edges[1]]
    edge_index = torch.unique(torch.cat([edges, edges.flip(0)], dim=1), dim=1)  # [2, E], both directions
    hidden = torch.randn(n, 16, generator=generator)
    features = torch.rand(n, 8, generator=generator)
    nodes = torch.arange(n)
    return CalibrationGraph.from_run(logits, hidden, edge_index, y, nodes[0::3], nodes[1::3], features=features)


class _IsolatedRandomState:
    """Leaves the global torch, numpy and ``random`` generators as it found them (a probe never moves the
    random streams of the runs)."""

    def __enter__(self):
        self.states = torch.get_rng_state(), np.random.get_state(), random.getstate()

    def __exit__(self, *exc):
        torch.set_rng_state(self.states[0])
        np.random.set_state(self.states[1])
        random.setstate(self.states[2])


def probe_calibrator(name: str, num_classes: int, dataset: str | None = None, backbone: str | None = None,
                     **options) -> None:
    """Fit calibrator ``name`` (built as on (dataset, backbone) with ``options``) on :func:`probe_graph` and check
    its output; ConfigError naming the calibrator and what is wrong. The global random generators are left as
    they were."""
    graph = probe_graph(num_classes)
    with _IsolatedRandomState():
        torch.manual_seed(PROBE_SEED)
        model = build_calibrator(name, num_classes, dataset, backbone, **options)
        model.max_epochs = min(int(model.max_epochs), PROBE_MAX_EPOCHS)
        try:
            model.fit(graph)
            with torch.no_grad():
                log_probs = model(graph)
        except SimCalibError as exc:
            raise ConfigError(f"calibrator {name} on a probe graph ({graph.num_nodes} nodes, {num_classes} "
                              f"classes): {exc}") from None
        except Exception as exc:  # a calibrator from outside may fail in any way
            raise ConfigError(f"calibrator {name}: fitting or applying it on a probe graph ({graph.num_nodes} "
                              f"nodes, {num_classes} classes) raised {type(exc).__name__}: {exc}; fix its fit or "
                              "forward") from None
    expected = (graph.num_nodes, num_classes)
    if not isinstance(log_probs, torch.Tensor) or tuple(log_probs.shape) != expected:
        got = tuple(log_probs.shape) if isinstance(log_probs, torch.Tensor) else type(log_probs).__name__
        raise ConfigError(f"calibrator {name}: forward(graph) returned {got} on a probe graph, not log-probabilities "
                          f"of shape [N, K] = {list(expected)}; return one row of log-probabilities per node")
    if not torch.isfinite(log_probs).all():
        raise ConfigError(f"calibrator {name}: forward(graph) returned NaN or infinite values on a probe graph; "
                          "return finite log-probabilities (e.g. log_softmax)")
    total = torch.logsumexp(log_probs.double(), dim=1)
    if not torch.allclose(total, torch.zeros_like(total), atol=1e-4):
        raise ConfigError(f"calibrator {name}: forward(graph) is not log-probabilities on a probe graph (each row's "
                          f"probabilities sum to {float(total.exp().min()):.4g}..{float(total.exp().max()):.4g}, not "
                          "1); return log-probabilities (e.g. log_softmax of calibrated logits)")
    if getattr(model, "accuracy_preserving", True):
        changed = int((log_probs.argmax(dim=1) != graph.logits.argmax(dim=1)).sum())
        if changed:
            raise ConfigError(f"calibrator {name} claims to be accuracy-preserving (accuracy_preserving = True) but "
                              f"changes the argmax of {changed} of {graph.num_nodes} nodes of a probe graph; set "
                              "accuracy_preserving = False in its class, or keep each node's top class")


__all__ = ["PROBE_MAX_EPOCHS", "probe_calibrator", "probe_graph"]
