"""Fixtures of the report tests: a small synthetic study folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from .synthetic import write_benchmark


@pytest.fixture
def synthetic_study(tmp_path: Path) -> Path:
    """Two benchmarks at 15% (Cora GCN complete, Citeseer GAT without GATS) and a 2-rate efficiency sweep."""
    root = tmp_path / "study"
    main = ["UnCal", "TS", "ETS", "CaGCN", "GATS", "SimCalib", "SimCalib_l", "SimCalib_w0.5"]
    write_benchmark(root / "Cora_GCN", "Cora", "GCN", main, seed=1)
    write_benchmark(root / "Citeseer_GAT", "Citeseer", "GAT", ["UnCal", "TS", "SimCalib"], seed=2,
                    feature_distance=False)
    efficiency = ["UnCal", "ETS", "CaGCN", "GATS", "SimCalib"]
    for k, rate in enumerate((0.03, 0.06)):
        write_benchmark(root / f"efficiency/Cora_GCN_lr{rate}", "Cora", "GCN", efficiency, label_rate=rate,
                        splits=(0,), folds=(0,), seed=10 + k, predictions=False)
    return root
