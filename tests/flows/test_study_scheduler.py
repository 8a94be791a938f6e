"""The study flow's scheduler (``flows.study._Scheduler``) on fake tasks, over the ledger
(:mod:`simcalib.experiment.ledger`): what it submits when, and what it takes from the benchmark's results.csv
instead of submitting.

The fake tasks finish only when a test says so, oldest first (a task runner's queue), so every step is
deterministic; the real tasks and Prefect run in test_study_flow.py."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from types import SimpleNamespace

import pandas as pd
import pytest

import flows.study
from flows.study import _Scheduler, fitted_together
from simcalib.experiment.ledger import forget_run, read_ledger
from simcalib.experiment.plan import plan_study
from simcalib.experiment.study import load_study
from simcalib.store.integrity import CALIBRATOR_DIGEST_COLUMN

CALIBRATORS = ["UnCal", "TS", "VS", "ETS"]


class FakeFuture:
    def __init__(self, kind: str, what: str, result):
        self.kind, self.what, self._result = kind, what, result
        self.done = False
        self.callbacks: list = []
        completed = SimpleNamespace(name="Completed", message=None, is_completed=lambda: True, is_final=lambda: True)
        self.state = completed

    def add_done_callback(self, fn) -> None:
        fn(self) if self.done else self.callbacks.append(fn)

    def wait(self) -> None:
        assert self.done

    def result(self):
        return self._result

    def finish(self) -> None:
        self.done = True
        for fn in self.callbacks:
            fn(self)


class FakeTask:
    """Records each submission; refuses one whose ``wait_for`` has not finished (it would hold a resolver thread).
    Its rows carry ``machine.backbone``, the digest of the backbones of the machine it stands for."""

    def __init__(self, kind: str, submitted: list[FakeFuture], plan, machine):
        self.kind, self.submitted, self.plan, self.machine = kind, submitted, plan, machine

    def with_options(self, **_):
        return self

    def submit(self, *args, wait_for=None):
        assert all(f.done for f in wait_for or []), f"{self.kind} submitted before its dependencies finished"
        run = args[0]
        if self.kind == "pretrain":
            future = FakeFuture("pretrain", run.tag(), {"run": run.tag(), "val_accuracy": 0.5})
        elif isinstance(run, list):  # fitted on a split's runs together: one row per run
            future = FakeFuture("calibrate", f"split s{run[0].split} {args[2]}", [self._row(r, args[2]) for r in run])
        else:
            future = FakeFuture("calibrate", f"{run.tag()} {args[2]}", self._row(run, args[2]))
        self.submitted.append(future)
        return future

    def _row(self, run, calibrator: str) -> dict:
        benchmark = self.plan.benchmarks[0]
        digest = {c.name: c.digest for c in benchmark.calibrators}[calibrator]
        return {"dataset": run.dataset, "backbone": run.backbone, "calibrator": calibrator, "split": run.split,
                "init": run.init, "fold": run.fold, "seed": benchmark.seed(run), "ece": 0.1 * run.fold,
                "label_rate": benchmark.settings.label_rate, "backbone_digest": self.machine.backbone,
                CALIBRATOR_DIGEST_COLUMN: digest}


@pytest.fixture
def tiny_plan(study_env, tmp_path):
    path = study_env.write("scheduled", calibrators=CALIBRATORS, output=str(tmp_path / "out"))
    return plan_study(load_study(path), data=False)


@pytest.fixture
def logged(monkeypatch):
    """The benchmarks the scheduler handed to MLflow (their names)."""
    names: list[str] = []
    monkeypatch.setattr(flows.study, "_log_benchmark",
                        lambda study, plan, written, stats, tracker, logger: names.append(plan.name) or written)
    return names


def _scheduler(plan, monkeypatch, backbone: str = "machine-a") -> tuple[_Scheduler, list[FakeFuture]]:
    submitted: list[FakeFuture] = []
    machine = SimpleNamespace(backbone=backbone)
    for name, kind in (("pretrain", "pretrain"), ("pretrain_batch", "batch"), ("calibrate", "calibrate"),
                       ("calibrate_runs", "calibrate-runs")):
        monkeypatch.setattr(flows.study, name, FakeTask(kind, submitted, plan, machine))
    scheduler = _Scheduler(plan, logging.getLogger("test"), contextlib.ExitStack())
    for benchmark in plan.benchmarks:
        scheduler.plan_benchmark(benchmark)
    scheduler.start(tracker=None)
    return scheduler, submitted


def _finish_oldest(scheduler: _Scheduler, submitted: list[FakeFuture]) -> FakeFuture:
    future = next(f for f in submitted if not f.done)
    future.finish()
    scheduler.handle(next(iter(scheduler.completions)))
    return future


def _finish_all(scheduler: _Scheduler, submitted: list[FakeFuture]) -> None:
    while any(not f.done for f in submitted):
        _finish_oldest(scheduler, submitted)


def _rows(plan) -> pd.DataFrame:
    return pd.read_csv(plan.benchmarks[0].out_dir / "results.csv")


def test_backbones_train_one_per_worker_and_a_runs_calibrations_follow_its_own(tiny_plan, monkeypatch, logged):
    scheduler, submitted = _scheduler(tiny_plan, monkeypatch)  # Cora GCN, folds 0-2, 2 workers
    assert [f.what for f in submitted] == ["Cora_GCN_s0_i0_f0", "Cora_GCN_s0_i0_f1"]  # both workers train
    _finish_oldest(scheduler, submitted)  # f0's backbone: its calibrations, then the next backbone, queue up
    assert [f.what for f in submitted[2:]] == [f"Cora_GCN_s0_i0_f0 {c}" for c in CALIBRATORS] + ["Cora_GCN_s0_i0_f2"]
    while any(not f.done for f in submitted):
        _finish_oldest(scheduler, submitted)
        training = [f for f in submitted if f.kind == "pretrain" and not f.done]
        assert len(training) <= 2
    assert len(submitted) == 3 + 12 and logged == ["Cora-GCN"]
    rows = _rows(tiny_plan)  # appended as they came, then put in the plan's order
    assert list(zip(rows["fold"], rows["calibrator"])) == [(fold, c) for fold in range(3) for c in CALIBRATORS]
    assert read_ledger(tiny_plan.benchmarks[0]).complete
    assert sorted(p.name for p in tiny_plan.benchmarks[0].out_dir.iterdir() if p.name != ".simcalib.lock") == [
        "results.csv", "splits.json", "summary.csv"]  # the rows are the record: nothing else is written


def test_a_scheduler_started_again_takes_the_rows_and_trains_only_runs_with_work_left(tiny_plan, monkeypatch, logged):
    first, submitted = _scheduler(tiny_plan, monkeypatch)
    for _ in range(6):  # f0's and f1's backbones, f0's four calibrations; then the machine is gone
        _finish_oldest(first, submitted)
    results = tiny_plan.benchmarks[0].out_dir / "results.csv"
    assert len(_rows(tiny_plan)) == 4
    results.write_text(results.read_text() + "Cora,GCN,TS,0,0,2")  # a kill in the middle of a line

    again, submitted = _scheduler(tiny_plan, monkeypatch)
    assert again.rows_found == 4 and again.calibrations == 8  # f0: nothing left, no backbone needed
    assert [f.what for f in submitted] == ["Cora_GCN_s0_i0_f1", "Cora_GCN_s0_i0_f2"]
    _finish_all(again, submitted)
    rows = _rows(tiny_plan)
    assert list(zip(rows["fold"], rows["calibrator"])) == [(fold, c) for fold in range(3) for c in CALIBRATORS]


def test_a_complete_benchmark_is_not_submitted(tiny_plan, monkeypatch, logged):
    first, submitted = _scheduler(tiny_plan, monkeypatch)
    _finish_all(first, submitted)
    before = (tiny_plan.benchmarks[0].out_dir / "results.csv").read_bytes()
    again, submitted = _scheduler(tiny_plan, monkeypatch)
    assert submitted == [] and again.complete == {"Cora-GCN"} and again.rows_found == 12
    assert (tiny_plan.benchmarks[0].out_dir / "results.csv").read_bytes() == before
    assert logged == ["Cora-GCN", "Cora-GCN"]


def test_a_row_on_another_machines_backbone_is_refused_naming_the_command_that_recomputes_the_run(
        tiny_plan, monkeypatch, logged):
    first, submitted = _scheduler(tiny_plan, monkeypatch, backbone="machine-a")
    for _ in range(4):  # f0's and f1's backbones, f0's UnCal and TS; then the machine is gone
        _finish_oldest(first, submitted)

    again, submitted = _scheduler(tiny_plan, monkeypatch, backbone="machine-b")  # the same seed, other weights
    _finish_all(again, submitted)
    (refused, other) = again.ledgers["Cora-GCN"].refused
    results = tiny_plan.benchmarks[0].out_dir / "results.csv"
    assert refused.startswith("Cora-GCN s0 i0 f0: VS was computed on backbone machine-b, the run's rows in ")
    assert refused.endswith(f"not added. To compute the whole run here: simcalib study forget {results} --run 0,0,0, "
                            "then run the same command again")
    rows = _rows(tiny_plan)
    assert len(rows) == 2 + 8 and set(rows[rows.fold == 0]["backbone_digest"]) == {"machine-a"}
    assert set(rows[rows.fold > 0]["backbone_digest"]) == {"machine-b"}

    assert forget_run(results, 0, 0, 0) == 2  # the fix the line names: then the run is computed whole, here
    third, submitted = _scheduler(tiny_plan, monkeypatch, backbone="machine-b")
    assert [f.what for f in submitted] == ["Cora_GCN_s0_i0_f0"]
    _finish_all(third, submitted)
    assert third.ledgers["Cora-GCN"].refused == [] and set(_rows(tiny_plan)["backbone_digest"]) == {"machine-b"}


def test_a_run_with_rows_on_two_backbones_is_reported_by_the_ledger(tiny_plan, monkeypatch, logged):
    first, submitted = _scheduler(tiny_plan, monkeypatch)
    _finish_all(first, submitted)
    results = tiny_plan.benchmarks[0].out_dir / "results.csv"
    frame = pd.read_csv(results)
    frame.loc[(frame.fold == 1) & (frame.calibrator == "TS"), "backbone_digest"] = "machine-b"
    frame.to_csv(results, index=False)
    ledger = read_ledger(tiny_plan.benchmarks[0])
    assert ledger.complete and [r.fold for r in ledger.mixed_runs] == [1]
    assert ledger.line() == (
        "Cora-GCN: complete (3 runs x 4 calibrators in results.csv); 1 run with rows on two backbones (s0 i0 f1; "
        "backbone_digest): the paired tests leave out its pairs across backbones; to compute such a run again on "
        f"one: simcalib study forget {results} --run 0,0,1")


def test_a_changed_definition_recomputes_that_calibrators_rows_only(tiny_plan, monkeypatch, logged):
    first, submitted = _scheduler(tiny_plan, monkeypatch)
    _finish_all(first, submitted)
    benchmark = tiny_plan.benchmarks[0]
    before = _rows(tiny_plan)
    # TS's declared version bumped: its definition digest (the rows' calibrator_digest) moves, nothing else does
    bumped = tuple(dataclasses.replace(c, digest="0" * 12) if c.name == "TS" else c for c in benchmark.calibrators)
    plan = dataclasses.replace(tiny_plan, benchmarks=(dataclasses.replace(benchmark, calibrators=bumped),))
    ledger = read_ledger(plan.benchmarks[0])
    assert ledger.superseded == {"TS": 3} and ledger.calibrations_done == 9
    assert "rows under another definition, computed again: 3 of TS" in ledger.line()
    again, submitted = _scheduler(plan, monkeypatch)
    _finish_all(again, submitted)
    assert sorted(f.what for f in submitted if f.kind == "calibrate") == [f"Cora_GCN_s0_i0_f{f} TS" for f in range(3)]
    after = _rows(plan)
    assert list(zip(after["fold"], after["calibrator"])) == [(fold, c) for fold in range(3) for c in CALIBRATORS]
    assert set(after[after.calibrator == "TS"][CALIBRATOR_DIGEST_COLUMN]) == {"000000000000"}
    others = after.calibrator != "TS"
    pd.testing.assert_frame_equal(after[others].reset_index(drop=True),
                                  before[before.calibrator != "TS"].reset_index(drop=True))


def test_a_splits_calibrators_fitted_together_cover_the_runs_missing_their_rows(study_env, tmp_path, monkeypatch,
                                                                                 logged):
    path = study_env.write("together", calibrators=CALIBRATORS, output=str(tmp_path / "out"),
                           runs={"splits": 1, "inits": 1, "folds": 3, "batch_calibrators": True})
    plan = plan_study(load_study(path), data=False)
    together = fitted_together(plan, plan.benchmarks[0])
    assert together and together < set(CALIBRATORS)
    first, submitted = _scheduler(plan, monkeypatch)
    _finish_all(first, submitted)
    assert sorted(f.what for f in submitted if f.what.startswith("split")) == sorted(f"split s0 {c}" for c in together)
    results = plan.benchmarks[0].out_dir / "results.csv"
    assert forget_run(results, 0, 0, 2) == 4

    again, submitted = _scheduler(plan, monkeypatch)
    assert [f.what for f in submitted] == ["Cora_GCN_s0_i0_f2"]  # the one run with fits left
    _finish_all(again, submitted)
    refit = [f for f in submitted if f.what.startswith("split")]
    assert sorted(f.what for f in refit) == sorted(f"split s0 {c}" for c in together)
    assert all(len(f.result()) == 1 for f in refit)  # on the run missing its rows only
    assert read_ledger(plan.benchmarks[0]).complete and len(_rows(plan)) == 12
