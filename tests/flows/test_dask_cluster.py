"""The tiny study on a real Dask cluster on loopback: a ``dask scheduler`` and two ``dask worker`` processes,
each worker in its own working folder with its own backbone cache, data root and Prefect home, and no data or
Prefect variables of its own. The rows must be the threads runner's, also when a worker is SIGKILLed mid-study.

What the workers share with the flow here is what docs/orchestration.md says a cluster needs: the study's output
folder (absolute path), the dataset mirror and split files (paths in the study file) and the project's code.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient
from shared_paths import PROJECT_ROOT
from study_helpers import numbers

# The rows test is in the default suite (108 s with the cluster's start on a 2-core machine at load ~4); the
# two worker-killed tests are slow-marked (`make test-slow`; ~4.5 min for all three at load ~8). Each test is
# bounded, and the cluster's processes are killed in the fixture's teardown when it fails or times out.
pytestmark = pytest.mark.timeout(900, method="signal")

WORKERS = ("w0", "w1")
START_TIMEOUT = 120  # s, scheduler up and both workers registered (imports on a loaded 2-core machine)
# The worker's environment loses these: whatever it needs must come from the study file or the flow.
NOT_INHERITED = ("SIMCALIB_DATA_MIRROR", "SIMCALIB_SPLITS_DIR", "SIMCALIB_DATA_ROOT", "SIMCALIB_CACHE_DIR",
                 "PREFECT_API_URL", "PREFECT_HOME")


@dataclass
class DaskCluster:
    address: str
    root: Path
    env: dict  # the environment every process starts from
    folders: dict[str, Path] = field(default_factory=dict)  # process name -> its working folder
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)  # "scheduler" and the workers

    def cache(self, worker: str) -> Path:
        return self.folders[worker] / "cache"

    def log(self, name: str) -> str:
        return (self.folders[name] / "log").read_text()

    def spawn(self, name: str, *args: str, **env: str) -> None:
        """Start ``dask <args>`` as ``name`` in a folder of its own, in a process group of its own."""
        folder = self.folders[name] = self.root / name
        folder.mkdir(parents=True)
        with open(folder / "log", "w") as log:
            self.processes[name] = subprocess.Popen(
                [str(Path(sys.executable).parent / "dask"), *args], cwd=folder, env={**self.env, **env},
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def start_worker(self, name: str) -> None:
        """One single-threaded worker process (no nanny: SIGKILL loses the worker rather than restarting it),
        with its own backbone cache and Prefect home; its data root is ./data in its folder."""
        folder = self.root / name
        self.spawn(name, "worker", self.address, "--name", name, "--nthreads", "1", "--no-nanny", "--no-dashboard",
                   "--host", "127.0.0.1", "--local-directory", str(folder / "dask"), "--death-timeout",
                   str(START_TIMEOUT), SIMCALIB_CACHE_DIR=str(folder / "cache"), PREFECT_HOME=str(folder / "prefect"))

    def alive_workers(self) -> list[str]:
        return [name for name, p in self.processes.items() if name != "scheduler" and p.poll() is None]

    def wait_for_workers(self, count: int) -> None:
        from distributed import Client

        with Client(self.address, timeout=START_TIMEOUT) as client:
            client.wait_for_workers(count, timeout=START_TIMEOUT)

    def kill(self, name: str) -> None:
        """SIGKILL the process group of ``name`` (no-op when it is gone) and reap it."""
        process = self.processes[name]
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory):
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
    env.update(PYTHONPATH=str(PROJECT_ROOT), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    cluster = DaskCluster(f"tcp://127.0.0.1:{port}", tmp_path_factory.mktemp("dask-cluster"), env)
    try:
        cluster.spawn("scheduler", "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard")
        for name in WORKERS:
            cluster.start_worker(name)
        cluster.wait_for_workers(len(WORKERS))
        yield cluster
    finally:
        for name in reversed(list(cluster.processes)):  # workers first, then the scheduler
            cluster.kill(name)


def _study(study_env, name: str, address: str) -> Path:
    """The tiny study on the cluster; ``cache_dir: null``, so each worker uses its own $SIMCALIB_CACHE_DIR."""
    return study_env.write(name, runner={"kind": "dask", "address": address},
                           data={"mirror": str(study_env.mirror), "splits_dir": str(study_env.splits), "cache_dir": None})


def _backbones(folder: Path) -> set[str]:
    return {p.name for p in folder.rglob("*.pt")}


def test_tiny_study_on_a_scheduler_and_two_workers_gives_the_threads_rows(reference, study_env, dask_cluster):
    from flows.study import study_flow

    path = _study(study_env, "dask-cluster", dask_cluster.address)
    # A relative output folder: the flow resolves it before the paths reach the workers (whose working
    # directories are elsewhere), so their predictions land in the flow's output folder.
    relative = os.path.relpath(path.parent / "out", Path.cwd())
    result = study_flow(str(path), {"output": relative})

    assert result["tasks"]["calibrate"] == {"computed": 12, "failed": 0}
    results = pd.read_csv(result["benchmarks"][0]["results"])
    pd.testing.assert_frame_equal(numbers(results), numbers(reference.results))
    # Each worker trained backbones into its own cache (a calibrate task landing on the worker that did not
    # pretrain its run trains that backbone again, to the same numbers): the cache need not be shared.
    caches = {name: _backbones(dask_cluster.cache(name)) for name in WORKERS}
    assert all(caches.values()), caches
    assert set.union(*caches.values()) and len(set.union(*caches.values())) == 3
    # Each worker loaded Cora from the mirror into its own data root (./data in its folder).
    assert all((dask_cluster.folders[name] / "data" / "Cora").is_dir() for name in WORKERS)
    # The test predictions, written by the workers, are in the flow's output folder.
    assert result["output"] == relative
    assert len(list((path.parent / "out" / "Cora_GCN" / "predictions").glob("*.npz"))) == 12
    # The flow's Prefect settings travel with each task: the workers reported to the flow's API server
    # rather than starting temporary servers of their own.
    for name in WORKERS:
        assert "temporary server" not in dask_cluster.log(name), dask_cluster.log(name)


def _rows_in(results: Path) -> int:
    return max(0, len(results.read_text().splitlines()) - 1) if results.is_file() else 0


def _kill_a_busy_worker_after_the_first_calibration(cluster: DaskCluster, results: Path, killed: dict,
                                                     timeout: float = 180) -> None:
    """Poll ``results`` (a results.csv) until a row is there, then SIGKILL a worker running a task."""
    from distributed import Client

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _rows_in(results):
            with Client(cluster.address, timeout=30) as client:
                names = {addr: info["name"] for addr, info in client.scheduler_info()["workers"].items()}
                busy = [names[addr] for addr, keys in client.processing().items() if keys] or cluster.alive_workers()
            killed.update(worker=busy[0], calibrations_done=_rows_in(results))
            cluster.kill(busy[0])
            return
        time.sleep(0.05)
    killed["error"] = f"no row in {results} within {timeout} s"


@pytest.mark.slow
@pytest.mark.parametrize("allowed_failures", [3, 0], ids=["dask-reschedules", "study-resumed"])
def test_a_worker_killed_mid_study_loses_and_duplicates_no_row(reference, study_env, dask_cluster, allowed_failures):
    """Dask's default (3 allowed failures) runs a task lost with its worker again on another worker; with 0,
    the task fails, the study ends with StudyIncompleteError and the same call resumes it from the rows."""
    from distributed import Client

    from flows.study import StudyIncompleteError, study_flow

    for n in range(len(WORKERS) - len(dask_cluster.alive_workers())):  # replace the workers killed before
        dask_cluster.start_worker(f"replacement-{allowed_failures}-{n}")
    dask_cluster.wait_for_workers(len(WORKERS))
    def set_allowed_failures(dask_scheduler=None):  # a local function: sent by value, not imported there
        dask_scheduler.allowed_failures = allowed_failures

    with Client(dask_cluster.address, timeout=30) as client:
        client.run_on_scheduler(set_allowed_failures)
    path = _study(study_env, f"dask-worker-killed-{allowed_failures}", dask_cluster.address)
    killed: dict = {}
    killer = threading.Thread(target=_kill_a_busy_worker_after_the_first_calibration,
                              args=(dask_cluster, path.parent / "out" / "Cora_GCN" / "results.csv", killed), daemon=True)
    killer.start()
    try:
        result = study_flow(str(path))
        resumed = False
    except StudyIncompleteError as error:  # the task lost with the worker failed: the same call resumes
        assert "KilledWorker" in str(error)  # the failure names the lost worker, not a stale "Running" state
        result = study_flow(str(path))
        resumed = True
    killer.join(timeout=60)
    print(f"killed {killed}; resumed: {resumed}; tasks of the last call {result['tasks']}")
    assert "error" not in killed, killed["error"]
    assert dask_cluster.processes[killed["worker"]].returncode == -signal.SIGKILL
    assert killed["calibrations_done"] < 12, "the worker was killed after the study had finished"
    assert resumed == (allowed_failures == 0)

    results = pd.read_csv(result["benchmarks"][0]["results"])
    pd.testing.assert_frame_equal(numbers(results), numbers(reference.results))  # nothing lost, nothing twice
    client = MlflowClient(result["tracking_uri"])
    runs = client.search_runs([client.get_experiment_by_name(result["experiment"]).experiment_id])
    assert len(runs) == 5  # one benchmark run and one per calibrator
