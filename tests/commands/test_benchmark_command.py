"""``simcalib benchmark --batch-runs --batch-calibrators`` end to end in a subprocess: killed with SIGKILL, the
same command loses nothing and gives the numbers of an uninterrupted run."""

import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest


def _command(tmp_path, out: str, cache: str) -> list[str]:
    return [sys.executable, "-m", "simcalib.cli", "benchmark", "--dataset", "Cora", "--backbone", "GCN",
            "--calibrators", "uncal,ts", "--splits", "0,1", "--inits", "2", "--folds", "=0", "--max-epochs", "80",
            "--threads", "1", "--batch-runs", "--batch-calibrators", "--no-progress", "--out", str(tmp_path / out),
            "--data-root", str(tmp_path / "data"), "--cache-dir", str(tmp_path / cache)]


@pytest.mark.slow  # three CLI runs: ~3 min on the shared 2-core machine
def test_batched_benchmark_killed_and_resumed_loses_nothing(tmp_path, mirror_dir, splits_dir):
    env = {**os.environ, "SIMCALIB_DATA_MIRROR": str(mirror_dir), "SIMCALIB_SPLITS_DIR": str(splits_dir)}
    results = tmp_path / "killed" / "results.csv"
    process = subprocess.Popen(_command(tmp_path, "killed", "cache"), env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while process.poll() is None and time.monotonic() < deadline:  # kill once split 0's rows are written
        if results.is_file() and len(results.read_text().splitlines()) > 1:
            process.send_signal(signal.SIGKILL)
            break
        time.sleep(0.05)
    process.wait()
    assert process.returncode == -signal.SIGKILL, "the benchmark finished before it could be killed"
    rows_at_kill = len(pd.read_csv(results))
    assert 0 < rows_at_kill < 8
    resumed = subprocess.run(_command(tmp_path, "killed", "cache"), env=env, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    reference = subprocess.run(_command(tmp_path, "reference", "cache-reference"), env=env, capture_output=True,
                               text=True, timeout=600)
    assert reference.returncode == 0, reference.stderr
    key = ["calibrator", "split", "init", "fold"]
    got, want = (pd.read_csv(tmp_path / d / "results.csv").sort_values(key).reset_index(drop=True)
                 for d in ("killed", "reference"))
    assert len(got) == 8 and not got.duplicated(key).any()
    pd.testing.assert_frame_equal(got.drop(columns="fit_seconds"), want.drop(columns="fit_seconds"), rtol=1e-4)
