"""The study flow: a study file's benchmarks fanned out as Prefect tasks, tracked in MLflow, then reported.

Shape of one study (``simcalib study run study/quick.yaml``, or a deployment in ``prefect.yaml``)::

    study (validate the file, resolve tuned options, check every dataset loads: fails before any work)
      run-study (subflow on the study's task runner: threads, processes or Dask)
        one task per unit of the study's schedule (simcalib.experiment.schedule), as it is released:
        pretrain         a run's backbone (or, with runs.batch_runs, a split's runs as one batched model)
        calibrate        one calibrator on one run -> one results row; with runs.batch_calibrators, TS, VS,
                         ETS, CaGCN and GATS fitted on a split's runs together -> one row per run
        run              one run: its backbone and every calibrator it is missing (on a CUDA device, or
                         task_runner.granularity: run), trained on cuda:<i> with K runs in flight per device
        (flow process)   per finished task        its rows appended to <output>/<Dataset>_<Backbone>/results.csv
        (flow process)   per benchmark            summary.csv, then a parent MLflow run + one per calibrator
      report             flows.report.report_flow when that module exists

What to compute and when is the library's schedule (:class:`~simcalib.experiment.schedule.Schedule`, the one
``simcalib benchmark`` drives too): the missing rows read from the results themselves (the ledger), each unit
released when what it needs has returned, training units bounded per worker or per device. This module turns its
units into task submissions, reports each finished task back, logs, and tracks each finished benchmark in MLflow. A
study killed at any moment and started again computes only what is missing. Prefect persists no task result: the
tasks are plain functions underneath (``pretrain.fn(unit)``) and can be tested without Prefect.

The flow holds the study's output folder and each benchmark folder with work left for its whole run
(:func:`simcalib.store.integrity.results_lock`): a second study (or a ``simcalib benchmark``) on the same folder
fails with a line naming the holder. Rows there computed on another split or graph definition are refused before
any work; rows of calibrators the study does not run are kept; ``splits.json`` is never rewritten with another
source. ``$SIMCALIB_FAULT_KILL_AFTER=N`` kills the flow's process after its N-th finished task with rows (for
fault-injection tests).
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pandas as pd
from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.context import FlowRunContext

from simcalib.errors import SimCalibError
from simcalib.experiment.ledger import run_label
from simcalib.experiment.plan import BenchmarkPlan, StudyPlan, plan_study
from simcalib.experiment.protocol import Run
from simcalib.experiment.schedule import (
    BACKBONE,
    CALIBRATE,
    RUN,
    DeviceLayout,
    Schedule,
    Unit,
    compute_unit,
    device_layout,
    plan_kind,
)
from simcalib.experiment.splits import check_split_sources
from simcalib.experiment.study import TaskRunnerSpec, load_study
from simcalib.store.integrity import results_lock
from simcalib.store.results_store import check_results_file, read_results, summarize

from .runners import broken_pool_stop, make_task_runner, shared_api_server, sigint_recorded

PAPER_DIR_ENV = "SIMCALIB_PAPER_DIR"

# torch's random state is process-global: seeded computations in one process run one at a time, so a
# threaded runner gives the same numbers as a serial one (parallelism comes from processes / Dask workers).
_COMPUTE_LOCK = threading.Lock()


class StudyIncompleteError(SimCalibError):
    """Some tasks failed; the others' rows are in the results files."""


# ---------------------------------------------------------------------------------------------------------
# Tasks
#
# A plain function first, wrapped as tasks below: a worker process (Dask, processes) unpickles a task's
# function by its module path, which must name the function itself and not the Task wrapping it.


def compute(unit: Unit, torch_threads: int | None = None) -> dict:
    """One unit of the schedule (:func:`~simcalib.experiment.schedule.compute_unit`): its rows and backbone
    statistics, computed under this process's lock (torch's random state is process-global)."""
    with _COMPUTE_LOCK:
        return compute_unit(unit, torch_threads)


def write_summary(dataset: str, backbone: str, out_dir: str) -> dict:
    """Write one benchmark's ``summary.csv`` from its ``results.csv`` (every calibrator there)."""
    out = Path(out_dir)
    results = out / "results.csv"
    frame = read_results(results)
    summarize(frame).to_csv(out / "summary.csv", index=False, float_format="%.10g")
    return {"dataset": dataset, "backbone": backbone, "results": str(results), "summary": str(out / "summary.csv"),
            "rows": len(frame)}


def _ece_text(row: dict) -> str:
    """A row's ECE for its log line: the test nodes' (protocol, conformal), or the ID and OOD test nodes' (shift)."""
    if "ece" in row:
        return f"ECE {row['ece']:6.2f}%"
    return f"ECE ID {row['id_ece']:6.2f}% OOD {row['ood_ece']:6.2f}%"


# No Prefect result persistence: a finished backbone is its disk-cache entry, a finished calibration its row.
_TASK = {"task_run_name": "{unit.name}", "cache_policy": NO_CACHE, "persist_result": False}
pretrain = task(compute, name="pretrain", **_TASK)
calibrate = task(compute, name="calibrate", **_TASK)
run_unit = task(compute, name="run", **_TASK)


def task_of(unit: Unit):
    """The task that computes ``unit`` (looked up when called, so a test can stand in for it)."""
    return {BACKBONE: pretrain, CALIBRATE: calibrate, RUN: run_unit}[unit.kind]


# ---------------------------------------------------------------------------------------------------------
# Flows


def study_layout(study: StudyPlan) -> DeviceLayout:
    """Units and devices of ``study`` (:func:`~simcalib.experiment.schedule.device_layout`)."""
    execution = study.execution
    return device_layout(study.device, execution.granularity, execution.runs_per_device, execution.workers or 1,
                         kinds=[plan_kind(b) for b in study.benchmarks])


def _runner_spec(execution, layout: DeviceLayout | None = None) -> TaskRunnerSpec:
    """The task runner's spec: with devices, as many workers as runs in flight on them."""
    workers = max(execution.workers, layout.slots) if layout is not None and layout.devices else execution.workers
    return TaskRunnerSpec(kind=execution.runner, workers=workers, address=execution.address,
                          torch_threads=execution.torch_threads)


@flow(name="study", log_prints=True)
def study_flow(study_file: str = "study/quick.yaml", overrides: dict | None = None, plan: dict | None = None,
               wait: bool = False) -> dict:
    """Run the study described by ``study_file`` (``overrides``: nested keys that win over the file).
    ``plan``: the study already resolved (:meth:`~simcalib.experiment.plan.StudyPlan.to_json`, as ``simcalib study run``
    passes it); else the file is resolved here, once, before the task runner (a Dask cluster, processes) starts.
    ``wait``: where another process writes to the output folder, wait for it to finish instead of failing."""
    study_plan = StudyPlan.from_json(plan) if plan is not None else plan_study(load_study(study_file, overrides))
    execution = study_plan.execution
    spec = _runner_spec(execution, study_layout(study_plan))
    with results_lock(study_plan.output, command=f"simcalib study run {study_file}", wait=wait, notify=print), \
            shared_api_server(spec):
        splits = []
        for benchmark in study_plan.benchmarks:
            splits.append(f"{benchmark.name}: {benchmark.describe_splits()}")
            print(f"splits: {splits[-1]}")
            # results already there must be of these runs' definitions: refuse now, not after computing
            # (a changed calibrator definition is not refused: the ledger computes its rows again)
            check_results_file(benchmark.out_dir / "results.csv", benchmark.planned_runs())
            check_split_sources(benchmark.out_dir, benchmark.split_sources)
        subflow = run_study.with_options(task_runner=make_task_runner(spec), name="run-study",
                                         flow_run_name=f"{study_plan.name}-{execution.runner}")
        return {**subflow(plan if plan is not None else study_plan.to_json(), wait), "splits": splits}


@flow(name="run-study", log_prints=True)
def run_study(plan: dict, wait: bool = False) -> dict:
    """The fan-out of a resolved study (:meth:`~simcalib.experiment.plan.StudyPlan.to_json`, recorded as this flow
    run's parameter) on the task runner this flow was given; ``wait`` as :func:`study_flow`'s."""
    logger = get_run_logger()
    study = StudyPlan.from_json(plan)
    execution = study.execution
    layout = study_layout(study)
    with contextlib.ExitStack() as locks:
        def hold(benchmark: BenchmarkPlan) -> None:
            locks.enter_context(results_lock(benchmark.out_dir, command=f"simcalib study run {study.source}",
                                             wait=wait, notify=print))

        schedule = Schedule(study.benchmarks, layout, execution.batch_calibrators, execution.models_per_batch,
                            execution.save_predictions, hold)
        for benchmark in study.benchmarks:
            ledger = schedule.ledgers[benchmark.name]
            if benchmark.name in schedule.superseded:
                logger.info("%s: %d rows under another definition of a planned calibrator removed from %s: computed "
                            "again", benchmark.name, schedule.superseded[benchmark.name], ledger.results)
            if ledger.calibrations_done and not ledger.complete:
                logger.info("%s: %d of %d rows in %s; %d runs with work left", benchmark.name, ledger.calibrations_done,
                            ledger.calibrations, ledger.results, len(ledger.runs_left()))
        logger.info("study %s: %d benchmarks, runs: %s, %d calibrators (%d benchmarks complete before) -> %d tasks "
                    "on %s (%d workers; %s); output %s", study.name, len(study.benchmarks), study.describe_runs(),
                    len({c for p in study.benchmarks for c in p.calibrator_names}), len(schedule.complete),
                    schedule.units_planned, execution.runner, _runner_spec(execution, layout).workers, layout.line(),
                    study.output)
        driver = _Driver(study, schedule, _tracker(study, logger), logger)
        try:
            with sigint_recorded():
                driver.run()
        except BrokenProcessPool:  # a worker process ended: the Ctrl-C stop, or a lost worker in one line
            raise broken_pool_stop(FlowRunContext.get().task_runner, study.output) from None
    tasks = driver.tasks
    result = {
        "study": study.name, "study_file": study.source, "output": str(study.output),
        "tracking_uri": execution.tracking_uri, "experiment": execution.experiment,
        "experiment_id": driver.tracker.experiment_id, "tasks": tasks, "granularity": layout.granularity,
        "rows_found": schedule.rows_found, "benchmarks": driver.benchmarks,
        "complete_before": sorted(p.name for p in schedule.complete), "report": None,
    }
    failures = driver.failures + schedule.refused
    if failures:
        raise StudyIncompleteError(
            f"{len(failures)} task(s) failed ({'; '.join(failures[:5])}{' ...' if len(failures) > 5 else ''}); "
            f"the rows of the others are in {study.output}: fix the cause and run the same command again to "
            "compute only what is missing")
    if execution.report:
        result["report"] = _report(study, logger)
    logger.info("study %s finished: %s", study.name, "; ".join(f"{k} {v}" for k, v in tasks.items()))
    return result


class _Completions:
    """Futures in the order they finish, watched as they are submitted (``prefect.futures.as_completed`` takes a
    fixed set; the schedule releases a run's calibrations only once its backbone is trained)."""

    def __init__(self):
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        self.pending = 0

    def watch(self, future) -> None:
        self.pending += 1
        future.add_done_callback(self._done.put)

    def __iter__(self):
        while self.pending:
            future = self._done.get()
            self.pending -= 1
            yield future


def _outcome(future) -> tuple[bool, object]:
    """(True, the task's result) or (False, why it failed) of a finished future."""
    future.wait()  # records the final state on the future (else `state` asks the API, which may lag)
    state = future.state
    if state.is_completed():
        return True, future.result()
    reason = state.message or state.name
    if not state.is_final():  # the runner lost the task (a Dask worker died): its error says why
        wrapped = getattr(future, "wrapped_future", None)
        error = wrapped.exception() if wrapped is not None else None
        reason = f"{type(error).__name__}: {error}" if error else f"never finished (last state {state.name})"
    return False, reason


class _Driver:
    """Hands the schedule's units to the task runner as they are released and each finished task back to the
    schedule; logs its rows and failures, and tracks each benchmark once the schedule says it is finished."""

    def __init__(self, study: StudyPlan, schedule: Schedule, tracker, logger):
        self.study, self.schedule, self.tracker, self.logger = study, schedule, tracker, logger
        self.threads = study.execution.torch_threads
        self.futures: dict = {}  # future -> unit
        self.completions = _Completions()
        self.tasks = {"pretrain": {"computed": 0, "failed": 0}, "calibrate": {"computed": 0, "failed": 0}}
        if schedule.layout.granularity == RUN:
            self.tasks["run"] = {"computed": 0, "failed": 0}
        self.failures: list[str] = []
        self.backbone_stats: dict[str, list[dict]] = {}
        self.benchmarks: list[dict] = []

    def run(self) -> None:
        """Track the benchmarks complete before, then submit and handle each task as it finishes until none is left."""
        self.start()
        for future in self.completions:
            self.handle(future)

    def start(self) -> None:
        for plan in self.schedule.complete:
            self.logger.info("%s: complete in %s (every planned row there): no task submitted", plan.name,
                             plan.out_dir / "results.csv")
            written = {"dataset": plan.dataset, "backbone": plan.backbone,
                       "results": str(plan.out_dir / "results.csv"), "summary": str(plan.out_dir / "summary.csv")}
            if not Path(written["summary"]).is_file():
                written = write_summary(plan.dataset, plan.backbone, str(plan.out_dir))
            self.benchmarks.append(_log_benchmark(self.study, plan, written, [], self.tracker, self.logger))
        self.submit()

    def submit(self) -> None:
        for unit in self.schedule.submit():
            future = task_of(unit).submit(unit, self.threads)
            self.futures[future] = unit
            self.completions.watch(future)

    def handle(self, future) -> None:
        """A finished task: reported to the schedule, its rows and failures logged, then what it unblocks submitted."""
        unit = self.futures.pop(future)
        ok, value = _outcome(future)
        schedule = self.schedule
        outcome = schedule.finished(unit, value) if ok else schedule.failed(unit, value)
        tally = self.tasks["pretrain" if unit.kind == BACKBONE else "calibrate" if unit.kind == CALIBRATE else "run"]
        if ok:
            tally["computed"] += len(outcome.backbones) if unit.kind == BACKBONE else 1
        else:
            tally["failed"] += len(unit.runs) if unit.kind == BACKBONE else 1
        self.backbone_stats.setdefault(unit.plan.name, []).extend(outcome.backbones)
        plan = unit.plan
        for row in outcome.rows:
            self.logger.info("[%d/%d] %s %s %-10s %s", schedule.returned, schedule.calibrations, plan.name,
                             run_label(Run(plan.dataset, plan.backbone, row["split"], row["init"], row["fold"])),
                             row["calibrator"], _ece_text(row))
        for line in outcome.refused:
            self.logger.error("[%d/%d] %s", schedule.returned, schedule.calibrations, line)
        for line in outcome.failures:
            self.logger.error("[%d/%d] %s", schedule.returned, schedule.calibrations, line)
        self.failures += outcome.failures
        for finished in outcome.finished:
            self.finish(finished)
        self.submit()

    def finish(self, plan: BenchmarkPlan) -> None:
        """Every unit of the benchmark returned (its rows in the plan's order): summary.csv, then MLflow."""
        written = write_summary(plan.dataset, plan.backbone, str(plan.out_dir))
        self.benchmarks.append(_log_benchmark(self.study, plan, written, self.backbone_stats.get(plan.name, []),
                                              self.tracker, self.logger))


def _tracker(study: StudyPlan, logger):
    from .tracking import StudyTracker

    tracker = StudyTracker(study.execution.tracking_uri, study.execution.experiment)
    logger.info("MLflow: experiment %r at %s", study.execution.experiment, study.execution.tracking_uri)
    return tracker


def _log_benchmark(study: StudyPlan, plan: BenchmarkPlan, written: dict, backbone_stats: list[dict], tracker,
                   logger) -> dict:
    """Log one benchmark's ``results.csv`` and ``summary.csv`` (``written``) to MLflow (idempotent)."""
    from .tracking import BenchmarkRecord, calibrator_hyperparameters, git_commit, package_versions

    results = pd.read_csv(written["results"])
    summary = pd.read_csv(written["summary"])
    settings = plan.settings
    params = {
        "study": study.name, "study_file": study.source, "study_seed": study.seed,
        **plan.run_indices,  # the benchmark's own (runs.per_dataset) or the study's
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
        from .report import report_flow
    except ModuleNotFoundError as exc:
        if exc.name != f"{__package__}.report":
            raise
        logger.info("no flows/report.py: skipping the report")
        return None
    return report_flow(results_dir=str(study.output), out_dir=str(study.output / "report"),
                       paper_dir=os.environ.get(PAPER_DIR_ENV), title=f"SimCalib study {study.name!r}",
                       tracking_uri=study.execution.tracking_uri, experiment=study.execution.experiment)


__all__ = [
    "StudyIncompleteError", "calibrate", "compute", "pretrain", "run_study", "run_unit", "study_flow", "study_layout",
    "task_of", "write_summary",
]
