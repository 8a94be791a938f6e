"""The schedule (:mod:`simcalib.experiment.schedule`) on fake units, over the ledger: what it hands out when, what it
takes from the benchmark's results.csv instead, how it cuts the work (a unit per run on devices, per backbone and
calibrator on the CPU) and spreads runs over devices (K in flight per device, device indices in turn).

The fake units finish only when a test says so, oldest first (a task runner's queue), so every step is
deterministic; the real units run in tests/flows/test_study_flow.py and tests/test_protocol.py."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

import simcalib.experiment.schedule as schedule_module
from simcalib.errors import ConfigError
from simcalib.experiment.ledger import forget_run, read_ledger
from simcalib.experiment.plan import plan_study
from simcalib.experiment.schedule import (
    BACKBONE,
    CALIBRATE,
    FAKE_DEVICES_ENV,
    RUN,
    Schedule,
    device_layout,
    mps_status,
)
from simcalib.experiment.study import study_from_dict
from simcalib.store.integrity import CALIBRATOR_DIGEST_COLUMN

CALIBRATORS = ["UnCal", "TS", "VS", "ETS"]


def _study(tmp_path, mirror_dir, splits_dir, runs: dict | None = None, runner: dict | None = None):
    """Cora x GCN with four calibrators, planned without the data (fake units compute nothing)."""
    study = study_from_dict({
        "name": "scheduled", "benchmarks": {"datasets": ["Cora"], "backbones": ["GCN"]}, "calibrators": CALIBRATORS,
        "runs": {"splits": 1, "inits": 1, "folds": 3, **(runs or {})}, "output": str(tmp_path / "out"),
        "data": {"mirror": str(mirror_dir), "splits_dir": str(splits_dir)}, "device": "cpu",
        "task_runner": {"kind": "threads", "workers": 2, **(runner or {})}})
    return plan_study(study, data=False)


@pytest.fixture
def tiny_plan(tmp_path, mirror_dir, splits_dir):
    return _study(tmp_path, mirror_dir, splits_dir)


class Driver:
    """Hands out the schedule's units, 'computes' them with fake rows (their backbone digest names the machine) and
    reports them back oldest first, as a task runner's queue would."""

    def __init__(self, study, backbone: str = "machine-a", granularity: str = "calibrator", devices: int = 0,
                 runs_per_device: int | None = None):
        self.study, self.backbone = study, backbone
        execution = study.execution
        layout = device_layout("cpu", granularity, runs_per_device, execution.workers, devices=devices)
        self.schedule = Schedule(study.benchmarks, layout, execution.batch_calibrators)
        self.submitted: list = []
        self.out: list = []  # handed out, not reported
        self.outcomes: list = []
        self.take()

    def take(self) -> None:
        units = self.schedule.submit()
        self.submitted += units
        self.out += units

    def finish_oldest(self, fail: str | None = None):
        unit = self.out.pop(0)
        if fail:
            outcome = self.schedule.failed(unit, fail)
        else:
            outcome = self.schedule.finished(unit, self.result(unit))
        self.outcomes.append(outcome)
        self.take()
        return unit

    def finish_all(self) -> None:
        while self.out:
            self.finish_oldest()
        assert self.schedule.done

    def result(self, unit) -> dict:
        stats = [{"run": run.tag(), "val_accuracy": 0.5} for run in unit.runs]
        rows = [self.row(unit.plan, run, c) for run in unit.runs for c in unit.calibrators]
        return {"rows": rows, "backbones": stats if unit.kind != CALIBRATE else []}

    def row(self, plan, run, calibrator: str) -> dict:
        digest = {c.name: c.digest for c in plan.calibrators}[calibrator]
        return {"dataset": run.dataset, "backbone": run.backbone, "calibrator": calibrator, "split": run.split,
                "init": run.init, "fold": run.fold, "seed": plan.seed(run), "ece": 0.1 * run.fold,
                "label_rate": plan.settings.label_rate, "backbone_digest": self.backbone,
                CALIBRATOR_DIGEST_COLUMN: digest}

    def named(self, units=None) -> list[str]:
        return [u.name for u in (self.submitted if units is None else units)]


def _rows(plan) -> pd.DataFrame:
    return pd.read_csv(plan.benchmarks[0].out_dir / "results.csv")


def _in_order(plan) -> None:
    rows = _rows(plan)
    assert list(zip(rows["fold"], rows["calibrator"])) == [(fold, c) for fold in range(3) for c in CALIBRATORS]


# ---------------------------------------------------------------------------------------------------------
# On the CPU: a unit per backbone and per calibrator


def test_backbones_train_one_per_worker_and_a_runs_calibrations_follow_its_own(tiny_plan):
    driver = Driver(tiny_plan)  # Cora GCN, folds 0-2, 2 workers
    assert driver.named() == ["pretrain-Cora-GCN-s0-i0-f0", "pretrain-Cora-GCN-s0-i0-f1"]  # both workers train
    assert driver.schedule.units_planned == 3 + 12
    driver.finish_oldest()  # f0's backbone: its calibrations, then the next backbone, are handed out
    assert driver.named(driver.submitted[2:]) == [f"calibrate-{c}-Cora-GCN-s0-i0-f0" for c in CALIBRATORS] + [
        "pretrain-Cora-GCN-s0-i0-f2"]
    while driver.out:
        driver.finish_oldest()
        assert sum(u.kind == BACKBONE for u in driver.out) <= 2
    assert len(driver.submitted) == 3 + 12 and driver.schedule.done
    assert [p.name for o in driver.outcomes for p in o.finished] == ["Cora-GCN"]  # once, at the end
    _in_order(tiny_plan)  # appended as they came, then put in the plan's order
    assert read_ledger(tiny_plan.benchmarks[0]).complete
    assert sorted(p.name for p in tiny_plan.benchmarks[0].out_dir.iterdir()) == ["results.csv", "splits.json"]


def test_a_schedule_made_again_takes_the_rows_and_trains_only_runs_with_work_left(tiny_plan):
    first = Driver(tiny_plan)
    for _ in range(6):  # f0's and f1's backbones, f0's four calibrations; then the machine is gone
        first.finish_oldest()
    results = tiny_plan.benchmarks[0].out_dir / "results.csv"
    assert len(_rows(tiny_plan)) == 4
    results.write_text(results.read_text() + "Cora,GCN,TS,0,0,2")  # a kill in the middle of a line

    again = Driver(tiny_plan)
    assert again.schedule.rows_found == 4 and again.schedule.calibrations == 8  # f0: nothing left, no backbone
    assert again.named() == ["pretrain-Cora-GCN-s0-i0-f1", "pretrain-Cora-GCN-s0-i0-f2"]
    again.finish_all()
    _in_order(tiny_plan)


def test_a_complete_benchmark_hands_out_nothing(tiny_plan):
    Driver(tiny_plan).finish_all()
    before = (tiny_plan.benchmarks[0].out_dir / "results.csv").read_bytes()
    again = Driver(tiny_plan)
    assert again.submitted == [] and [p.name for p in again.schedule.complete] == ["Cora-GCN"]
    assert again.schedule.rows_found == 12 and again.schedule.done
    assert (tiny_plan.benchmarks[0].out_dir / "results.csv").read_bytes() == before


def test_a_row_on_another_machines_backbone_is_refused_naming_the_command_that_recomputes_the_run(tiny_plan):
    first = Driver(tiny_plan, backbone="machine-a")
    for _ in range(4):  # f0's and f1's backbones, f0's UnCal and TS; then the machine is gone
        first.finish_oldest()

    again = Driver(tiny_plan, backbone="machine-b")  # the same seed, other weights
    again.finish_all()
    (refused, other) = again.schedule.refused
    results = tiny_plan.benchmarks[0].out_dir / "results.csv"
    assert refused.startswith("Cora-GCN s0 i0 f0: VS was computed on backbone machine-b, the run's rows in ")
    assert refused.endswith(f"not added. To compute the whole run here: simcalib study forget {results} --run 0,0,0, "
                            "then run the same command again")
    rows = _rows(tiny_plan)
    assert len(rows) == 2 + 8 and set(rows[rows.fold == 0]["backbone_digest"]) == {"machine-a"}
    assert set(rows[rows.fold > 0]["backbone_digest"]) == {"machine-b"}

    assert forget_run(results, 0, 0, 0) == 2  # the fix the line names: then the run is computed whole, here
    third = Driver(tiny_plan, backbone="machine-b")
    assert third.named() == ["pretrain-Cora-GCN-s0-i0-f0"]
    third.finish_all()
    assert third.schedule.refused == [] and set(_rows(tiny_plan)["backbone_digest"]) == {"machine-b"}


def test_a_changed_definition_recomputes_that_calibrators_rows_only(tiny_plan):
    Driver(tiny_plan).finish_all()
    benchmark = tiny_plan.benchmarks[0]
    before = _rows(tiny_plan)
    # TS's declared version bumped: its definition digest (the rows' calibrator_digest) moves, nothing else does
    bumped = tuple(dataclasses.replace(c, digest="0" * 12) if c.name == "TS" else c for c in benchmark.calibrators)
    plan = dataclasses.replace(tiny_plan, benchmarks=(dataclasses.replace(benchmark, calibrators=bumped),))
    again = Driver(plan)
    assert again.schedule.superseded == {"Cora-GCN": 3}
    again.finish_all()
    assert sorted(u.name for u in again.submitted if u.kind == CALIBRATE) == [
        f"calibrate-TS-Cora-GCN-s0-i0-f{f}" for f in range(3)]
    after = _rows(plan)
    assert list(zip(after["fold"], after["calibrator"])) == [(fold, c) for fold in range(3) for c in CALIBRATORS]
    assert set(after[after.calibrator == "TS"][CALIBRATOR_DIGEST_COLUMN]) == {"000000000000"}
    others = after.calibrator != "TS"
    pd.testing.assert_frame_equal(after[others].reset_index(drop=True),
                                  before[before.calibrator != "TS"].reset_index(drop=True))


def test_a_splits_calibrators_fitted_together_cover_the_runs_missing_their_rows(tmp_path, mirror_dir, splits_dir):
    plan = _study(tmp_path, mirror_dir, splits_dir, runs={"batch_calibrators": True})
    first = Driver(plan)
    first.finish_all()
    together = {u.calibrators[0] for u in first.submitted if u.together}
    assert together and together < set(CALIBRATORS)
    assert all(len(u.runs) == 3 for u in first.submitted if u.together)
    results = plan.benchmarks[0].out_dir / "results.csv"
    assert forget_run(results, 0, 0, 2) == 4

    again = Driver(plan)
    assert again.named() == ["pretrain-Cora-GCN-s0-i0-f2"]  # the one run with fits left
    again.finish_all()
    refit = [u for u in again.submitted if u.together]
    assert sorted(u.calibrators[0] for u in refit) == sorted(together)
    assert all(len(u.runs) == 1 for u in refit)  # on the run missing its rows only
    assert read_ledger(plan.benchmarks[0]).complete and len(_rows(plan)) == 12


def test_a_failed_backbone_gives_up_its_runs_calibrations_and_the_others_finish(tiny_plan):
    driver = Driver(tiny_plan)
    driver.finish_oldest(fail="TrainingDivergedError: loss is nan")  # f0's backbone
    failures = driver.outcomes[-1].failures
    assert failures[0] == "pretrain Cora_GCN_s0_i0_f0: TrainingDivergedError: loss is nan"
    assert [f.split(":")[0] for f in failures[1:]] == [f"calibrate Cora_GCN_s0_i0_f0 {c}" for c in CALIBRATORS]
    driver.finish_all()
    assert len(_rows(tiny_plan)) == 8 and driver.schedule.returned == driver.schedule.calibrations == 12


# ---------------------------------------------------------------------------------------------------------
# On devices: a unit per run, K in flight per device


def test_on_two_devices_with_three_runs_each_no_device_holds_more_and_indices_go_in_turn(tmp_path, mirror_dir,
                                                                                        splits_dir):
    plan = _study(tmp_path, mirror_dir, splits_dir, runs={"inits": 3}, runner={"runs_per_device": 3})  # 9 runs
    driver = Driver(plan, granularity="auto", devices=2, runs_per_device=3)
    assert driver.schedule.layout.granularity == RUN and driver.schedule.layout.slots == 6
    assert [u.device for u in driver.submitted] == [0, 1, 0, 1, 0, 1]  # round robin, three each
    seen = []
    while driver.out:
        for device in (0, 1):
            assert sum(u.device == device for u in driver.out) <= 3
        seen.append(driver.finish_oldest())
    assert [u.device for u in driver.submitted[6:]] == [0, 1, 0]  # each freed slot taken, the freed device's
    assert all(u.kind == RUN for u in driver.submitted)
    assert len(driver.submitted) == len(plan.benchmarks[0].runs) == 9  # one task per run
    assert all(u.calibrators == tuple(CALIBRATORS) for u in driver.submitted)
    assert driver.schedule.units_planned == 9 and len(_rows(plan)) == 36


def test_run_units_after_a_kill_compute_only_what_is_missing(tmp_path, mirror_dir, splits_dir):
    plan = _study(tmp_path, mirror_dir, splits_dir, runs={"inits": 2})  # 6 runs
    first = Driver(plan, granularity="run", devices=2, runs_per_device=1)
    first.finish_oldest()
    first.finish_oldest()  # two runs' rows written; then the machine is gone
    results = plan.benchmarks[0].out_dir / "results.csv"
    assert len(_rows(plan)) == 8
    assert forget_run(results, 0, 0, 0, ["TS"]) == 1  # and one row of a finished run lost

    again = Driver(plan, granularity="run", devices=2, runs_per_device=1)
    assert again.schedule.rows_found == 7 and again.schedule.calibrations == 24 - 7
    again.finish_all()
    runs = [(u.runs[0].init, u.runs[0].fold, u.calibrators) for u in again.submitted]
    assert runs[0] == (0, 0, ("TS",))  # the run missing one row: a unit with that calibrator alone
    assert sorted(runs[1:]) == [(i, f, tuple(CALIBRATORS)) for i, f in [(0, 2), (1, 0), (1, 1), (1, 2)]]
    rows = _rows(plan)
    assert len(rows) == 24 and not rows.duplicated(["calibrator", "init", "fold"]).any()
    assert list(zip(rows["init"], rows["fold"], rows["calibrator"]))[:4] == [(0, 0, c) for c in CALIBRATORS]


def test_batched_backbones_then_run_units_then_a_splits_fits_together(tmp_path, mirror_dir, splits_dir):
    plan = _study(tmp_path, mirror_dir, splits_dir, runs={"batch_runs": True, "batch_calibrators": True})
    driver = Driver(plan, granularity="run")
    assert driver.named() == ["pretrain-split-Cora-GCN-s0"]
    driver.finish_all()
    kinds = [(u.kind, u.together) for u in driver.submitted]
    together = sum(u.together for u in driver.submitted)
    assert kinds == [(BACKBONE, False)] + [(RUN, False)] * 3 + [(CALIBRATE, True)] * together
    assert driver.schedule.units_planned == len(kinds) and len(_rows(plan)) == 12
    _in_order(plan)


def test_the_layout_cuts_run_units_on_devices_and_a_declared_granularity_wins(monkeypatch):
    monkeypatch.delenv(FAKE_DEVICES_ENV, raising=False)
    assert device_layout("cpu").granularity == "calibrator" and device_layout("cpu").devices == 0
    assert device_layout("cpu", workers=3).slots == 3
    monkeypatch.setenv(FAKE_DEVICES_ENV, "2")
    layout = device_layout("cpu", runs_per_device=3)
    assert (layout.granularity, layout.devices, layout.runs_per_device, layout.slots) == (RUN, 2, 3, 6)
    assert device_layout("cpu", workers=5).runs_per_device == 3  # the workers shared over the devices
    assert device_layout("cpu", "calibrator").granularity == "calibrator"
    assert "3 in flight per device (6 in all)" in layout.line() and "MPS" in layout.line()
    monkeypatch.delenv(FAKE_DEVICES_ENV)
    assert device_layout("cpu", "run").granularity == RUN
    assert device_layout("cpu", kinds=["protocol", "shift"]).granularity == RUN  # node runs: a unit per run
    monkeypatch.setenv(FAKE_DEVICES_ENV, "two")
    with pytest.raises(ConfigError, match=r"SIMCALIB_FAKE_DEVICE_COUNT must be a whole number of devices >= 1"):
        device_layout("cpu")


def test_cuda_mps_is_reported_where_found_never_required(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert mps_status() == "no CUDA MPS"
    (tmp_path / "bin").mkdir()
    tool = tmp_path / "bin" / "nvidia-cuda-mps-control"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    assert mps_status().startswith("CUDA MPS available, daemon not running")
    (tmp_path / "control").write_text("")
    assert mps_status() == f"CUDA MPS daemon running (pipe {tmp_path})"


def test_a_unit_with_a_device_index_trains_on_that_cuda_device_and_on_the_cpu_stays_there(tiny_plan):
    from simcalib.experiment.schedule import Unit, unit_settings

    benchmark = tiny_plan.benchmarks[0]
    unit = Unit(RUN, benchmark, benchmark.runs[:1], ("TS",), device=1)
    assert unit_settings(unit).device == "cpu"  # a fake device count on the CPU computes on the CPU
    on_cuda = dataclasses.replace(benchmark, settings=dataclasses.replace(benchmark.settings, device="cuda"))
    assert unit_settings(dataclasses.replace(unit, plan=on_cuda)).device == "cuda:1"
    assert unit.name == "run-Cora-GCN-s0-i0-f0-device1"


@pytest.mark.parametrize("runner,message", [
    ({"runs_per_device": 0}, "task_runner.runs_per_device: Input should be greater than or equal to 1"),
    ({"granularity": "gpu"}, "task_runner.granularity: Input should be 'auto', 'run' or 'calibrator'"),
])
def test_a_bad_scheduling_setting_is_one_line_naming_the_key(tmp_path, mirror_dir, splits_dir, runner, message):
    with pytest.raises(ConfigError) as error:
        _study(tmp_path, mirror_dir, splits_dir, runner=runner)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_the_scheduling_settings_reach_the_plan_and_leave_its_digest_alone_at_their_defaults(
        tmp_path, mirror_dir, splits_dir):
    plain = _study(tmp_path, mirror_dir, splits_dir)
    assert "granularity" not in plain.to_json()["execution"]
    declared = _study(tmp_path, mirror_dir, splits_dir, runner={"granularity": "run", "runs_per_device": 4})
    assert (declared.execution.granularity, declared.execution.runs_per_device) == ("run", 4)
    assert declared.digest() != plain.digest()
    assert type(declared).from_json(declared.to_json()) == declared


def test_the_schedule_appends_through_the_fault_hook_once_per_unit_with_rows(tiny_plan, monkeypatch):
    calls = []
    monkeypatch.setattr(schedule_module, "finished_run", lambda: calls.append(1))
    driver = Driver(tiny_plan)
    driver.finish_all()
    assert len(calls) == 12  # the calibrate units; the backbone units write no row
