"""Study files: what an orchestrated study runs, as validated data (``study/*.yaml``).

A study is the GATS protocol over a set of benchmarks (datasets x backbones) and calibrators::

    name: quick                      # the MLflow experiment is named after the study
    seed: 10                         # study seed: every run's seed derives from it (simcalib.seeding)
    benchmarks: {datasets: [Cora, Citeseer], backbones: [GCN, GAT]}
    calibrators: all                 # or [UnCal, TS], or {TS: {lr: 0.01}, SimCalib: tuned}
    runs: {splits: 1, inits: 1, folds: 3, label_rate: 0.15}   # a count (0..n-1) or a list of indices
                                     # per_dataset: {minesweeper: {inits: 1}}: a dataset's own splits, inits
                                     # or folds (each key not given: the study's)
                                     # label_rate: one rate, or a list (a sweep: every benchmark at each rate)
                                     # generated_splits: false (true: splits beyond the fixed files are drawn)
                                     # batch_runs: false (true: a split's backbones trained as one batched
                                     # model, reports/performance/), models_per_batch: null (all of a split)
                                     # batch_calibrators: false (true: TS, VS, ETS, CaGCN and GATS fitted on
                                     # a split's runs together, simcalib.calibrators.across_runs)
    backbone: {}                     # BackboneConfig overrides, e.g. {max_epochs: 200}
    data: {mirror: null, root: null, splits_dir: null, cache_dir: null}   # null: environment / defaults
    output: results/quick            # per benchmark: <output>/<Dataset>_<Backbone>/results.csv
    tracking_uri: null               # null: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db
    task_runner: {kind: threads, workers: 2, address: null, torch_threads: null}
                                     # granularity: auto (run: one task per run, on a CUDA device; calibrator:
                                     # per backbone and per calibrator, on the CPU), runs_per_device: null (K runs
                                     # in flight on each CUDA device; null: the workers shared over the devices)
    shift: {properties: [popularity], id_fraction: 0.5}     # optional: structural shift splits (ShiftSpec)
    conformal: {alphas: [0.1, 0.05], scores: [APS, RAPS, DAPS]}   # optional: prediction sets (ConformalSpec)

With several label rates, each (rate, benchmark) is written to ``<output>/label_rate_<rate>/<Dataset>_<Backbone>``
and logged as its own MLflow run ``<Dataset>-<Backbone>-rate<rate>``; one rate keeps the plain layout.

Relative paths are relative to the working directory (the project root). ``tuned`` as a calibrator's
options reads ``study/tuned/<Dataset>_<Backbone>.yaml`` (:mod:`simcalib.tuning`'s output); ``tuned:NAME``
reads the tuned options of calibrator NAME (e.g. SimCalib's ablations with SimCalib's tuned w and t).

Every error names the file, the YAML line and the key, and is raised before any work starts. This module is
pure (pydantic + PyYAML); the Prefect flow that runs a study is :mod:`flows.study`.
"""

from __future__ import annotations

import dataclasses
import os
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from simcalib.errors import ConfigError, SimCalibError

Path_ = tuple[str | int, ...]  # a key path into the YAML document, e.g. ("runs", "splits")

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"  # shared with `simcalib tune`: one MLflow UI shows both
TUNED = "tuned"
N_FOLDS = 3  # the protocol's labelled folds; a study picks which of them are calibration folds


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class BenchmarksSpec(_Strict):
    datasets: list[str] = Field(min_length=1)
    backbones: list[str] = Field(default_factory=lambda: ["GCN", "GAT"], min_length=1)


LabelRate = Annotated[float, Field(gt=0.0, lt=1.0)]


Indices = int | list[int]  # a count (0..n-1) or a list of indices


class DatasetRunsSpec(_Strict):
    """One dataset's own runs (``runs.per_dataset``): each key given replaces the study's for that dataset's
    benchmarks; a key not given is the study's."""

    splits: Indices | None = None
    inits: Indices | None = None
    folds: Indices | None = None


class RunsSpec(_Strict):
    splits: int | list[int] = 5
    inits: int | list[int] = 5
    folds: int | list[int] = 3
    label_rate: LabelRate | list[LabelRate] = 0.15
    generated_splits: bool = False  # allow splits beyond the fixed split files (drawn from the study seed)
    batch_runs: bool = False  # train a split's backbones as one batched model (another stream, cached apart)
    models_per_batch: int | None = Field(default=None, ge=1)  # with batch_runs: at most this many per batch
    batch_calibrators: bool = False  # fit the stackable calibrators on a split's runs together (cached apart)
    per_dataset: dict[str, DatasetRunsSpec] = Field(default_factory=dict)  # a dataset's own splits, inits, folds


class DataSpec(_Strict):
    mirror: str | None = None  # None: $SIMCALIB_DATA_MIRROR
    root: str | None = None  # None: $SIMCALIB_DATA_ROOT or ./data
    splits_dir: str | None = None  # None: $SIMCALIB_SPLITS_DIR, else ../shared/datasets/splits, else <root>/splits
    cache_dir: str | None = None  # backbone cache; None: $SIMCALIB_CACHE_DIR or .cache/simcalib


class TaskRunnerSpec(_Strict):
    kind: Literal["threads", "processes", "dask"] = "processes"  # both cores; threads take turns on the numerics (flows/runners.py)
    workers: int = Field(default=2, ge=1)
    address: str | None = None  # Dask scheduler, e.g. tcp://10.0.0.5:8786; None: a LocalCluster on 127.0.0.1
    torch_threads: int | None = Field(default=None, ge=1)  # torch intra-op threads per task process
    # the units of work (simcalib.experiment.schedule): a task per run (its backbone and every calibrator) or per
    # backbone and per calibrator; auto: per run on a CUDA device, per calibrator on the CPU
    granularity: Literal["auto", "run", "calibrator"] = "auto"
    runs_per_device: int | None = Field(default=None, ge=1)  # runs in flight per device; None: the workers shared


ShiftProperty = Literal["popularity", "locality", "density"]
ConformalScore = Literal["APS", "RAPS", "DAPS"]
Alpha = Annotated[float, Field(gt=0.0, lt=1.0)]


class ShiftSpec(_Strict):
    """A structural shift (:mod:`simcalib.experiment.shift`): per property, NodePropertySplit's ID part (the
    ``id_fraction`` of the nodes) holds the protocol's folds and ID test nodes, the rest are OOD test nodes."""

    properties: list[ShiftProperty] = Field(min_length=1)
    id_fraction: float = Field(default=0.5, gt=0.0, lt=1.0)


class ConformalSpec(_Strict):
    """Split-conformal sets (:mod:`simcalib.conformal`): the calibration fold divided (seeded, per class) into
    a part that fits every calibrator and a part (``quantile_fraction``) that sets the conformal quantile."""

    alphas: list[Alpha] = Field(default_factory=lambda: [0.1, 0.05], min_length=1)
    scores: list[ConformalScore] = Field(default_factory=lambda: ["APS", "RAPS", "DAPS"], min_length=1)
    quantile_fraction: float = Field(default=0.5, gt=0.0, lt=1.0)
    randomised: bool = True
    raps_penalty: float = Field(default=0.01, ge=0.0)
    raps_k_reg: int = Field(default=2, ge=0)
    daps_diffusion: float = Field(default=0.5, ge=0.0, le=1.0)


class StudySpec(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    description: str = ""
    seed: int = 10
    benchmarks: BenchmarksSpec
    calibrators: Literal["all"] | list[str] | dict[str, dict[str, Any] | str | None] = "all"
    runs: RunsSpec = Field(default_factory=RunsSpec)
    backbone: dict[str, Any] = Field(default_factory=dict)
    data: DataSpec = Field(default_factory=DataSpec)
    output: str | None = None  # None: results/<name>
    tracking_uri: str | None = None
    task_runner: TaskRunnerSpec = Field(default_factory=TaskRunnerSpec)
    save_predictions: bool = True  # test probabilities per run (the report's reliability diagrams use them)
    report: bool = True  # run flows/report.py at the end when it exists
    device: str = "auto"
    tuned_dir: str | None = None  # None: $SIMCALIB_TUNED_DIR or study/tuned
    shift: ShiftSpec | None = None  # None: the protocol's splits (no ID/OOD division)
    conformal: ConformalSpec | None = None  # None: no prediction sets


# ---------------------------------------------------------------------------------------------------------
# YAML with line numbers


def _node_lines(node: yaml.Node, path: Path_, lines: dict[Path_, int], source: str) -> None:
    """Record the 1-based line of every key path below ``node``; refuse duplicate keys (YAML keeps the last)."""
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value
            line = key_node.start_mark.line + 1
            if key in seen:
                raise ConfigError(f"{source}:{line}: key {'.'.join(map(str, (*path, key)))!r} is given twice "
                                  f"(first on line {seen[key]}); keep one")
            seen[key] = line
            lines[(*path, key)] = line
            _node_lines(value_node, (*path, key), lines, source)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[(*path, index)] = item.start_mark.line + 1
            _node_lines(item, (*path, index), lines, source)


def parse_yaml(text: str, source: str) -> tuple[dict, dict[Path_, int]]:
    """The document as a dict and the line of every key path in it."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark, context = getattr(exc, "problem_mark", None), getattr(exc, "context_mark", None)
        where = f"{source}:{mark.line + 1}" if mark else source
        opened = f"; the {exc.context.split()[-1]} opened on line {context.line + 1}" if context and exc.context else ""
        raise ConfigError(f"{where}: not valid YAML ({getattr(exc, 'problem', exc)}{opened}); fix the syntax") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a study file is a mapping of keys (name, benchmarks, calibrators, ...)")
    lines: dict[Path_, int] = {}
    _node_lines(root, (), lines, source)
    return data, lines


# ---------------------------------------------------------------------------------------------------------
# The validated study


@dataclass(frozen=True)
class CalibratorPlan:
    """One calibrator of the study: canonical name and options (``tuned`` ones resolved per benchmark)."""

    name: str
    options: dict = field(default_factory=dict)
    tuned_from: str | None = None  # calibrator whose tuned options are used; None: ``options`` as given
    key: Path_ = ("calibrators",)  # where it is named in the file, for error messages


@dataclass
class Study:
    """A validated study file. ``line(path)`` gives the YAML line of a key, for errors found later."""

    spec: StudySpec
    source: str
    lines: dict[Path_, int]
    datasets: list[str]
    backbones: list[str]
    calibrators: list[CalibratorPlan]
    splits: list[int]
    inits: list[int]
    folds: list[int]
    label_rates: list[float] = field(default_factory=lambda: [0.15])
    # dataset -> its own (splits, inits, folds) from ``runs.per_dataset``; a dataset not here runs the study's
    dataset_runs: dict[str, tuple[list[int], list[int], list[int]]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def output(self) -> Path:
        return Path(self.spec.output or f"results/{self.spec.name}")

    @property
    def tracking_uri(self) -> str:
        return self.spec.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI

    @property
    def experiment_name(self) -> str:
        return f"study-{self.spec.name}"

    def benchmarks(self) -> list[tuple[str, str]]:
        return [(d, b) for d in self.datasets for b in self.backbones]

    @property
    def sweeps_label_rate(self) -> bool:
        return len(self.label_rates) > 1

    def benchmark_dir(self, dataset: str, backbone: str, label_rate: float | None = None) -> Path:
        """Where one benchmark's ``results.csv``, ``summary.csv`` and predictions go (one folder per rate
        when the study sweeps label rates)."""
        if self.sweeps_label_rate:
            return self.output / f"label_rate_{label_rate:g}" / f"{dataset}_{backbone}"
        return self.output / f"{dataset}_{backbone}"

    def runs_of(self, dataset: str) -> tuple[list[int], list[int], list[int]]:
        """The (splits, inits, folds) of ``dataset``'s benchmarks: its ``runs.per_dataset`` entry, else the
        study's."""
        return self.dataset_runs.get(dataset, (self.splits, self.inits, self.folds))

    def runs_per_benchmark(self, dataset: str | None = None) -> int:
        """The runs of one benchmark of ``dataset`` (None: of a dataset without a ``runs.per_dataset`` entry)."""
        splits, inits, folds = self.runs_of(dataset) if dataset is not None else (self.splits, self.inits, self.folds)
        return len(splits) * len(inits) * len(folds)

    def describe_runs(self) -> str:
        """The runs per benchmark in words (:func:`describe_runs` over :meth:`runs_per_benchmark` of each dataset)."""
        return describe_runs(self.runs_per_benchmark(), {d: self.runs_per_benchmark(d) for d in self.datasets})

    def settings(self, label_rate: float | None = None):
        """The :class:`simcalib.experiment.protocol.ProtocolSettings` of the study's runs at ``label_rate`` (default: its
        first, the only one unless the study sweeps rates)."""
        from simcalib.experiment.protocol import ProtocolSettings

        data = self.spec.data
        rate = self.label_rates[0] if label_rate is None else label_rate
        return ProtocolSettings(
            study_seed=self.spec.seed, fold_rate=rate / N_FOLDS, n_folds=N_FOLDS,
            data_root=data.root, mirror=data.mirror, splits_dir=data.splits_dir, cache_dir=data.cache_dir,
            device=self.spec.device, backbone_overrides=tuple(sorted(self.spec.backbone.items())),
            generated_splits=self.spec.runs.generated_splits, batch_runs=self.spec.runs.batch_runs,
        )

    def line(self, path: Iterable[str | int]) -> int | None:
        """The line of ``path`` or of its nearest enclosing key present in the file."""
        path = tuple(path)
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return None

    def where(self, path: Iterable[str | int]) -> str:
        """``file:line: key`` for messages (``(command line)`` for values set outside the file)."""
        path = tuple(path)
        line = self.line(path)
        key = ".".join(map(str, path))
        return f"{self.source}:{line}: {key}" if line else f"{self.source}: {key}"

    def benchmark_options(self, dataset: str, backbone: str) -> dict[str, dict]:
        """Every calibrator's options on one benchmark, by name (see :meth:`calibrator_options`)."""
        return {c.name: self.calibrator_options(c, dataset, backbone) for c in self.calibrators}

    def calibrator_options(self, calibrator: CalibratorPlan, dataset: str, backbone: str) -> dict:
        """The options of ``calibrator`` on one benchmark (tuned ones read now; ConfigError naming the line)."""
        if calibrator.tuned_from is None:
            return dict(calibrator.options)
        from simcalib.store.tuned import load_tuned_params  # torch and the registry: only for tuned names

        try:
            return load_tuned_params(dataset, backbone, calibrator.tuned_from, self.spec.tuned_dir)
        except SimCalibError as exc:
            raise ConfigError(f"{self.where(calibrator.key)}: {exc}") from None


# ---------------------------------------------------------------------------------------------------------
# Loading and checking


def describe_runs(default: int, counts: Mapping[str, int]) -> str:
    """Runs per benchmark in words: ``75 per benchmark``, or with datasets of their own count (``runs.per_dataset``)
    ``75 per benchmark, 15 on minesweeper, tolokers``. ``counts``: each dataset's runs per benchmark;
    ``default``: those of a dataset without an entry (left out when no dataset has it)."""
    groups: dict[int, list[str]] = {}
    for dataset, count in counts.items():
        groups.setdefault(count, []).append(dataset)
    if set(groups) <= {default}:
        return f"{default} per benchmark"
    head = [f"{default} per benchmark"] if default in groups else []
    return ", ".join(head + [f"{n} on {', '.join(names)}" for n, names in groups.items() if n != default])


def merge_overrides(base: dict, overrides: dict) -> dict:
    """``base`` with ``overrides`` winning, nested dicts merged key by key (neither argument is changed)."""
    merged = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_overrides(merged[key], value)
        else:
            merged[key] = value
    return merged


_TYPE_TAGS = {"int", "str", "float", "bool", "none", "dict", "list"}


def _format_validation(exc: ValidationError, source: str, lines: dict[Path_, int]) -> str:
    messages: dict[Path_, str] = {}  # one message per key (a union type reports once per member)
    for error in exc.errors():
        # pydantic adds union-member names to the location (e.g. "list[int]"); they are not keys in the file
        loc = tuple(p for p in error["loc"] if isinstance(p, int) or ("[" not in p and p not in _TYPE_TAGS))
        path = loc
        while path and path not in lines:
            path = path[:-1]
        line = lines.get(path)
        key = ".".join(map(str, loc)) or "(top level)"
        if error["type"] == "extra_forbidden":
            text = f"unknown key {key!r}; valid keys here are: {', '.join(_valid_keys(loc[:-1]))}"
        else:
            text = f"{key}: {error['msg']} (got {error.get('input')!r})"
        messages.setdefault(loc, f"{source}:{line}: {text}" if line else f"{source}: {text}")
    unique = list(dict.fromkeys(messages.values()))
    return unique[0] if len(unique) == 1 else "invalid study file:\n  " + "\n  ".join(unique)


def _valid_keys(path: Path_) -> list[str]:
    model: type[BaseModel] = StudySpec
    keys = iter(path)
    for key in keys:
        annotation = model.model_fields[str(key)].annotation if str(key) in model.model_fields else None
        if typing.get_origin(annotation) is dict:  # a mapping of names to one model (runs.per_dataset)
            annotation = typing.get_args(annotation)[1]
            if next(keys, None) is None:
                return []
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
        else:
            return []
    return list(model.model_fields)


def _indices(value: int | list[int], key: str, study_where, at: Path_ = ("runs",)) -> list[int]:
    indices = list(range(value)) if isinstance(value, int) else list(value)
    if not indices:
        raise ConfigError(f"{study_where((*at, key))}: selects no {key}; give a count >= 1 or a list")
    if any(i < 0 for i in indices) or len(set(indices)) != len(indices):
        raise ConfigError(f"{study_where((*at, key))}: indices must be distinct and >= 0, got {indices}")
    if key == "folds" and max(indices) >= N_FOLDS:
        raise ConfigError(f"{study_where((*at, key))}: folds are 0..{N_FOLDS - 1} (the protocol has {N_FOLDS} "
                          f"labelled folds), got {indices}")
    return indices


def _check_dataset_runs(study: Study) -> None:
    """``runs.per_dataset``: each key one of the study's datasets (matched case-insensitively, named once), each
    value's indices checked as the study's are."""
    from simcalib.errors import UnknownNameError, resolve_name

    study.dataset_runs = {}
    for key, runs in study.spec.runs.per_dataset.items():
        at = ("runs", "per_dataset", key)
        try:
            dataset = resolve_name(key, study.datasets, "dataset")
        except UnknownNameError as exc:
            raise ConfigError(f"{study.where(at)}: {exc}; a key of runs.per_dataset is a dataset of "
                              "benchmarks.datasets") from None
        if dataset in study.dataset_runs:
            raise ConfigError(f"{study.where(at)}: {dataset} has two runs.per_dataset entries; keep one")
        given = {k: _indices(v, k, study.where, at) for k, v in runs.model_dump().items() if v is not None}
        if not given:
            raise ConfigError(f"{study.where(at)}: names none of splits, inits, folds; give one or remove the entry")
        study.dataset_runs[dataset] = (given.get("splits", study.splits), given.get("inits", study.inits),
                                       given.get("folds", study.folds))


def _label_rates(value: float | list[float], study_where) -> list[float]:
    rates = [value] if isinstance(value, float) else list(value)
    if not rates:
        raise ConfigError(f"{study_where(('runs', 'label_rate'))}: an empty list; give a rate in (0, 1) or a list")
    if len({round(r, 9) for r in rates}) != len(rates):
        raise ConfigError(f"{study_where(('runs', 'label_rate'))}: rates must be distinct, got {rates}")
    return rates


def _check_names(study: Study) -> None:
    """Datasets, backbones, calibrators, their options and the backbone overrides, each error naming its line."""
    from simcalib.backbones import BackboneConfig, backbone_name
    from simcalib.calibrators import CALIBRATORS, build_calibrator, calibrator_names, canonical_calibrator
    from simcalib.data import get_spec

    def resolve(path: Path_, fn, value):
        try:
            return fn(value)
        except SimCalibError as exc:
            raise ConfigError(f"{study.where(path)}: {exc}") from None

    spec = study.spec
    study.datasets = _unique([resolve(("benchmarks", "datasets", i), lambda v: get_spec(v).name, d)
                              for i, d in enumerate(spec.benchmarks.datasets)], study, ("benchmarks", "datasets"))
    study.backbones = _unique([resolve(("benchmarks", "backbones", i), backbone_name, b)
                               for i, b in enumerate(spec.benchmarks.backbones)], study, ("benchmarks", "backbones"))

    fields = {f.name for f in dataclasses.fields(BackboneConfig)} - {"name"}
    for key in spec.backbone:
        if key not in fields:
            raise ConfigError(f"{study.where(('backbone', key))}: unknown backbone option {key!r}; "
                              f"valid options are: {', '.join(sorted(fields))}")

    if spec.calibrators == "all":
        # every built-in calibrator but those that select among others (AutoCal fits each candidate five times:
        # it runs where a study names it)
        entries: list[tuple[Path_, str, Any]] = [(("calibrators",), name, None) for name in calibrator_names()
                                                 if not getattr(CALIBRATORS[name].cls, "selects_among_others", False)]
    elif isinstance(spec.calibrators, list):
        entries = [(("calibrators", i), name, None) for i, name in enumerate(spec.calibrators)]
    else:
        entries = [(("calibrators", name), name, options) for name, options in spec.calibrators.items()]
    if not entries:
        raise ConfigError(f"{study.where(('calibrators',))}: no calibrators; name at least one, or write `all`")
    plans, seen = [], {}
    for path, raw_name, options in entries:
        name = resolve(path, canonical_calibrator, raw_name)
        if name in seen:
            raise ConfigError(f"{study.where(path)}: calibrator {name} is listed twice (also line {seen[name]})")
        seen[name] = study.line(path)
        plans.append(_calibrator_plan(study, path, name, options, resolve, canonical_calibrator))
    # Options are checked by building each calibrator once per benchmark (cheap: small modules, no data); a
    # calibrator from another package is also fitted on a small probe graph (simcalib.calibrators.probe).
    probed: set = set()
    for plan in plans:
        if plan.tuned_from is None:
            for dataset in study.datasets:
                for backbone in study.backbones:
                    resolve(plan.key, lambda options, n=plan.name, d=dataset, b=backbone: build_calibrator(
                        n, get_spec(d).num_classes, d, b, **options), plan.options)
                    resolve(plan.key, lambda options, n=plan.name, d=dataset, b=backbone: probe_external(
                        n, d, b, options, probed), plan.options)
    study.calibrators = plans


def probe_external(name: str, dataset: str, backbone: str, options: dict, probed: set | None = None) -> None:
    """:func:`~simcalib.calibrators.probe.probe_calibrator` for a calibrator from another package, once per
    definition and number of classes in ``probed``; nothing for a built-in."""
    from simcalib.calibrators import calibrator_definition, is_external
    from simcalib.calibrators.probe import probe_calibrator
    from simcalib.data import get_spec

    if not is_external(name):
        return
    num_classes = get_spec(dataset).num_classes
    key = (name, num_classes, calibrator_definition(name, dataset, backbone, **options).text)
    if probed is not None and key in probed:
        return
    probe_calibrator(name, num_classes, dataset, backbone, **options)
    if probed is not None:
        probed.add(key)


def _calibrator_plan(study: Study, path: Path_, name: str, options: Any, resolve, canonical) -> CalibratorPlan:
    from simcalib.calibrators import calibrator_entry

    tuned_name = calibrator_entry(name).tuned_from  # e.g. SimCalib_tuned: the study reads SimCalib's tuned options
    if options is None:
        return CalibratorPlan(name, tuned_from=tuned_name, key=path)
    if isinstance(options, dict):
        return CalibratorPlan(name, dict(options), key=path)
    text = options.strip()
    if text == TUNED:
        return CalibratorPlan(name, tuned_from=name, key=path)
    if text.startswith(f"{TUNED}:"):
        return CalibratorPlan(name, tuned_from=resolve(path, canonical, text.split(":", 1)[1].strip()), key=path)
    raise ConfigError(f"{study.where(path)}: options of {name} must be a mapping (e.g. {{lr: 0.01}}), "
                      f"`tuned`, or `tuned:<Calibrator>`; got {options!r}")


def _unique(names: list[str], study: Study, path: Path_) -> list[str]:
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"{study.where(path)}: {', '.join(duplicates)} listed twice")
    return names


def _check_paths(study: Study) -> None:
    """Data folders named in the file must exist (a missing splits folder would silently mean other splits)."""
    for key in ("mirror", "splits_dir"):
        value = getattr(study.spec.data, key)
        if value is not None and not Path(value).is_dir():
            raise ConfigError(f"{study.where(('data', key))}: folder {value} does not exist (relative paths are "
                              f"relative to the working directory {Path.cwd()}); fix it or write null")


def study_from_dict(data: dict, source: str = "<study>", lines: dict[Path_, int] | None = None) -> Study:
    """Validate an already-parsed study document (``lines``: YAML line of each key path, if known)."""
    lines = lines or {}
    try:
        spec = StudySpec.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_validation(exc, source, lines)) from None
    study = Study(spec, source, lines, [], [], [], [], [], [])
    study.splits = _indices(spec.runs.splits, "splits", study.where)
    study.inits = _indices(spec.runs.inits, "inits", study.where)
    study.folds = _indices(spec.runs.folds, "folds", study.where)
    study.label_rates = _label_rates(spec.runs.label_rate, study.where)
    _check_names(study)
    _check_dataset_runs(study)
    _check_paths(study)
    return study


def load_study(path: str | os.PathLike, overrides: dict | None = None) -> Study:
    """Read and validate a study file; ``overrides`` (nested keys, e.g. from the command line) win over it."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"study file {path} does not exist; see study/*.yaml for examples")
    data, lines = parse_yaml(path.read_text(), str(path))
    if overrides:
        data = merge_overrides(data, overrides)
        lines = {k: v for k, v in lines.items() if not _overridden(k, overrides)}
    return study_from_dict(data, str(path), lines)


def _overridden(path: Path_, overrides: dict) -> bool:
    """Whether the value at ``path`` comes from ``overrides`` (itself, or a list or value above it)."""
    node: Any = overrides
    for key in path:
        if not isinstance(node, dict):
            return True  # an overridden list or value holds this path
        if key not in node:
            return False
        node = node[key]
    return True


__all__ = [
    "DEFAULT_TRACKING_URI", "CalibratorPlan", "Study", "StudySpec", "describe_runs", "load_study", "merge_overrides",
    "parse_yaml", "study_from_dict",
]
