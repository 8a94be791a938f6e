"""The study flow's scheduler (``flows.study._Scheduler``) on fake tasks: what it submits when, and what it takes
from a benchmark's finished-tasks record instead of submitting.

The fake tasks finish only when a test says so, oldest first (a task runner's queue), so every step is
deterministic; the real tasks and Prefect run in test_study_flow.py."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import pytest

import flows.study
from flows.study import FINISHED_TASKS, _Scheduler, benchmark_progress, fitted_together
from simcalib.experiment.plan import plan_study
from simcalib.experiment.study import load_study

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
    Its rows carry ``backbone``, the digest of the backbones of the machine it stands for."""

    def __init__(self, kind: str, submitted: list[FakeFuture], backbone: str = "machine-a"):
        self.kind, self.submitted, self.backbone = kind, submitted, backbone

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
        return {"calibrator": calibrator, "split": run.split, "init": run.init, "fold": run.fold, "ece": 0.1 * run.fold,
                "backbone_digest": self.backbone}


@pytest.fixture
def tiny_plan(study_env, tmp_path):
    path = study_env.write("scheduled", calibrators=CALIBRATORS, output=str(tmp_path / "out"))
    return plan_study(load_study(path), data=False)


@pytest.fixture
def finished(monkeypatch):
    """The benchmarks the scheduler finished: (benchmark, its rows in order)."""
    written: list[tuple[str, list[dict]]] = []
    monkeypatch.setattr(flows.study, "_finish_benchmark",
                        lambda study, plan, rows, stats, key, tracker, logger: written.append((plan.name, rows)) or {})
    return written


def _scheduler(plan, backbone: str = "machine-a") -> tuple[_Scheduler, list[FakeFuture]]:
    submitted: list[FakeFuture] = []
    scheduler = _Scheduler(plan, logging.getLogger("test"), FakeTask("pretrain", submitted, backbone),
                           FakeTask("calibrate", submitted, backbone), FakeTask("calibrate-runs", submitted, backbone))
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


def test_backbones_train_one_per_worker_and_a_runs_calibrations_follow_its_own(tiny_plan, finished):
    scheduler, submitted = _scheduler(tiny_plan)  # Cora GCN, folds 0-2, 2 workers
    assert [f.what for f in submitted] == ["Cora_GCN_s0_i0_f0", "Cora_GCN_s0_i0_f1"]  # both workers train
    _finish_oldest(scheduler, submitted)  # f0's backbone: its calibrations, then the next backbone, queue up
    assert [f.what for f in submitted[2:]] == [f"Cora_GCN_s0_i0_f0 {c}" for c in CALIBRATORS] + ["Cora_GCN_s0_i0_f2"]
    while any(not f.done for f in submitted):
        _finish_oldest(scheduler, submitted)
        training = [f for f in submitted if f.kind == "pretrain" and not f.done]
        assert len(training) <= 2
    assert len(submitted) == 3 + 12
    (name, rows), = finished
    assert name == "Cora-GCN" and [(r["fold"], r["calibrator"]) for r in rows] == [
        (fold, c) for fold in range(3) for c in CALIBRATORS]
    assert not (tiny_plan.benchmarks[0].out_dir / FINISHED_TASKS).exists()  # complete: results.csv holds the rows


def test_a_scheduler_started_again_takes_the_recorded_tasks_and_trains_only_runs_with_work_left(tiny_plan, finished):
    first, submitted = _scheduler(tiny_plan)
    for _ in range(6):  # f0's and f1's backbones, f0's four calibrations; then the machine is gone
        _finish_oldest(first, submitted)
    record = tiny_plan.benchmarks[0].out_dir / FINISHED_TASKS
    keys = [json.loads(line)["key"] for line in record.read_text().splitlines()]
    assert [k.split("-")[0] for k in keys] == ["pretrain", "pretrain"] + ["calibrate"] * 4
    record.write_text(record.read_text() + '{"key": "calibrate-cut')  # a kill in the middle of a line

    again, submitted = _scheduler(tiny_plan)
    assert again.recorded == {"pretrain": 1, "calibrate": 4}  # f0: nothing left, no backbone needed
    assert [f.what for f in submitted] == ["Cora_GCN_s0_i0_f1", "Cora_GCN_s0_i0_f2"]  # f1 has calibrations left
    _finish_all(again, submitted)
    assert len(submitted) == 2 + 8
    (_, rows), = finished
    assert [(r["fold"], r["calibrator"]) for r in rows] == [(fold, c) for fold in range(3) for c in CALIBRATORS]
    assert not record.exists()


def test_rows_recorded_on_another_machines_backbone_are_computed_again_on_this_ones(tiny_plan, finished, caplog):
    first, submitted = _scheduler(tiny_plan, backbone="machine-a")
    for _ in range(4):  # f0's and f1's backbones, f0's UnCal and TS; then the machine is gone
        _finish_oldest(first, submitted)

    again, submitted = _scheduler(tiny_plan, backbone="machine-b")  # the same seed, other weights
    assert again.recorded == {"pretrain": 0, "calibrate": 2}
    with caplog.at_level(logging.WARNING):
        _finish_all(again, submitted)
    f0 = [f.what for f in submitted if f.what.startswith("Cora_GCN_s0_i0_f0 ")]
    assert f0 == [f"Cora_GCN_s0_i0_f0 {c}" for c in ["VS", "ETS", "UnCal", "TS"]]
    assert "UnCal, TS were computed on another backbone (backbone_digest machine-a" in caplog.text
    (_, rows), = finished
    assert [(r["fold"], r["calibrator"]) for r in rows] == [(fold, c) for fold in range(3) for c in CALIBRATORS]
    assert {r["backbone_digest"] for r in rows} == {"machine-b"}


def test_a_run_recorded_on_two_machines_backbones_is_computed_again_whole(tiny_plan, finished, caplog):
    first, submitted = _scheduler(tiny_plan, backbone="machine-a")
    for _ in range(6):  # f0's and f1's backbones, f0's four calibrations: f0 has nothing left
        _finish_oldest(first, submitted)
    record = tiny_plan.benchmarks[0].out_dir / FINISHED_TASKS
    lines = record.read_text().splitlines()
    lines[-1] = lines[-1].replace("machine-a", "machine-b")  # f0's last calibration recorded on another machine
    record.write_text("\n".join(lines) + "\n")
    (progress,) = benchmark_progress(tiny_plan)
    assert progress.mixed_runs == ("s0 i0 f0",)
    assert "1 run with rows on more than one backbone (s0 i0 f0; backbone_digest) recorded: computed again" in (
        progress.line())

    with caplog.at_level(logging.WARNING):
        again, submitted = _scheduler(tiny_plan, backbone="machine-a")
    assert "Cora_GCN_s0_i0_f0: its recorded rows were computed on 2 backbones" in caplog.text
    assert again.recorded == {"pretrain": 0, "calibrate": 0}
    assert [f.what for f in submitted] == ["Cora_GCN_s0_i0_f0", "Cora_GCN_s0_i0_f1"]
    _finish_all(again, submitted)
    assert len(submitted) == 3 + 12
    (_, rows), = finished
    assert {r["backbone_digest"] for r in rows} == {"machine-a"}


def test_a_splits_together_fitted_rows_of_another_machine_are_fitted_again_with_the_run_left(study_env, tmp_path,
                                                                                               finished):
    path = study_env.write("together", calibrators=CALIBRATORS, output=str(tmp_path / "out"),
                           runs={"splits": 1, "inits": 1, "folds": 3, "batch_calibrators": True})
    plan = plan_study(load_study(path), data=False)
    first, submitted = _scheduler(plan, backbone="machine-a")
    while not any(f.kind == "calibrate" and f.what.startswith("Cora_GCN_s0_i0_f2") for f in submitted):
        _finish_oldest(first, submitted)  # every backbone trained; the split's together fits submitted
    for future in [f for f in submitted if not f.done and not f.what.startswith("Cora_GCN_s0_i0_f2")]:
        future.finish()  # all but f2's own fits finish: the machine is gone with those
        first.handle(next(iter(first.completions)))

    again, submitted = _scheduler(plan, backbone="machine-b")
    assert [f.what for f in submitted] == ["Cora_GCN_s0_i0_f2"]  # the one run with a fit left
    _finish_all(again, submitted)
    together = fitted_together(plan, plan.benchmarks[0])
    assert together and sorted(f.what for f in submitted if f.what.startswith("split")) == sorted(
        f"split s0 {c}" for c in together)  # fitted again on this machine's backbones
    (_, rows), = finished
    assert len(rows) == 3 * len(CALIBRATORS) and {r["backbone_digest"] for r in rows} == {"machine-b"}


def test_the_record_keeps_every_number_exactly_and_a_cut_last_line_is_not_a_record(tmp_path):
    from flows.study import FinishedTasks, read_finished_tasks

    row = {"ece": 0.1 + 0.2, "nll": float("nan"), "split": 3, "note": None}
    record = FinishedTasks(tmp_path, {})
    record.add("calibrate-a", row)
    with open(tmp_path / FINISHED_TASKS, "a") as fh:
        fh.write('{"key": "calibrate-b", "res')  # cut off by a kill
    FinishedTasks(tmp_path, read_finished_tasks(tmp_path)).add("calibrate-c", [row])
    back = read_finished_tasks(tmp_path)
    assert sorted(back) == ["calibrate-a", "calibrate-c"]
    assert back["calibrate-a"]["ece"] == 0.1 + 0.2 and back["calibrate-a"]["split"] == 3
    assert back["calibrate-a"]["nll"] != back["calibrate-a"]["nll"]  # NaN
    assert len(back["calibrate-c"]) == 1 and back["calibrate-c"][0]["ece"] == 0.1 + 0.2


def test_progress_and_scheduler_take_the_same_records_when_a_splits_runs_are_fitted_together(study_env, tmp_path,
                                                                                               finished):
    from flows.study import benchmark_task_keys

    path = study_env.write("together", calibrators=CALIBRATORS, output=str(tmp_path / "out"),
                           runs={"splits": 1, "inits": 1, "folds": 3, "batch_calibrators": True})
    plan = plan_study(load_study(path), data=False)
    benchmark = plan.benchmarks[0]
    together = fitted_together(plan, benchmark)
    assert together and together < set(CALIBRATORS)
    keys = benchmark_task_keys(benchmark, together)
    (split, runs), = keys.split_runs.items()
    first = runs[0]
    records = [(key, [{"calibrator": c, "fit_seconds": 2.0} for _ in runs]) for c, key in keys.together[split].items()]
    records += [(key, {"calibrator": c, "fit_seconds": 5.0}) for c, key in keys.per_run[first].items()]
    records += [(keys.pretrain[first], {"run": first.tag(), "train_seconds": 100.0})]
    benchmark.out_dir.mkdir(parents=True, exist_ok=True)
    (benchmark.out_dir / FINISHED_TASKS).write_text(
        "".join(json.dumps({"key": key, "result": result}) + "\n" for key, result in records))

    (progress,) = benchmark_progress(plan)
    per_run = len(CALIBRATORS) - len(together)
    assert (progress.runs_recorded, progress.calibrations_recorded, progress.backbones_recorded,
            progress.records_elsewhere) == (1, len(together) * len(runs) + per_run, 1, 0)
    # the two backbones and per-run fits left, at the recorded rates; the split's joint fits are all in
    assert progress.cost.backbone_seconds == 100 and progress.cost.fit_seconds_per_run == 2 * len(together) + 5 * per_run
    assert progress.cost.remaining_hours == pytest.approx((2 * 100 + 2 * 5 * per_run) / 3600)
    assert progress.cost.unpriced == ()
    scheduler = _Scheduler(plan, logging.getLogger("test"), *(FakeTask(k, []) for k in ("a", "b", "c")))
    scheduler.plan_benchmark(benchmark)
    assert scheduler.recorded == {"pretrain": 1, "calibrate": len(together) + per_run}
    assert scheduler.left_together[(benchmark.name, split)] == {}
    assert [bool(scheduler.left[(benchmark.name, run)]) for run in runs] == [False, True, True]


def test_progress_counts_what_the_record_holds_by_the_plans_own_task_keys(tiny_plan, finished):
    from flows.caching import benchmark_key
    from flows.study import record_completion

    benchmark = tiny_plan.benchmarks[0]
    (before,) = benchmark_progress(tiny_plan)
    assert before.line() == "Cora-GCN: nothing recorded (3 runs, 12 calibrations to compute)"
    first, submitted = _scheduler(tiny_plan)
    for _ in range(6):  # f0's and f1's backbones, f0's four calibrations
        _finish_oldest(first, submitted)
    record = benchmark.out_dir / FINISHED_TASKS
    record.write_text(record.read_text() + json.dumps({"key": "calibrate-Cora_GCN_s0_i0_f2-TS-other", "result": {}})
                      + "\n")  # a task of other code or settings
    (progress,) = benchmark_progress(tiny_plan)
    assert (progress.complete, progress.runs_recorded, progress.calibrations_recorded, progress.backbones_recorded,
            progress.records_elsewhere) == (False, 1, 4, 2, 1)
    assert progress.line().startswith("Cora-GCN: 1 of 3 runs with every calibrator recorded; calibrations 4 of 12, "
                                      "backbones 2 of 3")
    assert progress.cost is None  # the fake tasks' records carry no seconds: no rate to project from

    (benchmark.out_dir / "results.csv").write_text("calibrator\nTS\n")
    record_completion(benchmark.out_dir, "a-key-of-other-code", [])
    assert not benchmark_progress(tiny_plan)[0].complete  # another plan's rows
    key = benchmark_key(benchmark.runs, benchmark.settings, benchmark.calibrator_options,
                        fitted_together(tiny_plan, benchmark))
    record_completion(benchmark.out_dir, key, [])
    (done,) = benchmark_progress(tiny_plan)
    assert done.complete and done.line() == ("Cora-GCN: complete (3 runs; results.csv is this plan's output, "
                                              "completion.json)")
    (benchmark.out_dir / "results.csv").write_text(
        "calibrator,split,init,fold,backbone_digest\nUnCal,0,0,1,a\nTS,0,0,1,b\nUnCal,0,0,2,a\nTS,0,0,2,a\n")
    record_completion(benchmark.out_dir, key, [])
    (mixed,) = benchmark_progress(tiny_plan)
    assert mixed.complete and mixed.mixed_runs == ("s0 i0 f1",)
    assert mixed.line().endswith("1 run with rows on more than one backbone (s0 i0 f1; backbone_digest): the paired "
                                 "tests leave out its pairs across backbones")
