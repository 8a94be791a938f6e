"""Task-runner selection, the temporary server's process, and a tiny study on a local Dask cluster on loopback
(same numbers as threads)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pandas as pd
import pytest
from prefect.task_runners import ProcessPoolTaskRunner, ThreadPoolTaskRunner
from shared_paths import PROJECT_ROOT
from study_helpers import numbers

from flows.runners import make_task_runner
from simcalib.experiment.study import TaskRunnerSpec


def test_each_kind_gives_its_runner():
    from prefect_dask import DaskTaskRunner

    assert isinstance(make_task_runner(TaskRunnerSpec(kind="threads", workers=3)), ThreadPoolTaskRunner)
    assert isinstance(make_task_runner(TaskRunnerSpec(kind="processes")), ProcessPoolTaskRunner)
    remote = make_task_runner(TaskRunnerSpec(kind="dask", address="tcp://10.1.2.3:8786"))
    assert isinstance(remote, DaskTaskRunner) and remote.address == "tcp://10.1.2.3:8786"
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
        from flows.runners import _detached_processes
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
