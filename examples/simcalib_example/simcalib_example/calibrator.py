"""Temperature scaling mixed with the uniform distribution."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from simcalib.calibrators import CalibrationGraph, Calibrator


class UniformMixTS(Calibrator):
    r"""Temperature scaling mixed with the uniform distribution over the K classes:

    .. math::
        p_i = (1 - \alpha) \, \mathrm{softmax}(z_i / T) + \alpha / K, \qquad
        T = \mathrm{softplus}(t) + 10^{-3}, \quad \alpha = \alpha_{\max} \, \sigma(a)

    with two trained scalars t and a. Both terms keep each node's top class, so it is accuracy-preserving.
    Fitted by the protocol's rule (Adam on the calibration fold's NLL, early-stopped on the training folds).
    """

    name = "uniformmixts"
    accuracy_preserving = True

    def __init__(self, num_classes: int, max_mix: float = 0.5, **kwargs):
        super().__init__(num_classes, **kwargs)
        if not 0.0 <= max_mix < 1.0:
            raise ValueError(f"max_mix must be in [0, 1), got {max_mix}")
        self.max_mix = max_mix
        self.t = nn.Parameter(torch.tensor(0.5413))  # softplus(0.5413) + 1e-3 = 1.0: start at T = 1
        self.a = nn.Parameter(torch.tensor(-4.0))  # alpha starts near 0

    def forward(self, graph: CalibrationGraph) -> Tensor:
        temperature = F.softplus(self.t) + 1e-3
        alpha = self.max_mix * torch.sigmoid(self.a)
        probs = F.softmax(graph.logits / temperature, dim=-1)  # [N, K]
        return torch.log((1 - alpha) * probs + alpha / self.num_classes)  # [N, K] log-probabilities
