"""The peak resident memory of this process, as the benchmarks report it (Linux).

* VmHWM (``/proc/self/status``): the process's own high-water mark of resident memory;
* ``ru_maxrss`` (``getrusage``): the same peak, except that after ``exec`` it starts at the resident size of
  the process that started it, so a child's value is at least its parent's.

Both in KiB on Linux; the functions below convert.
"""

from __future__ import annotations

import resource


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
