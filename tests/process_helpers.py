"""Helpers for tests that drive long-running commands (`simcalib ui`, `simcalib study run`, `dask worker`) as child
processes: their output, and the processes they leave behind."""

from __future__ import annotations

import subprocess
import time


def read_until(process: subprocess.Popen, text: str, timeout: float) -> str:
    """What ``process`` printed up to and including the first line containing ``text``; fails the test with
    the output so far if that line does not come within ``timeout`` seconds or the process exits."""
    lines, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line and process.poll() is not None:
            break
        lines.append(line)
        if text in line:
            return "".join(lines)
    raise AssertionError(f"the command did not print {text!r} within {timeout} s:\n{''.join(lines)}")


def process_tree(pid: int) -> list:
    """``pid``'s process and every process below it (``psutil.Process`` objects), as they are now."""
    import psutil

    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def left_running(processes: list, timeout: float) -> list[str]:
    """The command lines of ``processes`` still running after ``timeout`` seconds (zombies count as ended)."""
    import psutil

    _, alive = psutil.wait_procs(processes, timeout=timeout)
    running = []
    for process in alive:
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                running.append(f"{process.pid} (parent {process.ppid()}): {' '.join(process.cmdline())[:100]}")
        except psutil.NoSuchProcess:
            pass
    return running


def kill_all(processes: list) -> None:
    """SIGKILL whatever of ``processes`` still runs (a test's cleanup)."""
    import psutil

    for process in processes:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
