"""The plan: a study file (or one ``simcalib benchmark`` command) resolved once, before any work, into
immutable data.

Every question the protocol asks about its input is answered here, once:

* the benchmarks (dataset x backbone x label rate) and where each writes its results;
* the runs (split, init, fold) and their seeds (:func:`simcalib.seeding.run_seed`);
* each split's source: the fixed GATS file (path and SHA-256 of its bytes) or generated from the study seed,
  and, where the data is at hand, the digest of its node indices (the rows' ``split_digest``);
* the digest of the processed graph (the rows' ``data_digest``), where the data is at hand;
* the backbone's resolved configuration and the options its rows record (``backbone_options``);
* each calibrator, resolved once (:class:`~simcalib.experiment.protocol.PlannedCalibrator`): its canonical name
  (a calibrator of another package found by its entry point or ``module:Class`` here, and checked; nothing is
  registered), its options (tuned ones read from their file), the canonical JSON of every constructor option
  and its digest (the rows' ``calibrator_options`` and ``calibrator_digest``), and the name its fits' seeds
  derive from. The executor, the study flow and the ledger hand these entries to the protocol, which resolves
  no name again.
* the benchmark's kind (:attr:`BenchmarkPlan.kind`): ``protocol`` (the GATS protocol's rows), ``shift`` (one plan per
  dataset x backbone x shift property of the study file's ``shift`` section, its own results folder
  ``<dataset>_<backbone>_<property>``, the splits the shift splits of :mod:`simcalib.experiment.shift`) or
  ``conformal`` (the study file's ``conformal`` section: the protocol's splits, the calibration fold divided);
  the rows of the last two are computed by :func:`simcalib.experiment.node_runs.evaluate_run`, and their
  calibrator digests include the kind's settings (:func:`simcalib.experiment.node_runs.kind_definition`).

A run then reads its settings from the plan: :attr:`BenchmarkPlan.settings` names the fixed-splits folder
explicitly, so no process looks at ``$SIMCALIB_SPLITS_DIR`` or the checkout again. Each results row still
records the values of the split and graph it actually used, and :func:`simcalib.store.integrity.check_append`
compares them with the plan's (:meth:`BenchmarkPlan.planned_runs`).

The plan is JSON-able (:meth:`StudyPlan.to_json`, :meth:`StudyPlan.from_json`: equal after a round trip),
so a study's provenance can record it; :meth:`StudyPlan.lines` is its readable form (``simcalib study check``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from simcalib.backbones import backbone_name
from simcalib.calibrators import build_calibrator
from simcalib.data import get_spec, graph_digest
from simcalib.errors import ConfigError, SimCalibError
from simcalib.experiment.node_runs import KINDS, row_kind_definition, shift_run_split
from simcalib.experiment.protocol import (
    Options,
    PlannedCalibrator,
    ProtocolSettings,
    Run,
    backbone_config,
    backbone_options,
    load_graph,
    resolve_calibrator,
    run_split,
)
from simcalib.experiment.splits import (
    NO_SPLITS_DIR,
    PAPER_PROTOCOL,
    find_split_file,
    protocol_name,
    resolve_splits_dir,
    split_digest,
    split_source_label,
    split_sources,
)
from simcalib.experiment.study import Study, describe_runs, load_study, probe_external

PLAN_VERSION = 2  # bump when a field is added or its meaning changes

def _options(options: dict | None) -> Options:
    return tuple(sorted((options or {}).items()))


@dataclass(frozen=True)
class SplitEntry:
    """Where one split of a benchmark comes from."""

    split: int
    source: str  # "fixed" | "generated"
    file: str | None = None  # the fixed split file
    file_sha256: str | None = None  # 16 hex digits of SHA-256 over the file's bytes
    digest: str | None = None  # split_digest of its node indices; None when the data was not loaded
    label: str | None = None  # the rows' split_source ("fixed:<file>" or "generated"); None without data


@dataclass(frozen=True)
class BenchmarkPlan:
    """One benchmark at one label rate, resolved (``variant`` tells the rates of a sweep apart: ``-rate0.05``)."""

    dataset: str
    backbone: str
    settings: ProtocolSettings  # with the fixed-splits folder named explicitly ("none": no fixed files)
    runs: tuple[Run, ...]
    seeds: tuple[int, ...]  # of ``runs``, in order
    splits: tuple[SplitEntry, ...]
    splits_origin: str  # where the fixed-splits folder was found ("$SIMCALIB_SPLITS_DIR", "given", ...)
    calibrators: tuple[PlannedCalibrator, ...]
    backbone_config: Options  # the resolved BackboneConfig (dataset defaults and overrides)
    backbone_options: str  # the rows' backbone_options ("default" or key=value;...)
    data_digest: str | None  # digest of the processed graph; None when the data was not loaded
    out_dir: Path
    variant: str = ""
    kind: str = "protocol"  # protocol | shift | conformal (simcalib.experiment.node_runs.KINDS)
    kind_options: Options = ()  # shift: property, id_fraction; conformal: the ConformalSpec fields

    @property
    def name(self) -> str:
        return f"{self.dataset}-{self.backbone}{self.variant}"

    @property
    def kind_options_dict(self) -> dict:
        return {key: list(value) if isinstance(value, tuple) else value for key, value in self.kind_options}

    @property
    def split_sources(self) -> dict[int, str]:
        return {entry.split: entry.source for entry in self.splits}

    @property
    def calibrator_names(self) -> list[str]:
        return [c.name for c in self.calibrators]

    def calibrator(self, name: str) -> PlannedCalibrator:
        """The planned entry of calibrator ``name`` (its canonical name, as in :attr:`calibrator_names`)."""
        for entry in self.calibrators:
            if entry.name == name:
                return entry
        raise KeyError(f"{self.name} plans no calibrator {name!r}; it plans {', '.join(self.calibrator_names)}")

    @property
    def calibrator_options(self) -> dict[str, dict]:
        return {c.name: c.options_dict for c in self.calibrators}

    @property
    def has_data(self) -> bool:
        return self.data_digest is not None

    @property
    def run_indices(self) -> dict[str, list[int]]:
        """The split, init and fold indices of :attr:`runs` (``runs.per_dataset`` or the study's)."""
        return {"splits": sorted({r.split for r in self.runs}), "inits": sorted({r.init for r in self.runs}),
                "folds": sorted({r.fold for r in self.runs})}

    def seed(self, run: Run) -> int:
        return self.seeds[self.runs.index(run)]

    def planned_runs(self) -> list[dict]:
        """Each run's identity and definition as its rows will record them, for
        :func:`~simcalib.store.integrity.check_append` (needs a plan made with the data at hand)."""
        if not self.has_data:
            raise ValueError(f"{self.name}: the plan was made without the data; plan with data=True")
        entries = {entry.split: entry for entry in self.splits}
        return [{"dataset": r.dataset, "backbone": r.backbone, "split": r.split, "init": r.init, "fold": r.fold,
                 "label_rate": self.settings.label_rate, "seed": seed, "split_digest": entries[r.split].digest,
                 "data_digest": self.data_digest, "split_source": entries[r.split].label,
                 "backbone_options": self.backbone_options} for r, seed in zip(self.runs, self.seeds)]

    def definitions(self) -> dict[tuple[str, str, str], str]:
        """(dataset, backbone, calibrator) -> the calibrator digest its rows will carry."""
        return {(self.dataset, self.backbone, c.name): c.digest for c in self.calibrators}

    def describe_splits(self) -> str:
        """Where the splits come from, in one line: the fixed files and where they were found, or generated
        and why."""
        fixed = [e.split for e in self.splits if e.source == "fixed"]
        generated = [e.split for e in self.splits if e.source == "generated"]
        settings = self.settings
        if self.kind == "shift":
            options = self.kind_options_dict
            return (f"split(s) {_ranges(generated)} shift splits ({options['property']}, ID share "
                    f"{options['id_fraction']:g}) generated from seed {settings.study_seed}")
        parts = []
        if fixed:
            parts.append(f"split(s) {','.join(map(str, fixed))} from the fixed GATS files in "
                         f"{settings.resolved_splits_dir()} ({self.splits_origin})")
        if generated:
            external = get_spec(self.dataset).external
            if external is not None:
                why = f"a graph from another package, {external}"
            elif protocol_name(settings.fold_rate, settings.n_folds, settings.test_rate) != PAPER_PROTOCOL:
                why = f"no published files for label rate {settings.label_rate:g}"
            elif fixed:
                why = "beyond the fixed files, allowed by --generated-splits or runs.generated_splits"
            else:
                why = f"{self.splits_origin}; allowed by --generated-splits or runs.generated_splits"
            parts.append(f"split(s) {','.join(map(str, generated))} generated from seed {settings.study_seed} ({why})")
        return "; ".join(parts)

    def line(self) -> str:
        """The benchmark in one line: runs, seeds, data, backbone, calibrators, output."""
        splits, inits, folds = self.run_indices.values()
        data = f"data {self.data_digest}" if self.has_data else "data not loaded"
        kind = "" if self.kind == "protocol" else f" [{self.kind}]"
        return (f"{self.name}{kind}: {len(self.runs)} runs (splits {_ranges(splits)}, inits {_ranges(inits)}, folds "
                f"{_ranges(folds)}; rate {self.settings.label_rate:g}; first seed {self.seeds[0]}), "
                f"{len(self.calibrators)} calibrators; {data}; backbone {self.backbone_options} -> {self.out_dir}")

    def to_json(self) -> dict:
        return {
            "dataset": self.dataset, "backbone": self.backbone, "variant": self.variant, "out_dir": str(self.out_dir),
            "settings": dataclasses.asdict(self.settings),
            "runs": [[r.split, r.init, r.fold, seed] for r, seed in zip(self.runs, self.seeds)],
            "splits": [dataclasses.asdict(e) for e in self.splits], "splits_origin": self.splits_origin,
            "calibrators": [{**dataclasses.asdict(c), "options": dict(c.options)} for c in self.calibrators],
            "backbone_config": dict(self.backbone_config), "backbone_options": self.backbone_options,
            "data_digest": self.data_digest,
            # only for another kind: a protocol plan keeps its JSON and digest
            **({"kind": self.kind, "kind_options": self.kind_options_dict} if self.kind != "protocol" else {}),
        }

    @classmethod
    def from_json(cls, data: dict) -> BenchmarkPlan:
        settings = dict(data["settings"])
        settings["backbone_overrides"] = tuple(tuple(pair) for pair in settings["backbone_overrides"])
        dataset, backbone = data["dataset"], data["backbone"]
        return cls(
            dataset=dataset, backbone=backbone, settings=ProtocolSettings(**settings),
            runs=tuple(Run(dataset, backbone, s, i, f) for s, i, f, _ in data["runs"]),
            seeds=tuple(seed for *_, seed in data["runs"]),
            splits=tuple(SplitEntry(**e) for e in data["splits"]), splits_origin=data["splits_origin"],
            calibrators=tuple(PlannedCalibrator(**{**c, "options": _options(c["options"])}) for c in data["calibrators"]),
            backbone_config=tuple(data["backbone_config"].items()), backbone_options=data["backbone_options"],
            data_digest=data["data_digest"], out_dir=Path(data["out_dir"]), variant=data["variant"],
            kind=_known_kind(data.get("kind", "protocol")), kind_options=_kind_options(data.get("kind_options")),
        )


@dataclass(frozen=True)
class ExecutionPlan:
    """How a study's tasks run and what they keep (not part of any number)."""

    runner: str = "threads"  # threads | processes | dask
    workers: int = 1
    address: str | None = None
    torch_threads: int | None = None
    batch_calibrators: bool = False
    models_per_batch: int | None = None
    save_predictions: bool = True
    report: bool = True
    tracking_uri: str = ""
    experiment: str = ""
    granularity: str = "auto"  # auto | run | calibrator (simcalib.experiment.schedule.device_layout)
    runs_per_device: int | None = None  # runs in flight per device; None: the workers shared over the devices

    def to_json(self) -> dict:
        """The fields, the scheduling ones only when not their defaults (a plan without them keeps its digest)."""
        data = dataclasses.asdict(self)
        for key, default in (("granularity", "auto"), ("runs_per_device", None)):
            if data[key] == default:
                del data[key]
        return data


@dataclass(frozen=True)
class StudyPlan:
    """A study resolved: its benchmarks' plans and how its tasks run."""

    name: str
    source: str  # the study file
    seed: int
    splits: tuple[int, ...]
    inits: tuple[int, ...]
    folds: tuple[int, ...]
    label_rates: tuple[float, ...]
    device: str
    output: Path
    execution: ExecutionPlan
    benchmarks: tuple[BenchmarkPlan, ...]
    version: int = PLAN_VERSION
    shift: dict | None = None  # the study file's ``shift`` (ShiftSpec fields); None: none declared
    conformal: dict | None = None  # the study file's ``conformal`` (ConformalSpec fields); None: none declared

    @property
    def runs_per_benchmark(self) -> int:
        """The runs of a benchmark whose dataset has no ``runs.per_dataset`` entry (the study's splits x inits x
        folds); each benchmark's own: ``len(benchmark.runs)``."""
        return len(self.splits) * len(self.inits) * len(self.folds)

    def describe_runs(self) -> str:
        """The runs per benchmark in words (:func:`~simcalib.experiment.study.describe_runs` over each dataset's
        benchmarks): ``75 per benchmark``, or with ``runs.per_dataset`` entries ``75 per benchmark, 15 on
        minesweeper, tolokers``."""
        return describe_runs(self.runs_per_benchmark, {b.dataset: len(b.runs) for b in self.benchmarks})

    @property
    def has_data(self) -> bool:
        return all(b.has_data for b in self.benchmarks)

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds of its benchmark plans, in order of first appearance."""
        return tuple(dict.fromkeys(b.kind for b in self.benchmarks))

    def digest(self) -> str:
        """16 hex digits of SHA-256 over :meth:`to_json` (sorted keys): equal digests, equal plans."""
        return hashlib.sha256(json.dumps(self.to_json(), sort_keys=True, default=str).encode()).hexdigest()[:16]

    def lines(self) -> list[str]:
        """The plan, readable: a header, one line per benchmark (its calibrator definitions below it), the
        split sources of each dataset, the counts."""
        calibrators = {c.name for b in self.benchmarks for c in b.calibrators}
        runs = sum(len(b.runs) for b in self.benchmarks)
        tasks = sum(len(b.runs) * len(b.calibrators) for b in self.benchmarks)
        execution = self.execution
        lines = [f"plan {self.digest()} of study {self.name} ({self.source}); seed {self.seed}, device {self.device}",
                 f"  counts       {len(self.benchmarks)} benchmarks, {len(calibrators)} calibrators, {runs} runs "
                 f"({self.describe_runs()}): {runs} pretrain + {tasks} calibrate tasks",
                 f"  runner       {execution.runner} x {execution.workers}"
                 + (f" at {execution.address}" if execution.address else "")
                 + (f"; granularity {execution.granularity}" if execution.granularity != "auto" else "")
                 + (f"; {execution.runs_per_device} runs in flight per device" if execution.runs_per_device else ""),
                 f"  output       {self.output}; tracking {execution.tracking_uri} (experiment {execution.experiment})"]
        seen: set[tuple[str, float]] = set()
        for benchmark in self.benchmarks:  # one line per dataset and rate: the backbones share their splits
            key = (benchmark.dataset, benchmark.settings.label_rate)
            if key not in seen:
                seen.add(key)
                digests = ", ".join(f"{e.split}:{e.digest}" for e in benchmark.splits if e.digest)
                lines.append(f"  splits       {benchmark.dataset}{benchmark.variant}: {benchmark.describe_splits()}"
                             + (f"; digests {digests}" if digests else ""))
        lines.append("  benchmarks")
        lines += [f"    {benchmark.line()}" for benchmark in self.benchmarks]
        lines.append("  calibrator definitions (name, digest, options given or tuned, the benchmarks using it)")
        users: dict[tuple[str, str], list[str]] = {}
        entries: dict[tuple[str, str], PlannedCalibrator] = {}
        for benchmark in self.benchmarks:
            for calibrator in benchmark.calibrators:
                users.setdefault((calibrator.name, calibrator.digest), []).append(benchmark.name)
                entries[(calibrator.name, calibrator.digest)] = calibrator
        everywhere = len(self.benchmarks)
        order = {name: i for i, name in enumerate(dict.fromkeys(name for name, _ in users))}
        for key, names in sorted(users.items(), key=lambda item: order[item[0][0]]):
            calibrator = entries[key]
            where = "all benchmarks" if len(names) == everywhere else ", ".join(names)
            tuned = f" tuned:{calibrator.tuned_from}" if calibrator.tuned_from else ""
            lines.append(f"    {calibrator.name:<18} {calibrator.digest}{tuned} {_short_options(calibrator)} on {where}")
        if self.shift is not None:
            properties = self.shift["properties"]
            lines.append(f"  shift        {', '.join(properties)}: one benchmark plan per dataset x backbone x property "
                         f"({len(properties) * self.runs_per_benchmark} runs per dataset x backbone), each on shift "
                         f"splits: ID {self.shift['id_fraction']:g} of the nodes (torch_geometric NodePropertySplit), "
                         "the protocol's folds inside it; simcalib.experiment.shift, rows by "
                         "simcalib.experiment.node_runs.evaluate_run")
        if self.conformal is not None:
            c = self.conformal
            lines.append(f"  conformal    {', '.join(c['scores'])} at alpha {', '.join(f'{a:g}' for a in c['alphas'])}; "
                         f"quantile part {c['quantile_fraction']:g} of the calibration fold; simcalib.conformal, rows "
                         "by simcalib.experiment.node_runs.evaluate_run")
        if not self.has_data:
            lines.append("  (datasets not loaded: data and split digests unknown; `simcalib study check --data` "
                         "loads them)")
        return lines

    def to_json(self) -> dict:
        return {"version": self.version, "name": self.name, "source": self.source, "seed": self.seed,
                "splits": list(self.splits), "inits": list(self.inits), "folds": list(self.folds),
                "label_rates": list(self.label_rates), "device": self.device, "output": str(self.output),
                "execution": self.execution.to_json(),
                "benchmarks": [b.to_json() for b in self.benchmarks],
                # only when declared: a plan without them keeps its JSON and digest
                **{key: value for key, value in (("shift", self.shift), ("conformal", self.conformal))
                   if value is not None}}

    @classmethod
    def from_json(cls, data: dict) -> StudyPlan:
        if data.get("version") != PLAN_VERSION:
            raise ConfigError(f"a plan of version {data.get('version')} cannot be read by this code "
                              f"(version {PLAN_VERSION}); plan the study again")
        return cls(name=data["name"], source=data["source"], seed=data["seed"], splits=tuple(data["splits"]),
                   inits=tuple(data["inits"]), folds=tuple(data["folds"]), label_rates=tuple(data["label_rates"]),
                   device=data["device"], output=Path(data["output"]), execution=ExecutionPlan(**data["execution"]),
                   benchmarks=tuple(BenchmarkPlan.from_json(b) for b in data["benchmarks"]), version=data["version"],
                   shift=data.get("shift"), conformal=data.get("conformal"))


# ---------------------------------------------------------------------------------------------------------
# Resolving


def resolve_settings(settings: ProtocolSettings) -> tuple[ProtocolSettings, str]:
    """``settings`` with its fixed-splits folder resolved once and named explicitly (``none`` when there is
    none), and where that folder came from."""
    folder, origin = resolve_splits_dir(settings.splits_dir, settings.data_root)
    return dataclasses.replace(settings, splits_dir=str(folder) if folder is not None else NO_SPLITS_DIR), origin


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def plan_benchmark(dataset: str, backbone: str, splits: Iterable[int], inits: Iterable[int], folds: Iterable[int],
                   calibrators: Sequence[tuple[str, dict | None, str | None]], settings: ProtocolSettings,
                   out_dir: str | Path, variant: str = "", data: bool = True, kind: str = "protocol",
                   kind_options: dict | None = None) -> BenchmarkPlan:
    """One benchmark resolved. ``calibrators``: (name, options, tuned_from) with the options already read
    (``tuned_from`` only records where tuned ones came from). With ``data`` the graph and split files are
    loaded (missing or corrupt data fails here) and their digests recorded. ``kind``/``kind_options``: see
    :attr:`BenchmarkPlan.kind` (a shift plan's splits are its shift splits, all generated). ConfigError on
    input that cannot run (a fixed/generated split mix that is not allowed, unknown options)."""
    if kind not in KINDS:
        raise ConfigError(f"unknown benchmark kind {kind!r}; one of {', '.join(KINDS)}")
    kind_options = dict(kind_options or {})
    if kind == "shift" and "property" not in kind_options:
        raise ConfigError("a shift benchmark plan needs its property (kind_options={'property': ...})")
    dataset, backbone = get_spec(dataset).name, backbone_name(backbone)
    splits, inits, folds = list(splits), list(inits), list(folds)
    if not splits or not inits or not folds:
        raise ConfigError("no " + ", ".join(n for n, v in (("splits", splits), ("inits", inits), ("folds", folds))
                                            if not v) + " selected; give a count >= 1 or a list")
    if any(f < 0 or f >= settings.n_folds for f in folds):
        raise ConfigError(f"folds must be within 0..{settings.n_folds - 1}, got {folds}")
    settings, origin = resolve_settings(settings)
    spec = get_spec(dataset)
    protocol = protocol_name(settings.fold_rate, settings.n_folds, settings.test_rate)
    if spec.external is not None and not settings.generated_splits and protocol == PAPER_PROTOCOL and kind != "shift":
        raise ConfigError(f"{spec.name} is a graph from another package ({spec.external}) and has no fixed GATS "
                          "split files; run it on splits drawn from the study seed: runs.generated_splits: true in "
                          "the study file, or --generated-splits")
    folder = None if spec.external is not None else settings.resolved_splits_dir()  # as protocol.run_split
    sources = ({s: "generated" for s in splits} if kind == "shift" else
               split_sources(dataset, splits, folder, settings.fold_rate, settings.n_folds, settings.test_rate,
                             settings.generated_splits))
    runs = tuple(Run(dataset, backbone, s, i, f) for s in splits for i in inits for f in folds)
    graph = load_graph(dataset, settings) if data else None
    entries = []
    for s in splits:
        path = find_split_file(folder, dataset, s, protocol) if sources[s] == "fixed" else None
        digest = label = None
        if graph is not None:
            if kind == "shift":  # the rows' split: the shift split's folds and ID test nodes
                split = shift_run_split(Run(dataset, backbone, s, 0, 0), settings, kind_options["property"],
                                        kind_options.get("id_fraction", 0.5)).split
            else:
                split = run_split(Run(dataset, backbone, s, 0, 0), settings, graph)
            digest, label = split_digest(split), split_source_label(split)
        entries.append(SplitEntry(s, sources[s], str(path) if path else None, _file_sha256(path) if path else None,
                                  digest, label))
    data_digest = None
    if graph is not None:
        data_digest = getattr(graph, "_simcalib_digest", None)  # the same cached value the rows read
        if data_digest is None:
            data_digest = graph._simcalib_digest = graph_digest(graph)
    resolved = []
    for name, options, tuned_from in calibrators:
        planned = resolve_calibrator(name, dataset, backbone, options, tuned_from)  # the name resolved: once, here
        if kind != "protocol":  # a shift or conformal row's digest includes the kind's settings
            definition = row_kind_definition(planned.name, dataset, backbone, planned.options_dict, kind, kind_options)
            planned = dataclasses.replace(planned, definition=definition.text, digest=definition.digest)
        build_calibrator(planned.name, spec.num_classes, dataset, backbone, **planned.options_dict)  # options build
        resolved.append(planned)
    if len({c.name for c in resolved}) != len(resolved):
        raise ConfigError(f"a calibrator is named twice: {[c.name for c in resolved]}")
    return BenchmarkPlan(
        dataset=dataset, backbone=backbone, settings=settings, runs=runs,
        seeds=tuple(r.seed(settings) for r in runs), splits=tuple(entries), splits_origin=origin,
        calibrators=tuple(resolved), backbone_config=tuple(vars(backbone_config(runs[0], settings)).items()),
        backbone_options=backbone_options(runs[0], settings), data_digest=data_digest, out_dir=Path(out_dir),
        variant=variant, kind=kind, kind_options=_kind_options(kind_options))


def plan_study(study: Study, data: bool = True) -> StudyPlan:
    """Every benchmark of ``study`` resolved (tuned options read and checked now; an error names the study
    line). With ``data`` each dataset is loaded once, so missing or corrupt data fails here."""
    settings = study.settings()
    if data:
        for index, dataset in enumerate(study.datasets):
            try:
                load_graph(dataset, settings)
            except SimCalibError as exc:
                raise type(exc)(f"{study.where(('benchmarks', 'datasets', index))}: {exc}") from None
    benchmarks = []
    for dataset, backbone in study.benchmarks():
        calibrators = []
        for calibrator in study.calibrators:
            options = study.calibrator_options(calibrator, dataset, backbone)
            if calibrator.tuned_from is not None:  # explicit options were checked when the file was read
                try:
                    build_calibrator(calibrator.name, get_spec(dataset).num_classes, dataset, backbone, **options)
                    probe_external(calibrator.name, dataset, backbone, options)
                except SimCalibError as exc:
                    raise ConfigError(f"{study.where(calibrator.key)}: tuned options for "
                                      f"{dataset}/{backbone}: {exc}") from None
            calibrators.append((calibrator.name, options, calibrator.tuned_from))
        splits, inits, folds = study.runs_of(dataset)  # runs.per_dataset, else the study's
        runs_key = ("runs", "per_dataset", dataset) if dataset in study.dataset_runs else ("runs", "splits")
        for rate in study.label_rates:
            variant = f"-rate{rate:g}" if study.sweeps_label_rate else ""
            for kind, kind_options, suffix in _kinds(study.spec):
                out_dir = study.benchmark_dir(dataset, backbone, rate)
                try:
                    benchmarks.append(plan_benchmark(dataset, backbone, splits, inits, folds, calibrators,
                                                     study.settings(rate),
                                                     out_dir.with_name(out_dir.name + suffix.replace("-", "_")),
                                                     variant + suffix, data, kind, kind_options))
                except ConfigError as exc:  # the calibrators were checked above: the splits are what cannot run
                    raise ConfigError(f"{study.where(runs_key)}: {exc}") from None
    spec = study.spec
    runner = spec.task_runner
    execution = ExecutionPlan(runner=runner.kind, workers=runner.workers, address=runner.address,
                              torch_threads=runner.torch_threads, batch_calibrators=spec.runs.batch_calibrators,
                              models_per_batch=spec.runs.models_per_batch, save_predictions=spec.save_predictions,
                              report=spec.report, tracking_uri=study.tracking_uri, experiment=study.experiment_name,
                              granularity=runner.granularity, runs_per_device=runner.runs_per_device)
    return StudyPlan(name=study.name, source=study.source, seed=spec.seed, splits=tuple(study.splits),
                     inits=tuple(study.inits), folds=tuple(study.folds), label_rates=tuple(study.label_rates),
                     device=spec.device, output=study.output, execution=execution, benchmarks=tuple(benchmarks),
                     shift=spec.shift.model_dump() if spec.shift is not None else None,
                     conformal=spec.conformal.model_dump() if spec.conformal is not None else None)


def plan_one_benchmark(study_path: str | Path, dataset: str | None = None, backbone: str | None = None,
                       overrides: dict | None = None) -> BenchmarkPlan:
    """The plan of one benchmark of the study file at ``study_path``: ``dataset``/``backbone`` (the study's
    first benchmark when not given) with the study's calibrators, options and settings; ``overrides`` as in
    :func:`~simcalib.experiment.study.load_study`."""
    overrides = dict(overrides or {})
    if dataset is not None or backbone is not None:
        benchmarks = dict(overrides.get("benchmarks") or {})
        if dataset is not None:
            benchmarks["datasets"] = [dataset]
        if backbone is not None:
            benchmarks["backbones"] = [backbone]
        overrides["benchmarks"] = benchmarks
    return plan_study(load_study(study_path, overrides or None)).benchmarks[0]


def _kinds(spec) -> list[tuple[str, dict | None, str]]:
    """(kind, kind options, name suffix) of each benchmark plan of one dataset x backbone x rate: one per shift
    property for a study with ``shift`` (suffix ``-<property>``, the results folder ``..._<property>``), one of
    kind conformal for a study with ``conformal``, else one of the protocol."""
    if spec.shift is not None and spec.conformal is not None:
        raise ConfigError("a study file declares shift or conformal, not both; put each in its own study file")
    if spec.shift is not None:
        return [("shift", {"property": p, "id_fraction": spec.shift.id_fraction}, f"-{p}")
                for p in spec.shift.properties]
    if spec.conformal is not None:
        return [("conformal", spec.conformal.model_dump(), "")]
    return [("protocol", None, "")]


def _known_kind(kind: str) -> str:
    """``kind`` when it is one of :data:`~simcalib.experiment.node_runs.KINDS` (the kinds a plan is made of and the
    schedule computes); else a one-line ConfigError: a plan recorded by other code."""
    if kind not in KINDS:
        raise ConfigError(f"a benchmark plan of kind {kind!r} cannot be read by this code (kinds "
                          f"{', '.join(KINDS)}); plan the study again")
    return kind


def _kind_options(options: dict | None) -> Options:
    """A kind's options as sorted pairs, lists as tuples (the plan stays hashable)."""
    return tuple(sorted((key, tuple(value) if isinstance(value, list) else value)
                        for key, value in (options or {}).items()))


def _ranges(values: Sequence[int]) -> str:
    """``0-4`` for consecutive values, else ``0,2``."""
    values = list(values)
    if len(values) > 2 and values == list(range(values[0], values[-1] + 1)):
        return f"{values[0]}-{values[-1]}"
    return ",".join(map(str, values))


def _short_options(calibrator: PlannedCalibrator, width: int = 70) -> str:
    """The options that were given or tuned (else ``registered``: the registry's options for the benchmark),
    cut to ``width`` characters."""
    if not calibrator.options:
        return "registered"
    text = json.dumps(calibrator.options_dict, sort_keys=True, default=repr, separators=(",", ":"))
    return text if len(text) <= width else text[: width - 3] + "..."


__all__ = [
    "PLAN_VERSION", "BenchmarkPlan", "PlannedCalibrator", "ExecutionPlan", "SplitEntry", "StudyPlan", "plan_benchmark",
    "plan_study", "resolve_settings",
]
