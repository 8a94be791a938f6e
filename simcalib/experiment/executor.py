"""One benchmark run from its plan, and the process pool its runs may use.

:func:`run_planned_benchmark` chains the protocol's units (:mod:`simcalib.experiment.protocol`) over the runs of one
:class:`~simcalib.experiment.plan.BenchmarkPlan`, appending each run's rows to ``results.csv``
(:mod:`simcalib.store.results_store`) as soon as they exist, so an interrupted benchmark keeps what it computed and
a restart skips it (what is finished is what :func:`~simcalib.experiment.ledger.read_ledger` finds there, as for a
study); :func:`run_benchmark` plans a :class:`BenchmarkRequest` first.

:func:`in_processes` yields ``function(*task)`` of every task as it finishes. Workers are spawned (torch and
fork do not mix safely), take the caller's warning filters, exit when the parent dies, and are stopped as
soon as the caller stops reading (interrupted, a task failed, or it left early), so nothing runs on unseen.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

from simcalib.errors import ConfigError
from simcalib.experiment.ledger import BackboneMismatchError, read_ledger
from simcalib.experiment.plan import BenchmarkPlan, plan_benchmark
from simcalib.experiment.protocol import (
    FittedCalibrator,
    PlannedCalibrator,
    ProtocolSettings,
    Run,
    evaluate_calibrator,
    fit_calibrator_across_runs,
    fits_across_runs,
    prepare_run,
    train_run_backbone,
    train_split_backbones,
)
from simcalib.store.integrity import finished_run, results_lock
from simcalib.store.results_store import (
    append_rows,
    check_results_file,
    check_resume_source,
    copy_finished_rows,
    read_results,
    result_key,
)


def worker_init(threads: int, warning_filters: list, parent_pid: int) -> None:
    """Set up a worker process: ``threads`` torch threads, the parent's warning filters, and a watcher that
    exits the worker once ``parent_pid`` is gone."""
    torch.set_num_threads(threads)
    warnings.filters[:] = warning_filters  # the caller's filters (spawned processes start with the defaults)

    def exit_with_parent() -> None:  # a killed parent would otherwise leave idle workers behind for good
        while os.getppid() == parent_pid:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=exit_with_parent, daemon=True).start()


class Counted:
    """An iterable with a known length, so that a progress wrapper (tqdm) shows the total."""

    def __init__(self, items: Iterable, length: int):
        self.items, self.length = items, length

    def __iter__(self):
        return iter(self.items)

    def __len__(self) -> int:
        return self.length


def in_processes(function: Callable, tasks: Sequence[tuple], workers: int) -> Iterator:
    """``function(*task)`` of every task in ``workers`` spawned processes with one torch thread each, yielded
    as each finishes (``function`` must be importable by name: a module-level function)."""
    context = multiprocessing.get_context("spawn")  # torch and fork do not mix safely
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=worker_init,
                               initargs=(1, list(warnings.filters), os.getpid()))
    try:
        futures = [pool.submit(function, *task) for task in tasks]
        for future in as_completed(futures):
            yield future.result()
    except BaseException:
        # Interrupted, a task failed or the caller stopped early: what finished is already with the caller;
        # stop the tasks in flight now instead of waiting for them, and start no other.
        processes = list(getattr(pool, "_processes", {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.terminate()
        raise
    pool.shutdown()



# ---------------------------------------------------------------------------------------------------------
# One benchmark, from its plan


@dataclass
class BenchmarkRequest:
    dataset: str
    backbone: str
    calibrators: list[str]
    splits: list[int] = field(default_factory=lambda: list(range(5)))
    inits: list[int] = field(default_factory=lambda: list(range(5)))
    folds: list[int] = field(default_factory=lambda: list(range(3)))
    calibrator_options: dict[str, dict] = field(default_factory=dict)


def _run_calibrators(run: Run, settings: ProtocolSettings, calibrators: Sequence[str],
                     entries: dict[str, PlannedCalibrator], predictions_dir: Path | None) -> list[dict]:
    """One run: its backbone (cached), prepared once (:func:`~simcalib.experiment.protocol.prepare_run`), and the
    result rows of ``calibrators`` (names of the plan's ``entries``) on it."""
    context = prepare_run(run, settings)
    return [evaluate_calibrator(run, settings, entries[c], None, context.output, predictions_dir, context=context)
            for c in calibrators]


def _split_groups(jobs: Sequence[tuple[Run, list[str]]]) -> list[list[tuple[Run, list[str]]]]:
    """The jobs with work to do, grouped by split (the runs whose backbones train together), in job order."""
    groups: dict[int, list] = {}
    for run, todo in jobs:
        if todo:
            groups.setdefault(run.split, []).append((run, todo))
    return list(groups.values())


def _run_split_group(group: Sequence[tuple[Run, list[str]]], settings: ProtocolSettings,
                     entries: dict[str, PlannedCalibrator],
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
    contexts = [prepare_run(run, settings, output) for run, output in zip(runs, outputs)]
    fitted: dict[tuple[int, str], FittedCalibrator] = {}  # (position in group, calibrator) -> fitted model
    if batch_calibrators:
        names = list(dict.fromkeys(c for _, todo in group for c in todo if fits_across_runs(c)))
        for name in names:
            positions = [p for p, (_, todo) in enumerate(group) if name in todo]
            models = fit_calibrator_across_runs([runs[p] for p in positions], settings, entries[name], None,
                                                [outputs[p] for p in positions], [contexts[p] for p in positions])
            fitted.update({(p, name): model for p, model in zip(positions, models)})
    for position, ((run, todo), context) in enumerate(zip(group, contexts)):
        yield [evaluate_calibrator(run, settings, entries[c], None, context.output, predictions_dir,
                                   fitted.pop((position, c), None), context) for c in todo]


def _split_group_rows(group, settings, entries, predictions_dir, models_per_batch=None,
                      batch_calibrators=False) -> list[list[dict]]:
    """:func:`_run_split_group` collected, for a worker process (which returns once)."""
    return list(_run_split_group(group, settings, entries, predictions_dir, models_per_batch, batch_calibrators))


def _batched_rows(jobs, settings, entries, predictions_dir, workers: int, models_per_batch: int | None,
                  batch_calibrators: bool = False):
    """Each job's rows (``[]`` for a job with nothing to do), the runs of a split together (their backbones
    with ``settings.batch_runs``, their calibrators with ``batch_calibrators``); with ``workers`` > 1, one split
    per worker process (one torch thread each)."""
    groups = _split_groups(jobs)
    for _ in range(len(jobs) - sum(len(g) for g in groups)):
        yield []
    if workers == 1:
        for group in groups:
            yield from _run_split_group(group, settings, entries, predictions_dir, models_per_batch, batch_calibrators)
        return
    tasks = [(g, settings, entries, predictions_dir, models_per_batch, batch_calibrators) for g in groups]
    for rows_per_run in in_processes(_split_group_rows, tasks, workers):
        yield from rows_per_run


def _rows_in_processes(jobs, settings, entries, predictions_dir, workers: int):
    """Each job's result rows (``[]`` for a job with nothing to do), the runs computed in ``workers``
    processes with one torch thread each (the layout that is fastest for small graphs on few cores, and the
    same numbers as ``--threads 1``: the thread count is part of the backbone's identity), yielded as each
    run finishes."""
    pending = [(run, todo) for run, todo in jobs if todo]
    for _ in range(len(jobs) - len(pending)):
        yield []
    yield from in_processes(_run_calibrators, [(run, settings, todo, entries, predictions_dir)
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
    """Resolve ``request`` into its plan (:func:`~simcalib.experiment.plan.plan_benchmark`) and run it
    (:func:`run_planned_benchmark`). ``batch_runs`` sets ``settings.batch_runs`` (the calibrators' view of a
    run must read the same backbones)."""
    if batch_runs != settings.batch_runs:
        settings = dataclasses.replace(settings, batch_runs=batch_runs)
    if not request.calibrators:
        raise ConfigError("no calibrators given; choose from the registered names (see `simcalib benchmark --help`)")
    options = {str(k).strip().lower(): v for k, v in request.calibrator_options.items()}  # names match in any case
    given = {str(c).strip().lower() for c in request.calibrators}
    unused = sorted(k for k in request.calibrator_options if str(k).strip().lower() not in given)
    if unused:
        raise ConfigError(f"calibrator_options name {', '.join(unused)}, not among the calibrators "
                          f"{', '.join(request.calibrators)}; give options for the calibrators that run")
    plan = plan_benchmark(request.dataset, request.backbone, request.splits, request.inits, request.folds,
                          [(c, options.get(str(c).strip().lower()), None) for c in request.calibrators], settings,
                          out_dir)  # the plan resolves the names, once
    return run_planned_benchmark(plan, save_predictions, progress, workers, resume_from, models_per_batch,
                                 batch_calibrators, wait, notify)


def run_planned_benchmark(
    plan: BenchmarkPlan,
    save_predictions: bool = False,
    progress: Callable[[Iterable], Iterable] | None = None,
    workers: int = 1,
    resume_from: str | os.PathLike | None = None,
    models_per_batch: int | None = None,
    batch_calibrators: bool = False,
    wait: bool = False,
    notify: Callable[[str], None] | None = None,
) -> pd.DataFrame:
    """Run (or resume) the runs of ``plan``; rows go to ``plan.out_dir/results.csv`` as each run finishes.

    ``workers`` > 1 runs that many runs at once in separate processes (one torch thread each). With
    ``plan.settings.batch_runs`` the backbones of a split's runs are trained together
    (:func:`~simcalib.experiment.protocol.train_split_backbones`; another random stream than the per-run trainer, hence
    other backbones), with ``workers`` > 1 one split per process. ``batch_calibrators``: the calibrators that
    :func:`~simcalib.experiment.protocol.fits_across_runs` are fitted on a split's runs together (the same models to
    float rounding; a split's rows then arrive once all its backbones are there). ``resume_from``: a
    results.csv (e.g. committed under reports/) whose rows of the planned runs are copied into
    ``results.csv`` first, so those runs are not computed again.

    The folder is held for this call (:func:`~simcalib.store.integrity.results_lock`; another writer: an error, or
    with ``wait`` a wait, announced through ``notify``). Rows already in ``results.csv`` (and those copied by
    ``resume_from``) must be of the plan's split and data definitions and hold no run twice; otherwise
    nothing is added (:func:`~simcalib.store.results_store.check_results_file`)."""
    if resume_from is not None:
        check_resume_source(resume_from)
    with results_lock(plan.out_dir, wait=wait, notify=notify):
        return _run_planned_locked(plan, save_predictions, progress, workers, resume_from, models_per_batch,
                                   batch_calibrators)


def _run_planned_locked(plan: BenchmarkPlan, save_predictions, progress, workers, resume_from, models_per_batch,
                        batch_calibrators) -> pd.DataFrame:
    out_dir, settings, runs, calibrators = plan.out_dir, plan.settings, plan.runs, plan.calibrator_names
    results_path = out_dir / "results.csv"
    planned, definitions = plan.planned_runs(), plan.definitions()
    check_results_file(results_path, planned, definitions)  # before anything is added
    if resume_from is not None:
        copy_finished_rows(Path(resume_from), results_path,
                           {result_key(r.dataset, r.backbone, c, r.split, r.init, r.fold, seed)
                            for r, seed in zip(runs, plan.seeds) for c in calibrators}, planned, definitions)
    ledger = read_ledger(plan)  # what results.csv holds of the plan: the rows are the record
    predictions_dir = out_dir / "predictions" if save_predictions else None
    jobs = [(run, ledger.todo(run)) for run in runs]  # (run, calibrators still missing from results.csv)
    entries = {entry.name: entry for entry in plan.calibrators}  # resolved once, by the plan
    if settings.batch_runs or batch_calibrators:
        rows_per_job = _batched_rows(jobs, settings, entries, predictions_dir, workers, models_per_batch,
                                     batch_calibrators)
    elif workers > 1:
        rows_per_job = _rows_in_processes(jobs, settings, entries, predictions_dir, workers)
    else:
        rows_per_job = (_run_calibrators(run, settings, todo, entries, predictions_dir) if todo else []
                        for run, todo in jobs)
    with contextlib.closing(rows_per_job):  # an interruption stops the runs in flight
        counted = Counted(rows_per_job, len(jobs))
        for rows in progress(counted) if progress else counted:
            # the parent alone writes results.csv, each run as it finishes; a row on another backbone than its
            # run's rows there is not added (the ledger's rule)
            append_rows(results_path, ledger.accept(rows))
            if rows:
                finished_run()  # the fault hook ($SIMCALIB_FAULT_KILL_AFTER)
    if ledger.refused:
        more = f" (and {len(ledger.refused) - 1} more rows)" if len(ledger.refused) > 1 else ""
        raise BackboneMismatchError(f"{ledger.refused[0]}{more}")
    results = read_results(results_path)
    wanted = (results["calibrator"].isin(calibrators) & (results["dataset"] == plan.dataset)
              & (results["backbone"] == plan.backbone))
    return results[wanted].reset_index(drop=True)


__all__ = ["BenchmarkRequest", "Counted", "in_processes", "run_benchmark", "run_planned_benchmark", "worker_init"]
