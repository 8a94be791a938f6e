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

A task is submitted only when it can start (:class:`_Scheduler`): backbones one per worker at a time, a run's
calibrations once its backbone is trained. ``pretrain`` and ``calibrate`` persist their results under a key of
everything their numbers depend on (:mod:`flows.caching`), in ``<output>/task-results``: a study killed at any
moment and started again reuses every finished task and ends with the same numbers. Each finished task's result
is also appended to the benchmark's ``finished-tasks.jsonl`` (:class:`FinishedTasks`), small enough to keep with
the rows, so a study resumes on a machine without the task cache or the backbones; a run's rows share one
backbone, so recorded rows whose ``backbone_digest`` is not this machine's (the same seed trains other weights
on another CPU model) are computed again with the run's fits left. A benchmark already
complete is not even submitted: ``aggregate`` writes ``completion.json`` beside its ``results.csv`` (the
benchmark's key over all its task keys, the file's SHA-256, the backbone statistics), and a later run whose
plan gives the same key takes the rows from the file (replaying thousands of cached tasks costs about 0.4 s
each). The tasks are plain functions underneath (``pretrain.fn(...)``) and can be tested without Prefect.

The flow holds the study's output folder for its whole run, and each benchmark folder while writing it
(:func:`simcalib.store.integrity.results_lock`): a second study (or a ``simcalib benchmark``) on the same folder
fails with a line naming the holder. ``aggregate`` refuses to replace a ``results.csv`` whose rows were
computed on another split or graph definition, keeps the rows there of calibrators the study does not run (a
sweep by another command), and ``splits.json`` is never rewritten with another source.
It prints at start where each benchmark's splits come from. ``$SIMCALIB_FAULT_KILL_AFTER=N`` kills the flow's
process after its N-th finished calibrate task (for fault-injection tests).
"""

from __future__ import annotations

import csv
import json
import os
import queue
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

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

from .caching import (
    benchmark_key,
    calibrate_across_runs_cache_key_fn,
    calibrate_across_runs_key,
    calibrate_cache_key_fn,
    calibrate_key,
    pretrain_cache_key_fn,
    pretrain_key,
)
from .runners import make_task_runner, shared_api_server

TASK_RESULTS = "task-results"  # under the study's output folder
COMPLETION = "completion.json"  # beside a benchmark's results.csv: what the finished file was computed from
FINISHED_TASKS = "finished-tasks.jsonl"  # beside it while the benchmark is incomplete: each finished task's result
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


def write_benchmark_results(dataset: str, backbone: str, rows: list[dict], out_dir: str,
                            calibrators: list[str] | None = None) -> dict:
    """Write one benchmark's ``results.csv`` (rows in the given order) and ``summary.csv``; refused when the
    file there holds the same runs on another split or data definition (:func:`check_benchmark_rows`).
    ``calibrators``: the ones these rows are of; rows of other calibrators already in the file (another
    command's, e.g. a sweep) are kept after them. None: the file holds ``rows`` only."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.csv"
    check_benchmark_rows(rows, results)
    kept: list[dict] = []
    if calibrators is not None and results.is_file():
        earlier = read_results(results)
        kept = earlier[~earlier["calibrator"].isin(calibrators)].to_dict("records")
    partial = out / "results.csv.part"  # written whole, then renamed: a kill never leaves half a file
    partial.unlink(missing_ok=True)
    append_rows(partial, [*rows, *kept])
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


def read_finished_tasks(out_dir: Path) -> dict[str, object]:
    """Task key -> result of every task recorded in ``out_dir/finished-tasks.jsonl`` (:class:`FinishedTasks`);
    a line cut off by a kill is not a record (its task runs again)."""
    path = out_dir / FINISHED_TASKS
    if not path.is_file():
        return {}
    finished: dict[str, object] = {}
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
            finished[record["key"]] = record["result"]
        except (ValueError, KeyError, TypeError):
            continue
    return finished


def fitted_together(study: StudyPlan, plan: BenchmarkPlan) -> set[str]:
    """The calibrators of ``plan`` fitted on a split's runs together (``runs.batch_calibrators``)."""
    return {c for c in plan.calibrator_names if study.execution.batch_calibrators and fits_across_runs(c)}


@dataclass(frozen=True)
class BenchmarkTaskKeys:
    """The task keys of one benchmark plan: what the flow looks up in the benchmark's records before submitting."""

    split_runs: dict[int, list[Run]]  # split -> its runs, in the plan's order
    together: dict[int, dict[str, str]]  # split -> calibrator fitted on the split's runs together -> key
    per_run: dict[Run, dict[str, str]]  # run -> calibrator fitted on that run alone -> key
    pretrain: dict[Run, str]  # run -> its backbone's key

    def all(self) -> set[str]:
        keys = set(self.pretrain.values())
        for by_calibrator in (*self.together.values(), *self.per_run.values()):
            keys.update(by_calibrator.values())
        return keys


def benchmark_task_keys(plan: BenchmarkPlan, together: set[str]) -> BenchmarkTaskKeys:
    """Every task key of ``plan``: calibrators in ``together`` are fitted per split on its runs together, the others
    per run; calibrators in the plan's order."""
    settings, options = plan.settings, plan.calibrator_options
    split_runs: dict[int, list[Run]] = {}
    for run in plan.runs:
        split_runs.setdefault(run.split, []).append(run)
    return BenchmarkTaskKeys(
        split_runs,
        {split: {c: calibrate_across_runs_key(runs, settings, c, o) for c, o in options.items() if c in together}
         for split, runs in split_runs.items()},
        {run: {c: calibrate_key(run, settings, c, o) for c, o in options.items() if c not in together}
         for run in plan.runs},
        {run: pretrain_key(run, settings) for run in plan.runs})


@dataclass(frozen=True)
class TaskCost:
    """Seconds the recorded tasks of a benchmark took (each task's own timer: CPU seconds at one torch thread per
    task) and what its unrecorded tasks take at the same rates: a backbone at the recorded backbones' mean, a
    calibration at the mean of the same calibrator's records."""

    backbone_seconds: float  # mean over the recorded backbones (0: none timed)
    fit_seconds_per_run: float  # sum over calibrators of each one's mean fit seconds per run
    remaining_hours: float  # task hours of the unrecorded backbones and calibrations
    unpriced: tuple[str, ...]  # calibrators with no timed record, left out of remaining_hours

    def line(self) -> str:
        text = (f"per run so far: backbone {self.backbone_seconds:.0f} s, fits {self.fit_seconds_per_run:.0f} s; "
                f"the rest at these rates: {self.remaining_hours:.1f} task-hours")
        if self.unpriced:
            text += f" (not counting {', '.join(self.unpriced)}: no timed record yet)"
        return text


def _as_rows(result) -> list[dict]:
    """A recorded result as rows (a row, or one row per run for a split fitted together)."""
    return [row for row in (result if isinstance(result, list) else [result]) if isinstance(row, dict)]


def _seconds(result, field: str) -> list[float]:
    """``field`` of a recorded result."""
    return [float(row[field]) for row in _as_rows(result) if isinstance(row.get(field), (int, float))]


def task_cost(keys: BenchmarkTaskKeys, recorded: dict[str, object]) -> TaskCost | None:
    """:class:`TaskCost` of a benchmark's records, by its plan's task keys (None: no record is timed)."""
    runs = len(keys.pretrain)
    trained = [s for k in keys.pretrain.values() if k in recorded for s in _seconds(recorded[k], "train_seconds")]
    fits: dict[str, list[float]] = {}
    for by_calibrator in (*keys.together.values(), *keys.per_run.values()):
        for name, key in by_calibrator.items():
            fits.setdefault(name, [])
            if key in recorded:
                fits[name].extend(_seconds(recorded[key], "fit_seconds"))
    means = {name: sum(s) / len(s) for name, s in fits.items() if s}
    if not trained and not means:
        return None
    backbone = sum(trained) / len(trained) if trained else 0.0
    remaining = backbone * (runs - len(trained)) + sum(mean * (runs - len(fits[name])) for name, mean in means.items())
    return TaskCost(backbone, sum(means.values()), remaining / 3600,
                    tuple(name for name, s in fits.items() if not s))


@dataclass(frozen=True)
class BenchmarkProgress:
    """How much of one benchmark a study run would take from its output folder instead of computing it."""

    name: str
    runs: int
    calibrations: int  # run x calibrator rows of the benchmark
    complete: bool  # results.csv is this plan's complete output (completion.json matches)
    runs_recorded: int  # runs with every calibration recorded in finished-tasks.jsonl
    calibrations_recorded: int
    backbones_recorded: int
    records_elsewhere: int  # records whose key this plan does not have (other code, settings or options)
    results_rows: int  # rows of results.csv (0: none)
    cost: TaskCost | None = None  # task seconds of the records, and what the rest takes at their rates
    mixed_runs: tuple[str, ...] = ()  # runs whose rows (results.csv when complete, else the records) span backbones

    def line(self) -> str:
        mixed = (f"{len(self.mixed_runs)} run{'s' if len(self.mixed_runs) != 1 else ''} with rows on more than one "
                 f"backbone ({', '.join(self.mixed_runs)}; backbone_digest)")
        if self.complete:
            line = f"{self.name}: complete ({self.runs} runs; results.csv is this plan's output, completion.json)"
            return f"{line}; {mixed}: the paired tests leave out its pairs across backbones" if self.mixed_runs else line
        if self.calibrations_recorded or self.backbones_recorded:
            parts = [f"{self.name}: {self.runs_recorded} of {self.runs} runs with every calibrator recorded; "
                     f"calibrations {self.calibrations_recorded} of {self.calibrations}, backbones "
                     f"{self.backbones_recorded} of {self.runs} ({FINISHED_TASKS})"]
            if self.cost is not None:
                parts.append(self.cost.line())
        else:
            parts = [f"{self.name}: nothing recorded ({self.runs} runs, {self.calibrations} calibrations to compute)"]
        if self.records_elsewhere:
            plural = "s" if self.records_elsewhere != 1 else ""
            parts.append(f"{self.records_elsewhere} record{plural} of other code, settings or options (computed again)")
        if self.results_rows:
            parts.append(f"results.csv ({self.results_rows} rows) is not this plan's complete output: its rows of "
                         f"the study's calibrators are replaced when the benchmark completes")
        if self.mixed_runs:
            parts.append(f"{mixed} recorded: computed again on this machine's backbone")
        return "; ".join(parts)


def runs_on_several_backbones(rows: Iterable[dict]) -> dict[tuple[int, int, int], set[str]]:
    """(split, init, fold) -> the backbone digests of each run whose ``rows`` carry more than one."""
    digests: dict[tuple[int, int, int], set[str]] = {}
    for row in rows:
        if row.get("backbone_digest"):
            run = (int(row["split"]), int(row["init"]), int(row["fold"]))
            digests.setdefault(run, set()).add(row["backbone_digest"])
    return {run: found for run, found in sorted(digests.items()) if len(found) > 1}


def _run_labels(runs: Iterable[tuple[int, int, int]]) -> tuple[str, ...]:
    return tuple(f"s{split} i{init} f{fold}" for split, init, fold in runs)


def benchmark_progress(study: StudyPlan) -> list[BenchmarkProgress]:
    """Per benchmark of ``study``: what its output folder holds of it, by the same task keys the flow uses, so
    that records written under other code or settings do not count (the flow would compute those again)."""
    progress = []
    for plan in study.benchmarks:
        settings, options = plan.settings, plan.calibrator_options
        together = fitted_together(study, plan)
        calibrations = len(plan.runs) * len(options)
        results = plan.out_dir / "results.csv"
        rows = sum(1 for _ in results.open()) - 1 if results.is_file() else 0
        key = benchmark_key(plan.runs, settings, options, together)
        if completed_benchmark(plan.out_dir, key) is not None:
            with results.open(newline="") as fh:
                mixed = _run_labels(runs_on_several_backbones(csv.DictReader(fh)))
            progress.append(BenchmarkProgress(plan.name, len(plan.runs), calibrations, True, len(plan.runs),
                                              calibrations, len(plan.runs), 0, rows, mixed_runs=mixed))
            continue
        recorded = read_finished_tasks(plan.out_dir)
        keys = benchmark_task_keys(plan, together)
        done_per_run = {run: sum(k in recorded for k in by_calibrator.values())
                        for run, by_calibrator in keys.per_run.items()}
        for split, runs in keys.split_runs.items():
            for k in keys.together[split].values():
                for run in runs:
                    done_per_run[run] += k in recorded
        progress.append(BenchmarkProgress(
            plan.name, len(plan.runs), calibrations, False,
            sum(1 for run in plan.runs if done_per_run[run] == len(options)),
            sum(done_per_run.values()), sum(k in recorded for k in keys.pretrain.values()),
            len(set(recorded) - keys.all()), rows, task_cost(keys, recorded),
            _run_labels(runs_on_several_backbones(row for key in keys.all() - set(keys.pretrain.values())
                                                  if key in recorded for row in _as_rows(recorded[key])))))
    return progress


class FinishedTasks:
    """The results of a benchmark's finished tasks, one JSON line each (``{"key": task key, "result": ...}``),
    appended by the flow's process as the tasks finish. Unlike the task cache (``task-results``, one file per
    task, Prefect's format), the record sits beside the benchmark's rows and is small enough to keep with
    them (in version control, say): a study started again on a machine without its task cache or backbone
    cache takes every recorded task from it instead of computing it, and trains only the backbones of runs with
    a calibrator left. Removed once ``results.csv`` and ``completion.json`` hold the complete benchmark."""

    def __init__(self, out_dir: Path, recorded: dict[str, object]):
        self.path = out_dir / FINISHED_TASKS
        self.recorded = recorded
        self._cut = False  # the file ends in a line cut off by a kill: the next record starts a new line
        if self.path.is_file() and self.path.stat().st_size:
            with open(self.path, "rb") as fh:
                fh.seek(-1, os.SEEK_END)
                self._cut = fh.read(1) != b"\n"

    def add(self, key: str, result: object) -> None:
        if key in self.recorded:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as fh:  # JSON keeps every float exactly (and NaN)
            fh.write(("\n" if self._cut else "") + json.dumps({"key": key, "result": result}) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        self._cut = False
        self.recorded[key] = result

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


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
    study_plan.check_flow_runs_it()
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
    plans = study.benchmarks

    scheduler = _Scheduler(study, logger, pretrain_task, calibrate_task, calibrate_runs_task)
    for plan in plans:
        scheduler.plan_benchmark(plan)
    logger.info("study %s: %d benchmarks x %d runs, %d calibrators (%d benchmarks complete before) -> %d tasks on %s "
                "(%d workers); output %s", study.name, len(plans), study.runs_per_benchmark,
                len({c for p in plans for c in p.calibrator_names}), len(scheduler.complete), scheduler.task_count(),
                execution.runner, execution.workers, study.output)
    scheduler.run(_tracker(study, logger))
    pre_tally, cal_tally = scheduler.pre_tally, scheduler.cal_tally
    result = {
        "study": study.name, "study_file": study.source, "output": str(study.output),
        "tracking_uri": execution.tracking_uri, "experiment": execution.experiment,
        "experiment_id": scheduler.tracker.experiment_id,
        "tasks": {"pretrain": pre_tally.as_dict(), "calibrate": cal_tally.as_dict()},
        "recorded": scheduler.recorded, "benchmarks": scheduler.benchmarks,
        "complete_before": sorted(scheduler.complete), "report": None,
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
    runs: list[tuple[Run, str]]  # (run, pretrain task key)
    untrained: int = 0  # of runs, backbones not trained yet


class _Scheduler:
    """Submits a study's tasks so that every worker stays busy and a run's calibrations follow its backbone.

    A task submitted with ``wait_for`` holds one of the task runner's resolver threads (as many as it has workers)
    until its dependencies finish; submitting every task at once would leave workers idle while a backbone
    trains. So a task is submitted only when it can run: backbones one training job per worker at a time
    (in the study's order), a run's calibrations when its backbone is trained, a split's calibrators fitted
    on its runs together when all of them are. Each finished task's result joins the benchmark's
    finished-tasks record (:class:`FinishedTasks`); tasks already recorded are not submitted at all."""

    def __init__(self, study: StudyPlan, logger, pretrain_task, calibrate_task, calibrate_runs_task):
        self.study, self.logger = study, logger
        self.tasks = (pretrain_task, calibrate_task, calibrate_runs_task)
        self.threads = study.execution.torch_threads
        self.limit = max(1, study.execution.workers or 1)  # training jobs in flight
        self.keys: dict[str, str] = {}  # benchmark -> its key (flows.caching.benchmark_key)
        self.task_keys: dict[str, BenchmarkTaskKeys] = {}
        self.complete: dict[str, list[dict]] = {}  # benchmarks whose results.csv is this plan's output -> stats
        self.records: dict[str, FinishedTasks] = {}
        self.backbone_stats: dict[str, list[dict]] = {}
        self.rows: dict[str, list[tuple[tuple, dict]]] = {}
        self.remaining: dict[str, int] = {}  # benchmark -> (run, calibrator) rows not yet in
        self.recorded = {"pretrain": 0, "calibrate": 0}  # tasks taken from the records, not submitted
        self.left: dict[tuple[str, Run], dict[str, str]] = {}  # (benchmark, run) -> calibrator -> task key
        self.left_together: dict[tuple[str, int], dict[str, str]] = {}  # (benchmark, split) -> calibrator -> key
        self.split_runs: dict[tuple[str, int], list[Run]] = {}
        self.split_untrained: dict[tuple[str, int], int] = {}
        self.split_failed: set[tuple[str, int]] = set()
        self.jobs: deque[_Job] = deque()
        self.in_flight = 0
        self.futures: dict = {}  # future -> ("batch", job) | ("pretrain", job, run, key) | ("calibrate", plan, runs, name, key)
        self.completions = _Completions()
        self.pre_tally, self.cal_tally = _Tally(), _Tally()
        self.calibrations = 0  # calibrate tasks to submit (for the progress lines)
        self.done = 0
        self.benchmarks: list[dict] = []
        self.tracker = None

    # --- planning ----------------------------------------------------------------------------------------
    def plan_benchmark(self, plan: BenchmarkPlan) -> None:
        settings, name = plan.settings, plan.name
        together = fitted_together(self.study, plan)
        self.keys[name] = benchmark_key(plan.runs, settings, plan.calibrator_options, together)
        stats = completed_benchmark(plan.out_dir, self.keys[name])
        if stats is not None:
            self.complete[name] = stats
            return
        self.records[name] = FinishedTasks(plan.out_dir, read_finished_tasks(plan.out_dir))
        self.backbone_stats[name], self.rows[name] = [], []
        self.remaining[name] = len(plan.runs) * len(plan.calibrators)
        keys = self.task_keys[name] = benchmark_task_keys(plan, together)
        for split, runs in keys.split_runs.items():
            self.split_runs[(name, split)] = runs
            self.left_together[(name, split)] = {
                c: key for c, key in keys.together[split].items() if not self._take(plan, runs, c, key)}
        for run in plan.runs:
            self.left[(name, run)] = {
                c: key for c, key in keys.per_run[run].items() if not self._take(plan, [run], c, key)}
        mixed = runs_on_several_backbones(row for _, row in self.rows[name])
        for run in plan.runs:  # records of two machines: every calibration of the run again, on this one's backbone
            digests = mixed.get((run.split, run.init, run.fold))
            if digests:
                self.logger.warning("%s %s: its recorded rows were computed on %d backbones (backbone_digest %s; "
                                    "records of two machines?): its calibrations run again on this machine's",
                                    name, run.tag(), len(digests), ", ".join(sorted(digests)))
                self._take_back(plan, run, self._calibrators_recorded(plan, run), planned=True)
        to_train = []
        for run in plan.runs:
            pretrain_id = keys.pretrain[run]
            record = self.records[name].recorded
            if not self.left[(name, run)] and not self.left_together[(name, run.split)] and pretrain_id in record:
                self.backbone_stats[name].append(record[pretrain_id])  # nothing left: no backbone needed
                self.recorded["pretrain"] += 1
            else:
                to_train.append((run, pretrain_id))
                self.split_untrained[(name, run.split)] = self.split_untrained.get((name, run.split), 0) + 1
                self.calibrations += len(self.left[(name, run)])
        self.calibrations += sum(len(v) for (b, _), v in self.left_together.items() if b == name)
        if settings.batch_runs:
            by_split: dict[int, list] = {}
            for run, key in to_train:
                by_split.setdefault(run.split, []).append((run, key))
            self.jobs.extend(_Job(plan, runs) for runs in by_split.values())
        else:
            self.jobs.extend(_Job(plan, [entry]) for entry in to_train)
        if self.rows[name]:
            self.logger.info("%s: %d calibrate and %d pretrain tasks from %s; %d backbones to train", name,
                             len(self.rows[name]), len(plan.runs) - len(to_train), self.records[name].path,
                             len(to_train))

    def _take(self, plan: BenchmarkPlan, runs: list[Run], calibrator: str, key: str) -> bool:
        """Whether the task ``key`` is in the benchmark's record; if so its rows join the benchmark's."""
        record = self.records[plan.name].recorded
        if key not in record:
            return False
        self._add_rows(plan, runs, calibrator, record[key])
        self.remaining[plan.name] -= len(runs)
        self.recorded["calibrate"] += 1
        return True

    def _add_rows(self, plan: BenchmarkPlan, runs: list[Run], calibrator: str, result) -> list[tuple[Run, dict]]:
        """A calibrate task's result (one row, or one per run when fitted across runs) joins the benchmark's rows,
        keyed by run and the study's calibrator order; returns (run, row) pairs."""
        pairs = list(zip(runs, result if isinstance(result, list) else [result]))
        index = plan.calibrator_names.index(calibrator)
        self.rows[plan.name].extend(((run.split, run.init, run.fold, index), row) for run, row in pairs)
        return pairs

    def _run_rows(self, name: str, run: Run) -> list[tuple[tuple, dict]]:
        return [(key, row) for key, row in self.rows[name] if key[:3] == (run.split, run.init, run.fold)]

    def _calibrators_recorded(self, plan: BenchmarkPlan, run: Run, other_than: str | None = None) -> set[str]:
        """The calibrators whose row of ``run`` came from the record (with a backbone digest other than
        ``other_than``, when given)."""
        indices = {key[3] for key, row in self._run_rows(plan.name, run)
                   if other_than is None or row.get("backbone_digest") not in (None, other_than)}
        left = set(self.left[(plan.name, run)]) | set(self.left_together.get((plan.name, run.split), {}))
        return {plan.calibrator_names[index] for index in indices} - left

    def _take_back(self, plan: BenchmarkPlan, run: Run, calibrators: set[str], planned: bool) -> None:
        """Drop the recorded rows of ``calibrators`` on ``run`` (a calibrator fitted on the split's runs together:
        on every run of the split) and put their tasks back among those left to run. ``planned``: before the
        first submission (the run's calibrations are counted with the others then); else they are submitted
        here, or with the split's other together-fitted calibrators once its backbones are trained."""
        name, keys = plan.name, self.task_keys[plan.name]
        for calibrator in sorted(calibrators, key=plan.calibrator_names.index):
            together = keys.together.get(run.split, {})
            runs = self.split_runs[(name, run.split)] if calibrator in together else [run]
            key = together[calibrator] if calibrator in together else keys.per_run[run][calibrator]
            index = plan.calibrator_names.index(calibrator)
            dropped = {(r.split, r.init, r.fold, index) for r in runs}
            kept = [(k, row) for k, row in self.rows[name] if k not in dropped]
            self.remaining[name] += len(self.rows[name]) - len(kept)
            self.rows[name] = kept
            self.records[name].recorded.pop(key, None)  # its new result is recorded too (read back, the last wins)
            self.recorded["calibrate"] -= 1
            if calibrator in together:
                self.left_together[(name, run.split)][calibrator] = key
            else:
                self.left[(name, run)][calibrator] = key
            if planned:  # counted with the others once the benchmark is planned
                continue
            self.calibrations += 1
            if calibrator not in together:
                self._submit_calibrations(plan, run, {calibrator: key})
            elif not self.split_untrained.get((name, run.split), 0):  # else with the split's others, once trained
                self._submit_together(plan, run.split, {calibrator: key})

    def task_count(self) -> int:
        return sum(len(job.runs) for job in self.jobs) + self.calibrations

    # --- running -----------------------------------------------------------------------------------------
    def run(self, tracker) -> None:
        """Submit, then handle each task as it finishes until none is left."""
        self.start(tracker)
        for future in self.completions:
            self.handle(future)

    def start(self, tracker) -> None:
        """Log the benchmarks complete before, write those whose every task is recorded, submit the first jobs."""
        self.tracker = tracker
        for plan in self.study.benchmarks:
            if plan.name in self.complete:
                self.logger.info("%s: complete in %s (%s matches this plan and code): no task submitted", plan.name,
                                 plan.out_dir / "results.csv", COMPLETION)
                written = {"dataset": plan.dataset, "backbone": plan.backbone,
                           "results": str(plan.out_dir / "results.csv"), "summary": str(plan.out_dir / "summary.csv")}
                self.benchmarks.append(_log_benchmark(self.study, plan, written, self.complete[plan.name], tracker,
                                                      self.logger))
            elif self.remaining[plan.name] == 0:  # every task recorded (stopped before results.csv was written)
                self._finish(plan)
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
        pretrain_task = self.tasks[0]
        while self.jobs and self.in_flight < self.limit:
            job = self.jobs.popleft()
            job.untrained = len(job.runs)
            self.in_flight += 1
            if job.plan.settings.batch_runs:
                runs = [run for run, _ in job.runs]
                self._submit(pretrain_batch.with_options(
                    task_run_name=f"pretrain-split-{job.plan.name}-s{runs[0].split}").submit(
                        runs, job.plan.settings, self.threads, self.study.execution.models_per_batch), ("batch", job))
            else:
                run, key = job.runs[0]
                self._submit(pretrain_task.submit(run, job.plan.settings, self.threads), ("pretrain", job, run, key))

    def _batch_done(self, future, job: _Job) -> None:
        # the per-run pretrain tasks load the batch's models from the backbone cache (or train a run the batch
        # could not: a failed batch fails its runs there)
        for run, key in job.runs:
            self._submit(self.tasks[0].submit(run, job.plan.settings, self.threads, wait_for=[future]),
                         ("pretrain", job, run, key))

    def _pretrain_done(self, future, job: _Job, run: Run, key: str) -> None:
        plan = job.plan
        if self.pre_tally.add(future, f"pretrain {run.tag()}"):
            stats = future.result()
            self.backbone_stats[plan.name].append(stats)
            self.records[plan.name].add(key, stats)
            self._submit_calibrations(plan, run, self.left[(plan.name, run)], wait_for=[future])
        else:
            self.split_failed.add((plan.name, run.split))
            for name in self.left[(plan.name, run)]:
                self._not_run(plan, [run], name, f"its backbone (pretrain {run.tag()}) failed")
        split = (plan.name, run.split)
        self.split_untrained[split] -= 1
        if self.split_untrained[split] == 0:
            if split in self.split_failed:
                for name in self.left_together[split]:
                    self._not_run(plan, self.split_runs[split], name, f"a backbone of split {run.split} failed")
            else:
                self._submit_together(plan, run.split, self.left_together[split])
        job.untrained -= 1
        if job.untrained == 0:
            self.in_flight -= 1
            self._start_jobs()

    def _predictions(self, plan: BenchmarkPlan) -> str | None:
        return (str((plan.out_dir / "predictions").resolve())  # absolute: workers have their own cwd
                if self.study.execution.save_predictions else None)

    def _submit_calibrations(self, plan: BenchmarkPlan, run: Run, calibrations: dict[str, str],
                             wait_for: list | None = None) -> None:
        """Submit ``calibrations`` (calibrator -> task key) of ``run``, each fitted on the run alone."""
        for name, key in calibrations.items():
            self._submit(self.tasks[1].submit(run, plan.settings, name, plan.calibrator_options[name],
                                              self._predictions(plan), self.threads, wait_for=wait_for),
                         ("calibrate", plan, [run], name, key))

    def _submit_together(self, plan: BenchmarkPlan, split: int, calibrations: dict[str, str]) -> None:
        """Submit ``calibrations`` (calibrator -> task key) of ``split``, each fitted on its runs together."""
        runs = self.split_runs[(plan.name, split)]
        for name, key in calibrations.items():
            self._submit(self.tasks[2].with_options(task_run_name=f"calibrate-runs-{name}-{plan.name}-s{split}")
                         .submit(runs, plan.settings, name, plan.calibrator_options[name], self._predictions(plan),
                                 self.threads),
                         ("calibrate", plan, runs, name, key))

    def _calibrate_done(self, future, plan: BenchmarkPlan, runs: list[Run], name: str, key: str) -> None:
        self.done += 1
        what = f"calibrate {runs[0].tag()}{f' and {len(runs) - 1} more runs' if len(runs) > 1 else ''} {name}"
        if self.cal_tally.add(future, what):
            finished_run()  # the fault hook ($SIMCALIB_FAULT_KILL_AFTER)
            result = future.result()
            self.records[plan.name].add(key, result)
            pairs = self._add_rows(plan, runs, name, result)
            for run, row in pairs:
                self.logger.info("[%d/%d] %s s%d i%d f%d %-10s ECE %6.2f%%  (%s)", self.done, self.calibrations,
                                 plan.name, run.split, run.init, run.fold, name, row["ece"],
                                 future.state.name.lower())
            for run, row in pairs:
                self._recompute_on_this_backbone(plan, run, row.get("backbone_digest"))
        else:
            self.logger.error("[%d/%d] %s", self.done, self.calibrations, self.cal_tally.failed[-1])
        self._count(plan, len(runs))

    def _recompute_on_this_backbone(self, plan: BenchmarkPlan, run: Run, digest: str | None) -> None:
        """A run's rows share one backbone. The same seed trains other weights on another CPU, so the rows a
        record holds from another machine are computed again once a new row shows this machine's backbone."""
        stale = self._calibrators_recorded(plan, run, other_than=digest) if digest else set()
        if stale:
            others = {row["backbone_digest"] for _, row in self._run_rows(plan.name, run)
                      if row.get("backbone_digest") not in (None, digest)}
            self.logger.warning("%s %s: the recorded rows of %s were computed on another backbone (backbone_digest "
                                "%s, this machine's %s): computing them again on this one", plan.name, run.tag(),
                                ", ".join(sorted(stale, key=plan.calibrator_names.index)),
                                ", ".join(sorted(others)), digest)
            self._take_back(plan, run, stale, planned=False)

    def _not_run(self, plan: BenchmarkPlan, runs: list[Run], name: str, reason: str) -> None:
        self.done += 1
        self.cal_tally.failed.append(f"calibrate {runs[0].tag()} {name}: not run, {reason}")
        self.logger.error("[%d/%d] %s", self.done, self.calibrations, self.cal_tally.failed[-1])
        self._count(plan, len(runs))

    def _count(self, plan: BenchmarkPlan, n_rows: int) -> None:
        self.remaining[plan.name] -= n_rows
        if self.remaining[plan.name] == 0 and self.rows[plan.name]:
            self._finish(plan)

    def _finish(self, plan: BenchmarkPlan) -> None:
        ordered = [row for _, row in sorted(self.rows[plan.name], key=lambda item: item[0])]
        self.benchmarks.append(_finish_benchmark(self.study, plan, ordered, self.backbone_stats[plan.name],
                                                 self.keys[plan.name], self.tracker, self.logger))
        if len(ordered) == len(plan.runs) * len(plan.calibrators):  # results.csv and completion.json hold them
            self.records[plan.name].remove()


def _tracker(study: StudyPlan, logger):
    from .tracking import StudyTracker

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
        written = aggregate(plan.dataset, plan.backbone, rows, str(plan.out_dir), plan.calibrator_names)
        if len(rows) == len(plan.runs) * len(plan.calibrators):  # a failed task leaves the benchmark incomplete
            record_completion(plan.out_dir, key, backbone_stats)
    return _log_benchmark(study, plan, written, backbone_stats, tracker, logger)


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
    "StudyIncompleteError", "aggregate", "calibrate", "calibrate_runs", "pretrain", "run_study", "study_flow",
]
