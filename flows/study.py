"""The study flow: a study file's benchmarks fanned out as Prefect tasks, tracked in MLflow, then reported.

Shape of one study (``simcalib study run study/quick.yaml``, or a deployment in ``prefect.yaml``)::

    study (validate the file, resolve tuned options, check every dataset loads: fails before any work)
      run-study (subflow on the study's task runner: threads, processes or Dask)
        pretrain         per run                  train the run's backbone (or find it in the disk cache)
        calibrate        per run x calibrator     fit, evaluate on the test nodes -> one results row
        calibrate-runs   per split x calibrator   with runs.batch_calibrators, for TS, VS, ETS, CaGCN, GATS:
                                                  fitted on the split's runs together -> one row per run
        aggregate        per benchmark            <output>/<Dataset>_<Backbone>/results.csv and summary.csv
        (MLflow)         per benchmark            parent run + nested run per calibrator (flow process)
      report             flows.report.report_flow when that module exists

``pretrain`` and ``calibrate`` persist their results under a key of everything their numbers depend on
(:mod:`flows.caching`), in ``<output>/task-results``: a study killed at any moment and started again
reuses every finished task and ends with the same numbers. A benchmark already complete is not even submitted:
``aggregate`` writes ``completion.json`` beside its ``results.csv`` (the benchmark's key over all its task keys,
the file's SHA-256, the backbone statistics), and a later run whose plan gives the same key takes the rows from
the file (replaying thousands of cached tasks costs about 0.4 s each). The tasks are plain functions underneath
(``pretrain.fn(...)``) and can be tested without Prefect.

The flow holds the study's output folder for its whole run, and each benchmark folder while writing it
(:func:`simcalib.store.integrity.results_lock`): a second study (or a ``simcalib benchmark``) on the same folder
fails with a line naming the holder. ``aggregate`` refuses to replace a ``results.csv`` whose rows were
computed on another split or graph definition, and ``splits.json`` is never rewritten with another source.
It prints at start where each benchmark's splits come from. ``$SIMCALIB_FAULT_KILL_AFTER=N`` kills the flow's
process after its N-th finished calibrate task (for fault-injection tests).
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.futures import as_completed

from flows.caching import (
    benchmark_key,
    calibrate_across_runs_cache_key_fn,
    calibrate_cache_key_fn,
    pretrain_cache_key_fn,
)
from flows.runners import make_task_runner, shared_api_server
from simcalib.data.download import sha256
from simcalib.errors import SimCalibError
from simcalib.experiment.plan import BenchmarkPlan, StudyPlan, plan_study
from simcalib.experiment.protocol import (
    ProtocolSettings,
    Run,
    evaluate_calibrator,
    fit_calibrator_across_runs,
    fits_across_runs,
    train_run_backbone,
    train_split_backbones,
)
from simcalib.experiment.splits import check_split_sources
from simcalib.experiment.study import TaskRunnerSpec, load_study
from simcalib.store.integrity import check_append, check_results, finished_run, results_lock
from simcalib.store.results_store import append_rows, check_results_file, read_results, summarize

TASK_RESULTS = "task-results"  # under the study's output folder
COMPLETION = "completion.json"  # beside a benchmark's results.csv: what the finished file was computed from
PAPER_DIR_ENV = "SIMCALIB_PAPER_DIR"

# torch's random state is process-global: seeded computations in one process run one at a time, so a
# threaded runner gives the same numbers as a serial one (parallelism comes from processes / Dask workers).
_COMPUTE_LOCK = threading.Lock()


class StudyIncompleteError(SimCalibError):
    """Some tasks failed; the others' results are written and cached."""


def _set_torch_threads(threads: int | None) -> None:
    if threads:
        import torch

        torch.set_num_threads(threads)


# ---------------------------------------------------------------------------------------------------------
# Tasks
#
# Plain functions first, wrapped as tasks below: a worker process (Dask, processes) unpickles a task's
# function by its module path, which must name the function itself and not the Task wrapping it.


def pretrain_backbone(run: Run, settings: ProtocolSettings, torch_threads: int | None = None) -> dict:
    """Train (or load from the disk cache) the backbone of ``run``; returns its training statistics."""
    with _COMPUTE_LOCK:
        _set_torch_threads(torch_threads)
        output = train_run_backbone(run, settings)
    return {"run": run.tag(), "val_accuracy": float(output.val_accuracy), "val_nll": float(output.val_nll),
            "best_epoch": int(output.best_epoch), "epochs": int(output.epochs),
            "train_seconds": float(output.train_seconds)}


def pretrain_split(runs: list[Run], settings: ProtocolSettings, torch_threads: int | None = None,
                   models_per_batch: int | None = None) -> list[str]:
    """Train (or load) the backbones of ``runs`` (one split of one benchmark) as one batched model and put
    each in the disk cache, where the per-run ``pretrain`` tasks then find it; returns the run tags."""
    with _COMPUTE_LOCK:
        _set_torch_threads(torch_threads)
        train_split_backbones(runs, settings, models_per_batch)
    return [run.tag() for run in runs]


def calibrate_and_evaluate(run: Run, settings: ProtocolSettings, calibrator: str, options: dict,
                           predictions_dir: str | None = None, torch_threads: int | None = None) -> dict:
    """Fit ``calibrator`` on the run's (cached) backbone; returns the run's results row (test metrics)."""
    with _COMPUTE_LOCK:
        _set_torch_threads(torch_threads)
        return evaluate_calibrator(run, settings, calibrator, options, predictions_dir=predictions_dir)


def calibrate_and_evaluate_across_runs(runs: list[Run], settings: ProtocolSettings, calibrator: str, options: dict,
                                       predictions_dir: str | None = None, torch_threads: int | None = None) -> list[dict]:
    """Fit ``calibrator`` on the (cached) backbones of ``runs`` (one split of one benchmark) together; returns
    each run's results row, in the order of ``runs`` (each the row of a lone fit to float rounding)."""
    with _COMPUTE_LOCK:
        _set_torch_threads(torch_threads)
        outputs = [train_run_backbone(run, settings) for run in runs]
        fitted = fit_calibrator_across_runs(runs, settings, calibrator, options, outputs)
        return [evaluate_calibrator(run, settings, calibrator, options, output, predictions_dir, model)
                for run, output, model in zip(runs, outputs, fitted)]


def check_benchmark_rows(rows: list[dict], results: Path) -> None:
    """Refuse (ConfigError / DataCorruptError, one line) to replace ``results`` by ``rows`` when its rows were
    computed on another split, graph or seed than the same runs in ``rows``, or ``rows`` repeat a run."""
    if not rows:
        return
    check_results(pd.DataFrame(rows), f"the rows for {results}")
    planned = list({(r["dataset"], r["backbone"], r["split"], r["init"], r["fold"]): r for r in rows}.values())
    check_append(read_results(results), planned, results,
                 "the study's split source or data changed since those rows were written: use the earlier source "
                 "(data.splits_dir, $SIMCALIB_SPLITS_DIR, runs.generated_splits) or another output folder")


def write_benchmark_results(dataset: str, backbone: str, rows: list[dict], out_dir: str) -> dict:
    """Write one benchmark's ``results.csv`` (rows in the given order) and ``summary.csv``; refused when the
    file there holds the same runs on another split or data definition (:func:`check_benchmark_rows`)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.csv"
    check_benchmark_rows(rows, results)
    partial = out / "results.csv.part"  # written whole, then renamed: a kill never leaves half a file
    partial.unlink(missing_ok=True)
    append_rows(partial, rows)
    partial.replace(results)
    frame = pd.read_csv(results)
    summary = summarize(frame)
    summary.to_csv(out / "summary.csv", index=False, float_format="%.10g")
    return {"dataset": dataset, "backbone": backbone, "results": str(results), "summary": str(out / "summary.csv"),
            "rows": len(frame)}


def record_completion(out_dir: Path, key: str, backbone_stats: list[dict]) -> None:
    """Write ``completion.json``: ``results.csv`` there is the complete output of the benchmark with ``key``."""
    record = {"benchmark_key": key, "results_sha256": sha256(out_dir / "results.csv"),
              "backbone_stats": backbone_stats}
    partial = out_dir / (COMPLETION + ".part")
    partial.write_text(json.dumps(record, indent=1))
    partial.replace(out_dir / COMPLETION)


def completed_benchmark(out_dir: Path, key: str) -> list[dict] | None:
    """The backbone statistics of the benchmark in ``out_dir`` when its ``results.csv`` is the complete output of
    ``key`` (same task keys, file unchanged since it was written); else None (its tasks are submitted again)."""
    results, completion = out_dir / "results.csv", out_dir / COMPLETION
    if not (results.is_file() and completion.is_file()):
        return None
    try:
        record = json.loads(completion.read_text())
    except ValueError:
        return None
    if record.get("benchmark_key") != key or record.get("results_sha256") != sha256(results):
        return None
    return record.get("backbone_stats", [])


_RUN = "{run.dataset}-{run.backbone}-s{run.split}-i{run.init}-f{run.fold}"
pretrain = task(pretrain_backbone, name="pretrain", task_run_name=f"pretrain-{_RUN}",
                cache_key_fn=pretrain_cache_key_fn, persist_result=True, result_serializer="json")
# No task cache: a re-run finds the trained models in the backbone disk cache, which is the cache that counts.
pretrain_batch = task(pretrain_split, name="pretrain-split", cache_policy=NO_CACHE, persist_result=False)
calibrate = task(calibrate_and_evaluate, name="calibrate", task_run_name=f"calibrate-{{calibrator}}-{_RUN}",
                 cache_key_fn=calibrate_cache_key_fn, persist_result=True, result_serializer="json")
calibrate_runs = task(calibrate_and_evaluate_across_runs, name="calibrate-runs",
                      cache_key_fn=calibrate_across_runs_cache_key_fn, persist_result=True, result_serializer="json")
aggregate = task(write_benchmark_results, name="aggregate", task_run_name="aggregate-{dataset}-{backbone}",
                 cache_policy=NO_CACHE, persist_result=False)


# ---------------------------------------------------------------------------------------------------------
# Flows


@dataclass
class _Tally:
    computed: int = 0
    cached: int = 0
    failed: list[str] = field(default_factory=list)

    def add(self, future, what: str) -> bool:
        future.wait()  # records the final state on the future (else `state` asks the API, which may lag)
        state = future.state
        if state.is_completed():
            if state.name == "Cached":
                self.cached += 1
            else:
                self.computed += 1
            return True
        reason = state.message or state.name
        if not state.is_final():  # the runner lost the task (a Dask worker died): its error says why
            wrapped = getattr(future, "wrapped_future", None)
            error = wrapped.exception() if wrapped is not None else None
            reason = f"{type(error).__name__}: {error}" if error else f"never finished (last state {state.name})"
        self.failed.append(f"{what}: {reason}")
        return False

    def as_dict(self) -> dict:
        return {"computed": self.computed, "cached": self.cached, "failed": len(self.failed)}


def _runner_spec(execution) -> TaskRunnerSpec:
    return TaskRunnerSpec(kind=execution.runner, workers=execution.workers, address=execution.address,
                          torch_threads=execution.torch_threads)


@flow(name="study", log_prints=True)
def study_flow(study_file: str = "study/quick.yaml", overrides: dict | None = None, plan: dict | None = None) -> dict:
    """Run the study described by ``study_file`` (``overrides``: nested keys that win over the file).
    ``plan``: the study already resolved (:meth:`~simcalib.experiment.plan.StudyPlan.to_json`, as ``simcalib study run``
    passes it); else the file is resolved here, once, before the task runner (a Dask cluster, processes) starts."""
    study_plan = StudyPlan.from_json(plan) if plan is not None else plan_study(load_study(study_file, overrides))
    execution = study_plan.execution
    with results_lock(study_plan.output, command=f"simcalib study run {study_file}", notify=print), \
            shared_api_server(_runner_spec(execution)):
        splits = []
        for benchmark in study_plan.benchmarks:
            splits.append(f"{benchmark.name}: {benchmark.describe_splits()}")
            print(f"splits: {splits[-1]}")
            # results already there must be of these runs' definitions: refuse now, not after computing
            # (a changed calibrator definition is not refused: the flow rewrites results.csv from the plan's rows)
            check_results_file(benchmark.out_dir / "results.csv", benchmark.planned_runs())
            check_split_sources(benchmark.out_dir, benchmark.split_sources)
        subflow = run_study.with_options(task_runner=make_task_runner(_runner_spec(execution)), name="run-study",
                                         flow_run_name=f"{study_plan.name}-{execution.runner}")
        return {**subflow(study_plan.to_json()), "splits": splits}


@flow(name="run-study", log_prints=True)
def run_study(plan: dict) -> dict:
    """The fan-out of a resolved study (:meth:`~simcalib.experiment.plan.StudyPlan.to_json`, recorded as this flow run's
    parameter) on the task runner this flow was given."""
    logger = get_run_logger()
    study = StudyPlan.from_json(plan)
    execution = study.execution
    storage = (study.output / TASK_RESULTS).resolve()  # a Path: Prefect stores results there as local files
    pretrain_task = pretrain.with_options(result_storage=storage)
    calibrate_task = calibrate.with_options(result_storage=storage)
    calibrate_runs_task = calibrate_runs.with_options(result_storage=storage)
    threads = execution.torch_threads
    plans = study.benchmarks

    pretrains: dict = {}  # future -> (plan, run)
    calibrations: dict = {}  # future -> (plan, [runs], calibrator): one run, or a split's runs fitted together
    keys: dict[str, str] = {}  # benchmark -> its key (flows.caching.benchmark_key)
    complete: dict[str, list[dict]] = {}  # benchmarks whose results.csv is this plan's output -> backbone stats
    for plan in plans:
        together = {name for name in plan.calibrator_names if execution.batch_calibrators and fits_across_runs(name)}
        keys[plan.name] = benchmark_key(plan.runs, plan.settings, plan.calibrator_options, together)
        stats = completed_benchmark(plan.out_dir, keys[plan.name])
        if stats is not None:
            complete[plan.name] = stats
            continue
        # absolute, like the task-results folder: a worker resolves a relative path against its own directory
        predictions = str((plan.out_dir / "predictions").resolve()) if execution.save_predictions else None
        split_futures = _submit_split_batches(plan, threads, execution.models_per_batch)
        backbones: dict[int, list] = {}  # split -> its runs' pretrain futures
        for run in plan.runs:
            backbone = pretrain_task.submit(run, plan.settings, threads,
                                            wait_for=[split_futures[run.split]] if split_futures else None)
            pretrains[backbone] = (plan, run)
            backbones.setdefault(run.split, []).append(backbone)
            for name, options in plan.calibrator_options.items():
                if name not in together:
                    future = calibrate_task.submit(run, plan.settings, name, options, predictions, threads,
                                                   wait_for=[backbone])
                    calibrations[future] = (plan, [run], name)
        for split, futures in backbones.items():
            runs = [pretrains[f][1] for f in futures]
            for name, options in plan.calibrator_options.items():
                if name in together:
                    future = calibrate_runs_task.with_options(
                        task_run_name=f"calibrate-runs-{name}-{plan.name}-s{split}").submit(
                        runs, plan.settings, name, options, predictions, threads, wait_for=futures)
                    calibrations[future] = (plan, runs, name)

    logger.info("study %s: %d benchmarks x %d runs, %d calibrators (%d benchmarks complete before) -> %d tasks on %s "
                "(%d workers); output %s", study.name, len(plans), study.runs_per_benchmark,
                len({c for p in plans for c in p.calibrator_names}), len(complete), len(pretrains) + len(calibrations),
                execution.runner, execution.workers, study.output)
    tracker = _tracker(study, logger)
    benchmarks: list[dict] = []
    for plan in plans:
        if plan.name in complete:
            logger.info("%s: complete in %s (%s matches this plan and code): no task submitted", plan.name,
                        plan.out_dir / "results.csv", COMPLETION)
            written = {"dataset": plan.dataset, "backbone": plan.backbone, "results": str(plan.out_dir / "results.csv"),
                       "summary": str(plan.out_dir / "summary.csv")}
            benchmarks.append(_log_benchmark(study, plan, written, complete[plan.name], tracker, logger))
    pre_tally, cal_tally = _Tally(), _Tally()
    backbone_stats: dict[str, list[dict]] = {p.name: [] for p in plans}
    remaining = {p.name: len(p.runs) * len(p.calibrators) for p in plans}
    rows: dict[str, list[tuple[tuple, dict]]] = {p.name: [] for p in plans}
    done = 0
    # A run's pretrain finishes before its calibrations start, so a benchmark whose calibrations are all
    # done has all its backbone statistics too.
    for future in as_completed([*pretrains, *calibrations]):
        if future in pretrains:
            plan, run = pretrains[future]
            if pre_tally.add(future, f"pretrain {run.tag()}"):
                backbone_stats[plan.name].append(future.result())
            continue
        plan, runs, name = calibrations[future]
        done += 1
        what = f"calibrate {runs[0].tag()}{f' and {len(runs) - 1} more runs' if len(runs) > 1 else ''} {name}"
        if cal_tally.add(future, what):
            finished_run()  # the fault hook ($SIMCALIB_FAULT_KILL_AFTER)
            result = future.result()
            for run, row in zip(runs, result if isinstance(result, list) else [result]):
                order = (run.split, run.init, run.fold, plan.calibrator_names.index(name))
                rows[plan.name].append((order, row))
                logger.info("[%d/%d] %s s%d i%d f%d %-10s ECE %6.2f%%  (%s)", done, len(calibrations), plan.name,
                            run.split, run.init, run.fold, name, row["ece"], future.state.name.lower())
        else:
            logger.error("[%d/%d] %s", done, len(calibrations), cal_tally.failed[-1])
        remaining[plan.name] -= len(runs)
        if remaining[plan.name] == 0 and rows[plan.name]:
            ordered = [row for _, row in sorted(rows[plan.name], key=lambda item: item[0])]
            benchmarks.append(_finish_benchmark(study, plan, ordered, backbone_stats[plan.name], keys[plan.name],
                                                tracker, logger))

    result = {
        "study": study.name, "study_file": study.source, "output": str(study.output),
        "tracking_uri": execution.tracking_uri, "experiment": execution.experiment,
        "experiment_id": tracker.experiment_id,
        "tasks": {"pretrain": pre_tally.as_dict(), "calibrate": cal_tally.as_dict()},
        "benchmarks": benchmarks, "complete_before": sorted(complete), "report": None,
    }
    failures = pre_tally.failed + cal_tally.failed
    if failures:
        raise StudyIncompleteError(
            f"{len(failures)} task(s) failed ({'; '.join(failures[:5])}{' ...' if len(failures) > 5 else ''}); "
            f"the results of the others are in {study.output} and cached: fix the cause and run the same command "
            "again to compute only what is missing")
    if execution.report:
        result["report"] = _report(study, logger)
    logger.info("study %s finished: pretrain %s, calibrate %s", study.name, pre_tally.as_dict(), cal_tally.as_dict())
    return result


def _submit_split_batches(plan: BenchmarkPlan, threads: int | None, models_per_batch: int | None) -> dict:
    """With ``runs.batch_runs``: one batched-training task per split of ``plan`` (split -> future); else {}."""
    if not plan.settings.batch_runs:
        return {}
    by_split: dict[int, list[Run]] = {}
    for run in plan.runs:
        by_split.setdefault(run.split, []).append(run)
    return {split: pretrain_batch.with_options(task_run_name=f"pretrain-split-{plan.name}-s{split}").submit(
                runs, plan.settings, threads, models_per_batch)
            for split, runs in by_split.items()}


def _tracker(study: StudyPlan, logger):
    from flows.tracking import StudyTracker

    tracker = StudyTracker(study.execution.tracking_uri, study.execution.experiment)
    logger.info("MLflow: experiment %r at %s", study.execution.experiment, study.execution.tracking_uri)
    return tracker


def _finish_benchmark(study: StudyPlan, plan: BenchmarkPlan, rows: list[dict], backbone_stats: list[dict], key: str,
                      tracker, logger) -> dict:
    """Aggregate one benchmark, record its completion, then log it to MLflow from this (the flow's) process."""
    from simcalib.experiment.splits import record_split_sources

    with results_lock(plan.out_dir, command=f"simcalib study run {study.source}"):
        check_benchmark_rows(rows, plan.out_dir / "results.csv")  # before splits.json or results.csv change
        record_split_sources(plan.out_dir, plan.split_sources)
        written = aggregate(plan.dataset, plan.backbone, rows, str(plan.out_dir))
        if len(rows) == len(plan.runs) * len(plan.calibrators):  # a failed task leaves the benchmark incomplete
            record_completion(plan.out_dir, key, backbone_stats)
    return _log_benchmark(study, plan, written, backbone_stats, tracker, logger)


def _log_benchmark(study: StudyPlan, plan: BenchmarkPlan, written: dict, backbone_stats: list[dict], tracker,
                   logger) -> dict:
    """Log one benchmark's ``results.csv`` and ``summary.csv`` (``written``) to MLflow (idempotent)."""
    from flows.tracking import BenchmarkRecord, calibrator_hyperparameters, git_commit, package_versions

    results = pd.read_csv(written["results"])
    summary = pd.read_csv(written["summary"])
    settings = plan.settings
    params = {
        "study": study.name, "study_file": study.source, "study_seed": study.seed,
        "splits": list(study.splits), "inits": list(study.inits), "folds": list(study.folds),
        "label_rate": settings.label_rate, "runs": len(plan.runs), "calibrators": plan.calibrator_names,
        "generated_splits": sorted(s for s, source in plan.split_sources.items() if source == "generated"),
        "run_seeds": list(plan.seeds), "seed_rule": "simcalib.seeding.run_seed",
        "task_runner": study.execution.runner, "device": study.device, "git_commit": git_commit(),
        **{f"backbone.{k}": v for k, v in plan.backbone_config},
        **{f"version.{k}": v for k, v in package_versions().items()},
    }
    stats = pd.DataFrame(backbone_stats)
    backbone_metrics = ({f"backbone.{k}_mean": float(stats[k].mean())
                         for k in ("val_accuracy", "val_nll", "best_epoch", "epochs", "train_seconds")}
                        if len(stats) else {})
    record = BenchmarkRecord(
        study=study.name, dataset=plan.dataset, backbone=plan.backbone, variant=plan.variant, results=results,
        summary=summary,
        params=params,
        calibrator_params={c: calibrator_hyperparameters(c, plan.dataset, plan.backbone, o)
                           for c, o in plan.calibrator_options.items()},
        backbone_metrics=backbone_metrics,
        files=[Path(written["results"]), Path(written["summary"]), Path(study.source)],
        predictions_dir=plan.out_dir / "predictions" if study.execution.save_predictions else None,
    )
    run_id, logged = tracker.log_benchmark(record)
    logger.info("%s: %d rows -> %s; MLflow run %s (%s)", plan.name, len(results), written["results"], run_id,
                "logged" if logged else "already logged, unchanged")
    return {**written, "mlflow_run_id": run_id}


def _report(study: StudyPlan, logger) -> str | None:
    """Run ``flows.report.report_flow`` on the study's output when that module exists; returns report.md."""
    try:
        from flows.report import report_flow
    except ModuleNotFoundError as exc:
        if exc.name != "flows.report":
            raise
        logger.info("no flows/report.py: skipping the report")
        return None
    return report_flow(results_dir=str(study.output), out_dir=str(study.output / "report"),
                       paper_dir=os.environ.get(PAPER_DIR_ENV), title=f"SimCalib study {study.name!r}",
                       tracking_uri=study.execution.tracking_uri, experiment=study.execution.experiment)


__all__ = [
    "StudyIncompleteError", "aggregate", "calibrate", "calibrate_runs", "pretrain", "run_study", "study_flow",
]
