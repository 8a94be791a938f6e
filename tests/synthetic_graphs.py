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


def write_amazon_mirror(folder, dataset: str = "Photo", seed: int = 0, num_features: int = 32,
                        degree: int = 4) -> None:
    """A generated graph in torch_geometric's raw layout of an Amazon dataset (``<folder>/<dataset>/raw/*.npz``),
    with the node and class counts the registry expects, so the CLI loads it as that dataset: for end-to-end
    tests of the commands without the mirror. Same-class neighbours mostly, class-correlated binary features."""
    from pathlib import Path

    import scipy.sparse as sp

    from simcalib.data.registry import get_spec

    spec = get_spec(dataset)
    n, k = spec.num_nodes, spec.num_classes
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(n) % k)
    by_class = [np.flatnonzero(labels == c) for c in range(k)]
    source = np.repeat(np.arange(n), degree)
    same = rng.random(source.size) < 0.8
    target = rng.integers(0, n, source.size)  # other-class edges: any node
    for c, members in enumerate(by_class):  # same-class edges: a node of the source's class
        pick = same & (labels[source] == c)
        target[pick] = rng.choice(members, pick.sum())
    adj = sp.csr_matrix((np.ones(source.size, np.float32), (source, target)), shape=(n, n))
    centers = rng.random((k, num_features)) < 0.3
    attr = sp.csr_matrix(((rng.random((n, num_features)) < 0.05)
                          | (centers[labels] & (rng.random((n, num_features)) < 0.6))).astype(np.float32))
    raw = Path(folder) / spec.raw_subdir
    raw.mkdir(parents=True, exist_ok=True)
    np.savez(raw / spec.raw_files[0], adj_data=adj.data, adj_indices=adj.indices, adj_indptr=adj.indptr,
             adj_shape=np.array(adj.shape), attr_data=attr.data, attr_indices=attr.indices, attr_indptr=attr.indptr,
             attr_shape=np.array(attr.shape), labels=labels)
