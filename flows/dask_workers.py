"""The study's Dask task runner: on every worker, Prefect's temporary API server ends with the worker process.

Where no Prefect server is configured (no ``PREFECT_API_URL``, docs/orchestration.md), a task that reaches a
Dask worker starts Prefect's temporary API server (one per process, ``SubprocessASGIServer``) from the worker
thread that runs it, as a plain child of the worker process, stopped by an exit handler. A worker stopped with
SIGTERM while a task runs never reaches that handler: the ``dask worker`` nanny asks the worker process to
close, waits, and SIGKILLs it, and the server lives on, orphaned (measured: distributed 2026.8, prefect 3.8).

:class:`TemporaryServerOnWorkers`, a worker plugin that :class:`StudyDaskTaskRunner` registers on its client,
starts that server when the worker joins, in the worker's main thread (where plugins run), with
:func:`flows.temporary_server.start_temporary_server`: detached from the terminal and with the kernel's parent-death
signal, which is tied to the thread that started the child, hence the main thread. The tasks then find the
server running and use it, and the server ends with the worker process however that ends. Where the flow has a
server configured, its URL travels with every task and no plugin is registered; where a worker has one of its own
(``PREFECT_API_URL``), the plugin starts nothing.
"""

from __future__ import annotations

from distributed.diagnostics.plugin import WorkerPlugin
from prefect_dask import DaskTaskRunner

from .temporary_server import start_temporary_server

PLUGIN_NAME = "simcalib-temporary-prefect-server"


class TemporaryServerOnWorkers(WorkerPlugin):
    """Starts the worker process's temporary Prefect server (ephemeral mode only) as the worker joins."""

    idempotent = True  # registered again by the next study on the same cluster: kept, not set up twice
    name = PLUGIN_NAME

    def setup(self, worker) -> None:
        start_temporary_server()


class StudyDaskTaskRunner(DaskTaskRunner):
    """``prefect_dask.DaskTaskRunner`` that registers :class:`TemporaryServerOnWorkers` when its client starts."""

    @property
    def client(self):
        from prefect.settings import get_current_settings

        started = self._client is not None
        client = DaskTaskRunner.client.fget(self)
        if not started and not get_current_settings().api.url:  # a configured server travels with every task
            client.register_plugin(TemporaryServerOnWorkers(), name=PLUGIN_NAME)
        return client


__all__ = ["PLUGIN_NAME", "StudyDaskTaskRunner", "TemporaryServerOnWorkers"]
