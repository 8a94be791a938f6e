"""Task-runner selection for the study flow: threads, processes or Dask.

* ``processes`` (default): ``ProcessPoolTaskRunner``, one task per process, so the numerics use every worker's
  core. In ephemeral mode (no ``PREFECT_API_URL``) every worker process would start its own temporary API server
  (../shared/STACK.md); :func:`shared_api_server` starts one (:func:`flows.temporary_server.start_temporary_server`) and points the
  worker processes at it. Ctrl-C ends the worker processes at once (:func:`end_on_interrupt`); a pool broken by a
  worker's end is turned into the study's stop (:func:`broken_pool_stop`): the Ctrl-C stop when a worker ended by
  SIGINT or the flow's process received it, else :class:`~simcalib.errors.WorkerProcessLost`.
* ``threads``: Prefect's ``ThreadPoolTaskRunner`` in the flow's process. torch's random state is
  process-global, so the study's tasks hold one lock while they compute: threads overlap Prefect's
  bookkeeping and result I/O, not the numerics, and the numbers stay deterministic.
* ``dask``: ``prefect_dask.DaskTaskRunner`` (:class:`flows.dask_workers.StudyDaskTaskRunner`: a worker's
  temporary API server ends with the worker process) on a scheduler ``address`` (tcp://host:8786; its workers need this
  project at the same commit, the study's output folder shared at the same absolute path and the mirror and
  split files readable; docs/orchestration.md, "Running on a Dask cluster"), or else a ``LocalCluster`` of
  single-threaded worker processes listening on 127.0.0.1 only.

What runs on the runner is decided by the library's schedule (:mod:`simcalib.experiment.schedule`): on CUDA devices
the study's tasks are one per run, K in flight per device (``task_runner.runs_per_device``), and the flow gives
the runner as many workers as runs in flight (devices x K, ``flows.study._runner_spec``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator

from prefect.task_runners import ProcessPoolTaskRunner, TaskRunner, ThreadPoolTaskRunner

from simcalib.errors import ConfigError, WorkerProcessLost
from simcalib.experiment.study import TaskRunnerSpec

from .temporary_server import start_temporary_server

KINDS = ("threads", "processes", "dask")
SIGINT_EXITS = (-signal.SIGINT, 128 + signal.SIGINT)  # a process ended by SIGINT: its default action, end_on_interrupt
_interrupted = threading.Event()  # this process received SIGINT inside sigint_recorded()


def make_task_runner(spec: TaskRunnerSpec) -> TaskRunner:
    """The Prefect task runner a study's ``task_runner`` entry asks for."""
    if spec.kind == "threads":
        return ThreadPoolTaskRunner(max_workers=spec.workers)
    if spec.kind == "processes":
        return ProcessPoolTaskRunner(max_workers=spec.workers, initializer=end_on_interrupt)
    if spec.kind == "dask":
        from .dask_workers import StudyDaskTaskRunner as DaskTaskRunner  # workers' servers end with them

        if spec.address:
            return DaskTaskRunner(address=spec.address)
        # Loopback only: a LocalCluster must not listen on the machine's other interfaces. No dashboard (it
        # needs bokeh and a port); one thread per worker because torch's random state is process-global.
        return DaskTaskRunner(cluster_kwargs={
            "n_workers": spec.workers, "threads_per_worker": 1, "processes": True,
            "host": "127.0.0.1", "dashboard_address": None,
        })
    raise ConfigError(f"unknown task runner {spec.kind!r}; choose one of {', '.join(KINDS)}")


def end_on_interrupt() -> None:
    """Worker-process initializer: SIGINT (a terminal's Ctrl-C reaches the whole foreground process group) ends the
    worker process at once, its task in flight unfinished. Prefect's process pool resolves a task's future only
    for an ``Exception`` (prefect 3.8, ``task_runners._ChainedFuture``): a ``KeyboardInterrupt`` inside a task
    would leave its future unresolved and the flow's shutdown waiting on it forever, and a worker that ignored the
    key would finish its task first (a backbone in training: tens of seconds). A worker that is gone instead
    breaks the pool, every future resolves (``BrokenProcessPool``) and the flow's process, interrupted by the same
    key, exits. Finished tasks are kept; the task cut short left at most a partial result file, which Prefect
    reads as no result (``ResultStore.exists``), so the resumed study computes that task again
    (docs/decisions.md, "Ctrl-C stops a study")."""
    signal.signal(signal.SIGINT, lambda signum, frame: os._exit(128 + signum))


@contextlib.contextmanager
def sigint_recorded() -> Iterator[None]:
    """Inside the block a SIGINT to this process is recorded (for :func:`broken_pool_stop`) and then handled as
    before (by default: ``KeyboardInterrupt``). Only in the main thread, where Python runs signal handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)

    def record(signum, frame):
        _interrupted.set()
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            signal.default_int_handler(signum, frame)

    _interrupted.clear()
    signal.signal(signal.SIGINT, record)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def worker_exit_codes(task_runner, wait: float = 5.0) -> list[int]:
    """The exit codes of the ended worker processes of ``task_runner`` (a ``ProcessPoolTaskRunner``: its
    ``concurrent.futures`` pool and that pool's processes, neither a public attribute), waiting up to ``wait``
    seconds for a first one (the pool's futures fail before its workers are reaped); [] when none is found."""
    pool = getattr(task_runner, "_executor", None)
    processes = list((getattr(pool, "_processes", None) or {}).values())
    deadline = time.monotonic() + wait
    while True:
        codes = [p.exitcode for p in processes if p.exitcode is not None]
        if codes or not processes or time.monotonic() > deadline:
            return codes
        time.sleep(0.05)


def broken_pool_stop(task_runner, output) -> BaseException:
    """What a broken process pool (``BrokenProcessPool``: a worker process ended) means for a study writing its rows
    under ``output``: ``KeyboardInterrupt``, the stop Ctrl-C gives, when a worker ended by SIGINT (a Ctrl-C that
    reached it before the flow's process turned it into the stop) or this process received SIGINT
    (:func:`sigint_recorded`); else :class:`~simcalib.errors.WorkerProcessLost` naming how the worker ended and how to resume."""
    codes = worker_exit_codes(task_runner)
    if _interrupted.is_set() or any(code in SIGINT_EXITS for code in codes):
        return KeyboardInterrupt()
    # the pool ends the other workers with SIGTERM once one is gone: the first other end is the cause
    causes = [code for code in codes if code != -signal.SIGTERM] or codes
    if not causes:
        how = "its exit code unknown"
    elif causes[0] < 0:
        number = -causes[0]
        name = signal.Signals(number).name if number in signal.valid_signals() else "unknown"
        how = f"killed by signal {number}, {name}" + (
            ": out of memory or killed from outside" if number == signal.SIGKILL else "")
    else:
        how = f"exit code {causes[0]}"
    return WorkerProcessLost(f"a worker process of the study ended ({how}) while its tasks ran; every finished row "
                             f"is kept in {output}/<Dataset>_<Backbone>/results.csv; run the same command to resume")


@contextlib.contextmanager
def shared_api_server(spec: TaskRunnerSpec) -> Iterator[str | None]:
    """For ``processes``: export the API URL the flow talks to (starting the temporary server first when none
    is configured), so worker processes report to it instead of each starting their own server."""
    if spec.kind != "processes":
        yield None
        return
    from prefect.settings import get_current_settings

    url = get_current_settings().api.url or start_temporary_server()
    previous = os.environ.get("PREFECT_API_URL")
    os.environ["PREFECT_API_URL"] = url
    try:
        yield url
    finally:
        if previous is None:
            os.environ.pop("PREFECT_API_URL", None)
        else:
            os.environ["PREFECT_API_URL"] = previous


__all__ = ["KINDS", "SIGINT_EXITS", "broken_pool_stop", "end_on_interrupt", "make_task_runner", "shared_api_server",
           "sigint_recorded", "worker_exit_codes"]
