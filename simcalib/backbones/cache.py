"""On-disk cache of trained backbones, keyed by the run's identity.

The key hashes (dataset, backbone settings, split, init, fold, seed, the exact train/validation indices,
torch and torch_geometric versions), so a calibrator never retrains a backbone and a changed setting
never reuses a stale one. Writes are atomic (temporary file, then rename): a run killed mid-write leaves
no half file, and an unreadable entry is recomputed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import warnings
from pathlib import Path

import numpy as np
import torch
import torch_geometric

from simcalib.backbones.models import DEFAULT_ATTENTION
from simcalib.backbones.training import BackboneConfig, BackboneOutput

CACHE_ENV = "SIMCALIB_CACHE_DIR"
# Bump when the backbone code changes what a trained backbone computes: old entries then stop matching.
BACKBONE_CODE_VERSION = 1


def default_cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or ".cache/simcalib")


def cache_key(
    dataset: str, config: BackboneConfig, split: int, init: int, fold: int, seed: int,
    train_idx: torch.Tensor, val_idx: torch.Tensor, trainer: str = "per-run", device: str | torch.device = "cpu",
) -> str:
    """``trainer``: "per-run" (:func:`train_backbone`) or "batched" (:mod:`simcalib.backbones.batched`, other
    random streams, hence another backbone); only a non-default trainer enters the key, so the keys of
    per-run entries are unchanged. ``device``: where the backbone is trained; a device type other than CPU
    enters the key (CUDA draws dropout masks from its own generator: another backbone), CPU keys are unchanged."""
    settings = dataclasses.asdict(config)
    if settings["attention"] == DEFAULT_ATTENTION:  # the keys of entries trained before the option are unchanged
        del settings["attention"]
    identity = {
        "dataset": dataset,
        "config": settings,
        "split": split,
        "init": init,
        "fold": fold,
        "seed": seed,
        "train": hashlib.sha256(np.asarray(train_idx, dtype=np.int64).tobytes()).hexdigest(),
        "val": hashlib.sha256(np.asarray(val_idx, dtype=np.int64).tobytes()).hexdigest(),
        "code": BACKBONE_CODE_VERSION,
        # The CPU thread count changes floating-point reduction order, hence early stopping and the backbone.
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "pyg": torch_geometric.__version__,
    }
    if trainer != "per-run":
        identity["trainer"] = trainer
    if torch.device(device).type != "cpu":
        identity["device"] = torch.device(device).type
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:24]


class BackboneCache:
    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root) if root is not None else default_cache_dir()

    def path(self, dataset: str, backbone: str, key: str) -> Path:
        return self.root / "backbones" / dataset / backbone / f"{key}.pt"

    def load(self, dataset: str, backbone: str, key: str) -> BackboneOutput | None:
        path = self.path(dataset, backbone, key)
        if not path.is_file():
            return None
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
            return BackboneOutput(**state)
        except Exception as exc:  # a corrupt entry is recomputed, never fatal
            warnings.warn(f"ignoring unreadable backbone cache entry {path} ({exc}); it will be recomputed", stacklevel=2)
            return None

    def save(self, dataset: str, backbone: str, key: str, output: BackboneOutput) -> Path:
        path = self.path(dataset, backbone, key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        torch.save(dataclasses.asdict(output), tmp)
        tmp.replace(path)
        return path
