"""benchmarks/speed/gpu_check.py where there is no GPU: its refusal without CUDA, and its CPU/CUDA row comparison."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from benchmark_scripts import load_script
from shared_paths import PROJECT_ROOT

SCRIPT = PROJECT_ROOT / "benchmarks" / "speed" / "gpu_check.py"


@pytest.fixture(scope="module")
def gpu_check():
    return load_script(SCRIPT)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present: the script would run its checks")
def test_without_cuda_the_script_says_so_in_one_line_and_exits_2(tmp_path):
    out = tmp_path / "gpu_check.txt"
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)], cwd=PROJECT_ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-check: no CUDA device"), done.stdout
    assert not out.exists()  # nothing checked, nothing reported


def test_the_reason_names_a_cpu_build_or_an_invisible_device(gpu_check, monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", None)
    assert "CPU-only build" in gpu_check.cuda_unavailable_reason()
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "nvidia-smi" in gpu_check.cuda_unavailable_reason()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert gpu_check.cuda_unavailable_reason() is None


def test_the_checked_run_is_the_quick_studys_first_with_its_calibrators(gpu_check):
    from simcalib.calibrators import CALIBRATORS

    run, settings, calibrators = gpu_check._quick_run()
    assert (run.dataset, run.backbone, run.split, run.init, run.fold) == ("Cora", "GCN", 0, 0, 0)
    assert settings.study_seed == 10
    names = {name for name, _ in calibrators}
    assert {"UnCal", "TS", "VS", "ETS", "CaGCN", "GATS", "SimCalib"} <= names <= set(CALIBRATORS)
    assert all(isinstance(options, dict) for _, options in calibrators)


def _row(calibrator="TS", **metrics):
    values = {"ece": 10.0, "ace": 9.0, "mce": 30.0, "classwise_ece": 5.0, "kde_ece": 11.0, "nll": 1.2,
              "brier": 0.5, "accuracy": 80.0}
    return {"calibrator": calibrator, "split": 0, "init": 0, "fold": 0, **values, **metrics}


PRESERVING = {"TS": True, "VS": False}


@pytest.mark.parametrize("change,flagged", [
    ({}, False),
    ({"ece": 10.4}, False),  # within 0.5 percentage points
    ({"ece": 10.6}, True),
    ({"kde_ece": 10.4}, True),
    ({"nll": 1.2 * (1 + 5e-4)}, False),  # within relative 1e-3
    ({"nll": 1.2 * (1 + 2e-3)}, True),
    ({"brier": 0.502}, True),
    ({"mce": 60.0}, False),  # printed, not compared
    ({"accuracy": 80.1}, True),  # TS keeps the argmax: accuracy must be equal
    ({"ece": float("nan")}, True),
])
def test_comparison_flags_differences_beyond_the_tolerance(gpu_check, change, flagged):
    problems = gpu_check.compare_rows([_row()], [_row(**change)], PRESERVING)
    assert bool(problems) == flagged, problems
    if flagged:
        assert problems[0].startswith("TS s0 i0 f0: ")


def test_accuracy_of_a_calibrator_that_moves_the_argmax_has_the_binned_tolerance(gpu_check):
    assert gpu_check.compare_rows([_row("VS")], [_row("VS", accuracy=80.1)], PRESERVING) == []
    assert gpu_check.compare_rows([_row("VS")], [_row("VS", accuracy=81.0)], PRESERVING)


def test_rows_of_other_runs_are_flagged(gpu_check):
    problems = gpu_check.compare_rows([_row(), _row("VS")], [_row()], PRESERVING)
    assert len(problems) == 1 and "different runs" in problems[0]


def test_an_unknown_check_is_named_beside_the_choices(gpu_check, capsys):
    with pytest.raises(SystemExit) as exited:
        gpu_check.main(["--checks", "timing,speed"])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert "unknown check(s) speed" in error and "calibration, training, kernels, timing" in error


def test_a_calibrator_failing_on_cuda_is_reported_and_the_others_still_compared(gpu_check, monkeypatch):
    import dataclasses

    import simcalib.experiment.protocol as protocol

    @dataclasses.dataclass(frozen=True)
    class Settings:
        device: str = "cpu"
        cache_dir: str | None = None

    def evaluate(run, settings, name, options, output):
        if name == "CaGCN" and settings.device == "cuda":
            raise RuntimeError("Values and crow_indices need to be on the same device.")
        return _row(name)

    run = protocol.Run("Cora", "GCN", 0, 0, 0)
    monkeypatch.setattr(gpu_check, "_quick_run", lambda: (run, Settings(), [("TS", {}), ("CaGCN", {}), ("VS", {})]))
    monkeypatch.setattr(protocol, "train_run_backbone", lambda run, settings: None)
    monkeypatch.setattr(protocol, "evaluate_calibrator", evaluate)
    lines = []
    problems = gpu_check.check_calibration(lines)
    (problem,) = problems
    assert problem.startswith("CaGCN on cuda: RuntimeError: Values and crow_indices need to be on the same device. (")
    assert "tests/test_gpu_check.py:" in problem  # where it was raised
    table = {line.split()[0]: line for line in lines[2:5]}
    assert lines[5].endswith("CaGCN")  # the dropout fits named (CaGCN; TS and VS draw none)
    assert list(table) == ["TS", "CaGCN", "VS"] and "failed" in table["CaGCN"] and "failed" not in table["VS"]


def test_a_fit_with_dropout_is_compared_as_another_draw(gpu_check):
    cpu, gpu = [_row("CaGCN")], [_row("CaGCN", nll=1.5, brier=0.6, ace=12.0, ece=12.0)]
    assert gpu_check.compare_rows(cpu, gpu, {"CaGCN": True}, frozenset({"CaGCN"})) == []
    far = [_row("CaGCN", ece=10.0 + gpu_check.DROPOUT_FLAG_PP + 0.1)]
    (problem,) = gpu_check.compare_rows(cpu, far, {"CaGCN": True}, frozenset({"CaGCN"}))
    assert problem.startswith("CaGCN s0 i0 f0: ece") and "another random draw" in problem
    assert len(gpu_check.compare_rows(cpu, gpu, {"CaGCN": True})) == 4  # without dropout: ece, ace, nll, brier


def test_dropout_is_found_in_submodules(gpu_check):
    from simcalib.calibrators import build_calibrator

    assert gpu_check.fit_draws_dropout(build_calibrator("CaGCN", 7, "Cora", "GCN"))
    assert gpu_check.fit_draws_dropout(build_calibrator("SimCalib", 7, "Cora", "GCN"))  # its feature GNN
    assert not gpu_check.fit_draws_dropout(build_calibrator("SimCalib_m", 7, "Cora", "GCN"))  # movement only
    assert not gpu_check.fit_draws_dropout(build_calibrator("TS", 7, "Cora", "GCN"))
