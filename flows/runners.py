"""Task-runner selection for the study flow: threads, processes or Dask.

* ``threads`` (default): Prefect's ``ThreadPoolTaskRunner`` in the flow's process. torch's random state is
  process-global, so the study's tasks hold one lock while they compute: threads overlap Prefect's
  bookkeeping and result I/O, not the numerics, and the numbers stay deterministic.
* ``processes``: ``ProcessPoolTaskRunner``, one task per process. In ephemeral mode (no ``PREFECT_API_URL``)
  every worker process would start its own temporary API server (../shared/STACK.md); :func:`shared_api_server`
  starts one and points the worker processes at it.
* ``dask``: ``prefect_dask.DaskTaskRunner`` on a scheduler ``address`` (tcp://host:8786; its workers need this
  project at the same commit, the study's output folder shared at the same absolute path and the mirror and
  split files readable; docs/orchestration.md, "Running on a Dask cluster"), or else a ``LocalCluster`` of
  single-threaded worker processes listening on 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from prefect.task_runners import ProcessPoolTaskRunner, TaskRunner, ThreadPoolTaskRunner

from simcalib.errors import ConfigError
from simcalib.experiment.study import TaskRunnerSpec

KINDS = ("threads", "processes", "dask")


def make_task_runner(spec: TaskRunnerSpec) -> TaskRunner:
    """The Prefect task runner a study's ``task_runner`` entry asks for."""
    if spec.kind == "threads":
        return ThreadPoolTaskRunner(max_workers=spec.workers)
    if spec.kind == "processes":
        return ProcessPoolTaskRunner(max_workers=spec.workers)
    if spec.kind == "dask":
        from prefect_dask import DaskTaskRunner

        if spec.address:
            return DaskTaskRunner(address=spec.address)
        # Loopback only: a LocalCluster must not listen on the machine's other interfaces. No dashboard (it
        # needs bokeh and a port); one thread per worker because torch's random state is process-global.
        return DaskTaskRunner(cluster_kwargs={
            "n_workers": spec.workers, "threads_per_worker": 1, "processes": True,
            "host": "127.0.0.1", "dashboard_address": None,
        })
    raise ConfigError(f"unknown task runner {spec.kind!r}; choose one of {', '.join(KINDS)}")


@contextlib.contextmanager
def shared_api_server(spec: TaskRunnerSpec) -> Iterator[str | None]:
    """For ``processes``: export the API URL the flow talks to (starting the temporary server first when none
    is configured), so worker processes report to it instead of each starting their own server."""
    if spec.kind != "processes":
        yield None
        return
    from prefect.settings import get_current_settings

    url = get_current_settings().api.url
    if not url:
        from prefect.server.api.server import SubprocessASGIServer

        server = SubprocessASGIServer()  # the singleton the flow's own client uses in ephemeral mode
        server.start()  # stopped by Prefect's exit handler
        url = server.api_url
    previous = os.environ.get("PREFECT_API_URL")
    os.environ["PREFECT_API_URL"] = url
    try:
        yield url
    finally:
        if previous is None:
            os.environ.pop("PREFECT_API_URL", None)
        else:
            os.environ["PREFECT_API_URL"] = previous


__all__ = ["KINDS", "make_task_runner", "shared_api_server"]
