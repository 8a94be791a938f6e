"""`simcalib study run|check`: bad input fails before any work with one line naming the file line."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from shared_paths import PROJECT_ROOT

from simcalib.cli import main
from simcalib.experiment.study import load_study

STUDY = """\
name: bad
benchmarks:
  datasets: [Cora]
  backbones: [GCN]
calibrators: [UnCal, TS]
runs: {splits: 1, inits: 1, folds: 1}
output: OUT
"""


@pytest.mark.parametrize("change, expected", [
    (("runs:", "runz:"), ":6: unknown key 'runz'"),
    (("[Cora]", "[Cora, Coraa]"), ":3: benchmarks.datasets.1: unknown dataset 'Coraa'"),
    (("[UnCal, TS]", "[UnCal, SimCalibb]"), ":5: calibrators.1: unknown calibrator 'SimCalibb'"),
])
def test_bad_study_files_fail_before_any_work(tmp_path, capsys, change, expected):
    out = tmp_path / "out"
    path = tmp_path / "bad.yaml"
    path.write_text(STUDY.replace("OUT", str(out)).replace(*change))
    assert main(["study", "run", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}{expected}") and err.count("\n") == 1  # one line
    assert not out.exists()  # nothing was started


def test_bad_input_exits_before_prefect_starts(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(STUDY.replace("OUT", str(tmp_path / "out")).replace("runs:", "runz:"))
    done = subprocess.run([sys.executable, "-m", "simcalib.cli", "study", "run", str(path)], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [f"error: {path}:6: unknown key 'runz'; valid keys here are: "
                                                 "name, description, seed, benchmarks, calibrators, runs, backbone, "
                                                 "data, output, tracking_uri, task_runner, save_predictions, report, "
                                                 "device, tuned_dir, shift, conformal"]


def test_check_shows_the_plan(capsys):
    assert main(["study", "check", str(PROJECT_ROOT / "study" / "offline.yaml"), "--runner", "dask",
                 "--dask-address", "tcp://10.0.0.5:8786"]) == 0
    out = capsys.readouterr().out
    study = load_study(PROJECT_ROOT / "study" / "offline.yaml")
    calibrators = len(study.calibrators)
    assert f"14 benchmarks, {calibrators} calibrators, 1050 runs (75 per benchmark)" in out
    assert f"1050 pretrain + {1050 * calibrators} calibrate" in out
    assert "runner       dask x 2 at tcp://10.0.0.5:8786" in out
    lines = out.splitlines()
    # one line per benchmark, one per dataset's split sources, one per distinct calibrator definition
    assert sum(line.startswith("    Cora-GCN: 75 runs (splits 0-4, inits 0-4, folds 0-2") for line in lines) == 1
    assert sum(line.startswith("  splits       ") for line in lines) == len(study.datasets)
    assert sum(" runs (splits " in line for line in lines) == 14
    assert sum(line.startswith("    TS ") and "on all benchmarks" in line for line in lines) == 1


def test_set_overrides_any_key_and_the_named_options_win(capsys):
    study = str(PROJECT_ROOT / "study" / "offline.yaml")
    assert main(["study", "check", study, "--set", "benchmarks.datasets=[Computers, CS]", "--set",
                 "runs.inits=2", "--set", "task_runner.workers=4", "--workers", "3"]) == 0
    out = capsys.readouterr().out
    assert "4 benchmarks, " in out and "120 runs (30 per benchmark)" in out
    assert "runner       processes x 3" in out  # --workers wins over --set task_runner.workers


@pytest.mark.parametrize("setting, expected", [
    ("save_predictions", "--set 'save_predictions': expected KEY=VALUE"),
    ("runs.splits=[1", "--set 'runs.splits=[1': the value is not valid YAML"),
    ("benchmarks.datasets=[Coraa]", "benchmarks.datasets.0: unknown dataset 'Coraa'"),
    ("runz.splits=1", "unknown key 'runz'"),
])
def test_a_bad_set_fails_in_one_line_naming_it(capsys, setting, expected):
    assert main(["study", "check", str(PROJECT_ROOT / "study" / "offline.yaml"), "--set", setting]) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1
    assert not re.search(r"offline\.yaml:\d", err)  # an overridden value has no line in the file


def test_check_reports_what_an_existing_output_folder_already_holds(capsys, tmp_path):
    study = str(PROJECT_ROOT / "study" / "offline.yaml")
    assert main(["study", "check", study, "--output", str(tmp_path)]) == 0
    assert "progress in" not in capsys.readouterr().out  # nothing there yet: no progress block
    (tmp_path / "Cora_GCN").mkdir()
    (tmp_path / "Cora_GCN" / "finished-tasks.jsonl").write_text('{"key": "pretrain-of-other-code", "result": {}}\n')
    assert main(["study", "check", study, "--output", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"  progress in {tmp_path} (what `simcalib study run` takes from there instead of computing it)" in lines
    assert ("    Cora-GCN: nothing recorded (75 runs, 1575 calibrations to compute); 1 record of other code, "
            "settings or options (computed again)") in lines
    assert sum(line.startswith("    Physics-GAT: nothing recorded") for line in lines) == 1
