"""``simcalib benchmark`` end to end in subprocesses: killed with SIGKILL (by a timer, or at an exact point by
the fault hook ``SIMCALIB_FAULT_KILL_AFTER``), the same command loses nothing and gives the numbers of an
uninterrupted run; a second invocation on one folder, and a resume under another split source, are refused."""

import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
from synthetic_graphs import write_amazon_mirror

from simcalib.errors import ConfigError
from simcalib.experiment.splits import CHECKOUT_SPLITS


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


# ---------------------------------------------------------------------------------------------------------
# Faults a user meets: a kill, a second invocation, another split source. Each command is one small run set
# (Cora GCN, 10 epochs), ~10 s a process on the shared 2-core machine.

HOLD_LOCK = """
import sys, time
from simcalib.store.integrity import results_lock
with results_lock(sys.argv[1], command="holder"):
    print("held", flush=True)
    time.sleep(600)
"""


@pytest.fixture(scope="module")
def generated_mirror(tmp_path_factory):
    """A generated graph laid out as the mirror's Photo, so the resume and lock checks run without ../shared."""
    folder = tmp_path_factory.mktemp("generated-mirror")
    write_amazon_mirror(folder, "Photo")
    return folder


GENERATED = ("--generated-splits", "--splits-dir", "none")  # its splits: drawn from the seed


def _generated(tmp_path, out: str, *extra: str, cache: str = "cache") -> list[str]:
    """``simcalib benchmark`` of 3 runs (6 rows) on the generated Photo."""
    return _small(tmp_path, out, *GENERATED, *extra, cache=cache, dataset="photo")


def _small(tmp_path, out: str, *extra: str, cache: str = "cache", dataset: str = "cora") -> list[str]:
    return [sys.executable, "-m", "simcalib.cli", "benchmark", "--dataset", dataset, "--backbone", "gcn",
            "--calibrators", "uncal,ts", "--splits", "1", "--inits", "1", "--max-epochs", "10", "--threads", "1",
            "--no-progress", "--out", str(tmp_path / out), "--data-root", str(tmp_path / "data"),
            "--cache-dir", str(tmp_path / cache), *extra]


def _env(mirror_dir, splits_dir=None, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "SIMCALIB_SPLITS_DIR"}  # a plain shell: no splits set
    env.update({"SIMCALIB_DATA_MIRROR": str(mirror_dir), "SIMCALIB_OFFLINE": "1", **extra})
    if splits_dir is not None:
        env["SIMCALIB_SPLITS_DIR"] = str(splits_dir)
    return env


@pytest.mark.slow  # ~1 min; by default a cut-off results line (tests/test_protocol.py) and a killed study
# (tests/flows/test_study_flow.py) resume to the uninterrupted rows
def test_killed_after_a_run_and_resumed_gives_the_rows_of_an_uninterrupted_run(tmp_path, generated_mirror):
    killed = subprocess.run(_generated(tmp_path, "killed"), env=_env(generated_mirror, SIMCALIB_FAULT_KILL_AFTER="1"),
                            capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert len(pd.read_csv(tmp_path / "killed" / "results.csv")) == 2  # the first run's two rows, nothing else
    resumed = subprocess.run(_generated(tmp_path, "killed"), env=_env(generated_mirror), capture_output=True,
                             text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    reference = subprocess.run(_generated(tmp_path, "reference", cache="cache-reference"), env=_env(generated_mirror),
                               capture_output=True, text=True, timeout=300)
    assert reference.returncode == 0, reference.stderr
    got, want = (pd.read_csv(tmp_path / d / "results.csv") for d in ("killed", "reference"))
    assert len(got) == 6
    pd.testing.assert_frame_equal(got.drop(columns="fit_seconds"), want.drop(columns="fit_seconds"))


@pytest.mark.skipif(not CHECKOUT_SPLITS.is_dir(), reason="no ../shared/datasets/splits beside the checkout")
def test_from_a_plain_shell_the_paper_splits_are_used_and_said_and_another_source_is_refused(tmp_path, mirror_dir):
    first = subprocess.run(_small(tmp_path, "x"), env=_env(mirror_dir), capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    said = f"splits: Cora: split(s) 0 from the fixed GATS files in {CHECKOUT_SPLITS} (beside the checkout)"
    assert first.stdout.startswith(said) and first.stdout.rstrip().endswith(said)  # at start, and in the summary
    splits_json = (tmp_path / "x" / "splits.json").read_bytes()
    results = (tmp_path / "x" / "results.csv").read_bytes()
    no_files = _env(mirror_dir, "none")
    refused = subprocess.run(_small(tmp_path, "x", "--inits", "2"), env=no_files, capture_output=True, text=True,
                             timeout=300)
    assert refused.returncode == 2 and "--generated-splits" in refused.stderr  # no silent fallback
    switched = subprocess.run(_small(tmp_path, "x", "--inits", "2", "--generated-splits"), env=no_files,
                              capture_output=True, text=True, timeout=300)
    assert switched.returncode == 2, switched.stdout
    assert switched.stderr.count("\n") == 1 and switched.stderr.startswith(
        f"error: {tmp_path / 'x' / 'results.csv'}: refusing to add runs: Cora GCN s0 i0 f0 (label rate 0.15) was "
        "computed on another split")
    assert (tmp_path / "x" / "splits.json").read_bytes() == splits_json  # {"0": "fixed"} stays
    assert (tmp_path / "x" / "results.csv").read_bytes() == results


@pytest.mark.slow  # ~45 s; by default the lock through the command below and in tests/test_protocol.py
def test_a_second_invocation_on_one_folder_is_refused_or_waits(tmp_path, generated_mirror):
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(tmp_path / "x")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        refused = subprocess.run(_generated(tmp_path, "x"), env=_env(generated_mirror), capture_output=True,
                                 text=True, timeout=300)
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1
        assert f"is being written by pid {holder.pid} on " in refused.stderr and "--wait" in refused.stderr
        assert not (tmp_path / "x" / "results.csv").exists()
        waiting = subprocess.Popen(_generated(tmp_path, "x", "--wait"), env=_env(generated_mirror),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert waiting.stderr.readline().startswith(f"waiting for pid {holder.pid} ")
        holder.kill()  # the holder goes (killed, as the worst case): the waiting command takes over and runs
        out, err = waiting.communicate(timeout=300)
        assert waiting.returncode == 0, err
    finally:
        holder.kill()
        holder.wait()
    assert len(pd.read_csv(tmp_path / "x" / "results.csv")) == 6


def test_the_same_command_started_twice_at_once_writes_every_run_once(tmp_path, generated_mirror):
    env = _env(generated_mirror)
    both = [subprocess.Popen(_generated(tmp_path, "x"), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]
    outcomes = [(process.wait(timeout=300), process.stderr.read()) for process in both]
    for code, stderr in outcomes:  # one runs, the other is refused (or, had the first finished, finds all done)
        assert code == 0 or (code == 2 and "is being written by pid" in stderr), stderr
    results = pd.read_csv(tmp_path / "x" / "results.csv")
    assert len(results) == 6 and not results.duplicated(["calibrator", "split", "init", "fold"]).any()


@pytest.mark.slow  # 13 CLI runs: ~2.5 min on the shared 2-core machine
def test_killed_at_several_points_with_one_and_two_workers_resumes_to_the_uninterrupted_rows(tmp_path, generated_mirror):
    env = _env(generated_mirror)
    key = ["calibrator", "split", "init", "fold"]
    reference = subprocess.run(_generated(tmp_path, "reference", "--inits", "2", cache="cache-reference"), env=env,
                               capture_output=True, text=True, timeout=600)
    assert reference.returncode == 0, reference.stderr
    want = pd.read_csv(tmp_path / "reference" / "results.csv").sort_values(key).reset_index(drop=True)
    for workers in ("1", "2"):
        for after in (1, 3, 5):
            name = f"killed-w{workers}-n{after}"
            command = _generated(tmp_path, name, "--inits", "2", "--workers", workers, cache=f"cache-{name}")
            if workers == "2":  # each worker process runs one torch thread already
                del command[command.index("--threads"):command.index("--threads") + 2]
            killed = subprocess.run(command, env={**env, "SIMCALIB_FAULT_KILL_AFTER": str(after)},
                                    capture_output=True, text=True, timeout=600)
            assert killed.returncode == -signal.SIGKILL, killed.stderr
            path = tmp_path / name / "results.csv"
            assert len(pd.read_csv(path)) == 2 * after
            if after == 3:  # and the kill came in the middle of the last write
                path.write_bytes(path.read_bytes()[:-30])
            resumed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
            assert resumed.returncode == 0, resumed.stderr
            got = pd.read_csv(path).sort_values(key).reset_index(drop=True)
            assert len(got) == 12 and not got.duplicated(key).any()
            pd.testing.assert_frame_equal(got.drop(columns="fit_seconds"), want.drop(columns="fit_seconds"))


STUDY_OF_ITS_OWN = """\
name: own
seed: 3
benchmarks: {datasets: [cora], backbones: [gcn]}
calibrators: {UnCal: {}}
runs: {splits: 1, inits: 1, folds: 3, label_rate: 0.3, generated_splits: true}
"""


def _benchmark_args(study_file, *extra: str):
    import argparse

    from simcalib.commands.benchmark import register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args(["benchmark", "--dataset", "cora", "--backbone", "gcn", "--study", str(study_file), *extra])


def test_a_study_file_gives_its_label_rate_and_generated_splits_unless_the_command_line_does(tmp_path):
    from simcalib.commands.benchmark import take_study_defaults
    from simcalib.experiment.study import load_study

    path = tmp_path / "study.yaml"
    path.write_text(STUDY_OF_ITS_OWN)
    study = load_study(path)
    args = _benchmark_args(path)
    take_study_defaults(args, study)
    assert (args.seed, args.label_rate, args.generated_splits) == (3, 0.3, True)  # the study's rows, not 0.15's
    args = _benchmark_args(path, "--label-rate", "0.6", "--seed", "4")
    take_study_defaults(args, study)
    assert (args.seed, args.label_rate) == (4, 0.6)  # the command line wins

    path.write_text(STUDY_OF_ITS_OWN.replace("label_rate: 0.3", "label_rate: [0.3, 0.6]"))
    sweep = load_study(path)
    with pytest.raises(ConfigError, match="sweeps the label rates 0.3, 0.6; pass --label-rate"):
        take_study_defaults(_benchmark_args(path), sweep)
    args = _benchmark_args(path, "--label-rate", "0.6")
    take_study_defaults(args, sweep)
    assert args.label_rate == 0.6
