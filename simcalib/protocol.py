"""The 75-run protocol of one benchmark, as small functions with explicit inputs.

A *run* is (dataset, backbone, split, init, fold): it trains a fresh backbone (cached on disk) and fits
every calibrator on it. :func:`train_run_backbone` and :func:`evaluate_calibrator` are the units that
orchestration (``flows/``) fans out; :func:`run_benchmark` chains them for the CLI, appending each run's
rows to ``results.csv`` (:mod:`simcalib.results_store`) as soon as they exist, so an interrupted benchmark
keeps what it computed and a restart skips it. With several workers the runs are computed in worker
processes (:mod:`simcalib.executor`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import os
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

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
from simcalib.calibrators import (
    CALIBRATORS,
    CalibrationGraph,
    Calibrator,
    build_calibrator,
    calibrator_definition,
    calibrator_seed_name,
    canonical_calibrator,
)
from simcalib.calibrators.across_runs import fit_across_runs, generator_after_build, stackable
from simcalib.calibrators.signals import NodeSignals
from simcalib.data import GraphData, get_spec, graph_digest, load_dataset
from simcalib.errors import ConfigError, TrainingDivergedError
from simcalib.executor import Counted, in_processes
from simcalib.figure_bins import FIGURE_CALIBRATORS, summarise, to_json
from simcalib.homophily import local_homophily
from simcalib.homophily import summarise as homophily_summary
from simcalib.homophily import to_json as homophily_json
from simcalib.integrity import (
    BACKBONE_OPTIONS_COLUMN,
    CALIBRATOR_DIGEST_COLUMN,
    CALIBRATOR_OPTIONS_COLUMN,
    finished_run,
    results_lock,
)
from simcalib.metrics import compute_metrics
from simcalib.results_store import (
    AUDIT_COLUMNS,
    append_rows,
    check_results_file,
    check_resume_source,
    copy_finished_rows,
    known_backbone_digests,
    read_results,
    result_key,
    result_keys,
    run_key,
)
from simcalib.seeding import STUDY_SEED, derive_seed, run_seed, seed_everything
from simcalib.splits import (
    PAPER_PROTOCOL,
    Split,
    get_split,
    protocol_name,
    resolve_splits_dir,
    split_digest,
    split_source_label,
    split_sources,
)


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
    splits_dir: str | None = None  # fixed split files; None: simcalib.splits.resolve_splits_dir; "none": no files
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
    """What defines ``run`` besides its seed (the :data:`~simcalib.integrity.DEFINITION_COLUMNS` of its rows):
    the digest of its split's node indices, of the processed graph, and where the split came from. Read from
    the graph and split the run itself uses (:func:`load_graph`, :func:`run_split`)."""
    graph = load_graph(run.dataset, settings)
    digest = getattr(graph, "_simcalib_digest", None)  # once per loaded graph: hashing a large graph takes a while
    if digest is None:
        digest = graph_digest(graph)
        graph._simcalib_digest = digest
    split = run_split(run, settings, graph)
    return {"split_digest": split_digest(split), "data_digest": digest, "split_source": split_source_label(split),
            BACKBONE_OPTIONS_COLUMN: backbone_options(run, settings)}


def nodes_local_homophily(graph: GraphData, nodes: np.ndarray) -> np.ndarray:
    """Local homophily (:func:`simcalib.homophily.local_homophily`) of ``nodes`` (the test nodes), from the
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


def describe_split_sources(dataset: str, splits: Iterable[int], settings: ProtocolSettings) -> str:
    """One line saying where the splits of a benchmark come from: the fixed files and where they were found,
    or generated and why (ConfigError when that is not allowed, as :func:`run_split_sources`)."""
    splits = list(splits)
    sources = run_split_sources(dataset, splits, settings)
    fixed = [s for s in splits if sources[s] == "fixed"]
    generated = [s for s in splits if sources[s] == "generated"]
    parts = []
    if fixed:
        folder = settings.resolved_splits_dir()
        parts.append(f"split(s) {','.join(map(str, fixed))} from the fixed GATS files in {folder} "
                     f"({settings.splits_origin()})")
    if generated:
        if get_spec(dataset).external is not None:
            why = f"a graph from another package, {get_spec(dataset).external}"
        elif protocol_name(settings.fold_rate, settings.n_folds, settings.test_rate) != PAPER_PROTOCOL:
            why = f"no published files for label rate {settings.label_rate:g}"
        elif fixed:
            why = "beyond the fixed files, allowed by --generated-splits"
        else:
            why = f"{settings.splits_origin()}; allowed by --generated-splits"
        parts.append(f"split(s) {','.join(map(str, generated))} generated from seed {settings.study_seed} ({why})")
    return f"{get_spec(dataset).name}: " + "; ".join(parts)


def run_split_sources(dataset: str, splits: Iterable[int], settings: ProtocolSettings) -> dict[int, str]:
    """Which of ``splits`` come from fixed files and which are generated (ConfigError if not allowed). A graph
    from another package has no fixed files: at the paper's label rate, generated splits must be allowed."""
    spec = get_spec(dataset)
    if spec.external is not None and not settings.generated_splits and \
            protocol_name(settings.fold_rate, settings.n_folds, settings.test_rate) == PAPER_PROTOCOL:
        raise ConfigError(f"{spec.name} is a graph from another package ({spec.external}) and has no fixed GATS "
                          "split files; run it on splits drawn from the study seed: runs.generated_splits: true in "
                          "the study file, or --generated-splits")
    return split_sources(spec.name, list(splits), _splits_dir(spec.name, settings), settings.fold_rate,
                         settings.n_folds, settings.test_rate, settings.generated_splits)


def planned_runs(runs: Sequence[Run], settings: ProtocolSettings) -> list[dict]:
    """Each run's identity and definition (:func:`run_definition`), as :func:`~simcalib.integrity.check_append`
    compares them with the rows of a results file."""
    return [{"dataset": r.dataset, "backbone": r.backbone, "split": r.split, "init": r.init, "fold": r.fold,
             "label_rate": settings.label_rate, "seed": r.seed(settings), **run_definition(r, settings)} for r in runs]


def planned_definitions(dataset: str, backbone: str,
                        calibrators: Iterable[tuple[str, dict | None]]) -> dict[tuple[str, str, str], str]:
    """(dataset, backbone, calibrator) -> the calibrator digest its rows will carry, for each (name, options)
    of ``calibrators`` (:func:`~simcalib.calibrators.calibrator_definition`), as
    :func:`~simcalib.integrity.check_append` compares them with a results file's rows."""
    dataset, backbone = get_spec(dataset).name, backbone_name(backbone)
    return {(dataset, backbone, canonical_calibrator(name)):
            calibrator_definition(name, dataset, backbone, **(options or {})).digest for name, options in calibrators}


def backbone_config(run: Run, settings: ProtocolSettings) -> BackboneConfig:
    spec = get_spec(run.dataset)
    options = {"weight_decay": spec.backbone_weight_decay, **dict(settings.backbone_overrides)}
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
    config = backbone_config(run, settings)
    seed = run.seed(settings)
    cache = BackboneCache(settings.cache_dir)
    key = cache_key(_cache_dataset(run.dataset, graph), config, run.split, run.init, run.fold, seed, train_idx,
                    cal_idx, device=resolve_device(settings.device))
    output = cache.load(run.dataset, run.backbone, key)
    if output is None:
        output = train_backbone(graph, torch.from_numpy(train_idx), torch.from_numpy(cal_idx), config, seed,
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


def calibration_graph(run: Run, settings: ProtocolSettings, output: BackboneOutput) -> tuple[CalibrationGraph, np.ndarray]:
    """The calibrator's view of ``run`` (test labels hidden) and the test node indices."""
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


def fit_calibrator(run: Run, settings: ProtocolSettings, calibrator: str, options: dict | None = None,
                   output: BackboneOutput | None = None) -> FittedCalibrator:
    """Fit ``calibrator`` on ``run``'s backbone, seeded by the run's seed and the calibrator's name (so every
    caller, the study and the benchmarks alike, fits the same model)."""
    name = canonical_calibrator(calibrator)
    output = output if output is not None else train_run_backbone(run, settings)
    model, cg, test_idx = _built_calibrator(run, settings, name, options, output)
    start = time.perf_counter()
    try:
        model.fit(cg)
    except TrainingDivergedError as exc:
        raise TrainingDivergedError(f"{run.tag()}: {exc}") from None
    return FittedCalibrator(model, cg, test_idx, time.perf_counter() - start)


def _built_calibrator(run: Run, settings: ProtocolSettings, name: str, options: dict | None,
                      output: BackboneOutput) -> tuple[Calibrator, CalibrationGraph, np.ndarray]:
    """``name`` built for ``run`` under the run's calibrator seed (not fitted), its graph on the device, the
    test nodes. The global generator is left where the fit draws its first random number."""
    cg, test_idx = calibration_graph(run, settings, output)
    cg = cg.to(resolve_device(settings.device))
    seed_everything(derive_seed(run.seed(settings), calibrator_seed_name(name)))
    return build_calibrator(name, cg.num_classes, run.dataset, run.backbone, **(options or {})), cg, test_idx


def fits_across_runs(calibrator: str) -> bool:
    """Whether ``calibrator`` (a registered name) can be fitted on the runs of a split together
    (:mod:`simcalib.calibrators.across_runs`)."""
    return stackable(CALIBRATORS[canonical_calibrator(calibrator)].cls)


def fit_calibrator_across_runs(runs: Sequence[Run], settings: ProtocolSettings, calibrator: str,
                               options: dict | None, outputs: Sequence[BackboneOutput]) -> list[FittedCalibrator]:
    """:func:`fit_calibrator` of every run of ``runs`` (runs of one graph: one dataset and split), fitted
    together (:func:`~simcalib.calibrators.across_runs.fit_across_runs`): each run's model is the one
    :func:`fit_calibrator` gives, to float rounding, from the same seed. ``fit_seconds`` is the joint fit's time
    divided by the number of runs."""
    name = canonical_calibrator(calibrator)
    built, generators = [], []
    for run, output in zip(runs, outputs):
        built.append(_built_calibrator(run, settings, name, options, output))
        generators.append(generator_after_build(built[-1][1].device))  # the stream the run's lone fit would use
    start = time.perf_counter()
    try:
        fit_across_runs([model for model, _, _ in built], [cg for _, cg, _ in built], generators)
    except TrainingDivergedError as exc:
        tags = ", ".join(run.tag() for run in runs)
        raise TrainingDivergedError(f"{name} fitted across runs {tags}: {exc}; fit them one at a time "
                                    "(--no-batch-calibrators) to see which run") from None
    seconds = (time.perf_counter() - start) / len(runs)
    return [FittedCalibrator(model, cg, test_idx, seconds) for model, cg, test_idx in built]


def evaluate_calibrator(
    run: Run,
    settings: ProtocolSettings,
    calibrator: str,
    options: dict | None = None,
    output: BackboneOutput | None = None,
    predictions_dir: str | os.PathLike | None = None,
    fitted: FittedCalibrator | None = None,
) -> dict:
    """Fit ``calibrator`` on ``run``'s backbone (unless ``fitted`` is given: the model already fitted on it)
    and return its results row (test-node metrics)."""
    name = canonical_calibrator(calibrator)
    output = output if output is not None else train_run_backbone(run, settings)
    fitted = fitted if fitted is not None else fit_calibrator(run, settings, name, options, output)
    model, cg, test_idx, fit_seconds = fitted.model, fitted.graph, fitted.test_idx, fitted.fit_seconds
    probs = model.predict_proba(cg).cpu()
    test_nodes = torch.from_numpy(test_idx).to(cg.device)
    signals = NodeSignals(model, cg, test_nodes)  # T_feat and the prototype distance: once for audit and figure
    audit = {column: None for column in AUDIT_COLUMNS} | model.audit(cg, test_nodes, signals)
    graph = load_graph(run.dataset, settings)
    y_test = graph.y[test_idx]
    test_probs = probs[test_idx]
    test_degree = cg.degree()[torch.from_numpy(test_idx).to(cg.device)].cpu()  # in-degree: for degree_ece
    metrics = compute_metrics(test_probs, y_test, degree=test_degree)
    figure_bins = None
    if predictions_dir is not None or name in FIGURE_CALIBRATORS:
        # the feature-similarity figure's x axis; prototypes from the training folds, as SimCalib's default
        distance = signals.prototype_distance().cpu().numpy()
        if name in FIGURE_CALIBRATORS:
            t_feat = signals.feature_temperature
            t_feat = None if t_feat is None else t_feat.cpu().numpy()
            figure_bins = to_json(summarise(test_probs.numpy(), y_test.numpy(), distance, t_feat=t_feat))
        if predictions_dir is not None:
            save_predictions(Path(predictions_dir), run, name, test_probs.numpy(), y_test.numpy(), test_idx, distance)
    # analysis only, from the true labels of the loaded graph (outside the calibrator's CalibrationGraph)
    homophily_bins = homophily_json(homophily_summary(test_probs.numpy(), y_test.numpy(),
                                                      nodes_local_homophily(graph, test_idx)))
    definition = calibrator_definition(name, run.dataset, run.backbone, **(options or {}))
    return {
        "dataset": run.dataset, "backbone": run.backbone, "calibrator": name,
        "split": run.split, "init": run.init, "fold": run.fold, "seed": run.seed(settings),
        **metrics, "fit_seconds": fit_seconds, "label_rate": settings.label_rate, **audit,
        "backbone_digest": backbone_digest(output), "figure_bins": figure_bins, **run_definition(run, settings),
        "one_class_backbone": one_class_backbone(output, test_idx), "homophily_bins": homophily_bins,
        CALIBRATOR_OPTIONS_COLUMN: definition.text, CALIBRATOR_DIGEST_COLUMN: definition.digest,
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


@dataclass
class BenchmarkRequest:
    dataset: str
    backbone: str
    calibrators: list[str]
    splits: list[int] = field(default_factory=lambda: list(range(5)))
    inits: list[int] = field(default_factory=lambda: list(range(5)))
    folds: list[int] = field(default_factory=lambda: list(range(3)))
    calibrator_options: dict[str, dict] = field(default_factory=dict)


def _run_calibrators(run: Run, settings: ProtocolSettings, calibrators: Sequence[str], options: dict[str, dict],
                     predictions_dir: Path | None) -> list[dict]:
    """One run: its backbone (cached) and the result rows of ``calibrators`` on it."""
    output = train_run_backbone(run, settings)
    return [evaluate_calibrator(run, settings, c, options.get(c), output, predictions_dir) for c in calibrators]


def _split_groups(jobs: Sequence[tuple[Run, list[str]]]) -> list[list[tuple[Run, list[str]]]]:
    """The jobs with work to do, grouped by split (the runs whose backbones train together), in job order."""
    groups: dict[int, list] = {}
    for run, todo in jobs:
        if todo:
            groups.setdefault(run.split, []).append((run, todo))
    return list(groups.values())


def _run_split_group(group: Sequence[tuple[Run, list[str]]], settings: ProtocolSettings, options: dict[str, dict],
                     predictions_dir: Path | None, models_per_batch: int | None = None,
                     batch_calibrators: bool = False) -> Iterator[list[dict]]:
    """The runs of one split: their backbones (with ``settings.batch_runs`` trained together, else one at a
    time; cached per run), then each run's calibrator rows, yielded run by run (so results.csv grows one run
    at a time). With ``batch_calibrators`` every calibrator that :func:`fits_across_runs` is first fitted on
    all the runs that need it at once; the rows are then yielded run by run all the same."""
    runs = [run for run, _ in group]
    if settings.batch_runs:
        outputs = train_split_backbones(runs, settings, models_per_batch)
    else:
        outputs = [train_run_backbone(run, settings) for run in runs]
    fitted: dict[tuple[int, str], FittedCalibrator] = {}  # (position in group, calibrator) -> fitted model
    if batch_calibrators:
        names = list(dict.fromkeys(c for _, todo in group for c in todo if fits_across_runs(c)))
        for name in names:
            positions = [p for p, (_, todo) in enumerate(group) if name in todo]
            models = fit_calibrator_across_runs([runs[p] for p in positions], settings, name, options.get(name),
                                                [outputs[p] for p in positions])
            fitted.update({(p, name): model for p, model in zip(positions, models)})
    for position, ((run, todo), output) in enumerate(zip(group, outputs)):
        yield [evaluate_calibrator(run, settings, c, options.get(c), output, predictions_dir, fitted.pop((position, c), None))
               for c in todo]


def _split_group_rows(group, settings, options, predictions_dir, models_per_batch=None,
                      batch_calibrators=False) -> list[list[dict]]:
    """:func:`_run_split_group` collected, for a worker process (which returns once)."""
    return list(_run_split_group(group, settings, options, predictions_dir, models_per_batch, batch_calibrators))


def _batched_rows(jobs, settings, options, predictions_dir, workers: int, models_per_batch: int | None,
                  batch_calibrators: bool = False):
    """Each job's rows (``[]`` for a job with nothing to do), the runs of a split together (their backbones
    with ``settings.batch_runs``, their calibrators with ``batch_calibrators``); with ``workers`` > 1, one split
    per worker process (one torch thread each)."""
    groups = _split_groups(jobs)
    for _ in range(len(jobs) - sum(len(g) for g in groups)):
        yield []
    if workers == 1:
        for group in groups:
            yield from _run_split_group(group, settings, options, predictions_dir, models_per_batch, batch_calibrators)
        return
    tasks = [(g, settings, options, predictions_dir, models_per_batch, batch_calibrators) for g in groups]
    for rows_per_run in in_processes(_split_group_rows, tasks, workers):
        yield from rows_per_run


def _rows_in_processes(jobs, settings, options, predictions_dir, workers: int):
    """Each job's result rows (``[]`` for a job with nothing to do), the runs computed in ``workers``
    processes with one torch thread each (the layout that is fastest for small graphs on few cores, and the
    same numbers as ``--threads 1``: the thread count is part of the backbone's identity), yielded as each
    run finishes."""
    pending = [(run, todo) for run, todo in jobs if todo]
    for _ in range(len(jobs) - len(pending)):
        yield []
    yield from in_processes(_run_calibrators, [(run, settings, todo, options, predictions_dir)
                                               for run, todo in pending], workers)


def run_benchmark(
    request: BenchmarkRequest,
    settings: ProtocolSettings,
    out_dir: str | os.PathLike,
    save_predictions: bool = False,
    progress: Callable[[Iterable], Iterable] | None = None,
    workers: int = 1,
    batch_runs: bool = False,
    resume_from: str | os.PathLike | None = None,
    models_per_batch: int | None = None,
    batch_calibrators: bool = False,
    wait: bool = False,
    notify: Callable[[str], None] | None = None,
) -> pd.DataFrame:
    """Run (or resume) the protocol; rows go to ``out_dir/results.csv`` as each run finishes.

    ``workers`` > 1 runs that many runs at once in separate processes (one torch thread each).
    ``batch_runs``: the backbones of a split's runs are trained together (:func:`train_split_backbones`;
    another random stream than the per-run trainer, hence other backbones), with ``workers`` > 1 one split
    per process. ``batch_calibrators``: the calibrators that :func:`fits_across_runs` are fitted on a split's
    runs together (the same models to float rounding; a split's rows then arrive once all its backbones are
    there). ``resume_from``: a results.csv (e.g. committed under reports/) whose rows of the requested
    runs are copied into ``out_dir/results.csv`` first, so those runs are not computed again.

    The folder is held for this call (:func:`~simcalib.integrity.results_lock`; another writer: an error, or
    with ``wait`` a wait, announced through ``notify``). Rows already in ``results.csv`` (and those copied by
    ``resume_from``) must be of the runs' own split and data definition and hold no run twice; otherwise
    nothing is added (:func:`~simcalib.results_store.check_results_file`)."""
    if batch_runs != settings.batch_runs:  # the calibrators' view of a run must read the same backbones
        settings = dataclasses.replace(settings, batch_runs=batch_runs)
    calibrators = [canonical_calibrator(c) for c in request.calibrators]
    if not calibrators:
        raise ConfigError("no calibrators given; choose from the registered names (see `simcalib benchmark --help`)")
    for name, value in (("splits", request.splits), ("inits", request.inits), ("folds", request.folds)):
        if not value:
            raise ConfigError(f"no {name} selected")
    if any(f < 0 or f >= settings.n_folds for f in request.folds):
        raise ConfigError(f"folds must be within 0..{settings.n_folds - 1}")
    if resume_from is not None:
        check_resume_source(resume_from)
    out_dir = Path(out_dir)
    with results_lock(out_dir, wait=wait, notify=notify):
        return _run_benchmark_locked(request, settings, out_dir, calibrators, save_predictions, progress, workers,
                                     batch_runs, resume_from, models_per_batch, batch_calibrators)


def _run_benchmark_locked(request, settings, out_dir: Path, calibrators, save_predictions, progress, workers,
                          batch_runs, resume_from, models_per_batch, batch_calibrators) -> pd.DataFrame:
    results_path = out_dir / "results.csv"
    runs = make_runs(request.dataset, request.backbone, request.splits, request.inits, request.folds)
    load_graph(runs[0].dataset, settings)  # fail fast on missing data, before any progress bar
    planned = planned_runs(runs, settings)
    definitions = planned_definitions(runs[0].dataset, runs[0].backbone,
                                      [(c, request.calibrator_options.get(c)) for c in calibrators])
    check_results_file(results_path, planned, definitions)  # before anything is added
    if resume_from is not None:
        copy_finished_rows(Path(resume_from), results_path,
                           {result_key(r.dataset, r.backbone, c, r.split, r.init, r.fold, r.seed(settings))
                            for r in runs for c in calibrators}, planned, definitions)
    existing = read_results(results_path)
    done = set(result_keys(existing))
    predictions_dir = out_dir / "predictions" if save_predictions else None
    jobs = []  # (run, calibrators still missing from results.csv)
    for run in runs:
        todo = [c for c in calibrators
                if result_key(run.dataset, run.backbone, c, run.split, run.init, run.fold, run.seed(settings)) not in done]
        jobs.append((run, todo))
    options = request.calibrator_options
    if batch_runs or batch_calibrators:
        rows_per_job = _batched_rows(jobs, settings, options, predictions_dir, workers, models_per_batch,
                                     batch_calibrators)
    elif workers > 1:
        rows_per_job = _rows_in_processes(jobs, settings, options, predictions_dir, workers)
    else:
        rows_per_job = (_run_calibrators(run, settings, todo, options, predictions_dir) if todo else []
                        for run, todo in jobs)
    known = known_backbone_digests(existing)
    other_backbone = []
    with contextlib.closing(rows_per_job):  # an interruption stops the runs in flight
        counted = Counted(rows_per_job, len(jobs))
        for rows in progress(counted) if progress else counted:
            append_rows(results_path, rows)  # the parent alone writes results.csv, each run as it finishes
            if rows:
                finished_run()  # the fault hook ($SIMCALIB_FAULT_KILL_AFTER)
            other_backbone += [row for row in rows[:1] if known.get(run_key(row), {row["backbone_digest"]})
                               - {row["backbone_digest"]}]
    if other_backbone:
        tags = ", ".join(f"s{r['split']} i{r['init']} f{r['fold']}" for r in other_backbone[:8])
        warnings.warn(
            f"{len(other_backbone)} run(s) of {runs[0].dataset} {runs[0].backbone} ({tags}"
            f"{' ...' if len(other_backbone) > 8 else ''}) got another backbone than the earlier rows of the same "
            f"run in {results_path} (backbone_digest differs: trained on another machine or code?); the report "
            "does not pair such rows. To compare them, recompute the run's other calibrators here too (move their "
            "rows out of results.csv and run the same command).", stacklevel=2)
    results = read_results(results_path)
    wanted = results["calibrator"].isin(calibrators) & (results["dataset"] == runs[0].dataset) & (results["backbone"] == runs[0].backbone)
    return results[wanted].reset_index(drop=True)


__all__ = [
    "BenchmarkRequest", "FittedCalibrator", "ProtocolSettings", "Run", "backbone_config", "backbone_digest", "backbone_options",
    "calibration_graph", "describe_split_sources", "evaluate_calibrator", "fit_calibrator",
    "fit_calibrator_across_runs", "fits_across_runs", "load_graph", "make_runs", "nodes_local_homophily",
    "one_class_backbone", "planned_definitions", "planned_runs", "run_benchmark", "run_definition", "run_split",
    "run_split_sources", "save_predictions", "train_run_backbone", "train_split_backbones",
]
