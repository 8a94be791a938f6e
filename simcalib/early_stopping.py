"""Early-stopping state kept on the training device, read by the host every few epochs.

The training loops of backbones (:mod:`simcalib.backbones.training`, :mod:`simcalib.backbones.batched`) and
calibrators (:mod:`simcalib.calibrators.training`) hold their best losses, patience counters, kept
checkpoints and "diverged at epoch e" markers as tensors on the device they train on. An epoch then queues
its kernels without waiting for the device; the host reads the stopping flags once every
:func:`check_interval` epochs. An epoch run after the stop (at most ``interval - 1`` of them) changes no
kept value: every update is masked by "still training". On CPU the interval is 1, so every decision is
taken at the same epoch as a loop that reads each loss with ``.item()``, on the same float32 values.

:func:`python_max` and :func:`python_min` are Python's ``max(a, b)`` and ``min(a, b)`` on tensors, NaN
included (``max(a, b)`` is ``b`` only when ``b > a``), which ``torch.maximum`` is not (it propagates NaN).
"""

from __future__ import annotations

import torch
from torch import Tensor

CUDA_CHECK_INTERVAL = 25  # epochs between two host reads of the stopping flags on an accelerator


def check_interval(device: torch.device | str, interval: int | None = None) -> int:
    """Epochs between two host reads of the stopping state: ``interval`` when given, else 1 on CPU and
    :data:`CUDA_CHECK_INTERVAL` on any other device."""
    if interval is not None:
        if int(interval) < 1:
            raise ValueError(f"the stopping check interval must be at least 1 epoch, got {interval}")
        return int(interval)
    return 1 if torch.device(device).type == "cpu" else CUDA_CHECK_INTERVAL


def python_max(a: Tensor, b: Tensor) -> Tensor:
    """Python's ``max(a, b)``, element-wise: ``b`` where ``b > a``, else ``a``."""
    return torch.where(b > a, b, a)


def python_min(a: Tensor, b: Tensor) -> Tensor:
    """Python's ``min(a, b)``, element-wise: ``b`` where ``b < a``, else ``a``."""
    return torch.where(b < a, b, a)


def is_check_epoch(epoch: int, interval: int, last_epoch: int) -> bool:
    """Whether the host reads the stopping state after ``epoch`` (0-based)."""
    return (epoch + 1) % interval == 0 or epoch == last_epoch
