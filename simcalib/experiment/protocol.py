"""The runs of the GATS protocol, as small functions with explicit inputs.

A *run* is (dataset, backbone, split, init, fold): it trains a fresh backbone (cached on disk) and fits
every calibrator on it. :func:`train_run_backbone` and :func:`evaluate_calibrator` are the units that
orchestration (``flows/``) fans out and that :mod:`simcalib.experiment.executor` chains for one benchmark; what they
run on (the settings, the runs, the calibrators' options) comes resolved from :mod:`simcalib.experiment.plan`.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from simcalib.analysis.figure_bins import summarise, to_json
from simcalib.analysis.homophily import local_homophily
from simcalib.analysis.homophily import summarise as homophily_summary
from simcalib.analysis.homophily import to_json as homophily_json
from simcalib.backbones import (
    BackboneCache,
    BackboneConfig,
    BackboneOutput,
    backbone_name,
    cache_key,
    resolve_device,
    train_backbone,
)
from simcalib.backbones.batched import TRAINER, train_backbones_batched
from simcalib.backbones.cache import BACKBONE_CODE_VERSION
from simcalib.backbones.models import AUTO_ATTENTION, attention_for
from simcalib.calibrators import (
    CalibrationGraph,
    Calibrator,
    CalibratorDefinition,
    CalibratorEntry,
    build_calibrator,
    calibrator_definition,
    calibrator_entry,
    calibrator_seed_name,
)
from simcalib.calibrators.across_runs import fit_across_runs, generator_after_build, stackable
from simcalib.calibrators.signals import NodeSignals
from simcalib.data import GraphData, get_spec, graph_digest, load_dataset
from simcalib.errors import ConfigError, TrainingDivergedError
from simcalib.experiment.splits import Split, get_split, resolve_splits_dir, split_digest, split_source_label
from simcalib.metrics import METRICS_VERSION, compute_metrics
from simcalib.seeding import STUDY_SEED, derive_seed, run_seed, seed_everything
from simcalib.store.integrity import (
    BACKBONE_OPTIONS_COLUMN,
    CALIBRATOR_DIGEST_COLUMN,
    CALIBRATOR_OPTIONS_COLUMN,
)
from simcalib.store.results_store import AUDIT_COLUMNS

# The version of the numbers this protocol computes (splits, folds, the row's metrics inputs, the seed rule): bump it
# when an edit moves any row; every row is then computed again. Version 1 stays out of the rows' digests.
PROTOCOL_VERSION = 1


def code_versions() -> dict[str, int]:
    """The declared versions of the numbers every row depends on besides its calibrator's own
    (:attr:`~simcalib.calibrators.Calibrator.numbers_version`): backbone, metrics, protocol."""
    return {"backbone": BACKBONE_CODE_VERSION, "metrics": METRICS_VERSION, "protocol": PROTOCOL_VERSION}


def row_definition(calibrator: str | CalibratorEntry, dataset: str, backbone: str, options: dict | None = None) -> CalibratorDefinition:
    """What a results row of ``calibrator`` on (dataset, backbone) is a function of besides its run: the calibrator's
    resolved definition (:func:`~simcalib.calibrators.calibrator_definition`, its class's ``numbers_version`` from 2
    on) and the :func:`code_versions` above 1. Its digest is the rows' ``calibrator_digest``: equal digests, rows of
    the same numbers; a bumped version gives another digest, hence rows computed again (and only those)."""
    definition = calibrator_definition(calibrator, dataset, backbone, **(options or {}))
    bumped = {part: version for part, version in code_versions().items() if version > 1}
    if not bumped:
        return definition
    return CalibratorDefinition(definition.name, {**definition.options, "versions": bumped})


Options = tuple[tuple[str, object], ...]  # a calibrator's options as sorted (key, value) pairs


@dataclass(frozen=True)
class PlannedCalibrator:
    """One calibrator of a benchmark, resolved once (:func:`resolve_calibrator`, by the plan): its canonical name,
    options as resolved (given, or tuned and read), its definition and the name its fits' seeds derive from.
    The protocol's functions take it as it is and resolve no name again."""

    name: str
    options: Options
    tuned_from: str | None  # the calibrator whose tuned options these are; None: as given
    definition: str  # canonical JSON of every constructor option and its class (the rows' calibrator_options)
    digest: str  # 12 hex digits over ``definition`` and the declared versions (the rows' calibrator_digest)
    seed_name: str  # the name its fits' seeds derive from (:func:`~simcalib.calibrators.calibrator_seed_name`)

    @property
    def options_dict(self) -> dict:
        return dict(self.options)


def resolve_calibrator(calibrator: str | PlannedCalibrator, dataset: str, backbone: str, options: dict | None = None,
                       tuned_from: str | None = None) -> PlannedCalibrator:
    """``calibrator`` on (dataset, backbone) with ``options``, resolved: its canonical name and entry
    (:func:`~simcalib.calibrators.calibrator_entry`: a name of another package is found and checked, nothing is
    registered), its :func:`row_definition` and seed name. A :class:`PlannedCalibrator` is returned as it is
    (``options`` must then be None or its own). Unknown names and options raise one-line errors."""
    if isinstance(calibrator, PlannedCalibrator):
        if options is not None and dict(options) != calibrator.options_dict:
            raise ValueError(f"{calibrator.name} is planned with options {calibrator.options_dict}, not {options}")
        return calibrator
    entry = calibrator_entry(calibrator)
    options = dict(options or {})
    definition = row_definition(entry, dataset, backbone, options)
    return PlannedCalibrator(entry.name, tuple(sorted(options.items())), tuned_from, definition.text,
                             definition.digest, calibrator_seed_name(entry))


def backbone_digest(output: BackboneOutput) -> str:
    """16 hex digits of SHA-256 over the backbone's float32 logits (bit-exact: any difference shows)."""
    logits = output.logits.detach().to("cpu", torch.float32).contiguous().numpy()
    return hashlib.sha256(logits.tobytes()).hexdigest()[:16]


@dataclass(frozen=True)
class ProtocolSettings:
    """Everything besides the run's identity that determines its numbers (or where data lives)."""

    study_seed: int = STUDY_SEED
    fold_rate: float = 0.05  # fraction of each class per labelled fold
    n_folds: int = 3
    test_rate: float = 0.85
    data_root: str | None = None
    mirror: str | None = None
    splits_dir: str | None = None  # fixed split files; None: simcalib.experiment.splits.resolve_splits_dir; "none": no files
    cache_dir: str | None = None
    device: str = "auto"
    backbone_overrides: tuple[tuple[str, object], ...] = ()  # e.g. (("max_epochs", 200),)
    generated_splits: bool = False  # allow split indices beyond the fixed files (drawn from the study seed)
    # backbones from the batched trainer (simcalib.backbones.batched): another random stream, cached apart
    batch_runs: bool = False

    @property
    def label_rate(self) -> float:
        return self.fold_rate * self.n_folds

    def resolved_splits_dir(self) -> Path | None:
        return resolve_splits_dir(self.splits_dir, self.data_root)[0]

    def splits_origin(self) -> str:
        """Where :meth:`resolved_splits_dir` came from ("given", "$SIMCALIB_SPLITS_DIR", "beside the checkout" ...)."""
        return resolve_splits_dir(self.splits_dir, self.data_root)[1]


@dataclass(frozen=True)
class Run:
    dataset: str
    backbone: str
    split: int
    init: int
    fold: int

    def seed(self, settings: ProtocolSettings) -> int:
        return run_seed(settings.study_seed, self.dataset, self.backbone, self.split, self.init, self.fold)

    def tag(self) -> str:
        return f"{self.dataset}_{self.backbone}_s{self.split}_i{self.init}_f{self.fold}"


def make_runs(dataset: str, backbone: str, splits: Iterable[int] = range(5), inits: Iterable[int] = range(5),
              folds: Iterable[int] = range(3)) -> list[Run]:
    dataset, backbone = get_spec(dataset).name, backbone_name(backbone)
    return [Run(dataset, backbone, s, i, f) for s in splits for i in inits for f in folds]


@functools.lru_cache(maxsize=4)
def _load_graph(dataset: str, data_root: str | None, mirror: str | None) -> GraphData:
    return load_dataset(dataset, root=data_root, mirror=mirror)


def load_graph(dataset: str, settings: ProtocolSettings) -> GraphData:
    return _load_graph(get_spec(dataset).name, settings.data_root, settings.mirror)


def run_split(run: Run, settings: ProtocolSettings, graph: GraphData | None = None) -> Split:
    graph = graph or load_graph(run.dataset, settings)
    return get_split(run.dataset, graph.y.numpy(), run.split, settings.study_seed, _splits_dir(run.dataset, settings),
                     settings.fold_rate, settings.n_folds, settings.test_rate, settings.generated_splits)


def _splits_dir(dataset: str, settings: ProtocolSettings) -> Path | None:
    """The fixed-splits folder of ``dataset``'s runs: none for a graph from another package (its splits are
    always drawn from the seed, even where a folder of the same name exists)."""
    return None if get_spec(dataset).external is not None else settings.resolved_splits_dir()


def _cache_dataset(dataset: str, graph: GraphData) -> str:
    """The dataset part of a backbone's cache key: the name, and for a graph from another package the digest
    of the graph too (a changed function never reuses backbones of the graph it returned before)."""
    if get_spec(dataset).external is None:
        return dataset
    digest = getattr(graph, "_simcalib_digest", None)
    if digest is None:
        digest = graph._simcalib_digest = graph_digest(graph)
    return f"{dataset}@{digest}"


def run_definition(run: Run, settings: ProtocolSettings) -> dict[str, str]:
    """What defines ``run`` besides its seed (the :data:`~simcalib.store.integrity.DEFINITION_COLUMNS` of its rows):
    the digest of its split's node indices, of the processed graph, and where the split came from. Read from
    the graph and split the run itself uses (:func:`load_graph`, :func:`run_split`)."""
    graph = load_graph(run.dataset, settings)
    return _run_definition(run, settings, graph, run_split(run, settings, graph))


def _run_definition(run: Run, settings: ProtocolSettings, graph: GraphData, split: Split) -> dict[str, str]:
    digest = getattr(graph, "_simcalib_digest", None)  # once per loaded graph: hashing a large graph takes a while
    if digest is None:
        digest = graph_digest(graph)
        graph._simcalib_digest = digest
    return {"split_digest": split_digest(split), "data_digest": digest, "split_source": split_source_label(split),
            BACKBONE_OPTIONS_COLUMN: backbone_options(run, settings)}


@dataclass(frozen=True)
class RunContext:
    """One run prepared once and handed to each of its calibrators: its graph, split and fold's node indices, its
    backbone's output, and what its rows record of them (the run's definition columns, the backbone digest).

    Shapes: ``train_idx`` [n_train], ``cal_idx`` [n_cal], ``test_idx`` [n_test] (int64 node indices);
    ``output.logits`` [N, K]."""

    run: Run
    graph: GraphData
    split: Split
    train_idx: np.ndarray
    cal_idx: np.ndarray
    test_idx: np.ndarray
    output: BackboneOutput
    definition: dict[str, str]  # the DEFINITION_COLUMNS of its rows (run_definition)
    backbone_digest: str


def prepare_run(run: Run, settings: ProtocolSettings, output: BackboneOutput | None = None) -> RunContext:
    """The :class:`RunContext` of ``run``: the graph loaded and the split read once; ``output``: the run's backbone
    output when at hand, else :func:`train_run_backbone` (the backbone cache, or trained now)."""
    graph = load_graph(run.dataset, settings)
    split = run_split(run, settings, graph)
    output = output if output is not None else train_run_backbone(run, settings)
    train_idx, cal_idx, test_idx = split.fold_indices(run.fold)
    return RunContext(run, graph, split, train_idx, cal_idx, test_idx, output,
                      _run_definition(run, settings, graph, split), backbone_digest(output))


def nodes_local_homophily(graph: GraphData, nodes: np.ndarray) -> np.ndarray:
    """Local homophily (:func:`simcalib.analysis.homophily.local_homophily`) of ``nodes`` (the test nodes), from the
    graph's TRUE labels: for the analysis columns only, never given to a calibrator. Computed once per loaded
    graph."""
    homophily = getattr(graph, "_simcalib_local_homophily", None)
    if homophily is None:
        homophily = local_homophily(graph.edge_index, graph.y, graph.num_nodes)
        graph._simcalib_local_homophily = homophily
    return homophily[nodes]


def one_class_backbone(output: BackboneOutput, test_idx: np.ndarray) -> bool:
    """True when the backbone's argmax names one class only over the test nodes (e.g. the majority class of
    an imbalanced binary graph): its top-label ECE then says little, and ROC-AUC is that of its scores."""
    predicted = output.logits[torch.from_numpy(test_idx).to(output.logits.device)].argmax(dim=1)
    return bool(predicted.unique().numel() <= 1)


def backbone_options(run: Run, settings: ProtocolSettings) -> str:
    """The backbone settings of ``run`` that differ from its dataset's defaults, as ``key=value`` joined by
    ``;`` (e.g. ``attention=csr`` for GAT's CSR kernel, ``trainer=batched``), or ``default``. Two backbones
    trained under other settings are other backbones, so rows record this beside ``backbone_digest``."""
    config = backbone_config(run, settings)
    reference = backbone_config(run, ProtocolSettings())
    changed = [f"{f.name}={getattr(config, f.name)}" for f in dataclasses.fields(config)
               if getattr(config, f.name) != getattr(reference, f.name)]
    if settings.batch_runs:
        changed.append(f"trainer={TRAINER}")
    return ";".join(changed) or "default"


def backbone_config(run: Run, settings: ProtocolSettings) -> BackboneConfig:
    """The backbone's configuration: the dataset's defaults and the settings' overrides; an ``attention: auto``
    resolved for the settings' device (:func:`~simcalib.backbones.models.attention_for`)."""
    spec = get_spec(run.dataset)
    options = {"weight_decay": spec.backbone_weight_decay, **dict(settings.backbone_overrides)}
    if str(options.get("attention", "")).strip().lower() == AUTO_ATTENTION:
        options["attention"] = attention_for(resolve_device(settings.device))
    try:
        return BackboneConfig(run.backbone, **options)
    except TypeError as exc:
        raise ConfigError(f"invalid backbone option: {exc}") from None


def train_run_backbone(run: Run, settings: ProtocolSettings) -> BackboneOutput:
    """The frozen backbone of ``run``: from the on-disk cache, or trained now and cached. With
    ``settings.batch_runs`` it is the batched trainer's backbone (a model's stream depends on its own seed
    only, so a batch of one gives the model a full batch would have given)."""
    if settings.batch_runs:
        return train_split_backbones([run], settings)[0]
    graph = load_graph(run.dataset, settings)
    train_idx, cal_idx, _ = run_split(run, settings, graph).fold_indices(run.fold)
    return cached_backbone(run, settings, graph, train_idx, cal_idx, run.seed(settings))


def cached_backbone(run: Run, settings: ProtocolSettings, graph, train_idx, cal_idx, seed: int) -> BackboneOutput:
    """``run``'s backbone trained on ``train_idx`` and early-stopped on ``cal_idx`` from ``seed``: from the on-disk
    cache (keyed by these node indices and the seed), or trained now and cached."""
    config = backbone_config(run, settings)
    cache = BackboneCache(settings.cache_dir)
    key = cache_key(_cache_dataset(run.dataset, graph), config, run.split, run.init, run.fold, seed,
                    torch.as_tensor(train_idx), torch.as_tensor(cal_idx), device=resolve_device(settings.device))
    output = cache.load(run.dataset, run.backbone, key)
    if output is None:
        output = train_backbone(graph, torch.as_tensor(train_idx), torch.as_tensor(cal_idx), config, seed,
                                settings.device)
        cache.save(run.dataset, run.backbone, key, output)
    return output


def train_split_backbones(runs: Sequence[Run], settings: ProtocolSettings,
                          models_per_batch: int | None = None) -> list[BackboneOutput]:
    """The frozen backbones of ``runs`` (runs of one dataset, backbone and split) from the batched trainer:
    those in the on-disk cache are loaded, the others trained together as one batched model
    (:mod:`simcalib.backbones.batched`) and cached each as soon as it stops. Batched backbones have their own
    cache key (another random stream than :func:`train_run_backbone`'s), so the two never mix."""
    if len({(r.dataset, r.backbone, r.split) for r in runs}) > 1:
        raise ValueError("train_split_backbones: the runs must share dataset, backbone and split")
    graph = load_graph(runs[0].dataset, settings)
    split = run_split(runs[0], settings, graph)
    config = backbone_config(runs[0], settings)
    cache = BackboneCache(settings.cache_dir)
    outputs: list[BackboneOutput | None] = []
    missing, keys, folds = [], [], []
    for position, run in enumerate(runs):
        train_idx, cal_idx, _ = split.fold_indices(run.fold)
        key = cache_key(_cache_dataset(run.dataset, graph), config, run.split, run.init, run.fold,
                        run.seed(settings), train_idx, cal_idx, trainer=TRAINER, device=resolve_device(settings.device))
        outputs.append(cache.load(run.dataset, run.backbone, key))
        if outputs[-1] is None:
            missing.append(position)
            keys.append(key)
            folds.append((torch.from_numpy(train_idx), torch.from_numpy(cal_idx)))
    if missing:
        def cache_stopped(m: int, output: BackboneOutput) -> None:  # a kill later loses no stopped model
            cache.save(runs[0].dataset, runs[0].backbone, keys[m], output)

        trained = train_backbones_batched(graph, folds, [runs[p].seed(settings) for p in missing], config,
                                          settings.device, on_stopped=cache_stopped, models_per_batch=models_per_batch)
        for position, output in zip(missing, trained):
            outputs[position] = output
    return outputs  # type: ignore[return-value]


def calibration_graph(run: Run, settings: ProtocolSettings, output: BackboneOutput,
                      context: RunContext | None = None) -> tuple[CalibrationGraph, np.ndarray]:
    """The calibrator's view of ``run`` (test labels hidden) and the test node indices (from ``context`` when
    given: the run prepared once)."""
    if context is not None:
        graph, train_idx, cal_idx, test_idx = context.graph, context.train_idx, context.cal_idx, context.test_idx
    else:
        graph = load_graph(run.dataset, settings)
        train_idx, cal_idx, test_idx = run_split(run, settings, graph).fold_indices(run.fold)
    cg = CalibrationGraph.from_run(output.logits, output.hidden, graph.edge_index, graph.y,
                                   torch.from_numpy(train_idx), torch.from_numpy(cal_idx), features=graph.x)
    return cg, test_idx


@dataclass
class FittedCalibrator:
    """A calibrator fitted on one run as the protocol fits it, with the graph it was fitted on."""

    model: Calibrator
    graph: CalibrationGraph  # on the fit's device
    test_idx: np.ndarray
    fit_seconds: float


def fit_calibrator(run: Run, settings: ProtocolSettings, calibrator: str | PlannedCalibrator, options: dict | None = None,
                   output: BackboneOutput | None = None, context: RunContext | None = None) -> FittedCalibrator:
    """Fit ``calibrator`` (a plan's entry, or a name with ``options``: :func:`resolve_calibrator`) on ``run``'s
    backbone, seeded by the run's seed and the calibrator's seed name (so every caller, the study and the
    benchmarks alike, fits the same model). ``context``: the run prepared once (:func:`prepare_run`), its backbone
    output included."""
    planned = resolve_calibrator(calibrator, run.dataset, run.backbone, options)
    if context is not None:
        output = context.output
    output = output if output is not None else train_run_backbone(run, settings)
    model, cg, test_idx = _built_calibrator(run, settings, planned, output, context)
    start = time.perf_counter()
    try:
        model.fit(cg)
    except TrainingDivergedError as exc:
        raise TrainingDivergedError(f"{run.tag()}: {exc}") from None
    return FittedCalibrator(model, cg, test_idx, time.perf_counter() - start)


def _built_calibrator(run: Run, settings: ProtocolSettings, planned: PlannedCalibrator, output: BackboneOutput,
                      context: RunContext | None = None) -> tuple[Calibrator, CalibrationGraph, np.ndarray]:
    """``planned`` built for ``run`` under the run's calibrator seed (not fitted), its graph on the device, the
    test nodes. The global generator is left where the fit draws its first random number."""
    cg, test_idx = calibration_graph(run, settings, output, context)
    cg = cg.to(resolve_device(settings.device))
    seed_everything(derive_seed(run.seed(settings), planned.seed_name))
    model = build_calibrator(planned.name, cg.num_classes, run.dataset, run.backbone, **planned.options_dict)
    return model, cg, test_idx


def fits_across_runs(calibrator: str | PlannedCalibrator) -> bool:
    """Whether ``calibrator`` can be fitted on the runs of a split together
    (:mod:`simcalib.calibrators.across_runs`)."""
    name = calibrator.name if isinstance(calibrator, PlannedCalibrator) else calibrator
    return stackable(calibrator_entry(name).cls)


def fit_calibrator_across_runs(runs: Sequence[Run], settings: ProtocolSettings, calibrator: str | PlannedCalibrator,
                               options: dict | None, outputs: Sequence[BackboneOutput],
                               contexts: Sequence[RunContext] | None = None) -> list[FittedCalibrator]:
    """:func:`fit_calibrator` of every run of ``runs`` (runs of one graph: one dataset and split), fitted
    together (:func:`~simcalib.calibrators.across_runs.fit_across_runs`): each run's model is the one
    :func:`fit_calibrator` gives, to float rounding, from the same seed. ``fit_seconds`` is the joint fit's time
    divided by the number of runs."""
    planned = resolve_calibrator(calibrator, runs[0].dataset, runs[0].backbone, options)
    built, generators = [], []
    for position, (run, output) in enumerate(zip(runs, outputs)):
        built.append(_built_calibrator(run, settings, planned, output, contexts[position] if contexts else None))
        generators.append(generator_after_build(built[-1][1].device))  # the stream the run's lone fit would use
    start = time.perf_counter()
    try:
        fit_across_runs([model for model, _, _ in built], [cg for _, cg, _ in built], generators)
    except TrainingDivergedError as exc:
        tags = ", ".join(run.tag() for run in runs)
        raise TrainingDivergedError(f"{planned.name} fitted across runs {tags}: {exc}; fit them one at a time "
                                    "(--no-batch-calibrators) to see which run") from None
    seconds = (time.perf_counter() - start) / len(runs)
    return [FittedCalibrator(model, cg, test_idx, seconds) for model, cg, test_idx in built]


def evaluate_calibrator(
    run: Run,
    settings: ProtocolSettings,
    calibrator: str | PlannedCalibrator,
    options: dict | None = None,
    output: BackboneOutput | None = None,
    predictions_dir: str | os.PathLike | None = None,
    fitted: FittedCalibrator | None = None,
    context: RunContext | None = None,
) -> dict:
    """Fit ``calibrator`` (a plan's entry, or a name with ``options``: :func:`resolve_calibrator`) on ``run``'s
    backbone (unless ``fitted`` is given: the model already fitted on it) and return its results row (test-node
    metrics; its ``calibrator_options`` and ``calibrator_digest`` are the entry's). ``context``: the run prepared
    once (:func:`prepare_run`), for every calibrator of the run; built here when not given."""
    planned = resolve_calibrator(calibrator, run.dataset, run.backbone, options)
    name = planned.name
    context = context if context is not None else prepare_run(run, settings, output)
    output = context.output
    fitted = fitted if fitted is not None else fit_calibrator(run, settings, planned, None, output, context)
    model, cg, test_idx, fit_seconds = fitted.model, fitted.graph, fitted.test_idx, fitted.fit_seconds
    probs = model.predict_proba(cg).cpu()
    test_nodes = torch.from_numpy(test_idx).to(cg.device)
    signals = NodeSignals(model, cg, test_nodes)  # T_feat and the prototype distance: once for audit and figure
    audit = {column: None for column in AUDIT_COLUMNS} | model.audit(cg, test_nodes, signals)
    graph = context.graph
    y_test = graph.y[test_idx]
    test_probs = probs[test_idx]
    test_degree = cg.degree()[torch.from_numpy(test_idx).to(cg.device)].cpu()  # in-degree: for degree_ece
    metrics = compute_metrics(test_probs, y_test, degree=test_degree)
    # every calibrator's binned test predictions, for the figures (analysis only: no number of the row uses them);
    # the feature-similarity figure's x axis: prototypes from the training folds, as SimCalib's default
    distance = signals.prototype_distance().cpu().numpy()
    t_feat = signals.feature_temperature
    t_feat = None if t_feat is None else t_feat.cpu().numpy()
    figure_bins = to_json(summarise(test_probs.numpy(), y_test.numpy(), distance, t_feat=t_feat))
    if predictions_dir is not None:
        save_predictions(Path(predictions_dir), run, name, test_probs.numpy(), y_test.numpy(), test_idx, distance)
    # analysis only, from the true labels of the loaded graph (outside the calibrator's CalibrationGraph)
    homophily_bins = homophily_json(homophily_summary(test_probs.numpy(), y_test.numpy(),
                                                      nodes_local_homophily(graph, test_idx)))
    return {
        "dataset": run.dataset, "backbone": run.backbone, "calibrator": name,
        "split": run.split, "init": run.init, "fold": run.fold, "seed": run.seed(settings),
        **metrics, "fit_seconds": fit_seconds, "label_rate": settings.label_rate, **audit,
        "backbone_digest": context.backbone_digest, "figure_bins": figure_bins, **context.definition,
        "one_class_backbone": one_class_backbone(output, test_idx), "homophily_bins": homophily_bins,
        CALIBRATOR_OPTIONS_COLUMN: planned.definition, CALIBRATOR_DIGEST_COLUMN: planned.digest,
    }


def save_predictions(folder: Path, run: Run, calibrator: str, probs: np.ndarray, labels: np.ndarray,
                     test_idx: np.ndarray, feature_distance: np.ndarray | None = None) -> Path:
    """``probs``, ``labels``, ``test_idx`` and (if given) ``feature_distance`` of the test nodes, in one npz."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{run.tag()}_{calibrator}.npz"
    tmp = path.with_name(path.name + ".tmp.npz")
    extra = {} if feature_distance is None else {"feature_distance": feature_distance.astype(np.float64)}
    np.savez_compressed(tmp, probs=probs.astype(np.float32), labels=labels.astype(np.int64),
                        test_idx=test_idx.astype(np.int64), **extra)
    tmp.replace(path)
    return path


__all__ = [
    "PROTOCOL_VERSION", "FittedCalibrator", "PlannedCalibrator", "ProtocolSettings", "Run", "RunContext", "code_versions", "prepare_run",
    "resolve_calibrator", "row_definition", "backbone_config", "backbone_digest", "backbone_options",
    "calibration_graph", "evaluate_calibrator", "fit_calibrator", "fit_calibrator_across_runs", "fits_across_runs",
    "load_graph", "make_runs", "nodes_local_homophily", "one_class_backbone", "run_definition", "run_split",
    "save_predictions", "train_run_backbone", "train_split_backbones",
]
