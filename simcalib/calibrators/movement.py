r"""Representation-movement similarity, SimCalib's second branch (paper Methods, eq. "T_move").

.. math::
    \alpha_{ij} = \mathrm{softmax}_{j \in N(i)}\, \sigma\Big(\frac{\hat z_i \cdot \hat z_j}{\eta_i \eta_j}\Big),
    \qquad
    T_{move,i} = \mathrm{softplus}\Big(\sum_{j \in N(i)} \alpha_{ij}\, \eta_j
        \Big(\frac{d_i + 1}{d_j + 1}\Big)^t \tilde z_j^\top W\Big),

with :math:`\sigma` a LeakyReLU, :math:`\eta_i` the hop distance of node i to the nearest training node,
:math:`d_i` its degree, :math:`\tilde z_j` the sorted logits and :math:`W \in \mathbb{R}^K` trainable.

Nothing but W is trainable, so the per-edge weights :math:`c_{ij} = \alpha_{ij} \eta_j ((d_i+1)/(d_j+1))^t`
and the aggregated messages :math:`m_i = \sum_j c_{ij} \tilde z_j` [N, K] are constants of the graph,
computed once here; training then only evaluates :math:`\mathrm{softplus}(m_i^\top W)`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from simcalib.calibrators.layers import SortedEdges
from simcalib.errors import ConfigError


def minmax_rows(logits: Tensor) -> Tensor:
    r"""Each row scaled to [0, 1] (the logits of :math:`\tilde z_j` before sorting), [N, K]."""
    low, high = logits.min(dim=1, keepdim=True).values, logits.max(dim=1, keepdim=True).values
    return (logits - low) / (high - low).clamp(min=torch.finfo(logits.dtype).tiny)


def eta_from_hops(hops: Tensor, offset: float = 1.0, unreachable_hops: int | None = None) -> Tensor:
    r""":math:`\eta_i` = hop distance + ``offset`` (> 0, so training nodes at distance 0 never divide by 0).

    hops: [N] int64, -1 for nodes in a component without training nodes; those get ``unreachable_hops``
    (default: one more than the largest finite distance, i.e. "farther than every reachable node").
    Returns float [N] > 0.
    """
    if offset <= 0:
        raise ConfigError(f"eta_offset must be > 0 (eta = hops + offset divides the homophily term), got {offset}")
    reachable = hops >= 0
    if unreachable_hops is None:
        unreachable_hops = int(hops[reachable].max().item()) + 1 if reachable.any() else 0
    elif unreachable_hops < 0:
        raise ConfigError(f"unreachable_hops must be >= 0, got {unreachable_hops}")
    filled = torch.where(reachable, hops, torch.full_like(hops, unreachable_hops))
    return filled.float() + offset


def logit_products(logits: Tensor, edges: SortedEdges) -> Tensor:
    r""":math:`\hat z_i \cdot \hat z_j` per edge j -> i, [E] (constant: computed once per graph)."""
    return (logits.index_select(0, edges.target) * logits.index_select(0, edges.source)).sum(dim=1)


def homophily_attention(products: Tensor, eta: Tensor, edges: SortedEdges, negative_slope: float = 0.2,
                        enabled: bool = True) -> Tensor:
    r"""Per-edge :math:`\alpha_{ij}` [E] for the edges j -> i of ``edges``, summing to 1 per target i.

    products: [E] :math:`\hat z_i \cdot \hat z_j` (:func:`logit_products`). ``enabled=False`` (ablations r, n)
    replaces the homophily term by uniform weights :math:`1/|N(i)|`.
    """
    if enabled:
        score = products / (eta.index_select(0, edges.target) * eta.index_select(0, edges.source))  # [E]
        score = torch.nn.functional.leaky_relu(score, negative_slope)
    else:
        score = torch.zeros_like(products)
    return edges.softmax(score)


def relative_degree(degree: Tensor, edges: SortedEdges, t: float) -> Tensor:
    r""":math:`((d_i + 1) / (d_j + 1))^t` per edge j -> i, [E]; t = 0 disables it (ablations h, n)."""
    return ((degree.index_select(0, edges.target) + 1.0) / (degree.index_select(0, edges.source) + 1.0)).pow(t)


def movement_messages(sorted_logits: Tensor, alpha: Tensor, eta: Tensor, degree: Tensor, edges: SortedEdges,
                      t: float) -> Tensor:
    r""":math:`m_i = \sum_{j} \alpha_{ij} \eta_j ((d_i+1)/(d_j+1))^t \tilde z_j`: [N, K]."""
    weight = alpha * eta.index_select(0, edges.source) * relative_degree(degree, edges, t)  # [E]
    return edges.weighted_sum(weight, sorted_logits)


def confidence_gap(logits: Tensor, edges: SortedEdges) -> Tensor:
    r"""GATS's neighbour-confidence term :math:`\frac{1}{|N(i)|} \sum_{j \in N(i)} (c_i - c_j)`, [N, 1], with
    :math:`c_j = \max_k \mathrm{softmax}(z_j)_k` (GATS's; not in SimCalib's equation)."""
    confidence = torch.softmax(logits, dim=1).amax(dim=1)  # [N]
    ones = torch.ones_like(edges.source, dtype=confidence.dtype)  # [E]
    counts = edges.weighted_sum(ones, torch.ones_like(confidence)[:, None])  # [N, 1], |N(i)|
    neighbours = edges.weighted_sum(ones, confidence[:, None])  # [N, 1], sum_j c_j
    return (confidence[:, None] * counts - neighbours) / counts.clamp(min=1.0)


__all__ = ["confidence_gap", "eta_from_hops", "homophily_attention", "logit_products", "minmax_rows",
           "movement_messages", "relative_degree"]
