"""Helpers for tests that drive a long-running command (`simcalib ui`) as a child process."""

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
