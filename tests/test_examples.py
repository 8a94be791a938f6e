"""examples/calibrate_pyg_model.py runs offline from the data mirror and prints ECE and NLL before and after."""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys

import pytest
from shared_paths import MIRROR, PROJECT_ROOT

EXAMPLE = PROJECT_ROOT / "examples" / "calibrate_pyg_model.py"


@pytest.mark.skipif(not MIRROR.is_dir(), reason=f"dataset mirror {MIRROR} not present")
def test_the_pyg_example_calibrates_cora_with_the_recommended_calibrator(tmp_path):
    env = {**os.environ, "SIMCALIB_DATA_MIRROR": str(MIRROR), "SIMCALIB_DATA_ROOT": str(tmp_path / "data"),
           "SIMCALIB_OFFLINE": "1", "PYTHONPATH": str(PROJECT_ROOT), "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, str(EXAMPLE)], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    with (PROJECT_ROOT / "reports" / "recommendation.csv").open() as rows:
        recommended = next(row["calibrator"] for row in csv.DictReader(rows) if row["family"] == "homophilous")
    line = result.stdout.strip().splitlines()[-1]
    found = re.fullmatch(rf"{recommended} on (\d+) Cora test nodes: ECE ([\d.]+) -> ([\d.]+) \(%\), "
                         r"NLL ([\d.]+) -> ([\d.]+)", line)
    assert found, line
    assert int(found[1]) == 2708 - 640
    ece_before, ece_after = float(found[2]), float(found[3])
    assert ece_after < ece_before  # the recommended calibrator lowers the GCN's test ECE
