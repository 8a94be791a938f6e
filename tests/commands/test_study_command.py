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
    import shutil

    study = str(PROJECT_ROOT / "study" / "offline.yaml")
    assert main(["study", "check", study, "--output", str(tmp_path)]) == 0
    assert "progress in" not in capsys.readouterr().out  # nothing there yet: no progress block
    committed = PROJECT_ROOT / "reports" / "offline" / "results" / "Cora_GCN" / "results.csv"
    (tmp_path / "Cora_GCN").mkdir()
    shutil.copy(committed, tmp_path / "Cora_GCN" / "results.csv")
    lines = committed.read_text().splitlines(keepends=True)
    (tmp_path / "Citeseer_GCN").mkdir()
    (tmp_path / "Citeseer_GCN" / "results.csv").write_text("".join(lines[:1]))  # a header, no row
    assert main(["study", "check", study, "--output", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert f"  progress in {tmp_path} (what `simcalib study run` takes from there instead of computing it)" in out
    assert "    Cora-GCN: complete (75 runs x 21 calibrators in results.csv)" in out
    assert "    Citeseer-GCN: nothing done (75 runs, 1575 calibrations to compute)" in out
    # a calibrator's rows of another definition (options or declared version) are named, to be computed again
    import pandas as pd

    table = pd.read_csv(committed)
    table.loc[table.calibrator == "TS", "calibrator_digest"] = "000000000000"
    table.to_csv(tmp_path / "Cora_GCN" / "results.csv", index=False)
    assert main(["study", "check", study, "--output", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert ("    Cora-GCN: 0 of 75 runs complete, calibrations 1500 of 1575 (75 runs with work left); fits so far "
            in "\n".join(out))
    assert any(line.endswith("rows under another definition, computed again: 75 of TS") for line in out)


@pytest.mark.parametrize("study, output, short", [
    ("offline", "reports/offline/results", set()),
    # minesweeper and tolokers: 15 runs (runs.per_dataset), as their committed commands computed them
    # (reports/heterophily/provenance.yaml)
    ("heterophily", "reports/heterophily/results", {"minesweeper-GCN", "minesweeper-GAT", "tolokers-GCN",
                                                    "tolokers-GAT"}),
])
def test_the_committed_results_are_read_by_the_ledger_as_they_are(capsys, study, output, short):
    assert main(["study", "check", str(PROJECT_ROOT / "study" / f"{study}.yaml"), "--output",
                 str(PROJECT_ROOT / output)]) == 0
    lines = [line.strip() for line in capsys.readouterr().out.splitlines() if line.startswith("    ") and ": " in line
             and "-" in line.split(":")[0] and not line.startswith("     ")]
    progress = {line.split(":")[0]: line for line in lines if "runs" in line or "nothing done" in line}
    assert len(progress) == (14 if study == "offline" else 10)
    for name, line in progress.items():  # every benchmark complete: nothing to compute
        runs = 15 if name in short else 75
        assert line.startswith(f"{name}: complete ({runs} runs x 21 calibrators in results.csv)"), line
    if study == "offline":  # the one run known on two backbones (reports/offline/provenance.yaml, mixed_run)
        assert "1 run with rows on two backbones (s1 i4 f1; backbone_digest)" in progress["Physics-GCN"]
        assert sum("two backbones" in line for line in progress.values()) == 1


def test_forget_removes_one_runs_rows_and_names_bad_input(capsys, tmp_path):
    import pandas as pd

    committed = PROJECT_ROOT / "reports" / "offline" / "results" / "Cora_GCN" / "results.csv"
    results = tmp_path / "results.csv"
    lines = committed.read_text().splitlines(keepends=True)
    results.write_text("".join(lines[:1 + 2 * 21]))  # the first two runs' rows, as committed
    assert main(["study", "forget", str(results), "--run", "0,0,0", "--calibrators", "TS,VS"]) == 0
    assert "2 rows of run s0 i0 f0 removed" in capsys.readouterr().out
    kept = results.read_text().splitlines(keepends=True)
    assert len(kept) == 1 + 40 and set(kept) <= set(lines)  # every other line kept as it is
    assert main(["study", "forget", str(results), "--run", "0,0,0"]) == 0
    assert set(pd.read_csv(results)["fold"]) == {1}
    assert main(["study", "forget", str(results), "--run", "0-0-0"]) == 2
    err = capsys.readouterr().err
    assert "--run '0-0-0': expected SPLIT,INIT,FOLD" in err and err.count("\n") == 1
    assert main(["study", "forget", str(tmp_path / "missing.csv"), "--run", "0,0,0"]) == 2
    assert "no such file" in capsys.readouterr().err
