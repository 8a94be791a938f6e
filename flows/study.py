"""The study flow: a study file's benchmarks fanned out as Prefect tasks, tracked in MLflow, then reported.

Shape of one study (``simcalib study run study/quick.yaml``, or a deployment in ``prefect.yaml``)::

    study (validate the file, resolve tuned options, check every dataset loads: fails before any work)
      run-study (subflow on the study's task runner: threads, processes or Dask)
        pretrain         per run with work left   train the run's backbone (or find it in the disk cache)
        calibrate        per run x calibrator     fit, evaluate on the test nodes -> one results row
        calibrate-runs   per split x calibrator   with runs.batch_calibrators, for TS, VS, ETS, CaGCN, GATS:
                                                  fitted on the split's runs together -> one row per run
        (flow process)   per finished task        its rows appended to <output>/<Dataset>_<Backbone>/results.csv
        (flow process)   per benchmark            summary.csv, then a parent MLflow run + one per calibrator
      report             flows.report.report_flow when that module exists

What is finished is read from the results themselves (:mod:`simcalib.experiment.ledger`): a row of the plan's
run, calibrator and calibrator digest is a finished calibration, a backbone in the disk cache a finished
backbone. Only the missing rows are submitted; a benchmark with none is not submitted at all; each finished
task's rows are appended to ``results.csv`` at once, so a study killed at any moment and started again computes
only what is missing. The ledger keeps the one rule (a run's rows share one backbone) and drops the rows of a
planned calibrator under another definition (its options or declared version changed) before its rows are
computed again. A task is submitted only when it can start (:class:`_Scheduler`): backbones one per worker at a
time, a run's calibrations once its backbone is trained. Prefect persists no task result: the tasks are plain
functions underneath (``pretrain.fn(...)``) and can be tested without Prefect.

The flow holds the study's output folder and each benchmark folder with work left for its whole run
(:func:`simcalib.store.integrity.results_lock`): a second study (or a ``simcalib benchmark``) on the same folder
fails with a line naming the holder. Rows there computed on another split or graph definition are refused before
any work; rows of calibrators the study does not run are kept; ``splits.json`` is never rewritten with another
source. ``$SIMCALIB_FAULT_KILL_AFTER=N`` kills the flow's process after its N-th finished calibrate task (for
fault-injection tests).
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from simcalib.errors import SimCalibError
from simcalib.experiment.ledger import BenchmarkLedger, drop_superseded, order_rows, read_ledger, run_label
from simcalib.experiment.plan import BenchmarkPlan, StudyPlan, plan_study
from simcalib.experiment.protocol import (
    ProtocolSettings,
    Run,
    evaluate_calibrator,
    fit_calibrator_across_runs,
    fits_across_runs,
    prepare_run,
    train_run_backbone,
    train_split_backbones,
)
from simcalib.experiment.splits import check_split_sources, record_split_sources
from simcalib.experiment.study import TaskRunnerSpec, load_study
from simcalib.store.integrity import finished_run, results_lock
from simcalib.store.results_store import append_rows, check_results_file, read_results, summarize

from .runners import make_task_runner, shared_api_server

PAPER_DIR_ENV = "SIMCALIB_PAPER_DIR"

# torch's random state is process-global: seeded computations in one process run one at a time, so a
# threaded runner gives the same numbers as a serial one (parallelism comes from processes / Dask workers).
_COMPUTE_LOCK = threading.Lock()


class StudyIncompleteError(SimCalibError):
    """Some tasks failed; the others' rows are in the results files."""


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
        contexts = [prepare_run(run, settings) for run in runs]  # each run prepared once
        outputs = [context.output for context in contexts]
        fitted = fit_calibrator_across_runs(runs, settings, calibrator, options, outputs, contexts)
        return [evaluate_calibrator(run, settings, calibrator, options, context.output, predictions_dir, model, context)
                for run, context, model in zip(runs, contexts, fitted)]


def write_summary(dataset: str, backbone: str, out_dir: str) -> dict:
    """Write one benchmark's ``summary.csv`` from its ``results.csv`` (every calibrator there)."""
    out = Path(out_dir)
    results = out / "results.csv"
    frame = read_results(results)
    summarize(frame).to_csv(out / "summary.csv", index=False, float_format="%.10g")
    return {"dataset": dataset, "backbone": backbone, "results": str(results), "summary": str(out / "summary.csv"),
            "rows": len(frame)}


def fitted_together(study: StudyPlan, plan: BenchmarkPlan) -> set[str]:
    """The calibrators of ``plan`` fitted on a split's runs together (``runs.batch_calibrators``)."""
    return {c for c in plan.calibrator_names if study.execution.batch_calibrators and fits_across_runs(c)}


_RUN = "{run.dataset}-{run.backbone}-s{run.split}-i{run.init}-f{run.fold}"
# No Prefect result persistence: a finished backbone is its disk-cache entry, a finished calibration its row.
pretrain = task(pretrain_backbone, name="pretrain", task_run_name=f"pretrain-{_RUN}", cache_policy=NO_CACHE,
                persist_result=False)
pretrain_batch = task(pretrain_split, name="pretrain-split", cache_policy=NO_CACHE, persist_result=False)
calibrate = task(calibrate_and_evaluate, name="calibrate", task_run_name=f"calibrate-{{calibrator}}-{_RUN}",
                 cache_policy=NO_CACHE, persist_result=False)
calibrate_runs = task(calibrate_and_evaluate_across_runs, name="calibrate-runs", cache_policy=NO_CACHE,
                      persist_result=False)


# ---------------------------------------------------------------------------------------------------------
# Flows


@dataclass
class _Tally:
    computed: int = 0
    failed: list[str] = field(default_factory=list)

    def add(self, future, what: str) -> bool:
        future.wait()  # records the final state on the future (else `state` asks the API, which may lag)
        state = future.state
        if state.is_completed():
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
        return {"computed": self.computed, "failed": len(self.failed)}


def _runner_spec(execution) -> TaskRunnerSpec:
    return TaskRunnerSpec(kind=execution.runner, workers=execution.workers, address=execution.address,
                          torch_threads=execution.torch_threads)


@flow(name="study", log_prints=True)
def study_flow(study_file: str = "study/quick.yaml", overrides: dict | None = None, plan: dict | None = None) -> dict:
    """Run the study described by ``study_file`` (``overrides``: nested keys that win over the file).
    ``plan``: the study already resolved (:meth:`~simcalib.experiment.plan.StudyPlan.to_json`, as ``simcalib study run``
    passes it); else the file is resolved here, once, before the task runner (a Dask cluster, processes) starts."""
    study_plan = StudyPlan.from_json(plan) if plan is not None else plan_study(load_study(study_file, overrides))
    study_plan.check_flow_runs_it()
    execution = study_plan.execution
    with results_lock(study_plan.output, command=f"simcalib study run {study_file}", notify=print), \
            shared_api_server(_runner_spec(execution)):
        splits = []
        for benchmark in study_plan.benchmarks:
            splits.append(f"{benchmark.name}: {benchmark.describe_splits()}")
            print(f"splits: {splits[-1]}")
            # results already there must be of these runs' definitions: refuse now, not after computing
            # (a changed calibrator definition is not refused: the ledger computes its rows again)
            check_results_file(benchmark.out_dir / "results.csv", benchmark.planned_runs())
            check_split_sources(benchmark.out_dir, benchmark.split_sources)
        subflow = run_study.with_options(task_runner=make_task_runner(_runner_spec(execution)), name="run-study",
                                         flow_run_name=f"{study_plan.name}-{execution.runner}")
        return {**subflow(study_plan.to_json()), "splits": splits}


@flow(name="run-study", log_prints=True)
def run_study(plan: dict) -> dict:
    """The fan-out of a resolved study (:meth:`~simcalib.experiment.plan.StudyPlan.to_json`, recorded as this flow
    run's parameter) on the task runner this flow was given."""
    logger = get_run_logger()
    study = StudyPlan.from_json(plan)
    execution = study.execution
    plans = study.benchmarks
    with contextlib.ExitStack() as locks:
        scheduler = _Scheduler(study, logger, locks)
        for plan in plans:
            scheduler.plan_benchmark(plan)
        logger.info("study %s: %d benchmarks x %d runs, %d calibrators (%d benchmarks complete before) -> %d tasks "
                    "on %s (%d workers); output %s", study.name, len(plans), study.runs_per_benchmark,
                    len({c for p in plans for c in p.calibrator_names}), len(scheduler.complete),
                    scheduler.task_count(), execution.runner, execution.workers, study.output)
        scheduler.run(_tracker(study, logger))
    pre_tally, cal_tally = scheduler.pre_tally, scheduler.cal_tally
    result = {
        "study": study.name, "study_file": study.source, "output": str(study.output),
        "tracking_uri": execution.tracking_uri, "experiment": execution.experiment,
        "experiment_id": scheduler.tracker.experiment_id,
        "tasks": {"pretrain": pre_tally.as_dict(), "calibrate": cal_tally.as_dict()},
        "rows_found": scheduler.rows_found, "benchmarks": scheduler.benchmarks,
        "complete_before": sorted(scheduler.complete), "report": None,
    }
    failures = pre_tally.failed + cal_tally.failed + [line for ledger in scheduler.ledgers.values()
                                                      for line in ledger.refused]
    if failures:
        raise StudyIncompleteError(
            f"{len(failures)} task(s) failed ({'; '.join(failures[:5])}{' ...' if len(failures) > 5 else ''}); "
            f"the rows of the others are in {study.output}: fix the cause and run the same command again to "
            "compute only what is missing")
    if execution.report:
        result["report"] = _report(study, logger)
    logger.info("study %s finished: pretrain %s, calibrate %s", study.name, pre_tally.as_dict(), cal_tally.as_dict())
    return result


class _Completions:
    """Futures in the order they finish, watched as they are submitted (``prefect.futures.as_completed`` takes a
    fixed set; the scheduler submits a run's calibrations only once its backbone is trained)."""

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


@dataclass
class _Job:
    """One backbone training: a run, or (``runs.batch_runs``) a split's runs trained as one batched model."""

    plan: BenchmarkPlan
    runs: list[Run]
    untrained: int = 0  # of runs, backbones not trained yet


class _Scheduler:
    """Submits the missing work of a study so that every worker stays busy and a run's calibrations follow its
    backbone.

    A task submitted with ``wait_for`` holds one of the task runner's resolver threads (as many as it has workers)
    until its dependencies finish; submitting every task at once would leave workers idle while a backbone
    trains. So a task is submitted only when it can run: backbones one training job per worker at a time
    (in the study's order), a run's calibrations when its backbone is trained, a split's calibrators fitted
    on its runs together when all of them are. What to submit is what the ledger finds missing
    (:func:`~simcalib.experiment.ledger.read_ledger`); each finished task's rows are appended to the benchmark's
    ``results.csv`` by this (the flow's) process as they arrive."""

    def __init__(self, study: StudyPlan, logger, locks: contextlib.ExitStack):
        self.study, self.logger, self.locks = study, logger, locks
        self.threads = study.execution.torch_threads
        self.limit = max(1, study.execution.workers or 1)  # training jobs in flight
        self.ledgers: dict[str, BenchmarkLedger] = {}
        self.complete: set[str] = set()  # benchmarks complete before this run
        self.backbone_stats: dict[str, list[dict]] = {}
        self.remaining: dict[str, int] = {}  # benchmark -> (run, calibrator) calibrations not yet returned
        self.rows_found = 0  # planned rows already in the results files
        self.left: dict[tuple[str, Run], list[str]] = {}  # (benchmark, run) -> calibrators fitted on it alone
        self.left_together: dict[tuple[str, int], dict[str, list[Run]]] = {}  # (benchmark, split) -> calibrator -> runs
        self.split_untrained: dict[tuple[str, int], int] = {}
        self.split_failed: set[tuple[str, int]] = set()
        self.jobs: deque[_Job] = deque()
        self.in_flight = 0
        self.futures: dict = {}  # future -> ("batch", job) | ("pretrain", job, run) | ("calibrate", plan, runs, name)
        self.completions = _Completions()
        self.pre_tally, self.cal_tally = _Tally(), _Tally()
        self.calibrations = 0  # calibrate tasks to submit (for the progress lines)
        self.done = 0
        self.benchmarks: list[dict] = []
        self.tracker = None

    # --- planning ----------------------------------------------------------------------------------------
    def plan_benchmark(self, plan: BenchmarkPlan) -> None:
        name = plan.name
        ledger = self.ledgers[name] = read_ledger(plan)
        self.rows_found += ledger.calibrations_done
        if ledger.complete:
            self.complete.add(name)
            return
        self.locks.enter_context(results_lock(plan.out_dir, command=f"simcalib study run {self.study.source}"))
        if ledger.superseded:
            removed = drop_superseded(ledger)
            self.logger.info("%s: %d rows under another definition of a planned calibrator removed from %s: computed "
                             "again", name, removed, ledger.results)
        record_split_sources(plan.out_dir, plan.split_sources)
        together = fitted_together(self.study, plan)
        self.backbone_stats[name] = []
        to_train = ledger.runs_left()
        self.remaining[name] = sum(len(ledger.todo(run)) for run in to_train)
        for run in to_train:
            todo = ledger.todo(run)
            self.left[(name, run)] = [c for c in todo if c not in together]
            by_calibrator = self.left_together.setdefault((name, run.split), {})
            for c in todo:
                if c in together:
                    by_calibrator.setdefault(c, []).append(run)
            self.split_untrained[(name, run.split)] = self.split_untrained.get((name, run.split), 0) + 1
            self.calibrations += len(self.left[(name, run)])
        self.calibrations += sum(len(v) for (b, _), v in self.left_together.items() if b == name)
        if plan.settings.batch_runs:
            by_split: dict[int, list[Run]] = {}
            for run in to_train:
                by_split.setdefault(run.split, []).append(run)
            self.jobs.extend(_Job(plan, runs) for runs in by_split.values())
        else:
            self.jobs.extend(_Job(plan, [run]) for run in to_train)
        if ledger.calibrations_done:
            self.logger.info("%s: %d of %d rows in %s; %d runs with work left", name, ledger.calibrations_done,
                             ledger.calibrations, ledger.results, len(to_train))

    def task_count(self) -> int:
        return sum(len(job.runs) for job in self.jobs) + self.calibrations

    # --- running -----------------------------------------------------------------------------------------
    def run(self, tracker) -> None:
        """Submit, then handle each task as it finishes until none is left."""
        self.start(tracker)
        for future in self.completions:
            self.handle(future)

    def start(self, tracker) -> None:
        """Log the benchmarks complete before, submit the first jobs."""
        self.tracker = tracker
        for plan in self.study.benchmarks:
            if plan.name in self.complete:
                self.logger.info("%s: complete in %s (every planned row there): no task submitted", plan.name,
                                 plan.out_dir / "results.csv")
                written = {"dataset": plan.dataset, "backbone": plan.backbone,
                           "results": str(plan.out_dir / "results.csv"), "summary": str(plan.out_dir / "summary.csv")}
                if not Path(written["summary"]).is_file():
                    written = write_summary(plan.dataset, plan.backbone, str(plan.out_dir))
                self.benchmarks.append(_log_benchmark(self.study, plan, written, [], tracker, self.logger))
        self._start_jobs()

    def handle(self, future) -> None:
        """A finished task: record it, then submit what it unblocks."""
        entry = self.futures.pop(future)
        if entry[0] == "batch":
            self._batch_done(future, entry[1])
        elif entry[0] == "pretrain":
            self._pretrain_done(future, *entry[1:])
        else:
            self._calibrate_done(future, *entry[1:])

    def _submit(self, future, entry: tuple) -> None:
        self.futures[future] = entry
        self.completions.watch(future)

    def _start_jobs(self) -> None:
        while self.jobs and self.in_flight < self.limit:
            job = self.jobs.popleft()
            job.untrained = len(job.runs)
            self.in_flight += 1
            if job.plan.settings.batch_runs:
                self._submit(pretrain_batch.with_options(
                    task_run_name=f"pretrain-split-{job.plan.name}-s{job.runs[0].split}").submit(
                        job.runs, job.plan.settings, self.threads, self.study.execution.models_per_batch), ("batch", job))
            else:
                run = job.runs[0]
                self._submit(pretrain.submit(run, job.plan.settings, self.threads), ("pretrain", job, run))

    def _batch_done(self, future, job: _Job) -> None:
        # the per-run pretrain tasks load the batch's models from the backbone cache (or train a run the batch
        # could not: a failed batch fails its runs there)
        for run in job.runs:
            self._submit(pretrain.submit(run, job.plan.settings, self.threads, wait_for=[future]),
                         ("pretrain", job, run))

    def _pretrain_done(self, future, job: _Job, run: Run) -> None:
        plan = job.plan
        if self.pre_tally.add(future, f"pretrain {run.tag()}"):
            self.backbone_stats[plan.name].append(future.result())
            self._submit_calibrations(plan, run, self.left[(plan.name, run)], wait_for=[future])
        else:
            self.split_failed.add((plan.name, run.split))
            for name in self.left[(plan.name, run)]:
                self._not_run(plan, [run], name, f"its backbone (pretrain {run.tag()}) failed")
        split = (plan.name, run.split)
        self.split_untrained[split] -= 1
        if self.split_untrained[split] == 0:
            if split in self.split_failed:
                for name, runs in self.left_together.get(split, {}).items():
                    self._not_run(plan, runs, name, f"a backbone of split {run.split} failed")
            else:
                self._submit_together(plan, self.left_together.get(split, {}))
        job.untrained -= 1
        if job.untrained == 0:
            self.in_flight -= 1
            self._start_jobs()

    def _predictions(self, plan: BenchmarkPlan) -> str | None:
        return (str((plan.out_dir / "predictions").resolve())  # absolute: workers have their own cwd
                if self.study.execution.save_predictions else None)

    def _submit_calibrations(self, plan: BenchmarkPlan, run: Run, calibrators: list[str],
                             wait_for: list | None = None) -> None:
        """Submit ``calibrators`` of ``run``, each fitted on the run alone."""
        for name in calibrators:
            self._submit(calibrate.submit(run, plan.settings, name, plan.calibrator_options[name],
                                          self._predictions(plan), self.threads, wait_for=wait_for),
                         ("calibrate", plan, [run], name))

    def _submit_together(self, plan: BenchmarkPlan, calibrations: dict[str, list[Run]]) -> None:
        """Submit ``calibrations`` (calibrator -> the split's runs missing its row), each fitted on them together."""
        for name, runs in calibrations.items():
            self._submit(calibrate_runs.with_options(task_run_name=f"calibrate-runs-{name}-{plan.name}-s{runs[0].split}")
                         .submit(runs, plan.settings, name, plan.calibrator_options[name], self._predictions(plan),
                                 self.threads),
                         ("calibrate", plan, runs, name))

    def _calibrate_done(self, future, plan: BenchmarkPlan, runs: list[Run], name: str) -> None:
        self.done += 1
        what = f"calibrate {runs[0].tag()}{f' and {len(runs) - 1} more runs' if len(runs) > 1 else ''} {name}"
        if self.cal_tally.add(future, what):
            result = future.result()
            rows = result if isinstance(result, list) else [result]
            ledger = self.ledgers[plan.name]
            refused = len(ledger.refused)
            kept = ledger.accept(rows)
            append_rows(ledger.results, kept)  # the flow's process alone writes results.csv
            finished_run()  # the fault hook ($SIMCALIB_FAULT_KILL_AFTER)
            for row in kept:
                self.logger.info("[%d/%d] %s %s %-10s ECE %6.2f%%", self.done, self.calibrations, plan.name,
                                 run_label(Run(plan.dataset, plan.backbone, row["split"], row["init"], row["fold"])),
                                 name, row["ece"])
            for line in ledger.refused[refused:]:
                self.logger.error("[%d/%d] %s", self.done, self.calibrations, line)
        else:
            self.logger.error("[%d/%d] %s", self.done, self.calibrations, self.cal_tally.failed[-1])
        self._count(plan, len(runs))

    def _not_run(self, plan: BenchmarkPlan, runs: list[Run], name: str, reason: str) -> None:
        self.done += 1
        self.cal_tally.failed.append(f"calibrate {runs[0].tag()} {name}: not run, {reason}")
        self.logger.error("[%d/%d] %s", self.done, self.calibrations, self.cal_tally.failed[-1])
        self._count(plan, len(runs))

    def _count(self, plan: BenchmarkPlan, n_rows: int) -> None:
        self.remaining[plan.name] -= n_rows
        if self.remaining[plan.name] == 0:
            self._finish(plan)

    def _finish(self, plan: BenchmarkPlan) -> None:
        """Every task of the benchmark returned: its rows in the plan's order, summary.csv, then MLflow."""
        order_rows(plan)
        written = write_summary(plan.dataset, plan.backbone, str(plan.out_dir))
        self.benchmarks.append(_log_benchmark(self.study, plan, written, self.backbone_stats[plan.name],
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
    "StudyIncompleteError", "calibrate", "calibrate_runs", "pretrain", "run_study", "study_flow", "write_summary",
]
