"""Local dashboards and servers as child processes: start on 127.0.0.1, wait until healthy, stop cleanly.

Used by ``simcalib ui`` (MLflow UI, Optuna dashboard, Prefect server) and by the deployment test (Prefect
server and worker). Each child is detached from the terminal in a process group of its own (setsid), so a
Ctrl-C in the terminal reaches only ``simcalib ui``, which then stops the children in order: SIGINT or SIGTERM
to the group, and SIGKILL only if its leader outlives ``timeout``. Output goes to a log file per service.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

LOOPBACK = "127.0.0.1"


def executable(name: str) -> str:
    """The console script ``name`` of this Python environment (else from PATH)."""
    beside = Path(sys.executable).parent / name
    if beside.is_file():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} is not installed in {sys.prefix}; install the project (make install)")
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def port_in_use(port: int, host: str = LOOPBACK) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


@dataclass
class Service:
    """A child process with a health URL."""

    name: str
    command: list[str]
    url: str  # what a user opens
    health_url: str
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    stop_signal: int = signal.SIGTERM
    process: subprocess.Popen | None = None

    def start(self) -> Service:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        env={**os.environ, **self.env}, start_new_session=True)
        log.close()  # the child holds its own descriptor
        return self

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.health_url, timeout=2) as response:
                return 200 <= response.status < 300
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def wait_healthy(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running():
                raise RuntimeError(f"{self.name} exited with code {self.process.returncode if self.process else '?'} "
                                   f"before becoming healthy; see {self.log_path}")
            if self.healthy():
                return
            time.sleep(0.5)
        raise TimeoutError(f"{self.name} was not healthy at {self.health_url} within {timeout:.0f} s; see {self.log_path}")

    def stop(self, timeout: float = 20.0) -> int | None:
        """Signal the service's process group, wait, and SIGKILL the group if it is still there."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            _signal_group(self.process.pid, self.stop_signal)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _signal_group(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        return self.process.returncode


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# ---------------------------------------------------------------------------------------------------------
# The three dashboards


def mlflow_ui(tracking_uri: str, port: int, log_dir: Path) -> Service:
    command = [executable("mlflow"), "server", "--backend-store-uri", tracking_uri, "--host", LOOPBACK,
               "--port", str(port), "--workers", "1"]
    if tracking_uri.startswith("sqlite:///"):  # artifacts of runs logged through the UI's server go beside the file
        folder = Path(tracking_uri[len("sqlite:///"):]).parent / "mlartifacts"
        command += ["--artifacts-destination", str(folder.resolve())]
    url = f"http://{LOOPBACK}:{port}"
    return Service("MLflow UI", command, url, f"{url}/health", log_dir / "mlflow.log")


def optuna_dashboard(storage: str, port: int, log_dir: Path) -> Service:
    """The dashboard on an RDB storage; the storage's tables are created first (the dashboard does not create
    them, and exits on a new, empty SQLite file)."""
    import optuna

    optuna.storages.RDBStorage(storage)
    # wsgiref: gunicorn, if installed, would write ~/.gunicorn (../shared/STACK.md)
    command = [executable("optuna-dashboard"), storage, "--host", LOOPBACK, "--port", str(port), "--server", "wsgiref"]
    url = f"http://{LOOPBACK}:{port}/dashboard"
    return Service("Optuna dashboard", command, url, f"http://{LOOPBACK}:{port}/api/studies", log_dir / "optuna.log")


def optuna_storage_note(storage: str) -> str | None:
    """None where the Optuna ``storage`` holds a study; else one line saying how to create a small one (a
    one-run search of TS on Cora GCN, its tuned file kept out of study/tuned/), for the dashboard to show."""
    import shlex

    import optuna

    if optuna.storages.RDBStorage(storage).get_all_studies():
        return None
    return (f"Optuna dashboard: {storage} holds no search yet; `simcalib tune --dataset cora --backbone gcn "
            f"--calibrator ts --trials 10 --splits 1 --folds 1 --storage {shlex.quote(storage)} "
            "--tuned-dir .cache/tuned` creates one")


def prefect_server(port: int, log_dir: Path, env: dict[str, str] | None = None) -> Service:
    command = [executable("prefect"), "server", "start", "--host", LOOPBACK, "--port", str(port)]
    url = f"http://{LOOPBACK}:{port}"
    return Service("Prefect server", command, url, f"{url}/api/health", log_dir / "prefect-server.log",
                   env=dict(env or {}))


def prefect_worker(pool: str, api_url: str, log_dir: Path, env: dict[str, str] | None = None) -> Service:
    """A process worker; it ignores SIGTERM while a run is in flight, so it is stopped with SIGINT."""
    command = [executable("prefect"), "worker", "start", "--pool", pool, "--type", "process"]
    return Service("Prefect worker", command, api_url, f"{api_url}/health", log_dir / "prefect-worker.log",
                   env={"PREFECT_API_URL": api_url, **(env or {})}, stop_signal=signal.SIGINT)


__all__ = [
    "LOOPBACK", "Service", "executable", "free_port", "mlflow_ui", "optuna_dashboard", "optuna_storage_note",
    "port_in_use",
    "prefect_server", "prefect_worker",
]
