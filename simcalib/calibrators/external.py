"""Calibrators from other packages: found by name, checked against the interface, used like built-ins.

A calibrator named by an entry point of group ``simcalib.calibrators`` or as ``package.module:Class``
(:mod:`simcalib.entry_points`) is found by that name (:func:`simcalib.calibrators.calibrator_entry`, which registers
nothing: a plan records what it found, :mod:`simcalib.experiment.plan`), after two checks:

* **interface** (when it is named): a class deriving from :class:`~simcalib.calibrators.base.Calibrator` that
  implements ``forward(graph) -> [N, K]`` log-probabilities (``fit`` is inherited or overridden);
* **probe** (:func:`simcalib.calibrators.probe.probe_calibrator`, at plan time, per number of classes and options): built with the study's
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

from simcalib.calibrators.base import Calibrator
from simcalib.entry_points import CALIBRATOR_GROUP, resolve_external
from simcalib.errors import ConfigError

SOURCE_KEYS = ("package", "version", "entry")  # what a definition records of an external calibrator's origin


@dataclasses.dataclass(frozen=True)
class ExternalCalibrator:
    """A calibrator class found in another package, its interface checked."""

    name: str
    cls: type[Calibrator]
    source: dict  # SOURCE_KEYS -> its package, version and entry


def find_external_calibrator(name: str, taken: list[str]) -> ExternalCalibrator:
    """Find ``name`` outside the package (entry point, then ``module:Class``; ``taken``: the names registered
    already) and check its interface (:func:`simcalib.calibrators.calibrator_entry` makes its entry)."""
    found = resolve_external(name, CALIBRATOR_GROUP, "calibrator", taken)
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
    return ExternalCalibrator(found.name, cls, {"package": found.package, "version": found.version,
                                                "entry": found.reference})


__all__ = ["SOURCE_KEYS", "ExternalCalibrator", "find_external_calibrator"]
