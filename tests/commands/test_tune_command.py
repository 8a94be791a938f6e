"""`simcalib tune`: a search, its tuned file and the before/after report, through the command line."""

import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from simcalib.cli import main

PROJECT_ROOT = Path(__file__).resolve().parents[2]

SPACES = """
TS:
  default:
    params:
      lr: {low: 0.01, high: 0.1, log: true}
    fixed: {max_epochs: 40, patience: 10}
"""


def tune_args(tiny_protocol, tmp_path, *extra: str) -> list[str]:
    spaces = tmp_path / "spaces.yaml"
    spaces.write_text(SPACES)
    return ["tune", "--dataset", "cora", "--backbone", "gcn", "--calibrator", "ts", "--trials", "2",
            "--splits", "1", "--folds", "=0", "--spaces", str(spaces), "--storage", f"sqlite:///{tmp_path / 'o.db'}",
            "--no-mlflow", "--tuned-dir", str(tmp_path / "tuned"), "--cache-dir", tiny_protocol.cache_dir,
            "--splits-dir", tiny_protocol.splits_dir, "--data-mirror", tiny_protocol.mirror, "--max-epochs", "20",
            "--threads", "1", *extra]


def test_tune_then_evaluate_writes_tuned_options_and_a_report(tiny_protocol, tmp_path, capsys):
    report = tmp_path / "report.md"
    code = main(tune_args(tiny_protocol, tmp_path, "--evaluate", "--eval-splits", "1", "--eval-inits", "1",
                          "--eval-folds", "2", "--eval-out", str(tmp_path / "eval"), "--report", str(report)))
    out = capsys.readouterr().out
    assert code == 0
    assert "study Cora_GCN_TS" in out and "2 finished trials" in out
    assert (tmp_path / "tuned" / "Cora_GCN.yaml").is_file()
    text = report.read_text()
    assert "| all runs | 2 | ece |" in text and "| held-out runs | 1 | ece |" in text
    pairs = pd.read_csv(report.with_suffix(".csv"))
    assert pairs[["fold", "tuning_run"]].values.tolist() == [[0, True], [1, False]]
    assert (pairs["accuracy_default"] == pairs["accuracy_tuned"]).all()  # TS keeps the argmax
    assert (tmp_path / "eval" / "default" / "results.csv").is_file() and (tmp_path / "eval" / "tuned" / "results.csv").is_file()

    assert main(tune_args(tiny_protocol, tmp_path)) == 0  # the same command again: nothing left to do
    assert "0 new" in capsys.readouterr().out


def test_user_errors_are_one_line_with_exit_2(tiny_protocol, tmp_path, capsys):
    assert main(tune_args(tiny_protocol, tmp_path, "--space", "wide")) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: TS has no search space 'wide'") and "\n" not in err
    assert main(tune_args(tiny_protocol, tmp_path, "--sampler", "grid")) == 2
    assert "cannot run as a grid: lr (line 5)" in capsys.readouterr().err


@pytest.mark.slow
def test_sigterm_stops_the_search_cleanly_and_the_same_command_continues(tiny_protocol, tmp_path):
    """A real process: SIGTERM after the first finished trial; the running trial is marked FAIL (not left
    RUNNING), exit code 130, and the same command finishes the remaining trials."""
    import optuna

    args = tune_args(tiny_protocol, tmp_path)
    args[args.index("--trials") + 1] = "4"
    command = [sys.executable, "-m", "simcalib.cli", *args]
    storage = args[args.index("--storage") + 1]
    process = subprocess.Popen(command, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        line = process.stdout.readline()
        if "Trial 0 finished" in line:
            process.send_signal(signal.SIGTERM)
            break
    output = process.communicate(timeout=60)[0]
    assert process.returncode == 130, output
    assert "the same command continues it" in output
    before = optuna.load_study(study_name="Cora_GCN_TS", storage=storage).trials
    assert before[0].state.name == "COMPLETE" and len(before) < 4
    assert all(t.state.name != "RUNNING" for t in before)  # a trial cut short is FAIL (or was never created)

    assert main(args) == 0
    after = optuna.load_study(study_name="Cora_GCN_TS", storage=storage).trials
    assert sum(t.state.name in ("COMPLETE", "PRUNED") for t in after) == 4
    assert [t.number for t in after] == list(range(len(after)))  # numbering continues
    assert after[0].params == before[0].params and after[0].value == before[0].value


def test_a_count_of_zero_is_refused_with_the_way_to_name_index_zero(capsys):
    import argparse

    from simcalib.cli import main
    from simcalib.commands.common import count_or_list

    assert count_or_list("3") == [0, 1, 2] and count_or_list("=0") == [0] and count_or_list("0,2") == [0, 2]
    with pytest.raises(argparse.ArgumentTypeError, match="write =0"):
        count_or_list("0")
    with pytest.raises(SystemExit):
        main(["tune", "--dataset", "Cora", "--backbone", "GCN", "--calibrator", "TS", "--splits", "0"])
    assert "a count must be at least 1" in capsys.readouterr().err


def test_candidates_screen_named_option_sets_and_a_second_call_adds_nothing(tiny_protocol, tmp_path, capsys):
    candidates = tmp_path / "candidates.yaml"
    candidates.write_text("slow: {calibrator: TS, options: {lr: 0.005, max_epochs: 40, patience: 10}}\n"
                          "fast: {calibrator: ts, options: {lr: 0.05, max_epochs: 40, patience: 10}}\n")
    out = tmp_path / "screen.csv"
    args = ["tune", "--dataset", "cora", "--backbone", "gcn", "--candidates", str(candidates), "--out", str(out),
            "--splits", "1", "--folds", "=0", "--cache-dir", tiny_protocol.cache_dir, "--splits-dir",
            tiny_protocol.splits_dir, "--data-mirror", tiny_protocol.mirror, "--max-epochs", "20", "--threads", "1"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "slow" in printed and "fast" in printed and f"rows: {out}" in printed
    rows = pd.read_csv(out)
    assert sorted(rows["candidate"]) == ["fast", "slow"] and set(rows["run"]) == {"Cora_GCN_s0_i0_f0"}
    assert main(args) == 0 and len(pd.read_csv(out)) == 2  # resumed: nothing recomputed or duplicated


def test_a_search_or_a_screen_not_both(tiny_protocol, tmp_path, capsys):
    base = ["tune", "--dataset", "cora", "--backbone", "gcn"]
    assert main(base) == 2
    assert "give --calibrator (an Optuna search) or --candidates FILE" in capsys.readouterr().err
    assert main([*base, "--calibrator", "ts", "--candidates", str(tmp_path / "c.yaml")]) == 2
    assert main([*base, "--candidates", str(tmp_path / "none.yaml")]) == 2
    assert "does not exist" in capsys.readouterr().err
