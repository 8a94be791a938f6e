"""Which benchmarks of a study a report shows: those complete in the rows it read, by the study's plan and ledger.

A benchmark of a study (one :class:`~simcalib.experiment.plan.BenchmarkPlan`: dataset x backbone x label rate) is
complete when every planned run has a row of every planned calibrator under the plan's definition, which is the
ledger's :attr:`~simcalib.experiment.ledger.BenchmarkLedger.complete` as ``simcalib study check`` prints it. The
ledger is read by :func:`~simcalib.experiment.ledger.ledger_of` from the rows the report loaded, so a results file
that grows while the report renders is judged as it was read. The plan is made without the data
(``plan_study(..., data=False)``): completeness needs the runs, seeds and calibrator digests only.

A report over a study's results (a ``reports/reports.yaml`` entry's ``study``, ``simcalib report STUDY.yaml``, a
``reports/leaderboard.yaml`` family's ``study``) keeps the rows of the study's complete benchmarks (and of any
benchmark the study does not plan: the heterophily report's homophilous reference folder) and leaves out every row
of the others, which it names in one line with how far each is::

    Left out until complete (every planned run with a row of each planned calibrator): Pubmed GCN: 37 of 75 runs;
    Pubmed GAT: not started (study/offline.yaml)

A report whose results folder only its study files write (the AutoCal report's) also leaves out, and names, the
rows of a benchmark that none of them plans: a slice whose study file the report does not list.

"N of R runs" counts the runs with a row of every planned calibrator (:attr:`BenchmarkLedger.runs_complete`).

The kind reports (shift, conformal) read slices that compute some calibrators of a benchmark before others, so
they apply the same ledger per calibrator (:func:`complete_calibrators`): a planned calibrator enters a benchmark's
tables once it has a row of the plan's definition on every planned run of that benchmark, and is named until then::

    `Photo_GAT`: GATS, TS with at most 7 of 15 runs; left out until complete
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from simcalib.errors import ConfigError
from simcalib.experiment.ledger import BenchmarkLedger, ledger_of
from simcalib.experiment.plan import StudyPlan, plan_study
from simcalib.experiment.study import load_study
from simcalib.report.results import StudyResults
from simcalib.store.integrity import comparable_rate

LEFT_OUT = "left out until complete"
INCOMPLETE = f"{LEFT_OUT.capitalize()} (every planned run with a row of each planned calibrator)"


def benchmark_label(ledger: BenchmarkLedger) -> str:
    """``Pubmed GCN`` (with a label-rate sweep's variant: ``Cora GCN-rate0.05``)."""
    plan = ledger.plan
    return f"{plan.dataset} {plan.backbone}{plan.variant}"


def progress(ledger: BenchmarkLedger) -> str:
    """How far an incomplete benchmark is: ``not started`` or ``37 of 75 runs``."""
    if not ledger.calibrations_done:
        return "not started"
    return f"{ledger.runs_complete} of {len(ledger.plan.runs)} runs"


@dataclass(frozen=True)
class Completeness:
    """The ledger of each protocol benchmark of the study file ``study`` over one report's rows."""

    study: str
    ledgers: tuple[BenchmarkLedger, ...]
    planned: frozenset[tuple[str, str]]  # (dataset, backbone) of every benchmark the study plans

    @property
    def incomplete(self) -> tuple[BenchmarkLedger, ...]:
        return tuple(ledger for ledger in self.ledgers if not ledger.complete)

    def line(self) -> str:
        """The incomplete benchmarks, how far each is and the study file that plans them, in one line; empty when
        every one is complete."""
        parts = [f"{benchmark_label(ledger)}: {progress(ledger)}" for ledger in self.incomplete]
        return f"{'; '.join(parts)} ({self.study})" if parts else ""

    def left_out(self, frame: pd.DataFrame) -> np.ndarray:
        """A mask of the rows of ``frame`` (results rows or the index of saved predictions) that belong to an
        incomplete benchmark: its dataset and backbone, at its label rate or at an unknown one."""
        mask = np.zeros(len(frame), dtype=bool)
        if frame.empty or not self.incomplete:
            return mask
        rates = np.array([comparable_rate(v) for v in frame["label_rate"]], dtype=float) \
            if "label_rate" in frame.columns else np.full(len(frame), np.nan)
        dataset, backbone = frame["dataset"].astype(str).to_numpy(), frame["backbone"].astype(str).to_numpy()
        for ledger in self.incomplete:
            plan = ledger.plan
            rate = comparable_rate(plan.settings.label_rate)
            mask |= (dataset == plan.dataset) & (backbone == plan.backbone) & (np.isnan(rates) | (rates == rate))
        return mask


def study_plan(study_file: str | os.PathLike) -> StudyPlan:
    """The plan of the study file ``study_file``, made without the data (runs, seeds and calibrator digests)."""
    path = Path(study_file)
    if not path.is_file():
        raise ConfigError(f"study file {path} does not exist; name the study whose results the report reads "
                          "(e.g. study/offline.yaml)")
    return plan_study(load_study(path), data=False)


def study_completeness(study_file: str | os.PathLike, rows: pd.DataFrame) -> Completeness:
    """The ledgers of the protocol benchmarks that the study file ``study_file`` plans, over ``rows``."""
    plan = study_plan(study_file)
    return Completeness(str(study_file), tuple(ledger_of(b, rows) for b in plan.benchmarks if b.kind == "protocol"),
                        frozenset((b.dataset, b.backbone) for b in plan.benchmarks))


def complete_calibrators(rows: pd.DataFrame, plan: StudyPlan | None) -> tuple[pd.DataFrame, list[str]]:
    """``rows`` (results rows, each with its results ``folder``) less the rows of every calibrator that ``plan``
    plans for the folder's benchmark and that the benchmark's ledger finds on fewer than all planned runs, and one
    line per folder naming them (calibrators without any row are not named; nothing is left out without ``plan``)."""
    if plan is None or rows.empty:
        return rows, []
    drop, lines = np.zeros(len(rows), dtype=bool), []
    folders = rows["folder"].to_numpy()
    for benchmark in sorted(plan.benchmarks, key=lambda b: b.out_dir.name):
        folder = benchmark.out_dir.name
        ours = folders == folder
        if not ours.any():
            continue
        ledger = ledger_of(benchmark, rows[ours])
        present = set(rows.loc[ours, "calibrator"])
        runs = {name: ledger.runs_with(name) for name in benchmark.calibrator_names if name in present}
        short = {name: n for name, n in runs.items() if n < len(benchmark.runs)}
        if not short:
            continue
        drop |= ours & rows["calibrator"].isin(short).to_numpy()
        lines.append(f"`{folder}`: {', '.join(sorted(short))} with at most {max(short.values())} of "
                     f"{len(benchmark.runs)} runs; {LEFT_OUT}")
    return (rows[~drop], lines) if drop.any() else (rows, lines)


def _planned_only(rows: pd.DataFrame, predictions: pd.DataFrame,
                  planned: set[tuple[str, str]]) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """``rows`` and ``predictions`` without those of a (dataset, backbone) outside ``planned``, and the labels of
    the benchmarks left out (``Actor GCN``)."""
    def mask(frame: pd.DataFrame) -> np.ndarray:
        if frame.empty:
            return np.ones(len(frame), dtype=bool)
        keys = zip(frame["dataset"].astype(str), frame["backbone"].astype(str))
        return np.fromiter((key in planned for key in keys), dtype=bool, count=len(frame))

    keep = mask(rows)
    if keep.all():
        return rows, predictions, []
    unplanned = sorted({f"{d} {b}" for d, b in zip(rows["dataset"][~keep], rows["backbone"][~keep])})
    if len(predictions):
        predictions = predictions[mask(predictions)].reset_index(drop=True)
    return rows[keep].reset_index(drop=True), predictions, unplanned


def study_files(study: str | os.PathLike | Sequence[str | os.PathLike] | None) -> list[str | os.PathLike]:
    """The study files a report's ``study`` names: none, one, or a list of those writing into one results folder."""
    if study is None:
        return []
    return [study] if isinstance(study, (str, os.PathLike)) else list(study)


def complete_only(results: StudyResults,
                  study_file: str | os.PathLike | Sequence[str | os.PathLike] | None,
                  keep_unplanned: bool = True) -> StudyResults:
    """``results`` without the rows and saved predictions of the incomplete benchmarks of ``study_file`` (one study
    file, or several whose benchmarks share the results folder), its ``left_out`` line naming them
    (:meth:`Completeness.line`, one per study); ``study_file`` None: ``results`` as they are. With
    ``keep_unplanned`` False, the rows of benchmarks that none of the study files plans are left out too and named
    (a folder that only those studies write, where such rows come from a slice the report does not list)."""
    if study_file is None:
        return results
    rows, predictions, lines = results.rows, results.predictions, []
    files, planned = study_files(study_file), set()
    for file in files:
        completeness = study_completeness(file, rows)
        planned |= completeness.planned
        rows = rows[~completeness.left_out(rows)].reset_index(drop=True)
        if len(predictions):
            predictions = predictions[~completeness.left_out(predictions)].reset_index(drop=True)
        line = completeness.line()
        if line:
            lines.append(line)
    sentences = [f"{INCOMPLETE}: {'; '.join(lines)}"] if lines else []
    if not keep_unplanned:
        rows, predictions, unplanned = _planned_only(rows, predictions, planned)
        if unplanned:
            sentences.append(f"{', '.join(unplanned)}: planned by none of {', '.join(map(str, files))}; left out "
                             "(add the study file that computes them to the report's study)")
    return replace(results, rows=rows, predictions=predictions, notes=list(results.notes),
                   left_out=". ".join(sentences))


__all__ = ["LEFT_OUT", "Completeness", "benchmark_label", "complete_calibrators", "complete_only", "progress",
           "study_completeness", "study_files", "study_plan"]
