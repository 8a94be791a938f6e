"""The CLI end to end: what a user sees, exit codes, no tracebacks.

A small benchmark and an unknown-name error run in a subprocess, as from a shell (the process's own exit status and
stderr); the other commands call the same entry point in this process, since a subprocess spends seconds importing
torch."""

import os
import re
import subprocess
import sys
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from simcalib.cli import main


def simcalib(*args, env=None, cwd=None):
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "simcalib.cli", *args], capture_output=True, text=True,
                          env=full_env, cwd=cwd, timeout=600)


@pytest.fixture
def cli(capsys, monkeypatch):
    """``main(args)`` in this process, with ``env`` set for the call: returncode, stdout and stderr like ``simcalib``."""
    def run(*args, env=None):
        for key, value in (env or {}).items():
            monkeypatch.setenv(key, value)
        capsys.readouterr()
        threads = torch.get_num_threads()
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code
        finally:
            torch.set_num_threads(threads)  # a command's --threads must not leak into other tests
        out, err = capsys.readouterr()
        return SimpleNamespace(returncode=code, stdout=out, stderr=err)
    return run


@pytest.mark.parametrize("args,expected", [
    (["--dataset", "reddit", "--backbone", "gcn"], "valid datasets are: Cora, Citeseer, Pubmed, CoraFull, Computers, Photo, CS, Physics"),
    (["--dataset", "cora", "--backbone", "sage"], "valid backbones are: GCN, GAT"),
    (["--dataset", "cora", "--backbone", "gcn", "--calibrators", "ts,platt"], "unknown calibrator 'platt'; valid calibrators are: UnCal, TS"),
])
def test_unknown_names_list_the_valid_ones(cli, args, expected):
    result = cli("benchmark", *args)
    assert result.returncode == 2
    assert expected in result.stderr
    assert "Traceback" not in result.stderr


def test_an_unknown_name_from_a_shell_exits_2_with_the_valid_ones_and_no_traceback():
    result = simcalib("benchmark", "--dataset", "reddit", "--backbone", "gcn")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "valid datasets are: Cora, Citeseer, Pubmed, CoraFull, Computers, Photo, CS, Physics" in result.stderr


def test_missing_dataset_says_how_to_provide_it(cli, tmp_path):
    result = cli("benchmark", "--dataset", "pubmed", "--backbone", "gcn", "--data-root", str(tmp_path),
                 env={"SIMCALIB_DATA_MIRROR": "", "SIMCALIB_OFFLINE": "1"})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "dataset Pubmed is not available" in result.stderr and "SIMCALIB_DATA_MIRROR" in result.stderr


def test_truncated_raw_file_is_reported_as_corrupt(cli, tmp_path, mirror_dir):
    mirror = tmp_path / "mirror" / "Computers" / "raw"
    mirror.mkdir(parents=True)
    source = mirror_dir / "Computers" / "raw" / "amazon_electronics_computers.npz"
    (mirror / source.name).write_bytes(source.read_bytes()[:4096])
    result = cli("benchmark", "--dataset", "computers", "--backbone", "gcn", "--data-root", str(tmp_path / "root"),
                 "--data-mirror", str(tmp_path / "mirror"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "corrupt or truncated" in result.stderr


def test_benchmark_prints_a_summary_and_writes_results(tmp_path, mirror_dir, splits_dir):
    result = simcalib("benchmark", "--dataset", "Cora", "--backbone", "GCN", "--calibrators", "uncal,ts",
                      "--splits", "1", "--inits", "1", "--folds", "=0", "--max-epochs", "10", "--no-progress",
                      "--out", str(tmp_path / "out"), "--data-root", str(tmp_path / "data"),
                      "--cache-dir", str(tmp_path / "cache"),
                      env={"SIMCALIB_DATA_MIRROR": str(mirror_dir), "SIMCALIB_SPLITS_DIR": str(splits_dir)})
    assert result.returncode == 0, result.stderr
    assert "Cora / GCN" in result.stdout and "UnCal" in result.stdout
    frame = pd.read_csv(tmp_path / "out" / "results.csv")
    assert sorted(frame["calibrator"]) == ["TS", "UnCal"]


def test_data_check_reports_loadable_and_missing_datasets(cli, tmp_path, mirror_dir):
    result = cli("data", "check", "cora", "corafull", "--data-root", str(tmp_path), "--data-mirror", str(mirror_dir),
                 env={"SIMCALIB_OFFLINE": "1"})
    assert result.returncode == 1
    assert "Cora" in result.stdout and "2708" in result.stdout
    assert re.search(r"^CoraFull +cannot load", result.stdout, re.MULTILINE)


def test_benchmark_bad_resume_file_and_batch_size_are_one_line_errors(cli, tmp_path):
    result = cli("benchmark", "--dataset", "Cora", "--backbone", "GCN", "--resume-from", str(tmp_path / "none.csv"),
                 "--out", str(tmp_path / "out"), env={"SIMCALIB_OFFLINE": "1"})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "--resume-from" in result.stderr and "no such file" in result.stderr
    result = cli("benchmark", "--dataset", "Cora", "--backbone", "GCN", "--batch-runs", "--models-per-batch", "0",
                 "--out", str(tmp_path / "out"), env={"SIMCALIB_OFFLINE": "1"})
    assert result.returncode == 2 and "--models-per-batch must be >= 1" in result.stderr


def test_benchmark_takes_calibrators_options_and_seed_from_a_study_file(cli, tmp_path, mirror_dir, splits_dir):
    from simcalib.seeding import run_seed

    study = tmp_path / "pass.yaml"
    study.write_text("name: pass\nseed: 3\nbenchmarks: {datasets: [Cora], backbones: [GCN]}\n"
                     "calibrators:\n  TS: {}\n  SimCalib: {w: 0.0}\n")
    result = cli("benchmark", "--dataset", "Cora", "--backbone", "GCN", "--study", str(study),
                 "--splits", "=0", "--inits", "=0", "--folds", "=0", "--max-epochs", "10", "--threads", "1",
                 "--no-progress", "--out", str(tmp_path / "out"), "--data-root", str(tmp_path / "data"),
                 "--cache-dir", str(tmp_path / "cache"),
                 env={"SIMCALIB_DATA_MIRROR": str(mirror_dir), "SIMCALIB_SPLITS_DIR": str(splits_dir)})
    assert result.returncode == 0, result.stderr
    frame = pd.read_csv(tmp_path / "out" / "results.csv").set_index("calibrator")
    assert list(frame.index) == ["TS", "SimCalib"]  # the study's calibrators, in its order
    assert frame.loc["SimCalib", "w"] == 0.0  # its options: the movement branch alone, never a grid choice
    assert (frame["seed"] == run_seed(3, "Cora", "GCN", 0, 0, 0)).all()  # its seed, not the default 10


def test_benchmark_reads_tuned_options_for_tuned_names_from_the_tuned_dir(cli, tmp_path, mirror_dir, splits_dir):
    from simcalib.store.tuned import save_tuned_params

    args = ["benchmark", "--dataset", "Cora", "--backbone", "GCN", "--calibrators", "gats_tuned",
            "--splits", "=0", "--inits", "=0", "--folds", "=0", "--max-epochs", "10", "--threads", "1",
            "--no-progress", "--out", str(tmp_path / "out"), "--data-root", str(tmp_path / "data"),
            "--cache-dir", str(tmp_path / "cache"), "--tuned-dir", str(tmp_path / "tuned")]
    env = {"SIMCALIB_DATA_MIRROR": str(mirror_dir), "SIMCALIB_SPLITS_DIR": str(splits_dir)}
    missing = cli(*args, env=env)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert "no tuned hyperparameters for GATS on Cora/GCN" in missing.stderr and "simcalib tune" in missing.stderr
    save_tuned_params("Cora", "GCN", "GATS", {"lr": 0.02, "max_epochs": 3}, folder=tmp_path / "tuned")
    result = cli(*args, env=env)
    assert result.returncode == 0, result.stderr
    assert list(pd.read_csv(tmp_path / "out" / "results.csv")["calibrator"]) == ["GATS_tuned"]


def test_benchmark_takes_the_batch_keys_from_a_study_file_and_the_command_line_wins(cli, tmp_path, mirror_dir, splits_dir):
    study = tmp_path / "pass.yaml"
    study.write_text("name: pass\nbenchmarks: {datasets: [Cora], backbones: [GCN]}\ncalibrators: [TS]\n"
                     "runs: {batch_calibrators: true}\n")

    def ts_fit_seconds(*flags: str) -> list[float]:
        out = tmp_path / f"out{len(flags)}"
        result = cli("benchmark", "--dataset", "Cora", "--backbone", "GCN", "--study", str(study), *flags,
                     "--splits", "=0", "--inits", "=0", "--folds", "0,1", "--max-epochs", "10", "--threads", "1",
                     "--no-progress", "--out", str(out), "--data-root", str(tmp_path / "data"),
                     "--cache-dir", str(tmp_path / "cache"),
                     env={"SIMCALIB_DATA_MIRROR": str(mirror_dir), "SIMCALIB_SPLITS_DIR": str(splits_dir)})
        assert result.returncode == 0, result.stderr
        return pd.read_csv(out / "results.csv")["fit_seconds"].tolist()

    together = ts_fit_seconds()
    assert len(together) == 2 and together[0] == together[1]  # one fit of both runs, its time shared out
    one_by_one = ts_fit_seconds("--no-batch-calibrators")
    assert one_by_one[0] != one_by_one[1]  # two fits, timed apart


def test_benchmark_with_a_malformed_study_file_is_a_one_line_error(cli, tmp_path):
    study = tmp_path / "bad.yaml"
    study.write_text("name: bad\nseed: 3\nbenchmarks: {datasets: [Cora], backbones: [GCN]}\ncalibrators: {Platt: {}}\n")
    result = cli("benchmark", "--dataset", "Cora", "--backbone", "GCN", "--study", str(study),
                 "--out", str(tmp_path / "out"), env={"SIMCALIB_OFFLINE": "1"})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "Platt" in result.stderr and "bad.yaml" in result.stderr


def test_each_command_module_registers_the_commands_it_declares(cli):
    import argparse
    import importlib

    from simcalib.commands import COMMAND_MODULES

    declared = []
    for name in COMMAND_MODULES:
        module = importlib.import_module(name)
        sub = argparse.ArgumentParser().add_subparsers()
        module.register(sub)
        assert tuple(sub.choices) == module.COMMANDS, name
        declared += module.COMMANDS
    every = cli("--help")  # the top level lists every command
    assert every.returncode == 0 and all(command in every.stdout for command in declared)


@pytest.mark.parametrize("argv, printed", [(["report", "--help"], "usage: simcalib report"),
                                           (["--version"], "simcalib ")])
def test_a_command_starts_without_the_imports_of_another_commands_help(argv, printed):
    # `benchmark`'s help lists the calibrators (importing them and torch_geometric, seconds); `report` needs neither
    code = ("import sys; from simcalib.cli import main\n"
            f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
            "print('calibrators imported:', 'simcalib.calibrators' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(printed), done.stdout
    assert done.stdout.rstrip().endswith("calibrators imported: False"), done.stdout
