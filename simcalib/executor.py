"""A process pool for protocol runs: each task in its own spawned worker process with one torch thread.

:func:`in_processes` yields ``function(*task)`` of every task as it finishes. Workers are spawned (torch and
fork do not mix safely), take the caller's warning filters, exit when the parent dies, and are stopped as
soon as the caller stops reading (interrupted, a task failed, or it left early), so nothing runs on unseen.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed

import torch


def worker_init(threads: int, warning_filters: list, parent_pid: int) -> None:
    """Set up a worker process: ``threads`` torch threads, the parent's warning filters, and a watcher that
    exits the worker once ``parent_pid`` is gone."""
    torch.set_num_threads(threads)
    warnings.filters[:] = warning_filters  # the caller's filters (spawned processes start with the defaults)

    def exit_with_parent() -> None:  # a killed parent would otherwise leave idle workers behind for good
        while os.getppid() == parent_pid:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=exit_with_parent, daemon=True).start()


class Counted:
    """An iterable with a known length, so that a progress wrapper (tqdm) shows the total."""

    def __init__(self, items: Iterable, length: int):
        self.items, self.length = items, length

    def __iter__(self):
        return iter(self.items)

    def __len__(self) -> int:
        return self.length


def in_processes(function: Callable, tasks: Sequence[tuple], workers: int) -> Iterator:
    """``function(*task)`` of every task in ``workers`` spawned processes with one torch thread each, yielded
    as each finishes (``function`` must be importable by name: a module-level function)."""
    context = multiprocessing.get_context("spawn")  # torch and fork do not mix safely
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=worker_init,
                               initargs=(1, list(warnings.filters), os.getpid()))
    try:
        futures = [pool.submit(function, *task) for task in tasks]
        for future in as_completed(futures):
            yield future.result()
    except BaseException:
        # Interrupted, a task failed or the caller stopped early: what finished is already with the caller;
        # stop the tasks in flight now instead of waiting for them, and start no other.
        processes = list(getattr(pool, "_processes", {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.terminate()
        raise
    pool.shutdown()


__all__ = ["Counted", "in_processes", "worker_init"]
