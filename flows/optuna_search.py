"""Optuna search of one calibrator on one benchmark: persistent, resumable, pruned, tracked.

* **Study**: one per benchmark x calibrator (x space), named ``Cora_GCN_SimCalib``, in an RDB storage (a
  SQLite file by default, any SQLAlchemy URL such as ``postgresql://...``, so workers on several machines
  can share it). ``load_if_exists``: running the same search again continues the same study. What the
  study measures (space, objective, runs, protocol, declared code versions) is stored as a study attribute;
  resuming with different settings or changed numeric code is refused rather than mixing incomparable values.
* **Trial budget**: ``trials`` is the number of *finished* (complete or pruned) trials the study should
  hold, so an interrupted search re-run with the same command does exactly the missing trials.
* **Sampler**: seeded TPE (or a grid over an all-categorical space). The seed derives from the study seed,
  the study name, the worker index and the number of trials already stored, so a resumed search does not
  replay the random start-up proposals of its first call.
* **Pruner**: the median pruner sees the running mean of the per-run objective after each run, the runs
  visited in an order that alternates splits, and judges a trial from its third run on.
* **Tracking**: each trial is an MLflow run (optuna-integration's MLflowCallback) in the experiment named
  after the study, with the per-run values as a stepped metric.
* **Feedback**: the best options (plus the space's fixed ones) go to ``study/tuned/<Dataset>_<Backbone>.yaml``
  with :func:`simcalib.store.tuned.save_tuned_params`, where the study reads them when a calibrator says ``tuned``.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import optuna
from optuna.trial import TrialState

from simcalib.calibrators import canonical_calibrator
from simcalib.errors import ConfigError, TrainingDivergedError
from simcalib.experiment.protocol import ProtocolSettings, Run, make_runs
from simcalib.experiment.study import DEFAULT_TRACKING_URI  # one MLflow store for studies and searches
from simcalib.seeding import STUDY_SEED, derive_seed
from simcalib.store.tuned import load_tuned_params, save_tuned_params, tuned_path
from simcalib.tuning import (
    DEFAULT_SPACE,
    CalibrationObjective,
    ObjectiveSettings,
    SearchSpace,
    get_search_space,
    optuna_storage,
    study_name,
    tuning_order,
)
from simcalib.tuning.comparison import compare_tuned, summarize_comparison, write_report

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
SAMPLERS = ("tpe", "grid")
ATTRIBUTE = "simcalib"  # study user attribute holding what the study measures

log = logging.getLogger(__name__)


@dataclass
class SearchRequest:
    """One search: which calibrator on which benchmark, over which runs, how many trials, stored where."""

    dataset: str
    backbone: str
    calibrator: str
    trials: int = 30
    splits: list[int] = field(default_factory=lambda: [0, 1, 2])  # 3 x 1 x 3 = 9 tuning runs
    inits: list[int] = field(default_factory=lambda: [0])
    folds: list[int] = field(default_factory=lambda: [0, 1, 2])
    space: str = DEFAULT_SPACE
    spaces_file: str | None = None
    sampler: str = "tpe"
    objective: ObjectiveSettings = field(default_factory=ObjectiveSettings)
    storage: str | None = None  # SQLAlchemy URL; None: simcalib.tuning.optuna_storage()
    study_name: str | None = None  # None: <Dataset>_<Backbone>_<Calibrator>[_<space>]
    tracking_uri: str | None = None  # None: $MLFLOW_TRACKING_URI, else DEFAULT_TRACKING_URI
    track: bool = True
    tuned_dir: str | None = None
    write_tuned: bool = True
    seed: int = STUDY_SEED
    worker: int = 0  # distinct per process when several share one study
    startup_trials: int = 10  # random proposals before TPE models the results
    prune: bool = True
    pruner_startup_trials: int = 5  # complete trials before anything is pruned
    pruner_warmup_runs: int = 2  # a trial is judged from its 3rd run on (runs alternate splits: tuning_order)
    timeout: float | None = None  # seconds for this call's trials


@dataclass
class SearchResult:
    study_name: str
    storage: str  # password hidden
    finished: int  # complete + pruned trials in the study
    complete: int
    pruned: int
    failed: int
    new_trials: int  # trials started by this call
    best_value: float | None
    best_params: dict | None
    best_trial: int | None
    tuned_path: str | None

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def redact(url: str) -> str:
    """The storage URL with its password masked (it is logged and written to the tuned file)."""
    import sqlalchemy

    try:
        return sqlalchemy.engine.make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy parses: Optuna will report it
        return url


def open_storage(url: str) -> optuna.storages.RDBStorage:
    """An RDB storage with heartbeats, so a trial whose worker was killed (no chance to mark it failed)
    is failed by the next worker after the grace period and its options retried once."""
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        Path(url.removeprefix("sqlite:///")).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine_kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}  # wait out writers
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        try:
            return optuna.storages.RDBStorage(
                url, engine_kwargs=engine_kwargs, heartbeat_interval=60, grace_period=180,
                heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=1),
            )
        except (ImportError, ValueError) as exc:
            raise ConfigError(f"cannot open the Optuna storage {redact(url)}: {exc}") from None
        except Exception as exc:  # sqlalchemy errors: unreachable server, bad credentials, ...
            raise ConfigError(f"cannot open the Optuna storage {redact(url)}: {type(exc).__name__}: {exc}; "
                              "check the URL (any SQLAlchemy URL works, e.g. sqlite:///optuna.db)") from None


def suggest(trial: optuna.Trial, space: SearchSpace) -> dict:
    """Draw one configuration of ``space`` through the trial (Optuna records it)."""
    params = {}
    for name, spec in space.params.items():
        if spec.kind == "categorical":
            params[name] = trial.suggest_categorical(name, list(spec.choices))
        elif spec.kind == "int":
            params[name] = trial.suggest_int(name, spec.low, spec.high, step=spec.step or 1, log=spec.log)
        else:
            params[name] = trial.suggest_float(name, spec.low, spec.high, step=spec.step, log=spec.log)
    return params


def make_sampler(request: SearchRequest, space: SearchSpace, name: str, stored_trials: int) -> optuna.samplers.BaseSampler:
    seed = derive_seed("tuning", request.seed, name, request.worker, stored_trials)
    if request.sampler == "grid":
        return optuna.samplers.GridSampler(space.grid(), seed=seed)
    if request.sampler == "tpe":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=request.startup_trials)
    raise ConfigError(f"unknown sampler {request.sampler!r}; choose one of: {', '.join(SAMPLERS)}")


def make_pruner(request: SearchRequest) -> optuna.pruners.BasePruner:
    if not request.prune:
        return optuna.pruners.NopPruner()
    return optuna.pruners.MedianPruner(n_startup_trials=request.pruner_startup_trials,
                                       n_warmup_steps=request.pruner_warmup_runs)


def code_fingerprint() -> str:
    """The code behind a trial's value: the declared versions of the library's numbers (backbone, metrics,
    protocol and every registered calibrator's ``numbers_version``, as the rows' digests use them), the
    objective's source, and the torch / torch_geometric versions. A calibrator fixed or retuned by a code change
    (its version bumped) must not be compared with trials measured before it."""
    import hashlib
    import json

    import torch
    import torch_geometric

    from simcalib.calibrators import CALIBRATORS
    from simcalib.experiment.protocol import code_versions
    from simcalib.tuning import objective

    versions = {**code_versions(), **{name: entry.cls.numbers_version for name, entry in CALIBRATORS.items()}}
    digest = hashlib.sha256(json.dumps(versions, sort_keys=True).encode())
    digest.update(Path(objective.__file__).read_bytes())
    digest.update(f"{torch.__version__}|{torch_geometric.__version__}".encode())
    return digest.hexdigest()[:16]


def study_identity(request: SearchRequest, space: SearchSpace, settings: ProtocolSettings, runs: list[Run]) -> dict:
    """What the study's values mean; trials are only comparable when all of it is equal."""
    return {
        "code": code_fingerprint(),
        "dataset": runs[0].dataset, "backbone": runs[0].backbone, "calibrator": space.calibrator,
        "space": space.definition(), "objective": request.objective.describe(), "runs": [r.tag() for r in runs],
        "study_seed": settings.study_seed, "label_rate": settings.label_rate,
        "backbone_overrides": {k: v for k, v in settings.backbone_overrides},
    }


def check_identity(study: optuna.Study, identity: dict) -> None:
    stored = study.user_attrs.get(ATTRIBUTE)
    if stored is None:
        study.set_user_attr(ATTRIBUTE, identity)
        return
    changed = sorted(k for k in set(stored) | set(identity) if stored.get(k) != identity.get(k))
    if changed:
        raise ConfigError(
            f"Optuna study {study.study_name} already holds trials measured differently ({', '.join(changed)} changed: "
            f"stored {({k: stored.get(k) for k in changed})}); resume with the original settings (and code), or "
            "choose another --study-name (or --space) for the new search"
        )


def count_trials(study: optuna.Study) -> dict[str, int]:
    states = [t.state for t in study.get_trials(deepcopy=False)]
    return {"complete": states.count(TrialState.COMPLETE), "pruned": states.count(TrialState.PRUNED),
            "failed": states.count(TrialState.FAIL), "all": len(states)}


def mlflow_callback(request: SearchRequest, name: str):
    """optuna-integration's MLflowCallback on the study's experiment (created first, with its artifacts
    beside a SQLite tracking file, as the study flow does, and marked as a model-training experiment whose
    runs table shows the objective, best first)."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient
    from optuna_integration.mlflow import MLflowCallback

    from .tracking import artifact_location, mark_model_training

    uri = request.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI
    client = MlflowClient(uri)
    if client.get_experiment_by_name(name) is None:
        try:
            client.create_experiment(name, artifact_location=artifact_location(uri))
        except MlflowException:  # created meanwhile by another worker
            pass
    metric = request.objective.metric
    mark_model_training(client, client.get_experiment_by_name(name).experiment_id, (metric,), order_by=metric)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return MLflowCallback(tracking_uri=uri, metric_name=request.objective.metric, create_experiment=True,
                              mlflow_kwargs={"tags": {"simcalib.kind": "tuning", "simcalib.experiment.study": name}})


def make_objective(request: SearchRequest, space: SearchSpace, evaluator: CalibrationObjective,
                   callback) -> Callable[[optuna.Trial], float]:
    metric = request.objective.metric

    def objective(trial: optuna.Trial) -> float:
        params = suggest(trial, space)
        values: list[float] = []
        for step, value in enumerate(evaluator.run_values({**space.fixed, **params})):
            values.append(value)
            if callback is not None:
                import mlflow

                mlflow.log_metric(f"run_{metric}", value, step=step)
            trial.set_user_attr("run_values", [round(v, 6) for v in values])
            trial.report(float(np.mean(values)), step)  # running mean: comparable across trials, runs in fixed order
            if trial.should_prune():
                raise optuna.TrialPruned(f"running mean {np.mean(values):.4f} after {step + 1} runs")
        return float(np.mean(values))

    if callback is None:
        return objective
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return callback.track_in_mlflow()(objective)


def load_study(name: str, storage: str | None = None) -> optuna.Study:
    """An existing study (for reports and the dashboard); ConfigError listing the stored ones if absent."""
    url = optuna_storage(storage)
    store = open_storage(url)
    try:
        return optuna.load_study(study_name=name, storage=store)
    except KeyError:
        names = [s.study_name for s in optuna.get_all_study_summaries(store)]
        raise ConfigError(f"no Optuna study {name!r} in {redact(url)}; stored studies: {', '.join(names) or 'none'}") from None


def run_search(request: SearchRequest, settings: ProtocolSettings) -> SearchResult:
    """Run (or continue) the search until the study holds ``request.trials`` finished trials."""
    calibrator = canonical_calibrator(request.calibrator)
    space = get_search_space(calibrator, request.space, request.spaces_file)
    if request.sampler == "grid":
        space.grid()  # fail before any work if the space is not a grid
    if request.trials < 0:
        raise ConfigError(f"--trials must be >= 0, got {request.trials}")
    for what, value in (("splits", request.splits), ("inits", request.inits), ("folds", request.folds)):
        if not value:
            raise ConfigError(f"no tuning {what} selected (give a count >= 1 or a list of indices)")
    runs = tuning_order(make_runs(request.dataset, request.backbone, request.splits, request.inits, request.folds))
    if any(f >= settings.n_folds for f in request.folds):
        raise ConfigError(f"folds must be within 0..{settings.n_folds - 1}")
    name = request.study_name or study_name(runs[0].dataset, runs[0].backbone, calibrator, request.space)
    url = optuna_storage(request.storage)
    storage = open_storage(url)

    probe = optuna.create_study(storage=storage, study_name=name, direction="minimize", load_if_exists=True)
    check_identity(probe, study_identity(request, space, settings, runs))
    before = count_trials(probe)
    study = optuna.load_study(storage=storage, study_name=name, sampler=make_sampler(request, space, name, before["all"]),
                              pruner=make_pruner(request))
    remaining = request.trials - before["complete"] - before["pruned"]
    if request.sampler == "grid":
        remaining = min(remaining, space.grid_size() - before["complete"] - before["pruned"])
    log.info("study %s in %s: %d finished trials, %d to run", name, redact(url),
             before["complete"] + before["pruned"], max(remaining, 0))
    if remaining > 0:
        callback = mlflow_callback(request, name) if request.track else None
        evaluator = CalibrationObjective(calibrator, runs, settings, request.objective)
        study.optimize(make_objective(request, space, evaluator, callback), n_trials=remaining,
                       timeout=request.timeout, catch=(TrainingDivergedError,),
                       callbacks=[callback] if callback is not None else None, gc_after_trial=False)
    return summarize(study, request, space, url, before["all"])


def summarize(study: optuna.Study, request: SearchRequest, space: SearchSpace, url: str, trials_before: int) -> SearchResult:
    """Counts and best trial of the study; writes the tuned-options file when a trial completed."""
    counts = count_trials(study)
    best, tuned = None, None
    if counts["complete"]:
        best = study.best_trial
        if request.write_tuned:
            identity = study.user_attrs[ATTRIBUTE]
            tuned = str(save_tuned_params(
                identity["dataset"], identity["backbone"], space.calibrator, {**space.fixed, **best.params},
                request.tuned_dir, objective=request.objective.metric, evaluation=request.objective.evaluation,
                value=float(best.value), trials=counts["complete"] + counts["pruned"], optuna_study=study.study_name,
                best_trial=best.number, space=space.name, runs=identity["runs"], storage=redact(url),
            ))
    return SearchResult(
        study.study_name, redact(url), counts["complete"] + counts["pruned"], counts["complete"], counts["pruned"],
        counts["failed"], counts["all"] - trials_before, float(best.value) if best else None,
        dict(best.params) if best else None, best.number if best else None, tuned,
    )


__all__ = [
    "DEFAULT_TRACKING_URI", "SAMPLERS", "SearchRequest", "SearchResult", "load_study", "make_pruner", "make_sampler",
    "open_storage", "redact", "run_search", "suggest",
]


# ---------------------------------------------------------------------------------------------------------
# Before/after evaluation of a finished search (test metrics on the protocol's runs)


def trials_table(study: optuna.Study, top: int = 10) -> list[str]:
    """Markdown lines: the ``top`` complete trials by value, then the state counts."""
    complete = sorted((t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE),
                      key=lambda t: t.value)
    names = sorted({k for t in complete[:top] for k in t.params})
    lines = ["| trial | value | " + " | ".join(names) + " |", "| --- | --- | " + " | ".join("---" for _ in names) + " |"]
    for t in complete[:top]:
        cells = [f"{t.params[n]:.4g}" if isinstance(t.params.get(n), float) else str(t.params.get(n, "")) for n in names]
        lines.append(f"| {t.number} | {t.value:.4f} | " + " | ".join(cells) + " |")
    counts = count_trials(study)
    lines += ["", f"{counts['all']} trials stored: {counts['complete']} complete, {counts['pruned']} pruned, "
                  f"{counts['failed']} failed, {counts['all'] - counts['complete'] - counts['pruned'] - counts['failed']} other."]
    return lines


def evaluate_tuned(request: SearchRequest, settings: ProtocolSettings, out_dir: str | os.PathLike,
                   report_path: str | os.PathLike, splits=range(5), inits=range(5), folds=range(3),
                   command: str | None = None, progress=None) -> dict:
    """Test metrics of the calibrator with default vs tuned options (read back from the tuned file, as the
    study reads them) on the given runs, written as a markdown report plus a per-run CSV."""
    calibrator = canonical_calibrator(request.calibrator)
    tuning_runs = make_runs(request.dataset, request.backbone, request.splits, request.inits, request.folds)
    dataset, backbone = tuning_runs[0].dataset, tuning_runs[0].backbone
    name = request.study_name or study_name(dataset, backbone, calibrator, request.space)
    study = load_study(name, request.storage)
    tuned = load_tuned_params(dataset, backbone, calibrator, request.tuned_dir)
    paired = compare_tuned(dataset, backbone, calibrator, tuned, settings, out_dir, splits, inits, folds,
                           tuning_runs, progress)
    summary = summarize_comparison(paired)
    objective = request.objective
    # the default options on the search's own objective: did the search beat them where it looked?
    default_value = CalibrationObjective(calibrator, tuning_order(tuning_runs), settings, objective).mean({})
    best = study.best_trial
    intro = [
        f"Search: Optuna study `{name}` ({redact(optuna_storage(request.storage))}), {request.sampler} sampler, "
        f"space `{request.space}`; objective: mean {objective.metric.upper()} on calibration-fold nodes "
        f"({objective.evaluation}{f', {objective.inner_folds} inner folds' if objective.evaluation == 'crossfit' else ''}; "
        "never test nodes) over the tuning runs "
        f"{', '.join(r.tag().removeprefix(f'{dataset}_{backbone}_') for r in tuning_runs)}.",
        "",
        f"Tuned options (from `{tuned_path(dataset, backbone, request.tuned_dir)}`): `{tuned}`; "
        f"default: `{calibrator}` with its protocol defaults. Both evaluated on the test nodes of "
        f"{len(paired)} runs (backbones shared).",
        "",
        f"On the search's objective (labelled nodes of the tuning runs), the best trial ({best.number}) scores "
        f"{best.value:.4f} and the default options {default_value:.4f}.",
    ]
    if command:
        intro = [f"Command: `{command}`", "", *intro]
    paths = write_report(report_path, paired, summary, {
        "title": f"Tuning {calibrator} on {dataset} {backbone}",
        "intro": intro,
        "sections": [("Search: best trials (objective on labelled nodes)", trials_table(study))],
    })
    return {"paired": paired, "summary": summary, "report": str(paths[0]), "csv": str(paths[1])}
