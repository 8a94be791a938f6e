"""WATS: wavelet-aware temperature scaling (ICLR 2026): a node-wise temperature from fixed graph wavelet
features of the node degree, following the public code (lxy1134/WATS)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from scipy.special import ive
from torch import Tensor, nn

import simcalib.calibrators.graph_cache as graph_cache
from simcalib.calibrators.base import CalibrationGraph, TemperatureCalibrator
from simcalib.errors import ConfigError

KERNELS = ("heat", "exp")
TEMPERATURE_OFFSET = 1e-6  # added to the softplus output before dividing the logits, as the WATS code
DEGREE_FLOOR = 1e-6  # the WATS code clamps the degree count here before log1p (isolated nodes, no self-loop)
L1_FLOOR = 1e-12  # F.normalize's eps: an all-zero feature row stays zero

# (hidden, dropout, degree_self_loop) per dataset: hidden/dropout from the WATS logs of the heat-kernel version
# (cal_hidden_dim, cal_dropout); degree_self_loop where the WATS code loads the graph with DGL's AddSelfLoop.
# CS and Physics (no WATS setting) and every graph not listed: the default below (docs/decisions.md, "WATS").
WATS_SETTINGS = {
    "cora": (8, 0.95, True),
    "citeseer": (32, 0.4, True),
    "pubmed": (32, 0.4, True),
    "corafull": (128, 0.2, True),
    "computers": (64, 0.4, False),
    "photo": (32, 0.4, False),
    "tolokers": (16, 0.6, True),
    "roman_empire": (32, 0.2, True),
}
WATS_DEFAULT_SETTING = (32, 0.4, False)  # the most frequent logged hidden/dropout; degree without self-loop


def chebyshev_coefficients(kernel: str, order: int, scale: float) -> np.ndarray:
    r"""The coefficients :math:`c_0 \dots c_K` [K + 1] of the wavelet features.

    ``heat``: the Chebyshev coefficients of the heat kernel :math:`e^{-s\lambda}` on :math:`[0, 2]`,
    :math:`c_k = \frac{2}{\pi}\int_0^\pi \cos(k\theta)\, e^{-s(\cos\theta + 1)}\, d\theta
    = 2 e^{-s} (-1)^k I_k(s)` (:math:`I_k`: modified Bessel function of the first kind; the code integrates
    numerically, here ``ive`` = :math:`e^{-s} I_k(s)`; :math:`c_0` is not halved, as in the code).
    ``exp``: :math:`c_k = e^{-s k}` (the later code).
    """
    k = np.arange(order + 1)
    if kernel == "heat":
        return 2.0 * np.where(k % 2 == 0, 1.0, -1.0) * ive(k, scale)
    if kernel == "exp":
        return np.exp(-scale * k)
    raise ConfigError(f"WATS's kernel must be one of {KERNELS}, got {kernel!r}")


def wavelet_features(edge_index: Tensor, num_nodes: int, order: int, scale: float, kernel: str = "heat",
                     degree_self_loop: bool = False) -> Tensor:
    r"""The fixed per-node wavelet features f [N, K + 1] (float32), computed in float64 with K sparse products.

    .. math::
        x_0 = \log(1 + \deg), \quad \hat L = L - I = -D^{-1/2} A D^{-1/2} - \mathrm{diag}(\text{isolated}),
        \quad T_0 = x_0, \ T_1 = \hat L x_0, \ T_k = 2 \hat L T_{k-1} - T_{k-2},

    .. math::
        f_i = [c_0 T_{0,i}, \dots, c_K T_{K,i}] \,/\, \lVert [c_0 T_{0,i}, \dots, c_K T_{K,i}] \rVert_1,

    L the normalised Laplacian of A without self-loops (:math:`L_{ii} = 0` for an isolated node, as
    ``scipy.sparse.csgraph.laplacian(normed=True)``), :math:`\lambda_{max}` taken as 2 so that
    :math:`\hat L = 2L/\lambda_{max} - I`. deg = in-degree + out-degree of ``edge_index`` without self-loops
    (2 d_i on a symmetric graph), plus 2 with ``degree_self_loop`` (one self-loop counted in and out, as
    the code's graphs loaded with AddSelfLoop), floored at 1e-6 before the log.
    """
    row, col = edge_index.detach().cpu().numpy()
    keep = row != col
    row, col = row[keep], col[keep]
    adjacency = sp.csr_matrix((np.ones(len(row)), (row, col)), shape=(num_nodes, num_nodes))  # [N, N] float64
    count = np.bincount(row, minlength=num_nodes) + np.bincount(col, minlength=num_nodes)  # out + in, [N]
    count = count + (2.0 if degree_self_loop else 0.0)
    x0 = np.log1p(np.maximum(count, DEGREE_FLOOR))  # [N]
    weight = np.asarray(adjacency.sum(axis=0)).ravel()  # [N] in-degree (scipy's laplacian sums axis 0)
    isolated = weight == 0
    inv_sqrt = np.where(isolated, 0.0, 1.0 / np.sqrt(np.where(isolated, 1.0, weight)))  # [N]
    normalized = sp.diags(inv_sqrt) @ adjacency @ sp.diags(inv_sqrt)  # D^-1/2 A D^-1/2
    shifted = (-normalized - sp.diags(isolated.astype(np.float64))).tocsr()  # L^ = L - I, [N, N]
    terms = [x0, shifted @ x0]  # T_0, T_1: [N] each
    for _ in range(2, order + 1):
        terms.append(2.0 * (shifted @ terms[-1]) - terms[-2])
    features = np.stack(terms[:order + 1], axis=1) * chebyshev_coefficients(kernel, order, scale)  # [N, K + 1]
    features = features / np.maximum(np.abs(features).sum(axis=1, keepdims=True), L1_FLOOR)
    return torch.from_numpy(features).float()


class WATS(TemperatureCalibrator):
    r"""A two-layer MLP maps each node's fixed wavelet features to its temperature:

    .. math::
        T_i = \mathrm{softplus}\big(W_2\, \mathrm{dropout}(\mathrm{ReLU}(W_1 f_i + b_1)) + b_2\big), \qquad
        \hat p_i = \mathrm{softmax}\big(z_i / (T_i + 10^{-6})\big),

    with f_i the wavelet features of :func:`wavelet_features` (x_0 = log(1 + deg), Chebyshev terms of
    :math:`\hat L = L - I` up to order K, each scaled by its coefficient, L1-normalised per node):
    :math:`W_1 \in \mathbb{R}^{h \times (K+1)}`, :math:`W_2 \in \mathbb{R}^{1 \times h}` (``nn.Linear``'s
    initialisation). No logits, node features or message passing enter the model; the features are
    computed once per graph. Positive temperatures keep the argmax.

    Kernels: ``heat`` (K = 2, s = 1.2; the version of the WATS logs) and ``exp`` (the later code's
    :math:`c_k = e^{-sk}` with ``order=4, scale=0.4``). Training as the WATS code: Adam lr 0.01, no weight
    decay, up to 1000 epochs, patience 50, NLL on the calibration fold, early stopping on the training folds.
    ``hidden``/``dropout``/``degree_self_loop`` per dataset (:data:`WATS_SETTINGS`).

    Options: ``order``, ``scale``, ``kernel``, ``hidden``, ``dropout``, ``degree_self_loop``, ``lr``,
    ``weight_decay``, ``max_epochs``, ``patience``.
    """

    name = "WATS"

    def __init__(self, num_classes: int, order: int = 2, scale: float = 1.2, kernel: str = "heat",
                 hidden: int = WATS_DEFAULT_SETTING[0], dropout: float = WATS_DEFAULT_SETTING[1],
                 degree_self_loop: bool = WATS_DEFAULT_SETTING[2], **kwargs):
        kwargs.setdefault("weight_decay", 0.0)
        kwargs.setdefault("max_epochs", 1000)
        kwargs.setdefault("patience", 50)
        super().__init__(num_classes, **kwargs)
        if kernel not in KERNELS:
            raise ConfigError(f"WATS's kernel must be one of {KERNELS}, got {kernel!r}")
        if isinstance(order, bool) or not isinstance(order, (int, np.integer)) or order < 1:
            raise ConfigError(f"WATS's order (the Chebyshev order K) must be an integer >= 1, got {order!r}")
        if not scale > 0:
            raise ConfigError(f"WATS's scale (the kernel's s) must be > 0, got {scale!r}")
        if hidden < 1:
            raise ConfigError(f"WATS's hidden (the MLP width) must be >= 1, got {hidden!r}")
        if not 0 <= dropout < 1:
            raise ConfigError(f"WATS's dropout must be in [0, 1), got {dropout!r}")
        self.order, self.scale, self.kernel = int(order), float(scale), kernel
        self.hidden, self.dropout, self.degree_self_loop = hidden, float(dropout), bool(degree_self_loop)
        self.lin1 = nn.Linear(self.order + 1, hidden)  # W_1, b_1
        self.lin2 = nn.Linear(hidden, 1)  # W_2, b_2

    @classmethod
    def benchmark_defaults(cls, dataset: str | None, backbone: str | None) -> dict:
        key = str(dataset).lower().replace("-", "_") if dataset is not None else None
        hidden, dropout, self_loop = WATS_SETTINGS.get(key, WATS_DEFAULT_SETTING)
        return {"hidden": hidden, "dropout": dropout, "degree_self_loop": self_loop}

    def features(self, graph: CalibrationGraph) -> Tensor:
        """f [N, K + 1], computed once per edge tensor and option set (shared by every WATS model fitted on
        the graph's edges: every run of a benchmark, :mod:`~simcalib.calibrators.graph_cache`)."""
        key = ("wats_features", graph.num_nodes, self.order, self.scale, self.kernel, self.degree_self_loop,
               str(graph.device))
        return graph_cache.shared(graph.edge_index, key, lambda: wavelet_features(
            graph.edge_index, graph.num_nodes, self.order, self.scale, self.kernel,
            self.degree_self_loop).to(graph.device))

    def prepare(self, graph: CalibrationGraph) -> None:
        self.features(graph)

    def temperature(self, graph: CalibrationGraph) -> Tensor:
        hidden = F.relu(self.lin1(self.features(graph)))  # [N, hidden]
        hidden = F.dropout(hidden, self.dropout, self.training)
        return F.softplus(self.lin2(hidden)) + TEMPERATURE_OFFSET  # [N, 1]
