"""Deterministic seeds.

Every run's seed is a pure function of the study seed and the run's identity, so any single run can be
recomputed alone and gives the same numbers as inside the full study (on the same machine and software).
"""

from __future__ import annotations

import hashlib
import os
import random

import numpy as np
import torch

STUDY_SEED = 10  # the paper's (and GATS's) global seed


def derive_seed(*parts: object) -> int:
    """A 31-bit seed from any sequence of printable parts (stable across processes and platforms)."""
    text = "|".join(str(p).lower() for p in parts)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little") & 0x7FFFFFFF


def run_seed(study_seed: int, dataset: str, backbone: str, split: int, init: int, fold: int) -> int:
    """Seed of one run: (study seed, dataset, backbone, split, init, fold) -> int."""
    return derive_seed("run", study_seed, dataset, backbone, split, init, fold)


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (CPU and CUDA) and ask torch for deterministic kernels where cheap."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
