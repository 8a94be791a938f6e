"""benchmarks/gpu_check.py where there is no GPU: its refusal without CUDA, and its CPU/CUDA row comparison."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from benchmark_scripts import load_script
from shared_paths import PROJECT_ROOT

SCRIPT = PROJECT_ROOT / "benchmarks" / "gpu_check.py"


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
