"""Graph quantities the calibrators need: degrees and hop distances to the training nodes."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch
from scipy.sparse.csgraph import shortest_path

UNREACHABLE = -1


def to_scipy(edge_index: torch.Tensor, num_nodes: int) -> sp.csr_matrix:
    row, col = edge_index.detach().cpu().numpy()
    return sp.csr_matrix((np.ones(len(row), dtype=np.float32), (row, col)), shape=(num_nodes, num_nodes))


def hop_distance(edge_index: torch.Tensor, num_nodes: int, sources: torch.Tensor | np.ndarray) -> torch.Tensor:
    """Hop distance (BFS over the undirected graph) from every node to its nearest node in ``sources``.

    Returns int64 [N]; nodes in no component with a source get :data:`UNREACHABLE` (-1).
    """
    sources = torch.as_tensor(sources).cpu().numpy().astype(np.int64)
    adj = to_scipy(edge_index, num_nodes)
    adj = ((adj + adj.T) > 0).astype(np.float32)
    # One virtual super-source joined to every source turns "nearest source" into a single BFS.
    n = num_nodes
    link = sp.csr_matrix((np.ones(len(sources), np.float32), (np.full(len(sources), n), sources)), shape=(n + 1, n + 1))
    big = sp.bmat([[adj, None], [None, sp.csr_matrix((1, 1), dtype=np.float32)]], format="csr") + link
    dist = shortest_path(big, directed=False, unweighted=True, indices=n)[:n] - 1
    out = np.where(np.isfinite(dist), dist, UNREACHABLE).astype(np.int64)
    return torch.from_numpy(out)


def in_degree(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """Number of incoming edges per node (= degree for the symmetric graphs of the benchmark), float [N]."""
    return torch.bincount(edge_index[1], minlength=num_nodes).to(torch.float32)
