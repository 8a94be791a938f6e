"""Synthetic study folders for the report tests: results and predictions drawn from random logits, no training."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from simcalib import metrics as M
from simcalib.store.results_store import RESULT_COLUMNS

# Calibrators as temperatures on the same logits: UnCal overconfident, the others closer to calibrated.
TEMPERATURES = {"UnCal": 0.45, "TS": 1.0, "ETS": 1.05, "CaGCN": 1.2, "GATS": 0.95, "SimCalib": 1.0,
                "SimCalib_l": 0.9, "SimCalib_w0.5": 0.85, "Dirichlet": 1.1, "SimCalib_decay_all": 1.02,
                "GETS": 0.7, "GETS_ap": 0.75, "GETS_holdout": 0.9, "WATS": 0.98, "VS": 1.08, "IRM": 1.03,
                "MyCal": 1.07}  # MyCal: a calibrator no registry knows (another package's)


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(1, keepdims=True)


def _metrics(probs: np.ndarray, labels: np.ndarray, estimators: bool, degree: np.ndarray) -> dict[str, float]:
    """The row's metrics: every one (as simcalib benchmark writes them), or without the estimators (as rows
    written before their columns; also several times faster, the smooth ECE's bandwidth search dominating)."""
    if estimators:
        return M.compute_metrics(probs, labels, degree=degree)
    return {name: (100.0 if name in M.PERCENT_METRICS else 1.0) * getattr(M, name)(probs, labels)
            for name in M.BASE_METRIC_NAMES}


def write_benchmark(folder: Path, dataset: str, backbone: str, calibrators, label_rate: float = 0.15,
                    splits=(0, 1), inits=(0,), folds=(0, 1, 2), n_test: int = 400, n_classes: int = 4,
                    seed: int = 0, predictions: bool = True, feature_distance: bool = True,
                    estimators: bool = False) -> None:
    """``folder/results.csv`` (+ predictions/*.npz) computed from drawn logits, like `simcalib benchmark` writes;
    ``estimators``: with the estimator columns (smooth ECE, ...; a node's degree drawn at random), else the rows
    lack them, as the committed rows do."""
    rng = np.random.default_rng(seed)
    rows = []
    pred_dir = folder / "predictions"
    for s in splits:
        for i in inits:
            for f in folds:
                labels = rng.integers(0, n_classes, n_test)
                signal = rng.gamma(2.0, 1.0, n_test)  # per-node evidence; low evidence = far from a prototype
                logits = rng.normal(0, 1, (n_test, n_classes))
                logits[np.arange(n_test), labels] += signal
                distance = 1.0 / (signal + 0.1) + rng.normal(0, 0.05, n_test) ** 2
                degree = np.random.default_rng((seed, s, i, f)).integers(1, 12, n_test)  # own stream: rng's draws stay
                for c in calibrators:
                    probs = _softmax(logits / TEMPERATURES[c] / (1.0 + 0.2 * (c == "SimCalib") * (signal[:, None] < 1)))
                    metrics = _metrics(probs, labels, estimators, degree)
                    rows.append({"dataset": dataset, "backbone": backbone, "calibrator": c, "split": s, "init": i,
                                 "fold": f, "seed": 1000 * s + 10 * i + f, **metrics, "fit_seconds": 0.01,
                                 "label_rate": label_rate})
                    if predictions:
                        pred_dir.mkdir(parents=True, exist_ok=True)
                        arrays = {"probs": probs.astype(np.float32), "labels": labels, "test_idx": np.arange(n_test)}
                        if feature_distance:
                            arrays["feature_distance"] = distance
                        np.savez_compressed(pred_dir / f"{dataset}_{backbone}_s{s}_i{i}_f{f}_{c}.npz", **arrays)
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).reindex(columns=RESULT_COLUMNS).to_csv(folder / "results.csv", index=False)
