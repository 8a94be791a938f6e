"""Calibration per local-homophily group of the test nodes (an analysis of the results; no calibrator sees it).

Local homophily of node i, from the TRUE labels y and the simple undirected graph (no self-loops):

    h_i = |{j in N(i) : y_j = y_i}| / |N(i)|,      undefined (NaN) for an isolated node (|N(i)| = 0).

It reads the labels of the test nodes and their neighbours, so it is computed in evaluation
(:func:`simcalib.experiment.protocol.evaluate_calibrator`) from the loaded graph, never from a
:class:`~simcalib.calibrators.base.CalibrationGraph` (whose test labels are hidden), and is not passed to any
calibrator. The test nodes are put in fixed groups (:data:`GROUP_EDGES`: [0, 0.2), [0.2, 0.4), [0.4, 0.6),
[0.6, 0.8), [0.8, 1]) and a group of their own for isolated nodes; fixed edges, not quantiles, so that groups
mean the same on every graph and run. Per group: node count, ECE (15 equal-width bins, percent), accuracy and
mean top-1 confidence (percent), and on binary graphs the calibration error of p(y = 1) (percent). The result
is one JSON string per results row (column ``homophily_bins``).
"""

from __future__ import annotations

import json

import numpy as np
import torch

from simcalib.metrics import N_BINS, ece, positive_ece

GROUP_EDGES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
ISOLATED = "isolated"
VERSION = 1


def group_names() -> list[str]:
    """``"[0,0.2)"`` ... ``"[0.8,1]"`` and ``"isolated"``, in the order of :func:`group_index`."""
    edges = GROUP_EDGES
    names = [f"[{edges[g]:g},{edges[g + 1]:g})" for g in range(len(edges) - 2)]
    return [*names, f"[{edges[-2]:g},{edges[-1]:g}]", ISOLATED]


def local_homophily(edge_index: torch.Tensor, labels: torch.Tensor | np.ndarray, num_nodes: int) -> np.ndarray:
    """h_i for every node (float64 [N]; NaN for isolated nodes). ``edge_index`` [2, E] holds both directions of
    each undirected edge, ``labels`` [N] the true labels."""
    src, dst = (edge_index.detach().cpu().numpy() if isinstance(edge_index, torch.Tensor) else np.asarray(edge_index))
    y = labels.detach().cpu().numpy() if isinstance(labels, torch.Tensor) else np.asarray(labels)
    degree = np.bincount(dst, minlength=num_nodes).astype(np.float64)  # [N]
    same = np.bincount(dst, weights=(y[src] == y[dst]).astype(np.float64), minlength=num_nodes)  # [N]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(degree > 0, same / degree, np.nan)


def group_index(homophily: np.ndarray) -> np.ndarray:
    """Group of each node (int64): g for GROUP_EDGES[g] <= h < GROUP_EDGES[g + 1] (h = 1 in the last bounded
    group), len(GROUP_EDGES) - 1 for NaN (isolated)."""
    homophily = np.asarray(homophily, dtype=np.float64)
    inner = np.asarray(GROUP_EDGES[1:-1])
    index = np.searchsorted(inner, np.nan_to_num(homophily, nan=0.0), side="right")
    return np.where(np.isnan(homophily), len(GROUP_EDGES) - 1, index).astype(np.int64)


def summarise(probs: np.ndarray, labels: np.ndarray, homophily: np.ndarray, n_bins: int = N_BINS) -> dict:
    """Per group of the nodes (``probs`` [n, K], ``labels`` [n], ``homophily`` [n]): count, ECE, accuracy,
    confidence and, for K = 2, positive_ece (percent; NaN for an empty group)."""
    probs, labels = np.asarray(probs, dtype=np.float64), np.asarray(labels, dtype=np.int64)
    group = group_index(homophily)
    out: dict = {"version": VERSION, "groups": group_names(), "count": [], "ece": [], "accuracy": [], "confidence": []}
    binary = probs.shape[1] == 2
    if binary:
        out["positive_ece"] = []
    for g in range(len(out["groups"])):
        members = group == g
        out["count"].append(int(members.sum()))
        if not members.any():
            for key in ("ece", "accuracy", "confidence", *(("positive_ece",) if binary else ())):
                out[key].append(float("nan"))
            continue
        p, y = probs[members], labels[members]
        out["ece"].append(100.0 * ece(p, y, n_bins))
        out["accuracy"].append(100.0 * float((p.argmax(1) == y).mean()))
        out["confidence"].append(100.0 * float(p.max(1).mean()))
        if binary:
            out["positive_ece"].append(100.0 * positive_ece(p, y, n_bins))
    return out


def to_json(summary: dict) -> str:
    """Compact JSON (NaN written as null)."""
    clean = {k: [None if isinstance(v, float) and np.isnan(v) else (round(v, 6) if isinstance(v, float) else v)
                 for v in value] if isinstance(value, list) else value for k, value in summary.items()}
    return json.dumps(clean, separators=(",", ":"))


def from_json(text: str) -> dict:
    """The summary of :func:`to_json`, nulls back to NaN."""
    data = json.loads(text)
    return {k: [np.nan if v is None else v for v in value] if isinstance(value, list) and k != "groups" else value
            for k, value in data.items()}


__all__ = ["GROUP_EDGES", "ISOLATED", "from_json", "group_index", "group_names", "local_homophily", "summarise",
           "to_json"]
