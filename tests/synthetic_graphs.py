"""Small synthetic graphs for tests that must run without the dataset mirror (importable by any test module,
unlike a conftest, whose module name several folders share)."""

from __future__ import annotations

import numpy as np
import torch


def make_sbm_graph(num_nodes: int = 90, num_classes: int = 3, num_features: int = 24, seed: int = 0,
                   p_in: float = 0.15, p_out: float = 0.01):
    """A small stochastic-block-model graph with class-correlated sparse features (a GraphData)."""
    from simcalib.data.loading import GraphData

    rng = np.random.default_rng(seed)
    y = np.arange(num_nodes) % num_classes
    same = y[:, None] == y[None, :]
    upper = np.triu(rng.random((num_nodes, num_nodes)) < np.where(same, p_in, p_out), 1)
    adj = upper | upper.T
    row, col = np.nonzero(adj)
    centers = rng.random((num_classes, num_features)) < 0.3
    x = ((rng.random((num_nodes, num_features)) < 0.1) | (centers[y] & (rng.random((num_nodes, num_features)) < 0.7)))
    x = x.astype(np.float32)
    x /= np.clip(x.sum(1, keepdims=True), 1e-12, None)
    return GraphData(
        name="SBM",
        x=torch.from_numpy(x).to_sparse_csr(),
        edge_index=torch.from_numpy(np.stack([row, col])).long(),
        y=torch.from_numpy(y).long(),
        num_classes=num_classes,
        source="synthetic",
    )
