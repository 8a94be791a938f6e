"""The ledger: what a results folder holds of a benchmark plan, read from the results themselves.

A finished calibration is its row in ``<out_dir>/results.csv``, found by its key::

    (dataset, backbone, calibrator, split, init, fold, seed, label rate) and calibrator_digest

where ``calibrator_digest`` is the plan's :func:`~simcalib.experiment.protocol.row_definition` digest: the
calibrator's resolved options and the declared versions of the numbers (the calibrator class's
``numbers_version``, the backbone, metrics and protocol versions, each from 2 on). A finished backbone is its
entry in the backbone cache (:func:`~simcalib.experiment.protocol.train_run_backbone` loads it). Nothing else is
recorded: "complete", "progress" and "what is left" are derived from the plan and the rows
(:func:`read_ledger`), by ``simcalib benchmark`` (:mod:`simcalib.experiment.executor`), ``simcalib study run``
(``flows/study.py``) and ``simcalib study check`` alike. Editing a comment or refactoring keeps every row;
bumping one calibrator's version recomputes its rows only.

One rule: **a run's rows share one backbone** (their ``backbone_digest``). The same seed trains other weights
on another CPU model, so a row computed here for a run whose rows were computed elsewhere would pair two
backbones; :meth:`BenchmarkLedger.check_backbone` refuses it with the command that recomputes the whole run here.
Rows already in a file on two backbones (written before the rule) are reported by :attr:`mixed_runs`, and the
paired tests of the report leave their pairs across backbones out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from simcalib.errors import ConfigError
from simcalib.experiment.plan import BenchmarkPlan
from simcalib.experiment.protocol import Run
from simcalib.store.integrity import CALIBRATOR_DIGEST_COLUMN, comparable_rate, is_known
from simcalib.store.results_store import read_results, rewrite_results

RESULTS = "results.csv"



def run_label(run: Run) -> str:
    return f"s{run.split} i{run.init} f{run.fold}"


class BackboneMismatchError(ConfigError):
    """A row of a run computed on another backbone than the run's rows already in the results file."""


@dataclass
class BenchmarkLedger:
    """What ``plan.out_dir/results.csv`` holds of ``plan`` (:func:`read_ledger`)."""

    plan: BenchmarkPlan
    done: dict[Run, set[str]]  # run -> calibrators with a row of the plan's definition
    superseded: dict[str, int]  # calibrator -> rows of planned runs under another definition (computed again)
    backbones: dict[Run, set[str]]  # run -> backbone digests of its rows in the file (any calibrator)
    rows: int = 0  # rows in the file (all calibrators and label rates)
    fit_seconds: float = 0.0  # over the plan's rows found
    refused: list[str] = field(default_factory=list)  # rows not added (another backbone), one line each

    @property
    def results(self) -> Path:
        return self.plan.out_dir / RESULTS

    def todo(self, run: Run) -> list[str]:
        """The calibrators of ``run`` without a row, in the plan's order."""
        have = self.done.get(run, set())
        return [c for c in self.plan.calibrator_names if c not in have]

    def runs_left(self) -> list[Run]:
        return [run for run in self.plan.runs if self.todo(run)]

    def runs_with(self, calibrator: str) -> int:
        """The plan's runs with a row of ``calibrator`` under the plan's definition."""
        return sum(1 for run in self.plan.runs if calibrator in self.done.get(run, ()))

    @property
    def runs_complete(self) -> int:
        """The plan's runs with a row of every planned calibrator."""
        return sum(1 for run in self.plan.runs if not self.todo(run))

    @property
    def calibrations(self) -> int:
        return len(self.plan.runs) * len(self.plan.calibrators)

    @property
    def calibrations_done(self) -> int:
        return sum(len(c) for c in self.done.values())

    @property
    def complete(self) -> bool:
        return self.calibrations_done == self.calibrations

    @property
    def mixed_runs(self) -> tuple[Run, ...]:
        """The plan's runs whose rows in the file carry more than one backbone digest."""
        return tuple(run for run in self.plan.runs if len(self.backbones.get(run, ())) > 1)

    def check_backbone(self, row: dict) -> None:
        """Refuse (:class:`BackboneMismatchError`) ``row`` when its run's rows in the file name another backbone;
        else remember its backbone as the run's."""
        run = Run(row["dataset"], row["backbone"], int(row["split"]), int(row["init"]), int(row["fold"]))
        digest = row.get("backbone_digest")
        known = self.backbones.get(run, set())
        if is_known(digest) and known and str(digest) not in known:
            raise BackboneMismatchError(
                f"{self.plan.name} {run_label(run)}: {row['calibrator']} was computed on backbone {digest}, the "
                f"run's rows in {self.results} on {', '.join(sorted(known))} (trained on another machine or CPU "
                f"model); a run's rows share one backbone, so it is not added. To compute the whole run here: "
                f"{forget_command(self.plan, run)}, then run the same command again")
        if is_known(digest):
            self.backbones.setdefault(run, set()).add(str(digest))

    def accept(self, rows: Sequence[dict]) -> list[dict]:
        """The rows of ``rows`` that keep the rule (:meth:`check_backbone`); each refused one joins :attr:`refused`."""
        kept = []
        for row in rows:
            try:
                self.check_backbone(row)
            except BackboneMismatchError as exc:
                self.refused.append(str(exc))
                continue
            kept.append(row)
            run = Run(row["dataset"], row["backbone"], int(row["split"]), int(row["init"]), int(row["fold"]))
            self.done.setdefault(run, set()).add(row["calibrator"])
        return kept

    def line(self) -> str:
        """One line of progress, as ``simcalib study check`` prints it."""
        plan = self.plan
        mixed = self.mixed_runs
        if self.complete:
            text = f"{plan.name}: complete ({len(plan.runs)} runs x {len(plan.calibrators)} calibrators in {RESULTS})"
        elif not self.calibrations_done:
            text = (f"{plan.name}: nothing done ({len(plan.runs)} runs, {self.calibrations} calibrations to compute"
                    + (f"; {RESULTS} holds {self.rows} rows of other runs, calibrators or definitions)" if self.rows
                       else ")"))
        else:
            text = (f"{plan.name}: {self.runs_complete} of {len(plan.runs)} runs complete, calibrations {self.calibrations_done} "
                    f"of {self.calibrations} ({len(self.runs_left())} runs with work left)")
            if self.fit_seconds:
                text += f"; fits so far {self.fit_seconds / 3600:.2f} task-hours"
        if self.superseded:
            parts = ", ".join(f"{n} of {c}" for c, n in self.superseded.items())
            text += f"; rows under another definition, computed again: {parts}"
        if mixed:
            text += (f"; {len(mixed)} run{'s' if len(mixed) != 1 else ''} with rows on two backbones "
                     f"({', '.join(run_label(r) for r in mixed)}; backbone_digest): the paired tests leave out its "
                     f"pairs across backbones; to compute such a run again on one: {forget_command(plan, mixed[0])}")
        return text


def _planned_keys(plan: BenchmarkPlan) -> dict[tuple, Run]:
    rate = comparable_rate(plan.settings.label_rate)
    return {(run.split, run.init, run.fold, seed, rate): run for run, seed in zip(plan.runs, plan.seeds)}


def ledger_of(plan: BenchmarkPlan, frame: pd.DataFrame) -> BenchmarkLedger:
    """:class:`BenchmarkLedger` of ``plan`` over the results rows ``frame``."""
    planned = _planned_keys(plan)
    digests = {c.name: c.digest for c in plan.calibrators}
    done: dict[Run, set[str]] = {}
    superseded: dict[str, int] = {}
    backbones: dict[Run, set[str]] = {}
    seconds = 0.0
    if not frame.empty:
        ours = frame[(frame["dataset"] == plan.dataset) & (frame["backbone"] == plan.backbone)]
        has_digest = CALIBRATOR_DIGEST_COLUMN in ours.columns
        for row in ours.to_dict("records"):
            try:
                key = (int(row["split"]), int(row["init"]), int(row["fold"]), int(row["seed"]),
                       comparable_rate(row["label_rate"]))
            except (TypeError, ValueError):
                continue
            run = planned.get(key)
            if run is None:
                continue
            if is_known(row.get("backbone_digest")):
                backbones.setdefault(run, set()).add(str(row["backbone_digest"]))
            name = row["calibrator"]
            if name not in digests:
                continue  # a calibrator the plan does not run (a sweep by another command): kept, not counted
            digest = row.get(CALIBRATOR_DIGEST_COLUMN) if has_digest else None
            if is_known(digest) and str(digest) != digests[name]:
                superseded[name] = superseded.get(name, 0) + 1
                continue
            done.setdefault(run, set()).add(name)
            if isinstance(row.get("fit_seconds"), (int, float)) and np.isfinite(row["fit_seconds"]):
                seconds += float(row["fit_seconds"])
    return BenchmarkLedger(plan, done, superseded, backbones, len(frame), seconds)


def read_ledger(plan: BenchmarkPlan) -> BenchmarkLedger:
    """What ``plan.out_dir/results.csv`` holds of ``plan``: its rows of the plan's runs and definitions."""
    return ledger_of(plan, read_results(plan.out_dir / RESULTS))


def drop_superseded(ledger: BenchmarkLedger) -> int:
    """Remove from the results file the rows of the plan's runs under another definition of a planned
    calibrator (they are computed again under the plan's); returns how many."""
    if not ledger.superseded:
        return 0
    frame = read_results(ledger.results)
    planned = _planned_keys(ledger.plan)
    digests = {c.name: c.digest for c in ledger.plan.calibrators}

    def stale(row) -> bool:
        try:
            key = (int(row["split"]), int(row["init"]), int(row["fold"]), int(row["seed"]), comparable_rate(row["label_rate"]))
        except (TypeError, ValueError):
            return False
        digest = row.get(CALIBRATOR_DIGEST_COLUMN)
        return (row["dataset"] == ledger.plan.dataset and row["backbone"] == ledger.plan.backbone
                and key in planned and row["calibrator"] in digests and is_known(digest)
                and str(digest) != digests[row["calibrator"]])

    mask = np.array([stale(row) for row in frame.to_dict("records")], dtype=bool)
    _rewrite_rows(ledger.results, frame, ~mask)
    removed = int(mask.sum())
    ledger.superseded = {}
    return removed


def _rewrite_rows(path: Path, frame: pd.DataFrame, keep: np.ndarray) -> None:
    """Keep the rows ``keep`` of the results file ``path``: their lines are copied as they are (every digit)."""
    import csv
    import io

    text = path.read_text()
    reader = list(csv.reader(io.StringIO(text)))
    header, records = reader[0], reader[1:]
    if len(records) != len(frame):  # a line cut off by a kill, or quoted newlines: rewrite through pandas
        rewrite_results(path, frame[keep])
        return
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(record for record, k in zip(records, keep) if k)
    partial = path.with_name(path.name + ".part")
    partial.write_text(out.getvalue())
    partial.replace(path)


def order_rows(plan: BenchmarkPlan) -> None:
    """Rewrite the benchmark's results file in the plan's order (run, then calibrator), rows of other calibrators
    or runs after them; every line is copied as it is."""
    path = plan.out_dir / RESULTS
    frame = read_results(path)
    if frame.empty:
        return
    runs = {(r.split, r.init, r.fold): i for i, r in enumerate(plan.runs)}
    names = {c: i for i, c in enumerate(plan.calibrator_names)}
    rate = comparable_rate(plan.settings.label_rate)
    keys = []
    for position, row in enumerate(frame.to_dict("records")):
        ours = (row["dataset"] == plan.dataset and row["backbone"] == plan.backbone and row["calibrator"] in names
                and comparable_rate(row["label_rate"]) == rate)
        run = runs.get((int(row["split"]), int(row["init"]), int(row["fold"]))) if ours else None
        keys.append((0, run, names[row["calibrator"]]) if run is not None else (1, position, 0))
    order = sorted(range(len(keys)), key=keys.__getitem__)
    if order == list(range(len(keys))):
        return
    import csv
    import io

    records = list(csv.reader(io.StringIO(path.read_text())))
    if len(records) - 1 != len(frame):
        rewrite_results(path, frame.iloc[order])
        return
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(records[0])
    writer.writerows(records[1 + i] for i in order)
    partial = path.with_name(path.name + ".part")
    partial.write_text(out.getvalue())
    partial.replace(path)


def forget_command(plan: BenchmarkPlan, run: Run) -> str:
    """The command that removes ``run``'s rows from the benchmark's results file (so it is computed whole)."""
    return f"simcalib study forget {plan.out_dir / RESULTS} --run {run.split},{run.init},{run.fold}"


def forget_run(results: Path, split: int, init: int, fold: int, calibrators: Iterable[str] | None = None) -> int:
    """Remove the rows of run (split, init, fold) (of ``calibrators`` only, when given) from ``results``; returns
    how many (every other line is kept as it is)."""
    frame = read_results(results)
    if frame.empty:
        return 0
    names = set(calibrators) if calibrators else None
    mask = ((frame["split"].astype(int) == split) & (frame["init"].astype(int) == init)
            & (frame["fold"].astype(int) == fold))
    if names is not None:
        mask &= frame["calibrator"].isin(names)
    _rewrite_rows(results, frame, ~mask.to_numpy())
    return int(mask.sum())


__all__ = ["BackboneMismatchError", "BenchmarkLedger", "drop_superseded", "forget_command", "forget_run",
           "ledger_of", "order_rows", "read_ledger", "run_label"]
