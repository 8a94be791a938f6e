"""The Prefect flow ``tune``: Optuna searches fanned out over benchmarks x calibrators.

Per benchmark, one task first makes sure the tuning runs' backbones are in the disk cache (so parallel
searches of several calibrators never train the same backbone twice); then one task per calibrator runs
:func:`flows.optuna_search.run_search`, which continues its Optuna study if it exists. Each search writes its best
options to ``study/tuned/<Dataset>_<Backbone>.yaml``, where the study flow reads them.

Usage::

    from .tune import tune
    tune(benchmarks=["Cora/GCN", "Citeseer/GAT"], calibrators=["SimCalib", "GATS"], trials=30)

The default task runner runs one search at a time (the protocol's fits are CPU-bound); pass
``workers`` to :func:`run_tune` for more.
"""

from __future__ import annotations

from prefect import flow, get_run_logger, task
from prefect.task_runners import ThreadPoolTaskRunner

from simcalib.backbones import backbone_name
from simcalib.calibrators import canonical_calibrator
from simcalib.data import get_spec
from simcalib.errors import ConfigError
from simcalib.experiment.protocol import ProtocolSettings, make_runs, train_run_backbone
from simcalib.seeding import STUDY_SEED
from simcalib.tuning import DEFAULT_SPACE, ObjectiveSettings

from .optuna_search import SearchRequest, run_search


def parse_benchmark(text: str) -> tuple[str, str]:
    """``"Cora/GCN"`` (or ``cora-gcn``, ``cora_gcn``) -> ("Cora", "GCN"), with names validated."""
    for sep in ("/", "-", "_", ":"):
        if sep in text:
            dataset, backbone = text.split(sep, 1)
            return get_spec(dataset.strip()).name, backbone_name(backbone.strip())
    raise ConfigError(f"benchmark {text!r} must read DATASET/BACKBONE, e.g. Cora/GCN")


@task(name="tuning-backbones", task_run_name="backbones-{dataset}-{backbone}")
def prepare_backbones(dataset: str, backbone: str, splits: list[int], inits: list[int], folds: list[int],
                      settings: ProtocolSettings) -> int:
    """Train (or find cached) the backbones of the tuning runs; returns how many runs are ready."""
    runs = make_runs(dataset, backbone, splits, inits, folds)
    for run in runs:
        train_run_backbone(run, settings)
    return len(runs)


@task(name="search", task_run_name="search-{request.dataset}-{request.backbone}-{request.calibrator}")
def search(request: SearchRequest, settings: ProtocolSettings) -> dict:
    result = run_search(request, settings)
    get_run_logger().info("%s: %d finished trials (%d new), best %s = %s with %s", result.study_name, result.finished,
                          result.new_trials, request.objective.metric, result.best_value, result.best_params)
    return result.as_dict()


@flow(name="tune", task_runner=ThreadPoolTaskRunner(max_workers=1))
def tune(
    benchmarks: list[str] = ["Cora/GCN"],  # noqa: B006 (Prefect flow parameters are copied per run)
    calibrators: list[str] = ["SimCalib"],  # noqa: B006
    trials: int = 30,
    splits: list[int] = [0, 1, 2],  # noqa: B006
    inits: list[int] = [0],  # noqa: B006
    folds: list[int] = [0, 1, 2],  # noqa: B006
    space: str = DEFAULT_SPACE,
    spaces_file: str | None = None,
    sampler: str = "tpe",
    objective: str = "nll",
    evaluation: str = "crossfit",
    storage: str | None = None,
    tracking_uri: str | None = None,
    track: bool = True,
    tuned_dir: str | None = None,
    seed: int = STUDY_SEED,
    cache_dir: str | None = None,
    splits_dir: str | None = None,
    max_epochs: int | None = None,
    device: str = "auto",
) -> list[dict]:
    """Run (or continue) one search per benchmark x calibrator; returns each search's summary."""
    objective_settings = ObjectiveSettings(objective, evaluation)  # validate before any work
    names = [canonical_calibrator(c) for c in calibrators]
    pairs = [parse_benchmark(b) for b in benchmarks]
    settings = ProtocolSettings(study_seed=seed, cache_dir=cache_dir, splits_dir=splits_dir, device=device,
                                backbone_overrides=(("max_epochs", max_epochs),) if max_epochs else ())
    futures = []
    for dataset, backbone in pairs:
        ready = prepare_backbones.submit(dataset, backbone, splits, inits, folds, settings)
        for calibrator in names:
            request = SearchRequest(dataset, backbone, calibrator, trials=trials, splits=splits, inits=inits, folds=folds,
                                    space=space, spaces_file=spaces_file, sampler=sampler, objective=objective_settings,
                                    storage=storage, tracking_uri=tracking_uri, track=track, tuned_dir=tuned_dir,
                                    seed=seed)
            futures.append(search.submit(request, settings, wait_for=[ready]))
    return [f.result() for f in futures]


def run_tune(workers: int = 1, **parameters) -> list[dict]:
    """Run the flow with ``workers`` searches in parallel (threads)."""
    return tune.with_options(task_runner=ThreadPoolTaskRunner(max_workers=workers))(**parameters)


__all__ = ["parse_benchmark", "run_tune", "tune"]
