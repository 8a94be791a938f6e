"""One benchmark run from its plan, and the process pool its units may use.

:func:`run_planned_benchmark` drives the schedule of one :class:`~simcalib.experiment.plan.BenchmarkPlan`
(:class:`~simcalib.experiment.schedule.Schedule`, the one the study flow drives too) over the benchmark's missing
work: a unit per run (its backbone and its calibrators), a split's batched backbones first with
``settings.batch_runs``, a split's fitted-together calibrators once its runs' backbones are there. Each unit's
rows are appended to ``results.csv`` as soon as it returns, so an interrupted benchmark keeps what it computed and
a restart skips it (what is finished is what :func:`~simcalib.experiment.ledger.read_ledger` finds there, as for a
study); :func:`run_benchmark` plans a :class:`BenchmarkRequest` first.

:func:`drive` computes a schedule's units in this process or in a pool of spawned processes, and
:func:`in_processes` yields ``function(*task)`` of a fixed list of tasks as each finishes. Workers are spawned (torch
and fork do not mix safely), take the caller's warning filters, exit when the parent dies, and are stopped as soon
as the caller stops reading (interrupted, a task failed, or it left early), so nothing runs on unseen.
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
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, as_completed, wait
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

from simcalib.errors import ConfigError
from simcalib.experiment.ledger import BackboneMismatchError
from simcalib.experiment.plan import BenchmarkPlan, plan_benchmark
from simcalib.experiment.protocol import ProtocolSettings
from simcalib.experiment.schedule import RUN, Outcome, Schedule, compute_unit, device_layout, plan_kind
from simcalib.store.integrity import results_lock
from simcalib.store.results_store import (
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
        _stop(pool)
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


def drive(schedule: Schedule, workers: int = 1) -> Iterator[Outcome]:
    """Compute the units of ``schedule`` and report each back (:meth:`~simcalib.experiment.schedule.Schedule.finished`),
    yielding each :class:`~simcalib.experiment.schedule.Outcome` as its unit finishes: in this process one unit at a
    time (``workers`` 1), else in ``workers`` spawned processes with one torch thread each (the layout that is
    fastest for small graphs on few cores, and the same numbers as ``--threads 1``: the thread count is part of the
    backbone's identity). A failed unit raises its error here, once the units in flight are stopped."""
    if workers == 1:
        while not schedule.done:
            units = schedule.submit()
            if not units:
                raise RuntimeError("the schedule has work left but no unit to start")  # a defect, not an input
            for unit in units:
                yield schedule.finished(unit, compute_unit(unit))
        return
    context = multiprocessing.get_context("spawn")  # torch and fork do not mix safely
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=worker_init,
                               initargs=(1, list(warnings.filters), os.getpid()))
    futures: dict = {}
    try:
        while True:
            futures.update({pool.submit(compute_unit, unit): unit for unit in schedule.submit()})
            if not futures:
                break
            finished, _ = wait(futures, return_when=FIRST_COMPLETED)
            for future in finished:
                yield schedule.finished(futures.pop(future), future.result())
    except BaseException:
        _stop(pool)
        raise
    pool.shutdown()


def _stop(pool: ProcessPoolExecutor) -> None:
    """Interrupted, a task failed or the caller stopped early: what finished is already with the caller; stop the
    tasks in flight now instead of waiting for them, and start no other."""
    processes = list(getattr(pool, "_processes", {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()


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
    # what results.csv holds of the plan (the rows are the record), the rest as units: one per run (its backbone,
    # prepared once, and its calibrators), after its split's batched backbones with settings.batch_runs, and a
    # split's fitted-together calibrators once its runs' backbones are there
    layout = device_layout(settings.device, RUN, workers=workers, kinds=(plan_kind(plan),))
    schedule = Schedule([plan], layout, batch_calibrators, models_per_batch, save_predictions)
    outcomes = drive(schedule, layout.slots if layout.devices else workers)
    with contextlib.closing(outcomes):  # an interruption stops the units in flight
        counted = Counted(outcomes, schedule.units_planned)
        for _ in progress(counted) if progress else counted:
            pass  # each unit's rows are in results.csv once it is reported (the schedule appends them)
    refused = schedule.refused
    if refused:
        more = f" (and {len(refused) - 1} more rows)" if len(refused) > 1 else ""
        raise BackboneMismatchError(f"{refused[0]}{more}")
    results = read_results(results_path)
    wanted = (results["calibrator"].isin(calibrators) & (results["dataset"] == plan.dataset)
              & (results["backbone"] == plan.backbone))
    return results[wanted].reset_index(drop=True)


__all__ = ["BenchmarkRequest", "Counted", "drive", "in_processes", "run_benchmark", "run_planned_benchmark", "worker_init"]
