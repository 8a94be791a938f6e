"""Post-hoc calibrators behind one interface, and the registry that names them.

A registered name maps to a class and preset options, so variants (e.g. SimCalib's ablations) are
configurations of one implementation, not copies. Names are matched case-insensitively. A name not
registered is looked up among other packages' calibrators (:func:`calibrator_entry`); looking a name up never
registers it, so ``CALIBRATORS`` holds the package's calibrators and those given to :func:`register_calibrator`.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import warnings
from dataclasses import dataclass, field

import torch
from torch import nn

from simcalib.calibrators.autocal import AutoCal, CandidateRegistry
from simcalib.calibrators.base import (
    HIDDEN_LABEL,
    SAVED_FORMAT,
    SAVED_FORMAT_VERSION,
    CalibrationGraph,
    Calibrator,
    TemperatureCalibrator,
)
from simcalib.calibrators.cagcn import CaGCN
from simcalib.calibrators.capture import node_outputs
from simcalib.calibrators.defaults import (
    SIMCALIB_DECAY_ALL_WEIGHT_DECAY,
    default_weight_decay,
    weight_decay_is_per_benchmark,
)
from simcalib.calibrators.dirichlet import Dirichlet
from simcalib.calibrators.ets import ETS
from simcalib.calibrators.external import find_external_calibrator
from simcalib.calibrators.gats import GATS
from simcalib.calibrators.gets import GETS
from simcalib.calibrators.irm import IRM
from simcalib.calibrators.order_invariant import OrderInvariant
from simcalib.calibrators.simcalib import SimCalib
from simcalib.calibrators.spline import Spline
from simcalib.calibrators.ts import TS
from simcalib.calibrators.uncal import UnCal
from simcalib.calibrators.vs import VS
from simcalib.calibrators.wats import WATS
from simcalib.errors import (
    ConfigError,
    DataCorruptError,
    DefaultsTakenWarning,
    UnknownNameError,
    did_you_mean,
    resolve_name,
)


@dataclass(frozen=True)
class CalibratorEntry:
    name: str  # canonical name, as used in results and tables
    cls: type[Calibrator]
    preset: dict = field(default_factory=dict)  # options fixed by this name
    description: str = ""
    tuned_from: str | None = None  # its options are this calibrator's tuned ones, given by the study layer
    # the name whose random stream a fit draws from (simcalib.experiment.protocol): its own, or that of the name whose
    # committed rows this preset reproduces (GETS_ap: the rows written as GETS before GETS followed the GETS code)
    seed_name: str | None = None
    # a calibrator from another package (simcalib.calibrators.external): {"package", "version", "entry"}
    source: dict | None = None


CALIBRATORS: dict[str, CalibratorEntry] = {}


def register_calibrator(name: str, cls: type[Calibrator], description: str = "", tuned_from: str | None = None,
                        seed_name: str | None = None, **preset) -> None:
    CALIBRATORS[name] = CalibratorEntry(name, cls, dict(preset), description or (cls.__doc__ or "").strip().split("\n")[0],
                                        tuned_from, seed_name)


def calibrator_names(include_tuned: bool = False) -> list[str]:
    """Registered names; the ``*_tuned`` ones (which need a tuned file per benchmark) only if asked: `all`
    in a study or on the command line means the calibrators that run anywhere."""
    return [name for name, entry in CALIBRATORS.items() if include_tuned or entry.tuned_from is None]


def calibrator_entry(name: str | CalibratorEntry) -> CalibratorEntry:
    """The entry ``name`` names, found without registering anything: a registered name (matched
    case-insensitively), else a calibrator of another package (an entry point of group ``simcalib.calibrators``,
    or ``package.module:Class``), its interface checked and its origin in ``source``. An entry is returned as
    given. A name found nowhere raises an UnknownNameError of one line with the closest names."""
    if isinstance(name, CalibratorEntry):
        return name
    try:
        return CALIBRATORS[resolve_name(name, CALIBRATORS, "calibrator")]
    except UnknownNameError:
        found = find_external_calibrator(name, calibrator_names(include_tuned=True))
        return CalibratorEntry(found.name, found.cls, description=(found.cls.__doc__ or "").strip().split("\n")[0],
                               source=found.source)


def canonical_calibrator(name: str) -> str:
    """The canonical spelling of ``name`` (:func:`calibrator_entry`): a pure look-up, no registration."""
    return calibrator_entry(name).name


def calibrator_seed_name(name: str | CalibratorEntry) -> str:
    """The name a fit of calibrator ``name`` derives its seed from (see :class:`CalibratorEntry`)."""
    entry = calibrator_entry(name)
    return entry.seed_name or entry.name


def is_external(name: str | CalibratorEntry) -> bool:
    """Whether calibrator ``name`` comes from another package."""
    return calibrator_entry(name).source is not None


def _build_kwargs(entry: CalibratorEntry, dataset: str | None, backbone: str | None, options: dict) -> dict:
    """The keyword options ``entry``'s class is built with on (dataset, backbone): the default weight decay
    (not for a calibrator from another package: its constructor's own), the class's per-benchmark defaults, the
    name's preset, then ``options``."""
    if entry.tuned_from is not None and not options:
        raise ConfigError(f"{entry.name} is {entry.tuned_from} with options tuned per benchmark, and none were given: "
                          f"pass them, e.g. build_calibrator({entry.name!r}, ..., **load_tuned_params(dataset, "
                          f"backbone, {entry.tuned_from!r})) from simcalib.store.tuned, or name it in a study file "
                          f"or `simcalib benchmark --calibrators`, which read study/tuned/")
    # per-benchmark option defaults besides weight decay (e.g. GATS's bias on CoraFull)
    benchmark_defaults = getattr(entry.cls, "benchmark_defaults", None)
    per_benchmark = benchmark_defaults(dataset, backbone) if benchmark_defaults else {}
    protocol = {} if entry.source else {"weight_decay": default_weight_decay(entry.cls.name, dataset, backbone)}
    return {**protocol, **per_benchmark, **entry.preset, **options}


def _per_benchmark_options(entry: CalibratorEntry) -> tuple[str, ...]:
    """The options whose default ``entry`` looks up per benchmark: the weight decay where it has a table,
    and every option its class's ``benchmark_defaults`` sets on some benchmark graph; less its preset's."""
    return tuple(sorted(set(_class_per_benchmark_options(entry.cls, entry.source is None)) - set(entry.preset)))


@functools.cache
def _class_per_benchmark_options(cls: type[Calibrator], builtin: bool) -> tuple[str, ...]:
    from simcalib.backbones.models import BACKBONES
    from simcalib.data.registry import dataset_names

    options = set()
    if builtin and weight_decay_is_per_benchmark(cls.name):
        options.add("weight_decay")
    benchmark_defaults = getattr(cls, "benchmark_defaults", None)
    if benchmark_defaults is not None:
        for dataset in dataset_names():
            for backbone in BACKBONES:
                options.update(benchmark_defaults(dataset, backbone))
    return tuple(sorted(options))


def defaults_taken(name: str | CalibratorEntry, dataset: str | None, backbone: str | None = None, **options) -> dict:
    """On a graph that is not a benchmark graph (``dataset`` None or not built in): each per-benchmark default
    of ``name`` that ``options`` leave open, with the value it took (the value the defaults give every graph
    outside their tables); {} on a benchmark graph."""
    from simcalib.data.registry import dataset_names

    if dataset in dataset_names():
        return {}
    entry = calibrator_entry(name)
    kwargs = _build_kwargs(entry, dataset, backbone, options)
    defaults = _constructor_defaults(entry.cls)
    return {option: kwargs.get(option, defaults.get(option)) for option in _per_benchmark_options(entry)
            if option not in options}


_WARNED: set = set()  # (calibrator, dataset, backbone) whose defaults_taken were warned about in this process


def _warn_defaults_taken(name: str, dataset: str | None, backbone: str | None, taken: dict) -> None:
    key = (name, dataset, backbone)
    if not taken or key in _WARNED:
        return
    _WARNED.add(key)
    from simcalib.data.registry import dataset_names

    graph = "a graph given without a dataset name" if dataset is None else f"graph {dataset!r}"
    hint = did_you_mean(dataset, dataset_names()) if dataset is not None else ""
    values = ", ".join(f"{option}={value!r}" for option, value in taken.items())
    warnings.warn(f"{name} on {graph}, not a benchmark graph{hint}: its per-benchmark defaults took {values} "
                  "(their value off the benchmark tables); pass these options to choose them (docs/own-graph.md)",
                  DefaultsTakenWarning, stacklevel=3)


def build_calibrator(name: str | CalibratorEntry, num_classes: int, dataset: str | None = None, backbone: str | None = None,
                     **options) -> Calibrator:
    """Instantiate a registered calibrator with the protocol defaults for (dataset, backbone).

    ``options`` override the preset and the default weight decay; unknown options raise a ConfigError
    naming the calibrator. A ``*_tuned`` name is its base calibrator with the options a search stored for the
    benchmark: the study and the command line read them (:func:`simcalib.store.tuned.load_tuned_params`) and
    pass them here as ``options``; the library reads no file. On a graph that is not a benchmark graph, the
    per-benchmark defaults it takes are warned about once (:func:`defaults_taken`, docs/own-graph.md). The
    calibrator keeps what it was built from (``built_from``), which :meth:`Calibrator.save` writes.
    """
    entry = calibrator_entry(name)
    kwargs = _build_kwargs(entry, dataset, backbone, options)
    try:
        calibrator = entry.cls(num_classes, **kwargs)
    except TypeError as exc:
        raise ConfigError(f"invalid options for calibrator {entry.name}: {exc}") from None
    taken = defaults_taken(entry.name, dataset, backbone, **options)
    _warn_defaults_taken(entry.name, dataset, backbone, taken)
    definition = _definition(entry, kwargs, calibrator, taken)
    calibrator.built_from = {"name": entry.name, "num_classes": int(num_classes), "dataset": dataset,
                             "backbone": backbone, "options": dict(options), "digest": definition.digest}
    # the same construction, unfitted: what Calibrator.save rebuilds to check that its file loads
    calibrator._build_unfitted = functools.partial(entry.cls, num_classes, **kwargs)
    return calibrator


TRAINING_OPTIONS = ("lr", "weight_decay", "max_epochs", "patience")  # Calibrator's own, kept as attributes


def _constructor_defaults(cls: type) -> dict:
    """Every keyword option of ``cls``'s constructor chain (its own ``__init__`` and those it passes
    ``**kwargs`` on to) with its default; the most derived class's default wins."""
    defaults: dict = {}
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is nn.Module or klass is object:
            continue
        for parameter in list(inspect.signature(init).parameters.values())[1:]:
            if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD) or parameter.name == "num_classes":
                continue
            defaults.setdefault(parameter.name, parameter.default)
    return defaults


@dataclass(frozen=True)
class CalibratorDefinition:
    """What a registered name builds on one benchmark: its class, every constructor option, resolved, and for a
    calibrator from another package the package, version and entry it came from."""

    name: str
    options: dict  # {"class": class name, [package, version, entry,] option: value, ...}
    # on a graph that is not a benchmark graph: each per-benchmark default taken, option -> value
    # (:func:`defaults_taken`); not part of :attr:`text`, which the options alone define
    defaults_taken: dict = field(default_factory=dict)

    @property
    def text(self) -> str:
        """The options as canonical JSON (sorted keys): what a results row records."""
        return json.dumps(self.options, sort_keys=True, default=repr, separators=(",", ":"))

    @property
    def digest(self) -> str:
        """12 hex digits of SHA-256 over :attr:`text`: equal digests, equal definitions."""
        return hashlib.sha256(self.text.encode()).hexdigest()[:12]


def calibrator_definition(name: str | CalibratorEntry, dataset: str | None = None, backbone: str | None = None,
                          **options) -> CalibratorDefinition:
    """The resolved definition of ``name`` on (dataset, backbone) with ``options`` (as :func:`build_calibrator`
    would build it): a changed default, preset, per-benchmark setting or tuned option gives another digest,
    so rows of two definitions of one calibrator are never taken for one (:mod:`simcalib.store.integrity`).
    Unknown options raise a ConfigError naming the calibrator."""
    entry = calibrator_entry(name)
    kwargs = _build_kwargs(entry, dataset, backbone, options)
    _check_options(entry, kwargs)
    # the training options a class may set in its constructor (e.g. WATS's 1000 epochs), read from a built model;
    # built under a forked generator so that resolving a definition never moves the random stream of a fit
    with torch.random.fork_rng(devices=[]):
        model = entry.cls(2, **kwargs)  # the options do not depend on the number of classes
    return _definition(entry, kwargs, model, defaults_taken(entry.name, dataset, backbone, **options))


def _check_options(entry: CalibratorEntry, kwargs: dict) -> None:
    defaults = _constructor_defaults(entry.cls)
    unknown = sorted(set(kwargs) - set(defaults))
    if unknown:
        raise ConfigError(f"invalid options for calibrator {entry.name}: {', '.join(unknown)} (its options: "
                          f"{', '.join(sorted(defaults))})")


def _definition(entry: CalibratorEntry, kwargs: dict, model: Calibrator, taken: dict) -> CalibratorDefinition:
    """The definition of ``entry`` built with ``kwargs`` as ``model``; ``taken``: :func:`defaults_taken`."""
    trained = {option: getattr(model, option) for option in TRAINING_OPTIONS}
    # the class's numbers version from 2 on (version 1 is absent: the digests of first definitions stay as they are)
    version = int(getattr(entry.cls, "numbers_version", 1))
    versioned = {"numbers_version": version} if version > 1 else {}
    return CalibratorDefinition(entry.name, {"class": entry.cls.__name__, **(entry.source or {}),
                                             **_constructor_defaults(entry.cls), **kwargs, **trained, **versioned},
                                taken)


def _read_saved(path) -> dict:
    """The record :meth:`Calibrator.save` wrote to ``path``, read with ``torch.load(weights_only=True)`` (plain
    values and tensors, no code runs); a ConfigError of one line for a missing file or another format."""
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise ConfigError(f"no calibrator file at {path}") from None
    except Exception as exc:  # torch raises several types for a file that is not its format
        raise ConfigError(f"{path} is not a saved calibrator ({type(exc).__name__}); write one with "
                          "calibrator.save(path)") from None
    if not isinstance(saved, dict) or saved.get("format") != SAVED_FORMAT:
        raise ConfigError(f"{path} is not a saved calibrator; write one with calibrator.save(path)")
    if saved["format_version"] != SAVED_FORMAT_VERSION:
        raise ConfigError(f"{path} has calibrator format {saved['format_version']}; this simcalib reads "
                          f"{SAVED_FORMAT_VERSION} (saved by simcalib {saved['simcalib_version']})")
    return saved


def _rebuild(built: dict) -> Calibrator:
    """The unfitted calibrator ``built`` (a ``built_from``) describes; its per-benchmark defaults were stated when
    it was first built, so they are not warned about again."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DefaultsTakenWarning)
        return build_calibrator(built["name"], built["num_classes"], built["dataset"], built["backbone"],
                                **built["options"])


def load_calibrator(path, device="cpu") -> Calibrator:
    """The fitted calibrator :meth:`Calibrator.save` wrote to ``path``, on ``device``, in evaluation mode.

    It is rebuilt from what ``build_calibrator`` built it from; a file whose definition this simcalib resolves to
    another digest (a default, preset or per-benchmark value changed since) is refused. The file is read with
    ``torch.load(weights_only=True)``: plain values and tensors, no code runs. The metadata saved beside it
    (``save(path, metadata=...)``): :func:`saved_metadata`."""
    saved = _read_saved(path)
    built = json.loads(saved["built_from"])
    with torch.random.fork_rng(devices=[]):  # building draws initial weights; loading leaves the stream alone
        calibrator = _rebuild(built)
        if calibrator.built_from["digest"] != built["digest"]:
            raise ConfigError(f"{path}: {built['name']} as saved (simcalib {saved['simcalib_version']}, definition "
                              f"{built['digest']}) resolves to another definition here "
                              f"({calibrator.built_from['digest']}); load it with the simcalib that saved it, or "
                              "fit it again")
        try:  # may build modules: drawn here
            calibrator.restore_state(saved["state"], json.loads(saved["attributes"]))
        except (RuntimeError, KeyError) as exc:
            raise DataCorruptError(f"{path}: the saved state of {built['name']} does not fit its model "
                                   f"({type(exc).__name__}); fit and save it again") from None
    calibrator.fit_info = json.loads(saved["fit_info"])
    return calibrator.to(device)


def saved_metadata(path) -> dict:
    """The metadata saved beside the calibrator in ``path`` (``calibrator.save(path, metadata=...)``; ``simcalib
    select`` saves its ranking as ``{"selection": ...}``); {} for a file saved without any."""
    return json.loads(_read_saved(path).get("metadata", "{}"))


register_calibrator("UnCal", UnCal)
register_calibrator("TS", TS)
register_calibrator("VS", VS)
register_calibrator("ETS", ETS)
register_calibrator("CaGCN", CaGCN)
register_calibrator("GATS", GATS)
# Calibrators beyond the paper's seven: the GATS code's four extra ones, GETS and WATS.
register_calibrator("Dirichlet", Dirichlet)
register_calibrator("IRM", IRM)
register_calibrator("Spline", Spline)
register_calibrator("OrderInvariant", OrderInvariant)
register_calibrator("GETS", GETS)
register_calibrator("WATS", WATS)
# GETS's variants (docs/decisions.md, "Extra calibrators"): presets of one implementation.
register_calibrator("GETS_ap", GETS, "GETS with one temperature per expert and node (accuracy-preserving), the "
                    "backbone's first-layer features and a trained degree embedding", seed_name="GETS",
                    expert_output="temperature", features="hidden", degree_embedding="trained")
register_calibrator("GETS_holdout", GETS, "GETS fitted on one per-class half of the calibration fold, early-stopped "
                    "on the other half", stopping="holdout")
# SimCalib and its ablations (paper Table 3): presets of one implementation.
register_calibrator("SimCalib", SimCalib)
# T_feat = softplus(G_feat(s, A)) with 0.05 decay on every parameter: one constant T_feat per run, kept to measure
# what the anchored feature branch changes on the same backbones (docs/decisions.md).
register_calibrator("SimCalib_decay_all", SimCalib,
                    "SimCalib with T_feat = softplus(G_feat) and weight decay 0.05 on every parameter",
                    feature_temperature="softplus", standardize_similarity=False, decay="all", stopping="train",
                    weight_decay=SIMCALIB_DECAY_ALL_WEIGHT_DECAY)
register_calibrator("SimCalib_l", SimCalib, "SimCalib with the backbone's logits instead of s_i in G_feat",
                    feature_input="logits")
register_calibrator("SimCalib_m", SimCalib, "SimCalib, movement-similarity branch only (w = 0)", w=0.0)
register_calibrator("SimCalib_h", SimCalib, "SimCalib without the relative degree", relative_degree=False)
register_calibrator("SimCalib_r", SimCalib, "SimCalib without the homophily term", homophily=False)
register_calibrator("SimCalib_n", SimCalib, "SimCalib without homophily nor relative degree",
                    homophily=False, relative_degree=False)
# The per-benchmark tuned settings (`simcalib tune ... --space paper_coarse`), beside the defaults in one table.
register_calibrator("SimCalib_tuned", SimCalib, "SimCalib with its tuned options for the benchmark (study/tuned/)",
                    tuned_from="SimCalib")
register_calibrator("GATS_tuned", GATS, "GATS with its tuned options for the benchmark (study/tuned/)",
                    tuned_from="GATS")
# The mixing weight as a fixed parameter (paper Table 4; t still chosen from its grid on labelled nodes).
for _w in (0.5, 0.6, 0.8, 0.9):
    register_calibrator(f"SimCalib_w{_w:g}", SimCalib, f"SimCalib with the mixing weight fixed at w = {_w:g}", w=_w)
# A calibrator chosen per run among registered ones by cross-fitting on the calibration fold (docs/decisions.md).
register_calibrator("AutoCal", AutoCal)
AutoCal.registry = CandidateRegistry(calibrator_entry, build_calibrator)

__all__ = [
    "AutoCal", "CALIBRATORS", "ETS", "GATS", "GETS", "HIDDEN_LABEL", "IRM", "TS", "VS", "CaGCN", "CalibrationGraph",
    "Calibrator", "CalibratorDefinition", "CalibratorEntry", "Dirichlet", "is_external", "OrderInvariant", "SimCalib", "Spline",
    "TemperatureCalibrator", "UnCal", "WATS", "build_calibrator", "calibrator_definition", "calibrator_names",
    "calibrator_entry", "calibrator_seed_name", "canonical_calibrator", "defaults_taken",
    "default_weight_decay", "load_calibrator", "node_outputs", "register_calibrator", "saved_metadata",
]
