r"""Feature similarity of nodes to class prototypes (SimCalib, paper Methods "Feature similarity").

For first-layer features :math:`x_i = X^{(1)}_i \in \mathbb{R}^h` and labelled nodes
:math:`\mathcal{L} = \cup_k \mathcal{L}_k` (:math:`\mathcal{L}_k`: those of class k):

.. math::
    \hat\mu_k = \frac{1}{|\mathcal{L}_k|} \sum_{i \in \mathcal{L}_k} x_i, \qquad
    \hat\Sigma = \frac{1}{|\mathcal{L}|} \sum_k \sum_{i \in \mathcal{L}_k} (x_i - \hat\mu_k)(x_i - \hat\mu_k)^\top,

.. math::
    d(x_i, \hat\mu_k) = (x_i - \hat\mu_k)^\top \hat\Sigma^{-1} (x_i - \hat\mu_k), \qquad
    s_i = \zeta\big(d(x_i, \hat\mu_1), \dots, d(x_i, \hat\mu_K)\big), \quad \zeta(v) = v / \lVert v \rVert_2 .

The shared covariance (Lee et al., 2018) is singular whenever h exceeds the number of labelled nodes or a
ReLU unit is dead on every labelled node. ``ridge`` chooses how it is inverted (PROTOCOL section 5,
**choice**): ``ridge = 0`` takes the pseudo-inverse (the precision matrix of Lee et al.'s
``EmpiricalCovariance``: directions without labelled variance are ignored); ``ridge > 0`` inverts
:math:`\hat\Sigma + \text{ridge} \cdot \bar\lambda I` with :math:`\bar\lambda = \mathrm{tr}(\hat\Sigma)/h`,
a ridge relative to the mean variance, so the same value suits features of any scale.

Everything is computed in float64.
"""

from __future__ import annotations

import torch
from torch import Tensor

from simcalib.errors import ConfigError

DEFAULT_RIDGE = 0.0  # pseudo-inverse, as Lee et al. (2018)

__all__ = ["DEFAULT_RIDGE", "class_prototypes", "mahalanobis_to_prototypes", "nearest_prototype_distance",
           "normalized_similarity", "precision_whitener", "shared_covariance", "spearman"]


def class_prototypes(hidden: Tensor, labels: Tensor, num_classes: int) -> tuple[Tensor, Tensor]:
    """Class means of ``hidden`` [n, h] with ``labels`` [n]: (prototypes [K, h], counts [K]), float64.

    A class with no node gets a NaN prototype and count 0.
    """
    hidden = hidden.double()
    counts = torch.bincount(labels, minlength=num_classes).to(hidden)  # [K]
    sums = torch.zeros(num_classes, hidden.shape[1], dtype=hidden.dtype, device=hidden.device)
    sums.index_add_(0, labels, hidden)  # [K, h]
    return sums / counts[:, None], counts


def shared_covariance(hidden: Tensor, labels: Tensor, prototypes: Tensor) -> Tensor:
    """Within-class covariance pooled over classes, normalised by the number of nodes: [h, h] float64."""
    centred = hidden.double() - prototypes[labels]  # [n, h]
    return centred.T @ centred / centred.shape[0]


def precision_whitener(covariance: Tensor, ridge: float = DEFAULT_RIDGE) -> Tensor:
    r"""A matrix U [h, r] with :math:`U U^\top = \Sigma^{-1}` (ridge > 0) or :math:`\Sigma^{+}` (ridge = 0).

    Distances are then squared Euclidean distances between whitened points ``x @ U``.
    """
    if ridge < 0:
        raise ConfigError(f"the covariance ridge must be >= 0 (0: pseudo-inverse), got {ridge}")
    eigenvalues, eigenvectors = torch.linalg.eigh(covariance)  # ascending, [h], [h, h]
    h = covariance.shape[0]
    if ridge > 0:
        mean_variance = torch.clamp(eigenvalues.sum() / h, min=torch.finfo(torch.float64).tiny)
        eigenvalues = eigenvalues.clamp(min=0) + ridge * mean_variance
        keep = torch.ones_like(eigenvalues, dtype=torch.bool)
    else:
        # numpy/torch pinv cut-off: singular values below h * eps * largest count as zero
        keep = eigenvalues > h * torch.finfo(torch.float64).eps * eigenvalues.abs().max()
    return eigenvectors[:, keep] / eigenvalues[keep].sqrt()  # [h, r]


def mahalanobis_to_prototypes(hidden: Tensor, labels: Tensor, labelled_idx: Tensor, num_classes: int,
                              ridge: float = DEFAULT_RIDGE) -> Tensor:
    r"""Squared Mahalanobis distances :math:`d(x_i, \hat\mu_k)` of every node to every class prototype.

    hidden: [N, h] node features (SimCalib: the backbone's first-layer representation X^(1)).
    labels: [N] int64; only ``labels[labelled_idx]`` is read.
    labelled_idx: [n] the nodes that define the prototypes and the shared covariance.
    ridge: 0 for the pseudo-inverse of the covariance, > 0 for a ridge relative to its mean variance.
    Returns [N, K] float64, >= 0; a class without labelled nodes is infinitely far from every node.
    """
    labelled_idx = torch.as_tensor(labelled_idx, device=hidden.device).long()
    if labelled_idx.numel() == 0:
        raise ConfigError("feature similarity needs labelled nodes to build class prototypes; none were given")
    x = hidden.double()  # [N, h]
    y = labels.to(hidden.device)[labelled_idx].long()  # [n]
    if (y < 0).any() or (y >= num_classes).any():
        raise ConfigError(f"labels of the prototype nodes must lie in 0..{num_classes - 1}; "
                          "hidden (-1) labels cannot define a prototype")
    prototypes, counts = class_prototypes(x[labelled_idx], y, num_classes)  # [K, h], [K]
    present = counts > 0
    whitener = precision_whitener(shared_covariance(x[labelled_idx], y, prototypes), ridge)  # [h, r]
    points = x @ whitener  # [N, r]
    centres = prototypes.nan_to_num(0.0) @ whitener  # [K, r]
    distances = torch.full((x.shape[0], num_classes), float("inf"), dtype=torch.float64, device=x.device)
    for k in torch.nonzero(present).flatten().tolist():  # one class at a time: no [N, K, h] tensor
        distances[:, k] = (points - centres[k]).square().sum(dim=1)
    return distances


def nearest_prototype_distance(hidden: Tensor, labels: Tensor, labelled_idx: Tensor, num_classes: int,
                               nodes: Tensor, ridge: float = DEFAULT_RIDGE) -> Tensor:
    r""":math:`\min_k d(x_i, \hat\mu_k)` for each of ``nodes``: how far a node's features lie from the nearest class
    prototype (the paper's feature-similarity analysis groups test nodes by it). Arguments as
    :func:`mahalanobis_to_prototypes`; returns [len(nodes)] float64."""
    distances = mahalanobis_to_prototypes(hidden, labels, labelled_idx, num_classes, ridge)
    return distances[torch.as_tensor(nodes, device=distances.device).long()].amin(dim=1)


def normalized_similarity(distances: Tensor) -> Tensor:
    r""":math:`s_i = d_i / \lVert d_i \rVert_2` per row of ``distances`` [N, K]; float32 [N, K].

    Infinite entries (classes without prototypes) take the row's largest finite distance first, so they
    read as "as far as the farthest class"; a row of zeros stays zero.
    """
    finite = torch.isfinite(distances)
    row_max = torch.where(finite, distances, torch.zeros_like(distances)).amax(dim=1, keepdim=True)  # [N, 1]
    filled = torch.where(finite, distances, row_max)
    norm = filled.norm(dim=1, keepdim=True).clamp(min=torch.finfo(filled.dtype).tiny)
    return (filled / norm).float()


def spearman(values: Tensor, reference: Tensor) -> float | None:
    """Spearman rank correlation of ``values`` with ``reference`` (both [n]; ties share their mean rank);
    None when either is constant (no order to follow) or n < 3."""
    def ranks(x: Tensor) -> Tensor:
        x = x.detach().double().cpu()
        order = torch.argsort(x)
        sorted_x = x[order]
        rank = torch.empty_like(x)
        rank[order] = torch.arange(len(x), dtype=torch.float64)
        _, inverse, counts = torch.unique_consecutive(sorted_x, return_inverse=True, return_counts=True)
        first = torch.cumsum(counts, 0) - counts  # mean rank of each tie group
        rank[order] = (first.double() + (counts.double() - 1) / 2)[inverse]
        return rank

    if values.numel() < 3:
        return None
    a, b = ranks(values), ranks(reference)
    a, b = a - a.mean(), b - b.mean()
    denominator = float(a.norm() * b.norm())
    return None if denominator == 0 else float(a @ b) / denominator

