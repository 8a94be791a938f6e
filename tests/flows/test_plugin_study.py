"""The example package of examples/ (a calibrator and a graph registered through entry points), installed into a
temporary folder, run through `simcalib study run` beside the built-in UnCal and TS; without it, the same study
fails before any work with one line naming the missing entry."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from shared_paths import PROJECT_ROOT

EXAMPLE = PROJECT_ROOT / "examples" / "simcalib_example"


def _study(folder: Path, datasets: list[str], calibrators: list[str]) -> Path:
    study = {
        "name": "plugins",
        "benchmarks": {"datasets": datasets, "backbones": ["GCN"]},
        "calibrators": calibrators,
        "runs": {"splits": 1, "inits": 1, "folds": 1, "generated_splits": True},
        "backbone": {"max_epochs": 50},
        "data": {"cache_dir": str(folder / "backbones")},
        "output": str(folder / "out"),
        "tracking_uri": f"sqlite:///{folder / 'mlflow.db'}",
        "task_runner": {"kind": "threads", "workers": 1, "torch_threads": 1},
        "device": "cpu",
        "report": True,
    }
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return path


def _run(path: Path, pythonpath: list[Path], timeout: float) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, pythonpath))}
    return subprocess.run([sys.executable, "-m", "simcalib.cli", "study", "run", str(path)], cwd=path.parent,
                          env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("datasets, calibrators, missing", [
    (["ExampleSBM"], ["UnCal", "TS"], "benchmarks.datasets.0: unknown dataset 'ExampleSBM'"),
    (["Cora"], ["UnCal", "UniformMixTS"], "calibrators.1: unknown calibrator 'UniformMixTS'"),
])
def test_without_the_package_the_study_fails_before_any_work_naming_the_entry(tmp_path, datasets, calibrators,
                                                                             missing):
    path = _study(tmp_path, datasets, calibrators)
    done = _run(path, [PROJECT_ROOT], timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}:") and missing in lines[0]
    assert "simcalib.calibrators" in lines[0] or "simcalib.datasets" in lines[0]  # where it was looked for
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # a Prefect server, a backbone and a report in a subprocess: 93 s on the shared 2-core machine
def test_the_installed_example_runs_beside_the_built_ins_into_results_report_and_mlflow(tmp_path):
    from mlflow.tracking import MlflowClient

    source, site = tmp_path / "src", tmp_path / "site"
    shutil.copytree(EXAMPLE, source)  # the build writes beside the sources: never into the checkout
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "--target", str(site), str(source)], check=True, timeout=300)
    path = _study(tmp_path, ["ExampleSBM"], ["UnCal", "TS", "UniformMixTS"])
    done = _run(path, [PROJECT_ROOT, site], timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]

    results = pd.read_csv(tmp_path / "out" / "ExampleSBM_GCN" / "results.csv")
    assert sorted(results["calibrator"]) == ["TS", "UnCal", "UniformMixTS"]
    assert set(results["dataset"]) == {"ExampleSBM"} and set(results["split_source"]) == {"generated"}
    options = json.loads(results.set_index("calibrator").loc["UniformMixTS", "calibrator_options"])
    assert (options["package"], options["version"], options["entry"]) == \
        ("simcalib-example", "0.1.0", "simcalib_example.calibrator:UniformMixTS")
    assert results["ece"].notna().all()

    report = (tmp_path / "out" / "report" / "report.md").read_text()
    assert "ECE (%) of the calibrators no other table shows" in report
    assert "UniformMixTS" in report and "ExampleSBM" in report

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("study-plugins")
    runs = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}
    assert {"ExampleSBM-GCN", "ExampleSBM-GCN-UnCal", "ExampleSBM-GCN-TS", "ExampleSBM-GCN-UniformMixTS"} <= set(runs)
    child = runs["ExampleSBM-GCN-UniformMixTS"].data
    assert child.params["package"] == "simcalib-example" and child.params["version"] == "0.1.0"
    assert abs(child.metrics["ece_mean"] - results.set_index("calibrator").loc["UniformMixTS", "ece"]) < 1e-9
