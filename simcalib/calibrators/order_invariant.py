"""OrderInvariant: order-invariant intra order-preserving calibration (Rahimi et al., "Intra Order-preserving
Functions for Calibration of Multi-Class Neural Networks", NeurIPS 2020)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from simcalib.calibrators.base import CalibrationGraph
from simcalib.calibrators.defaults import default_weight_decay
from simcalib.calibrators.irm import keep_argmax_after_rounding
from simcalib.calibrators.nodewise import NodewiseCalibrator
from simcalib.errors import ConfigError


class OrderInvariant(NodewiseCalibrator):
    r"""New logits that keep the order of the old ones, with gaps scaled by a network of the sorted logits.

    With :math:`s_1 \ge \dots \ge s_K` the logits of node i sorted in decreasing order (permutation
    :math:`\sigma_i`) and :math:`m(s) \in \mathbb{R}^{K-1}` an MLP of the sorted logits,

    .. math::
        y_K = 0, \qquad y_k = \sum_{j=k}^{K-1} (s_j - s_{j+1})\, \mathrm{softplus}(m_j(s)), \qquad
        \hat p_i = \mathrm{softmax}\big(\sigma_i^{-1}(y)\big),

    so :math:`y_k - y_{k+1} = (s_k - s_{k+1})\,\mathrm{softplus}(m_k) \ge 0`: every node keeps its class
    order (intra order-preserving, hence **accuracy-preserving**), and because m sees only the sorted
    logits, permuting the classes permutes the output (order-invariant). MLP: K -> ``hidden`` (K, as the
    GATS code) -> ReLU -> K - 1. Trained by the common rule (on the labelled nodes only: no graph part); weight decay 5e-4 unless the GATS configs
    give a benchmark its own (protocol defaults). A float32 tie created by rounding is broken towards the
    predicted class.

    Options: ``hidden``, ``weight_decay``, ``lr``, ``max_epochs``, ``patience``.
    """

    name = "OrderInvariant"

    def __init__(self, num_classes: int, hidden: int | None = None, **kwargs):
        kwargs.setdefault("weight_decay", default_weight_decay(self.name))  # without a benchmark: the protocol's
        super().__init__(num_classes, **kwargs)
        hidden = num_classes if hidden is None else hidden
        if hidden < 1:
            raise ConfigError(f"OrderInvariant needs a hidden width >= 1, got {hidden}")
        self.hidden = hidden
        self.gap_scales = nn.Sequential(nn.Linear(num_classes, hidden), nn.ReLU(), nn.Linear(hidden, num_classes - 1))

    def forward(self, graph: CalibrationGraph) -> Tensor:
        z = graph.logits
        sorted_logits, order = z.sort(dim=1, descending=True)  # s [N, K], sigma
        gaps = sorted_logits[:, :-1] - sorted_logits[:, 1:]  # s_j - s_{j+1} >= 0, [N, K-1]
        steps = gaps * F.softplus(self.gap_scales(sorted_logits))  # [N, K-1]
        # y_k = sum_{j >= k} steps_j, y_K = 0: a reversed cumulative sum
        tail_sums = steps.flip(1).cumsum(1).flip(1)
        sorted_new = torch.cat([tail_sums, tail_sums.new_zeros(len(z), 1)], dim=1)  # [N, K]
        new_logits = torch.empty_like(sorted_new).scatter(1, order, sorted_new)  # sigma^{-1}
        return keep_argmax_after_rounding(F.log_softmax(new_logits, -1), z)
