"""Task-runner selection, the temporary server's process, Ctrl-C to a study on worker processes, the temporary
servers of stopped Dask workers, and a tiny study on a local Dask cluster on loopback (same numbers as threads)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
from prefect.task_runners import ProcessPoolTaskRunner, ThreadPoolTaskRunner
from process_helpers import kill_all, left_running, process_tree
from shared_paths import PROJECT_ROOT
from study_helpers import TINY_CALIBRATORS, numbers

from flows.runners import make_task_runner
from simcalib.experiment.study import TaskRunnerSpec


def test_each_kind_gives_its_runner():
    from prefect_dask import DaskTaskRunner

    from flows.dask_workers import StudyDaskTaskRunner

    assert isinstance(make_task_runner(TaskRunnerSpec(kind="threads", workers=3)), ThreadPoolTaskRunner)
    assert isinstance(make_task_runner(TaskRunnerSpec(kind="processes")), ProcessPoolTaskRunner)
    remote = make_task_runner(TaskRunnerSpec(kind="dask", address="tcp://10.1.2.3:8786"))
    assert isinstance(remote, DaskTaskRunner) and remote.address == "tcp://10.1.2.3:8786"
    assert isinstance(remote, StudyDaskTaskRunner) and isinstance(remote.duplicate(), StudyDaskTaskRunner)
    local = make_task_runner(TaskRunnerSpec(kind="dask", workers=2))
    assert local.address is None
    assert local.cluster_kwargs["host"] == "127.0.0.1"  # the scheduler and workers listen on loopback only
    assert local.cluster_kwargs["n_workers"] == 2 and local.cluster_kwargs["threads_per_worker"] == 1


def test_a_process_started_for_the_study_leaves_its_process_group_and_ends_with_the_study():
    """How the temporary server is started: out of reach of a terminal's Ctrl-C, yet gone when the study is
    killed outright."""
    import psutil

    study = textwrap.dedent("""
        import os, signal, subprocess
        from flows.temporary_server import _detached_processes
        with _detached_processes():
            child = subprocess.Popen(["sleep", "300"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        print(child.pid, os.getsid(0), os.getsid(child.pid), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    process = subprocess.run([sys.executable, "-c", study], cwd=PROJECT_ROOT, capture_output=True, text=True,
                             timeout=60, env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)})
    child, study_sid, child_sid = (int(x) for x in process.stdout.split())  # getsid values
    assert child_sid == child != study_sid
    deadline = time.monotonic() + 10
    while psutil.pid_exists(child) and psutil.Process(child).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the child outlived the killed study"
        time.sleep(0.1)


def _ephemeral_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a process started where no Prefect server is configured (Prefect's temporary one)."""
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    return {**env, "PREFECT_HOME": str(home), "PYTHONPATH": str(PROJECT_ROOT), "PYTHONUNBUFFERED": "1", **extra}


STOP_WITHIN = 60  # s from Ctrl-C to exit: measured 15 s at load ~7 on 2 cores (a backbone in training: 20-40 s)


class _StudyInFlight:
    """``simcalib study run`` of a tiny study on two worker processes, started as a terminal starts it (its own
    process group, SIGINT at its default, no Prefect server configured) and watched until its first
    calibration's row is written, while backbones of up to 150 epochs (Cora GCN rarely stops before: several
    seconds each) keep work in flight. ``finished``: the rows at that moment; ``tree``: its processes then."""

    def __init__(self, study_env, tmp_path: Path, name: str):
        study_file = study_env.write(name, runner={"kind": "processes", "workers": 2}, backbone={"max_epochs": 150})
        self.out = study_file.parent / "out"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "simcalib.cli", "study", "run", str(study_file)], cwd=PROJECT_ROOT,
            env=_ephemeral_env(tmp_path / "home"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        self.tree: list = []

    def rows(self) -> list[str]:  # every finished calibration is a row of its benchmark's results.csv (the ledger)
        return [line for path in sorted(self.out.glob("*/results.csv")) for line in path.read_text().splitlines()[1:]]

    def wait_for_first_row(self) -> None:
        deadline = time.monotonic() + 300
        while not self.rows() and self.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert self.process.poll() is None, "the study ended before it could be stopped"
        self.tree = process_tree(self.process.pid)
        self.finished = self.rows()

    def check_rows_kept(self) -> None:
        after = self.rows()
        # rows finished by a worker between the snapshot and the signal are kept too; none is lost or rewritten
        assert after[:len(self.finished)] == self.finished, "a finished row was lost or rewritten"
        assert len(after) < 3 * len(TINY_CALIBRATORS), "the study had no work left in flight when stopped"
        assert left_running(self.tree, timeout=20) == []

    def end(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        kill_all(self.tree)  # the server is outside the study's process group


def test_ctrl_c_stops_a_study_on_worker_processes_at_once_keeping_its_finished_tasks(study_env, tmp_path):
    """``simcalib study run`` on the processes runner (the default), as a terminal starts it (its own foreground
    process group, SIGINT at its default), no Prefect server configured. Ctrl-C (SIGINT to the whole group) once
    the first calibration is done, while a backbone trains: the study exits with 130 within seconds, the
    backbone in flight cut short (no task finishes after the key), every task finished before the key kept as
    it was, and no process of the study (worker processes, the temporary server) left."""
    study = _StudyInFlight(study_env, tmp_path, "ctrl-c-processes")
    try:
        study.wait_for_first_row()
        assert any("uvicorn" in " ".join(p.cmdline()) for p in study.tree), "no temporary server was started"
        os.killpg(study.process.pid, signal.SIGINT)
        stopped = time.monotonic()
        try:
            output, _ = study.process.communicate(timeout=STOP_WITHIN)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the study still runs {STOP_WITHIN} s after Ctrl-C")
        print(f"exit {study.process.returncode} {time.monotonic() - stopped:.1f} s after Ctrl-C; rows written "
              f"before it: {len(study.finished)}")
        assert study.process.returncode == 130, output
        assert "interrupted: every finished row is kept in" in output
        study.check_rows_kept()
    finally:
        study.end()


def _worker_processes(pid: int) -> list:
    """The process pool's workers below the study process ``pid`` (spawned: ``multiprocessing.spawn``)."""
    return [p for p in process_tree(pid)[1:] if "spawn_main" in " ".join(p.cmdline())]


@pytest.mark.parametrize("signum, status, line", [
    (signal.SIGINT, 130, "interrupted: every finished row is kept in"),
    pytest.param(signal.SIGKILL, 1, "error: a worker process of the study ended (killed by signal 9, SIGKILL",
                 marks=pytest.mark.slow),  # ~70 s, the same path as SIGINT's to its other end
], ids=["SIGINT", "SIGKILL"])
def test_a_worker_process_ended_by_a_signal_stops_the_study_in_one_line(study_env, tmp_path, signum, status, line):
    """``simcalib study run`` on the processes runner; one worker process alone gets a signal once a first row is
    written (a Ctrl-C that reaches a worker before the study's process, a worker killed for memory). SIGINT: the
    stop Ctrl-C gives (exit 130, its one line); SIGKILL: an error of one line naming the worker's end and how to
    resume. Either way no traceback, and every row finished before it kept."""
    study = _StudyInFlight(study_env, tmp_path, f"worker-{signum.name}")
    try:
        study.wait_for_first_row()
        workers = _worker_processes(study.process.pid)
        assert workers, "no worker process found"
        workers[0].send_signal(signum)  # the worker alone: the study's process gets no signal
        try:
            output, _ = study.process.communicate(timeout=STOP_WITHIN)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the study still runs {STOP_WITHIN} s after its worker got {signum.name}")
        assert study.process.returncode == status, output
        assert "Traceback" not in output, output
        (message,) = [text for text in output.splitlines() if text.startswith(line)]  # the command's own line
        assert "run the same command to resume" in message, output
        study.check_rows_kept()
    finally:
        study.end()


_HOLD_ON_EACH_WORKER = textwrap.dedent("""
    import sys, time
    from prefect import flow, task
    from flows.runners import make_task_runner
    from simcalib.experiment.study import TaskRunnerSpec

    @task
    def hold(seconds):
        time.sleep(seconds)
        return seconds

    @flow(task_runner=make_task_runner(TaskRunnerSpec(kind="dask", address=sys.argv[1])))
    def hold_on_each_worker():
        return [f.result() for f in [hold.submit(600 + i) for i in range(2)]]

    hold_on_each_worker()
""")


def test_dask_workers_stopped_with_sigterm_leave_no_temporary_server_behind(tmp_path):
    """Two ``dask worker`` processes as docs/orchestration.md starts them (with their nanny), no Prefect server
    configured anywhere: each worker holds a Prefect task when it gets SIGTERM; the nanny ends the busy worker
    process after a grace period, and every process of both workers' trees, their temporary Prefect servers
    included, must end with them."""
    from distributed import Client

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    dask = str(Path(sys.executable).parent / "dask")
    started: dict[str, subprocess.Popen] = {}
    trees: dict[str, list] = {}

    def spawn(name: str, *args: str) -> None:
        folder = tmp_path / name
        folder.mkdir()
        with open(folder / "log", "w") as log:
            started[name] = subprocess.Popen([dask, *args], cwd=folder, stdout=log, stderr=subprocess.STDOUT,
                                             env=_ephemeral_env(folder / "prefect", OMP_NUM_THREADS="1"),
                                             start_new_session=True)

    try:
        spawn("scheduler", "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard")
        for name in ("w0", "w1"):
            spawn(name, "worker", address, "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1",
                  "--local-directory", str(tmp_path / name / "dask"))
        with Client(address, timeout=120) as client:
            client.wait_for_workers(2, timeout=120)
        (tmp_path / "flow").mkdir()
        started["flow"] = subprocess.Popen([sys.executable, "-c", _HOLD_ON_EACH_WORKER, address], cwd=tmp_path / "flow",
                                           env=_ephemeral_env(tmp_path / "flow" / "prefect"),
                                           stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:  # both workers busy, each with its temporary server
            trees = {name: process_tree(started[name].pid) for name in ("w0", "w1")}
            with Client(address, timeout=30) as client:
                busy = sum(bool(keys) for keys in client.processing().values())
            servers = [p for tree in trees.values() for p in tree if "uvicorn" in " ".join(p.cmdline())]
            if busy == 2 and len(servers) == 2:
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"the workers did not both hold a task with a temporary server: {trees}")
        for name in ("w0", "w1"):
            started[name].send_signal(signal.SIGTERM)  # the worker's own process, as `kill PID` does
        for name in ("w0", "w1"):
            started[name].wait(timeout=60)
        left = left_running([p for tree in trees.values() for p in tree], timeout=20)
        assert left == [], left
    finally:
        for process in started.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
        kill_all([p for tree in trees.values() for p in tree])


@pytest.mark.slow  # ~1 min; Dask by default: a scheduler and two workers (tests/flows/test_dask_cluster.py)
def test_tiny_study_on_a_local_dask_cluster_matches_the_threads_run(reference, study_env):
    from flows.study import study_flow

    path = study_env.write("dask", runner={"kind": "dask", "workers": 2})
    result = study_flow(str(path))
    assert result["tasks"]["calibrate"] == {"computed": 12, "failed": 0}
    results = pd.read_csv(result["benchmarks"][0]["results"])
    pd.testing.assert_frame_equal(numbers(results), numbers(reference.results))


@pytest.mark.slow
def test_tiny_study_on_processes_matches_the_threads_run(reference, study_env):
    from flows.study import study_flow

    path = study_env.write("processes", runner={"kind": "processes", "workers": 2})
    result = study_flow(str(path))
    assert result["tasks"]["calibrate"] == {"computed": 12, "failed": 0}
    results = pd.read_csv(result["benchmarks"][0]["results"])
    pd.testing.assert_frame_equal(numbers(results), numbers(reference.results))
