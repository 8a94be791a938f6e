"""benchmarks/gpu/: the lease measurement's dry run on CPU (the code paths a device call takes), its projection,
and both scripts' one-line refusal without CUDA."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from benchmark_scripts import load_script
from shared_paths import PROJECT_ROOT

LEASE = PROJECT_ROOT / "benchmarks" / "gpu" / "lease_measure.py"
STUDY = PROJECT_ROOT / "benchmarks" / "gpu" / "gpu_study.py"


@pytest.fixture(scope="module")
def lease():
    return load_script(LEASE)


def test_the_dry_run_measures_a_cell_and_projects_the_study(tmp_path):
    out = tmp_path / "gpu"
    done = subprocess.run([sys.executable, str(LEASE), "--dry-run-cpu", "--fake-devices", "2", "--runs", "1",
                           "--k", "1", "--benchmarks", "Cora:GCN", "--calibrators", "TS", "--max-epochs", "3",
                           "--budget-seconds", "60", "--threads", "1", "--out", str(out)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((out / "lease_measure.json").read_text())
    (cell,) = report["cells"]
    assert (cell["dataset"], cell["backbone"], cell["k"], cell["runs_done"]) == ("Cora", "GCN", 1, 1)
    assert cell["epochs_mean"] == 3 and cell["runs_per_minute"] > 0
    assert report["projected_minutes"]["K=1"] == pytest.approx(75 / cell["runs_per_minute"])
    text = (out / "lease_measure.txt").read_text()
    assert "K=1 Cora" in text and "projected wall time" in text


def test_workers_spread_over_the_devices_in_turn(lease):
    assert [lease.device_of(w, 2, cpu=False) for w in range(4)] == ["cuda:0", "cuda:1", "cuda:0", "cuda:1"]
    assert lease.device_of(3, 2, cpu=True) == "cpu"


def test_the_projection_sums_each_benchmarks_runs_over_its_throughput(lease):
    cells = [{"dataset": "A", "backbone": "GCN", "k": 1, "runs_per_minute": 10.0},
             {"dataset": "A", "backbone": "GCN", "k": 4, "runs_per_minute": 30.0},
             {"dataset": "B", "backbone": "GAT", "k": 1, "runs_per_minute": 5.0}]
    projected = lease.project(cells, [("A", "GCN", 75), ("B", "GAT", 75)])
    assert projected["K=1"] == pytest.approx(7.5 + 15.0)
    assert "K=4" not in projected  # not measured on every benchmark
    assert projected["best K per benchmark"] == pytest.approx(2.5 + 15.0)


def test_the_install_lines_name_a_cuda_build_of_the_projects_torch(lease):
    (torch_line, project_line) = lease.install_commands("python")
    assert torch_line[:4] == ["python", "-m", "pip", "install"] and f"torch=={lease.TORCH_VERSION}" in torch_line
    assert any("download.pytorch.org/whl/cu" in part for part in torch_line)
    assert project_line[-1] == str(PROJECT_ROOT)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present: the scripts would run")
@pytest.mark.parametrize("script,prefix", [(LEASE, "lease-measure: no CUDA device"),
                                           (STUDY, "gpu-study: no CUDA device")])
def test_without_cuda_each_script_says_so_in_one_line_and_exits_2(tmp_path, script, prefix):
    done = subprocess.run([sys.executable, str(script), "--out", str(tmp_path / "out")], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(prefix), done.stdout
    assert not (tmp_path / "out").exists()
