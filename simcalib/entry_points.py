"""Objects provided by other installed packages: a Python entry point or a ``package.module:attribute`` name.

A name is looked up in this order: the package's own registry (done by the caller), then an entry point of
``group`` whose name matches (case-insensitively), then, for a name with a colon, the attribute ``attribute``
of the importable module ``package.module``. Every failure is a :class:`~simcalib.errors.SimCalibError` whose
one-line message names the entry and the fix.

A package declares its objects in its ``pyproject.toml``::

    [project.entry-points."simcalib.calibrators"]
    MyCalibrator = "my_package.calibrator:MyCalibrator"

    [project.entry-points."simcalib.datasets"]
    MyGraph = "my_package.graph:my_graph"

The package and version recorded for an object are those of the distribution that declares the entry point, or,
for a ``module:attribute`` name, of the installed distribution providing its top-level module
(:mod:`importlib.metadata`); a module found on ``sys.path`` outside any distribution has none.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from importlib import metadata

from simcalib.errors import ConfigError, UnknownNameError, did_you_mean

CALIBRATOR_GROUP = "simcalib.calibrators"
DATASET_GROUP = "simcalib.datasets"
NOT_INSTALLED = "none"  # package and version of a module that no installed distribution provides


@dataclass(frozen=True)
class ExternalObject:
    """An object from outside this package and where it came from."""

    name: str  # canonical name: the entry point's name, or the ``module:attribute`` reference as given
    reference: str  # ``module:attribute``
    obj: object
    package: str  # distribution name, or NOT_INSTALLED
    version: str  # distribution version, or NOT_INSTALLED

    @property
    def source(self) -> dict:
        """What a results row records of the object's origin."""
        return {"package": self.package, "version": self.version, "reference": self.reference}


def is_reference(name: str) -> bool:
    """Whether ``name`` is written as ``package.module:attribute``."""
    return ":" in str(name)


def entry_points(group: str) -> list[metadata.EntryPoint]:
    """The installed entry points of ``group``, by name."""
    return sorted(metadata.entry_points(group=group), key=lambda ep: ep.name)


def find_entry_point(group: str, name: str) -> metadata.EntryPoint | None:
    key = str(name).strip().lower()
    for ep in entry_points(group):
        if ep.name.lower() == key:
            return ep
    return None


def _distribution_of(module: str) -> tuple[str, str]:
    """(distribution name, version) of the installed distribution providing ``module``'s top-level package."""
    top = module.split(".")[0]
    for dist_name in metadata.packages_distributions().get(top, []):
        try:
            return dist_name, metadata.version(dist_name)
        except metadata.PackageNotFoundError:
            continue
    return NOT_INSTALLED, NOT_INSTALLED


def load_reference(reference: str, kind: str) -> object:
    """The attribute named by ``module:attribute`` (``attribute`` may be dotted); ConfigError naming what is
    missing."""
    module_name, _, attribute = str(reference).strip().partition(":")
    if not module_name or not attribute:
        raise ConfigError(f"{kind} {reference!r}: write an object from another package as package.module:Name")
    try:
        obj = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{kind} {reference!r}: module {module_name} cannot be imported ({exc}); install the "
                          "package that provides it, or fix the name (package.module:Name)") from None
    for part in attribute.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"{kind} {reference!r}: module {module_name} has no {attribute}; fix the name "
                              "(package.module:Name)")
        obj = getattr(obj, part)
    return obj


def resolve_external(name: str, group: str, kind: str, builtin: list[str]) -> ExternalObject:
    """The entry point of ``group`` named ``name``, or the ``module:attribute`` object ``name`` names.

    ``builtin``: the package's own names, listed first in the error for a name found nowhere."""
    name = str(name).strip()
    ep = find_entry_point(group, name)
    if ep is not None:
        package = ep.dist.name if ep.dist is not None else NOT_INSTALLED
        version = ep.dist.version if ep.dist is not None else NOT_INSTALLED
        try:
            obj = ep.load()
        except Exception as exc:  # an entry point may fail in any way its module does
            raise ConfigError(f"{kind} {ep.name!r}: the entry point {ep.value} of group {group} (package "
                              f"{package} {version}) cannot be loaded ({type(exc).__name__}: {exc}); fix or "
                              "reinstall that package") from None
        return ExternalObject(ep.name, ep.value, obj, package, version)
    if is_reference(name):
        obj = load_reference(name, kind)
        package, version = _distribution_of(name.partition(":")[0])
        return ExternalObject(name, name, obj, package, version)
    installed_names = [ep.name for ep in entry_points(group)]
    installed = ", ".join(installed_names) or "none installed"
    hint = did_you_mean(name, [*builtin, *installed_names])
    raise UnknownNameError(f"unknown {kind} {name!r}{hint}; valid {kind}s are: {', '.join(builtin)}; or an entry point "
                           f"of group {group} (installed: {installed}): install the package that provides "
                           f"{name!r}, or name an object of another package as package.module:Name")


__all__ = [
    "CALIBRATOR_GROUP", "DATASET_GROUP", "NOT_INSTALLED", "ExternalObject", "entry_points", "find_entry_point",
    "is_reference", "load_reference", "resolve_external",
]
