"""A small synthetic graph: a stochastic block model with class-dependent features."""

from __future__ import annotations

import torch
from torch_geometric.data import Data


def stochastic_block_graph(num_classes: int = 3, nodes_per_class: int = 100, num_features: int = 16,
                           p_in: float = 0.03, p_out: float = 0.015, seed: int = 0) -> Data:
    """A stochastic block model of ``num_classes`` blocks: edges within a block with probability ``p_in``,
    across blocks with ``p_out``, plus a path through each block (no node without an edge); features are a
    class mean plus unit Gaussian noise. The same graph on every call (a fixed seed).

    Returns Data(x [N, F] float32, y [N] int64, edge_index [2, E] int64), N = num_classes * nodes_per_class.
    """
    generator = torch.Generator().manual_seed(seed)
    n = num_classes * nodes_per_class
    y = torch.arange(num_classes).repeat_interleave(nodes_per_class)  # [N]
    same = y[:, None] == y[None, :]
    p = torch.where(same, torch.tensor(p_in), torch.tensor(p_out))
    upper = torch.triu(torch.rand(n, n, generator=generator) < p, diagonal=1)
    path = torch.arange(n - 1)
    within = y[path] == y[path + 1]
    upper[path[within], path[within] + 1] = True
    src, dst = upper.nonzero(as_tuple=True)
    edge_index = torch.stack([torch.cat([src, dst]), torch.cat([dst, src])])  # [2, E], both directions
    means = 0.3 * torch.randn(num_classes, num_features, generator=generator)
    x = means[y] + torch.randn(n, num_features, generator=generator)  # [N, F]
    return Data(x=x, y=y, edge_index=edge_index)
