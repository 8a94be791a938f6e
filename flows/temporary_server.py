"""Prefect's temporary API server, started where no server is configured so that it neither sees a terminal's
Ctrl-C nor outlives the process that started it (docs/decisions.md, "Ctrl-C stops a study").

Used by ``simcalib study run`` and ``simcalib report --flow`` before their first flow, by the processes runner
(:func:`flows.runners.shared_api_server`) and on every Dask worker (:mod:`flows.dask_workers`).
"""

from __future__ import annotations

import contextlib
import ctypes
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator


def start_temporary_server() -> str | None:
    """In ephemeral mode (no ``PREFECT_API_URL``): start Prefect's temporary API server now, detached from the
    terminal (setsid), and return its URL (None when a server is configured); flows then use it (Prefect keeps one
    per process) and Prefect's exit handler stops it. Started by Prefect on entering a flow instead, the server
    shares the terminal's foreground process group: a Ctrl-C stops it with the study, and the interrupted flow
    waits on the dead server instead of exiting (docs/decisions.md, "Ctrl-C stops a study"). Call it before the
    first flow."""
    from prefect.settings import get_current_settings

    if get_current_settings().api.url:
        return None
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()  # the singleton the flow's own client uses in ephemeral mode
    with _detached_processes():
        server.start()  # no-op when it is already running
    return server.api_url


def _die_with_parent() -> Callable[[], None] | None:
    """Linux: a child-side hook that has the kernel send the child SIGTERM when the process that started it ends,
    however it ends (``kill -9``, a closed terminal); bound before the fork, so the child only makes the call.
    The kernel ties the signal to the starting thread's end, hence the main thread only."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    pr_set_pdeathsig = 1
    return lambda: prctl(pr_set_pdeathsig, signal.SIGTERM)


class _DetachedPopen(subprocess.Popen):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("start_new_session", True)
        kwargs.setdefault("preexec_fn", _die_with_parent())
        super().__init__(*args, **kwargs)


@contextlib.contextmanager
def _detached_processes() -> Iterator[None]:
    """Processes started inside the block are detached from the terminal (setsid), out of reach of its Ctrl-C, and
    end when this process ends (out of its process group, they would otherwise outlive a ``kill -9``). Prefect
    starts its temporary server with ``subprocess.Popen`` and no option for either, hence the substitution for
    the duration of the start."""
    original = subprocess.Popen
    subprocess.Popen = _DetachedPopen
    try:
        yield
    finally:
        subprocess.Popen = original


__all__ = ["start_temporary_server"]
