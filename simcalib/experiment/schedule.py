"""The schedule of a study: its missing work as units, in an order, each released once what it needs is there.

Derived from the plans (:mod:`simcalib.experiment.plan`) and what their results files hold (the ledger,
:func:`~simcalib.experiment.ledger.read_ledger`), for any driver: the study flow hands the units to a Prefect task
runner (``flows/study.py``), ``simcalib benchmark`` to its process pool or computes them in turn
(:mod:`simcalib.experiment.executor`). Three kinds of unit, each computed by :func:`compute_unit`::

    backbone    one run's backbone (or, with runs.batch_runs, a split's runs trained as one batched model)
    calibrate   one calibrator on one run; a "fitted together" calibrator (runs.batch_calibrators) on the runs of
                a split missing its row
    run         one run: its backbone and every calibrator it is missing, the run prepared once

The order, one rule each:

* **a run's calibrations after its backbone**: ``calibrate`` units are released when their run's ``backbone``
  unit returns; a split's fitted-together ``calibrate`` units when every run of the split has its backbone;
* **training in flight is bounded**: ``backbone`` and ``run`` units (the units that train) take a slot each:
  ``workers`` slots, or on devices ``runs_per_device`` (K) slots per device, each such unit given a device index in
  turn (round robin over the devices with a free slot) and computed on ``cuda:<index>``; ``calibrate`` units take
  none (they wait in the task runner's queue);
* **the granularity** (:func:`device_layout`): ``run`` units on a device (a task per calibrator costs more in
  orchestration there than the fit), ``backbone`` and ``calibrate`` units on the CPU, a declared
  ``task_runner.granularity`` winning over ``auto``. Either way each row comes from the same library functions
  (:func:`~simcalib.experiment.protocol.evaluate_calibrator` on the run's backbone), so the rows are the same.

The kinds of benchmark plan it computes (:data:`COMPUTED_KINDS`) are every kind a plan can be: ``protocol`` (a
run's calibrations through :func:`~simcalib.experiment.protocol.evaluate_calibrator`) and ``shift`` and
``conformal`` (a run unit each through :func:`~simcalib.experiment.node_runs.evaluate_run`); a plan of any other
kind is refused where it is made or read (:func:`~simcalib.experiment.plan.plan_benchmark`,
:meth:`~simcalib.experiment.plan.BenchmarkPlan.from_json`), so no driver checks a plan's kind again.

A driver asks :meth:`Schedule.submit` for the units to start now and reports each back with :meth:`Schedule.finished`
(its result) or :meth:`Schedule.failed` (why); the schedule accepts the rows into the ledger, appends them to the
benchmark's ``results.csv`` (the caller's process alone writes it), releases what they unblock and, once a
benchmark has nothing outstanding, puts its rows in the plan's order. :attr:`Schedule.done` tells when nothing is
left. A schedule made again over the same folders finds the rows written and computes only what is missing.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from simcalib.errors import ConfigError
from simcalib.experiment.ledger import BenchmarkLedger, drop_superseded, order_rows, read_ledger
from simcalib.experiment.node_runs import KINDS, evaluate_run
from simcalib.experiment.plan import BenchmarkPlan
from simcalib.experiment.protocol import (
    Run,
    evaluate_calibrator,
    fit_calibrator_across_runs,
    fits_across_runs,
    prepare_run,
    train_run_backbone,
    train_split_backbones,
)
from simcalib.experiment.splits import record_split_sources
from simcalib.store.integrity import finished_run
from simcalib.store.results_store import append_rows

BACKBONE, CALIBRATE, RUN = "backbone", "calibrate", "run"
COMPUTED_KINDS = KINDS  # the plans' kinds compute_unit computes: all of them (module docstring)
GRANULARITIES = ("auto", "run", "calibrator")
FAKE_DEVICES_ENV = "SIMCALIB_FAKE_DEVICE_COUNT"  # a device count for tests: slots and indices without a device
MPS_CONTROL = "nvidia-cuda-mps-control"
MPS_PIPE_ENV = "CUDA_MPS_PIPE_DIRECTORY"
MPS_DEFAULT_PIPE = "/tmp/nvidia-mps"


# ---------------------------------------------------------------------------------------------------------
# Devices and granularity


def plan_kind(plan: BenchmarkPlan) -> str:
    """The plan's study kind: "protocol" (the GATS protocol's rows), else its node runs' kind (shift, conformal)."""
    return getattr(plan, "kind", "protocol")


def device_count(device: str) -> int:
    """Devices the study's runs spread over: ``$SIMCALIB_FAKE_DEVICE_COUNT`` when set (device slots and indices on
    whatever ``device`` is, for tests), else the CUDA devices torch sees when ``device`` resolves to CUDA, else 0."""
    fake = os.environ.get(FAKE_DEVICES_ENV)
    if fake:
        try:
            count = int(fake)
        except ValueError:
            count = -1
        if count < 1:
            raise ConfigError(f"${FAKE_DEVICES_ENV} must be a whole number of devices >= 1, got {fake!r}")
        return count
    from simcalib.backbones import resolve_device

    if resolve_device(device).type != "cuda":
        return 0
    import torch

    return torch.cuda.device_count()


def mps_status() -> str:
    """CUDA MPS (several processes' kernels on one device at once) as found here, in words: used where its control
    daemon runs, never required."""
    pipe = Path(os.environ.get(MPS_PIPE_ENV) or MPS_DEFAULT_PIPE)
    if (pipe / "control").exists():
        return f"CUDA MPS daemon running (pipe {pipe})"
    if shutil.which(MPS_CONTROL):
        return f"CUDA MPS available, daemon not running (`{MPS_CONTROL} -d` starts it)"
    return "no CUDA MPS"


@dataclass(frozen=True)
class DeviceLayout:
    """How a study's units are cut and spread: ``granularity`` ("run" or "calibrator"), ``devices`` (0: none,
    slots are the workers) and ``runs_per_device`` training units in flight on each."""

    granularity: str
    devices: int = 0
    runs_per_device: int = 1
    workers: int = 1
    mps: str = ""

    @property
    def slots(self) -> int:
        """Training units in flight at most (and the worker processes a task runner needs for them)."""
        return self.devices * self.runs_per_device if self.devices else self.workers

    def line(self) -> str:
        if not self.devices:
            return f"{self.granularity} units, {self.workers} trained at a time"
        return (f"{self.granularity} units on {self.devices} device(s), {self.runs_per_device} in flight per device "
                f"({self.slots} in all); {self.mps}")


def device_layout(device: str, granularity: str = "auto", runs_per_device: int | None = None, workers: int = 1,
                  devices: int | None = None, kinds: Sequence[str] = ("protocol",)) -> DeviceLayout:
    """The layout of a study on ``device``. ``granularity`` "auto": run units where there are devices
    (:func:`device_count`, or ``devices`` given), calibrator units on the CPU; a study of node runs (``kinds`` other
    than "protocol") always runs run units. ``runs_per_device`` None: the ``workers`` shared over the devices."""
    if granularity not in GRANULARITIES:
        raise ConfigError(f"unknown granularity {granularity!r}; choose one of {', '.join(GRANULARITIES)}")
    devices = device_count(device) if devices is None else devices
    if granularity == "auto":
        granularity = RUN if devices else "calibrator"
    if any(kind != "protocol" for kind in kinds):
        granularity = RUN
    per_device = runs_per_device or (max(1, -(-workers // devices)) if devices else 1)
    return DeviceLayout(granularity, devices, per_device, max(1, workers), mps_status() if devices else "")


# ---------------------------------------------------------------------------------------------------------
# Units


@dataclass(frozen=True, eq=False)
class Unit:
    """One piece of work: its ``kind`` (:data:`BACKBONE`, :data:`CALIBRATE`, :data:`RUN`), benchmark, runs and
    calibrators. ``together``: a calibrate unit fitted on its runs together; ``device``: the device index it
    trains on (None: the plan's device as declared)."""

    kind: str
    plan: BenchmarkPlan
    runs: tuple[Run, ...]
    calibrators: tuple[str, ...] = ()
    together: bool = False
    device: int | None = None
    predictions_dir: str | None = None
    models_per_batch: int | None = None

    @property
    def rows(self) -> int:
        """Rows this unit returns."""
        return len(self.runs) * len(self.calibrators)

    @property
    def name(self) -> str:
        """The task's name (a Prefect task run, a log line), e.g. ``calibrate-TS-Cora-GCN-s0-i0-f1``."""
        first = self.runs[0]
        where = (f"{self.plan.name}-s{first.split}-i{first.init}-f{first.fold}" if len(self.runs) == 1
                 else f"{self.plan.name}-s{first.split}")
        if self.kind == BACKBONE:
            return f"pretrain-{'split-' if len(self.runs) > 1 else ''}{where}"
        if self.kind == CALIBRATE:
            return f"calibrate-{'runs-' if self.together else ''}{self.calibrators[0]}-{where}"
        return f"run-{where}" + (f"-device{self.device}" if self.device is not None else "")

    def describe(self) -> str:
        """In words, for failure lines: ``calibrate Cora_GCN_s0_i0_f1 TS``."""
        first = self.runs[0].tag()
        more = f" and {len(self.runs) - 1} more runs" if len(self.runs) > 1 else ""
        if self.kind == BACKBONE:
            return f"pretrain {first}{more}"
        if self.kind == CALIBRATE:
            return f"calibrate {first}{more} {self.calibrators[0]}"
        return f"run {first} ({len(self.calibrators)} calibrators)"


def unit_settings(unit: Unit):
    """The unit's protocol settings: the plan's, on ``cuda:<device>`` when the unit has a device index and the plan
    trains on CUDA (a fake device count on the CPU keeps the CPU)."""
    settings = unit.plan.settings
    if unit.device is None:
        return settings
    from simcalib.backbones import resolve_device

    if resolve_device(settings.device).type != "cuda":
        return settings
    return dataclasses.replace(settings, device=f"cuda:{unit.device}")


def backbone_stats(run: Run, output) -> dict:
    return {"run": run.tag(), "val_accuracy": float(output.val_accuracy), "val_nll": float(output.val_nll),
            "best_epoch": int(output.best_epoch), "epochs": int(output.epochs),
            "train_seconds": float(output.train_seconds)}


def compute_unit(unit: Unit, torch_threads: int | None = None) -> dict:
    """Compute ``unit``: ``{"rows": [results rows], "backbones": [training statistics per run trained]}``.
    ``torch_threads``: torch's intra-op threads for it (None: as they are)."""
    if torch_threads:
        import torch

        torch.set_num_threads(torch_threads)
    settings = unit_settings(unit)
    plan, runs = unit.plan, list(unit.runs)
    entry = plan.calibrator  # each calibrator as the plan resolved it (name, options, definition digest)
    if unit.kind == BACKBONE:
        outputs = (train_split_backbones(runs, settings, unit.models_per_batch) if settings.batch_runs
                   else [train_run_backbone(run, settings) for run in runs])
        return {"rows": [], "backbones": [backbone_stats(r, o) for r, o in zip(runs, outputs)]}
    if unit.kind == CALIBRATE:
        (name,) = unit.calibrators
        if not unit.together:
            return {"rows": [evaluate_calibrator(runs[0], settings, entry(name),
                                                 predictions_dir=unit.predictions_dir)], "backbones": []}
        contexts = [prepare_run(run, settings) for run in runs]  # each run prepared once
        fitted = fit_calibrator_across_runs(runs, settings, entry(name), None, [c.output for c in contexts],
                                            contexts)
        return {"rows": [evaluate_calibrator(run, settings, entry(name), None, context.output, unit.predictions_dir,
                                             model, context) for run, context, model in zip(runs, contexts, fitted)],
                "backbones": []}
    (run,) = runs
    if plan_kind(plan) != "protocol":  # shift, conformal: the node runs' rows
        on_device = dataclasses.replace(plan, settings=settings) if settings is not plan.settings else plan
        return {"rows": evaluate_run(on_device, run, list(unit.calibrators), unit.predictions_dir), "backbones": []}
    context = prepare_run(run, settings)
    rows = [evaluate_calibrator(run, settings, entry(c), None, context.output, unit.predictions_dir, context=context)
            for c in unit.calibrators]
    return {"rows": rows, "backbones": [backbone_stats(run, context.output)]}


# ---------------------------------------------------------------------------------------------------------
# The schedule


@dataclass
class _Split:
    """One split of one benchmark with work left."""

    plan: BenchmarkPlan
    runs: list[Run]
    alone: dict[Run, list[str]]  # run -> calibrators fitted on it alone
    together: dict[str, list[Run]]  # calibrator -> the runs missing its row, fitted on them together
    waiting: int = 0  # runs whose backbone has not returned
    failed: bool = False


@dataclass
class Outcome:
    """What one reported unit did: ``rows`` accepted and appended, ``refused`` rows (one line each, another
    backbone), ``failures`` (this unit, or units that will not run because of it), ``finished`` benchmarks
    (nothing outstanding: rows in the plan's order)."""

    unit: Unit
    rows: list[dict] = field(default_factory=list)
    backbones: list[dict] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    finished: list[BenchmarkPlan] = field(default_factory=list)


class Schedule:
    """The missing work of ``plans`` as units (module docstring). ``hold(plan)`` is called for each benchmark with
    work left before anything is written there (the study flow takes the folder's lock); ``save_predictions``:
    test probabilities under ``<out_dir>/predictions``."""

    def __init__(self, plans: Sequence[BenchmarkPlan], layout: DeviceLayout, batch_calibrators: bool = False,
                 models_per_batch: int | None = None, save_predictions: bool = False,
                 hold: Callable[[BenchmarkPlan], None] | None = None):
        self.plans, self.layout = tuple(plans), layout
        self.ledgers: dict[str, BenchmarkLedger] = {}
        self.complete: list[BenchmarkPlan] = []  # every planned row there before
        self.superseded: dict[str, int] = {}  # benchmark -> rows removed (another definition: computed again)
        self.rows_found = 0  # planned rows already in the results files
        self.calibrations = 0  # rows to compute
        self.returned = 0  # of those, returned or given up
        self.queue: deque[Unit] = deque()  # training units waiting for a slot
        self.ready: list[Unit] = []  # calibrate units released, to hand out
        self.in_flight: dict[Unit, int | None] = {}  # training units out -> device index
        self.load = [0] * layout.devices  # training units in flight per device
        self._cursor = 0
        self._outstanding: dict[str, int] = {}  # benchmark -> rows not returned
        self._splits: dict[tuple[str, int], _Split] = {}
        self.units_planned = 0  # every unit the work left takes, handed out or to come
        self.counts = {BACKBONE: 0, CALIBRATE: 0, RUN: 0}  # units handed out, by kind
        self._predictions: dict[str, str | None] = {}  # benchmark -> predictions folder (absolute) or None
        self._models_per_batch = models_per_batch
        for plan in self.plans:
            self._plan(plan, batch_calibrators, save_predictions, hold)

    # --- planning ----------------------------------------------------------------------------------------
    def _plan(self, plan: BenchmarkPlan, batch_calibrators: bool, save_predictions: bool, hold) -> None:
        ledger = self.ledgers[plan.name] = read_ledger(plan)
        self.rows_found += ledger.calibrations_done
        if ledger.complete:
            self.complete.append(plan)
            return
        if hold is not None:
            hold(plan)
        if ledger.superseded:
            self.superseded[plan.name] = drop_superseded(ledger)
        record_split_sources(plan.out_dir, plan.split_sources)
        protocol = plan_kind(plan) == "protocol"
        together = {c for c in plan.calibrator_names if protocol and batch_calibrators and fits_across_runs(c)}
        predictions = str((plan.out_dir / "predictions").resolve()) if save_predictions else None  # workers' cwd
        self._outstanding[plan.name] = 0
        for run in ledger.runs_left():
            todo = ledger.todo(run)
            split = self._splits.setdefault((plan.name, run.split), _Split(plan, [], {}, {}))
            split.runs.append(run)
            split.alone[run] = [c for c in todo if c not in together]
            for c in todo:
                if c in together:
                    split.together.setdefault(c, []).append(run)
            split.waiting += 1
            self._outstanding[plan.name] += len(todo)
        self.calibrations += self._outstanding[plan.name]
        self._predictions[plan.name] = predictions
        batched = protocol and plan.settings.batch_runs
        for (name, _), split in self._splits.items():
            if name != plan.name:
                continue
            if batched:
                self.queue.append(self._unit(BACKBONE, plan, split.runs))
            else:
                self.queue.extend(self._first_unit(plan, run, split) for run in split.runs)
            per_run = (len(split.runs) if self.layout.granularity == RUN
                       else (0 if batched else len(split.runs)) + sum(map(len, split.alone.values())))
            self.units_planned += int(batched) + per_run + len(split.together)

    def _unit(self, kind: str, plan: BenchmarkPlan, runs: Sequence[Run], calibrators: Sequence[str] = (),
              together: bool = False) -> Unit:
        return Unit(kind, plan, tuple(runs), tuple(calibrators), together,
                    predictions_dir=self._predictions[plan.name], models_per_batch=self._models_per_batch)

    def _first_unit(self, plan: BenchmarkPlan, run: Run, split: _Split) -> Unit:
        """A run's first unit: its run unit, or its backbone unit (calibrator granularity)."""
        if self.layout.granularity == RUN:
            return self._unit(RUN, plan, [run], split.alone[run])
        return self._unit(BACKBONE, plan, [run])

    @property
    def done(self) -> bool:
        return not self.queue and not self.ready and not self.in_flight and self.returned == self.calibrations

    @property
    def refused(self) -> list[str]:
        return [line for ledger in self.ledgers.values() for line in ledger.refused]

    # --- handing out -------------------------------------------------------------------------------------
    def submit(self) -> list[Unit]:
        """The units to start now: every released calibrate unit, and training units while slots are free
        (each given a device index in turn, at most ``runs_per_device`` in flight on a device)."""
        units, self.ready = self.ready, []
        while self.queue:
            device = self._free_device()
            if device is False:
                break
            unit = self.queue.popleft()
            if device is not None:
                unit = dataclasses.replace(unit, device=device)
                self.load[device] += 1
            self.in_flight[unit] = device
            units.append(unit)
        for unit in units:
            self.counts[unit.kind] += 1
        return units

    def _free_device(self) -> int | None | bool:
        """The next device with a free slot, round robin (None: no devices, a worker slot is free; False: none)."""
        if not self.layout.devices:
            return None if len(self.in_flight) < self.layout.workers else False
        n = self.layout.devices
        for step in range(n):
            device = (self._cursor + step) % n
            if self.load[device] < self.layout.runs_per_device:
                self._cursor = (device + 1) % n
                return device
        return False

    # --- reports -----------------------------------------------------------------------------------------
    def finished(self, unit: Unit, result: dict) -> Outcome:
        """``unit`` returned ``result`` (:func:`compute_unit`'s): its rows accepted into the ledger and appended to
        ``results.csv``, the units it unblocks released."""
        outcome = Outcome(unit, backbones=list(result.get("backbones", [])))
        self._release_slot(unit)
        rows = list(result.get("rows", []))
        if rows:
            ledger = self.ledgers[unit.plan.name]
            before = len(ledger.refused)
            outcome.rows = ledger.accept(rows)
            outcome.refused = ledger.refused[before:]
            append_rows(ledger.results, outcome.rows)  # the driver's process alone writes results.csv
            finished_run()  # the fault hook ($SIMCALIB_FAULT_KILL_AFTER)
        if unit.kind == BACKBONE:
            split = self._split_of(unit)
            if self.layout.granularity == RUN:  # a split's batched backbones: then each run's run unit
                self.queue.extendleft(reversed([self._unit(RUN, unit.plan, [run], split.alone[run])
                                                for run in unit.runs]))
            else:
                for run in unit.runs:
                    self.ready.extend(self._unit(CALIBRATE, unit.plan, [run], [c]) for c in split.alone[run])
                    self._trained(split, outcome)
        elif unit.kind == RUN:
            self._trained(self._split_of(unit), outcome)
        self._returned(unit.plan, unit.rows, outcome)
        return outcome

    def failed(self, unit: Unit, reason: str) -> Outcome:
        """``unit`` failed (``reason``): its rows and those of the units that needed it are given up, each named in
        :attr:`Outcome.failures`."""
        outcome = Outcome(unit, failures=[f"{unit.describe()}: {reason}"])
        self._release_slot(unit)
        if unit.kind in (BACKBONE, RUN):
            split = self._split_of(unit)
            split.failed = True
            for run in unit.runs:
                if unit.kind == BACKBONE:  # the run's calibrate units (or run unit) will not come
                    for c in split.alone[run]:
                        self._not_run(unit.plan, [run], c, f"its backbone ({unit.describe()}) failed", outcome)
                self._trained(split, outcome)
        self._returned(unit.plan, unit.rows, outcome)
        return outcome

    def _split_of(self, unit: Unit) -> _Split:
        return self._splits[(unit.plan.name, unit.runs[0].split)]

    def _release_slot(self, unit: Unit) -> None:
        if unit in self.in_flight:
            device = self.in_flight.pop(unit)
            if device is not None:
                self.load[device] -= 1

    def _trained(self, split: _Split, outcome: Outcome) -> None:
        """One run of ``split`` has its backbone (or will not): once all have, its fitted-together units."""
        split.waiting -= 1
        if split.waiting:
            return
        for name, runs in split.together.items():
            if split.failed:
                self._not_run(split.plan, runs, name, f"a backbone of split {runs[0].split} failed", outcome)
            else:
                self.ready.append(self._unit(CALIBRATE, split.plan, runs, [name], together=True))

    def _not_run(self, plan: BenchmarkPlan, runs: list[Run], name: str, reason: str, outcome: Outcome) -> None:
        outcome.failures.append(f"calibrate {runs[0].tag()}{f' and {len(runs) - 1} more runs' if len(runs) > 1 else ''}"
                                f" {name}: not run, {reason}")
        self._returned(plan, len(runs), outcome)

    def _returned(self, plan: BenchmarkPlan, rows: int, outcome: Outcome) -> None:
        if not rows:
            return
        self.returned += rows
        self._outstanding[plan.name] -= rows
        if self._outstanding[plan.name] == 0:
            order_rows(plan)
            outcome.finished.append(plan)


__all__ = ["BACKBONE", "CALIBRATE", "COMPUTED_KINDS", "FAKE_DEVICES_ENV", "GRANULARITIES", "RUN", "DeviceLayout",
           "Outcome", "Schedule", "Unit", "backbone_stats", "compute_unit", "device_count", "device_layout",
           "mps_status", "plan_kind", "unit_settings"]
