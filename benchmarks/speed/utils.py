"""Helpers shared by the speed benchmarks: the peak resident memory of this process (Linux) and the CPU model
that the outputs name.

* VmHWM (``/proc/self/status``): the process's own high-water mark of resident memory;
* ``ru_maxrss`` (``getrusage``): the same peak, except that after ``exec`` it starts at the resident size of
  the process that started it, so a child's value is at least its parent's.

Both in KiB on Linux; the functions below convert.
"""

from __future__ import annotations

import platform
import resource
import subprocess


def vm_hwm_kib() -> float:
    """VmHWM of this process in KiB; NaN where ``/proc/self/status`` has no VmHWM line."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return float(line.split()[1])
    return float("nan")


def ru_maxrss_kib() -> float:
    """``ru_maxrss`` of this process in KiB."""
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def peak_rss_gib() -> float:
    """VmHWM of this process (peak resident set) in GiB."""
    return vm_hwm_kib() / 2**20


def cpu_model() -> str:
    """The CPU model ``lscpu`` names (else the ``model name`` of /proc/cpuinfo, else the platform's processor
    string): backbones trained from one seed differ between CPU models, so rows pair only on the same model."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        return next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name"))
    except (OSError, subprocess.CalledProcessError, StopIteration):
        pass
    try:
        with open("/proc/cpuinfo") as info:
            return next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown CPU"
