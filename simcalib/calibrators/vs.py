"""VS: vector scaling (Guo et al., 2017)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from simcalib.calibrators.base import CalibrationGraph, Calibrator


class VS(Calibrator):
    r"""Per-class scale and bias on the logits:

    .. math::
        \hat p_i = \mathrm{softmax}(w \odot z_i + b), \qquad w, b \in \mathbb{R}^K,

    with w initialised to 1 and b to 0. Like the GATS code, only w is trained by default
    (``train_bias=False``; the GATS bias is a constant and cancels in the softmax). VS is the one
    calibrator here that is **not** accuracy-preserving: a per-class scale can reorder the logits, so
    benchmark tables report its accuracy next to the others.
    """

    name = "VS"
    needs_graph = False
    accuracy_preserving = False

    def __init__(self, num_classes: int, train_bias: bool = False, **kwargs):
        super().__init__(num_classes, **kwargs)
        self.scale = nn.Parameter(torch.ones(num_classes))
        self.bias = nn.Parameter(torch.zeros(num_classes), requires_grad=train_bias)

    def forward(self, graph: CalibrationGraph) -> Tensor:
        return F.log_softmax(graph.logits * self.scale + self.bias, dim=-1)
