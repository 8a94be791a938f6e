"""Calibrators from other packages: found by name, checked against the interface, registered like built-ins.

A calibrator named by an entry point of group ``simcalib.calibrators`` or as ``package.module:Class``
(:mod:`simcalib.entry_points`) is registered under that name the first time it is named, after two checks:

* **interface** (when it is named): a class deriving from :class:`~simcalib.calibrators.base.Calibrator` that
  implements ``forward(graph) -> [N, K]`` log-probabilities (``fit`` is inherited or overridden);
* **probe** (:func:`probe_calibrator`, at plan time, per number of classes and options): built with the study's
  options, fitted on a small random graph and applied to it, its output is finite log-probabilities of shape
  [N, K]; if it claims to be accuracy-preserving (``accuracy_preserving = True``, the default), its argmax is
  the argmax of the logits on every probe node:

    argmax_k log p_ik = argmax_k z_ik   for every node i of the probe graph

Its rows then carry, in ``calibrator_options``, the package, version and entry it came from beside its
options (:func:`~simcalib.calibrators.calibrator_definition`), and its fits draw from the seed of the run and its
name, as the built-ins' do.
"""

from __future__ import annotations

import dataclasses
import inspect
import random

import numpy as np
import torch

from simcalib.calibrators.base import CalibrationGraph, Calibrator
from simcalib.entry_points import CALIBRATOR_GROUP, resolve_external
from simcalib.errors import ConfigError, SimCalibError

PROBE_NODES_PER_CLASS = 20
PROBE_MAX_EPOCHS = 200  # a cap on the probe's fit only; runs use the calibrator's own max_epochs
PROBE_SEED = 0
SOURCE_KEYS = ("package", "version", "entry")  # what a definition records of an external calibrator's origin


def register_external_calibrator(name: str) -> str:
    """Find ``name`` outside the package (entry point, then ``module:Class``), check its interface, register it
    (:data:`~simcalib.calibrators.CALIBRATORS`) and return its canonical name."""
    from simcalib.calibrators import CALIBRATORS, calibrator_names, register_calibrator

    found = resolve_external(name, CALIBRATOR_GROUP, "calibrator", calibrator_names(include_tuned=True))
    cls = found.obj
    label = f"calibrator {found.name!r}" + (f" ({found.reference})" if found.reference != found.name else "")
    if not inspect.isclass(cls):
        raise ConfigError(f"{label} is a {type(cls).__name__}, not a class; point it at a subclass of "
                          "simcalib.calibrators.Calibrator")
    if not issubclass(cls, Calibrator):
        raise ConfigError(f"{label}: class {cls.__name__} does not derive from simcalib.calibrators.Calibrator; "
                          "derive it (the interface: __init__(num_classes, **options), forward(graph) -> "
                          "log-probabilities [N, K]; fit is inherited; docs/own-calibrator.md)")
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(cls.__abstractmethods__))
        raise ConfigError(f"{label}: class {cls.__name__} does not implement {missing}; implement forward(graph) "
                          "returning log-probabilities [N, K] (docs/own-calibrator.md)")
    clashes = sorted(set(SOURCE_KEYS) & set(inspect.signature(cls.__init__).parameters))
    if clashes:
        raise ConfigError(f"{label}: constructor options {', '.join(clashes)} clash with what a results row "
                          "records of the calibrator's origin; rename them")
    register_calibrator(found.name, cls)
    source = {"package": found.package, "version": found.version, "entry": found.reference}
    CALIBRATORS[found.name] = dataclasses.replace(CALIBRATORS[found.name], source=source)
    return found.name


def is_external(name: str) -> bool:
    """Whether the registered calibrator ``name`` comes from another package."""
    from simcalib.calibrators import CALIBRATORS, canonical_calibrator

    return CALIBRATORS[canonical_calibrator(name)].source is not None


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
    from simcalib.calibrators import build_calibrator

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


__all__ = ["PROBE_MAX_EPOCHS", "is_external", "probe_calibrator", "probe_graph", "register_external_calibrator"]
