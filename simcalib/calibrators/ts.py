"""TS: temperature scaling (Guo et al., 2017)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from simcalib.calibrators.base import CalibrationGraph, TemperatureCalibrator


class TS(TemperatureCalibrator):
    r"""One temperature for all nodes:

    .. math::
        \hat p_i = \mathrm{softmax}(z_i / T), \qquad T > 0,

    initialised at T = 1 and trained directly (as the GATS code does), clamped at 1e-3 to stay positive.
    """

    name = "TS"

    def __init__(self, num_classes: int, **kwargs):
        super().__init__(num_classes, **kwargs)
        self.raw_temperature = nn.Parameter(torch.ones(1, 1))

    def temperature(self, graph: CalibrationGraph) -> Tensor:
        return self.raw_temperature.clamp(min=1e-3)  # [1, 1]


def nll_temperature(logits: Tensor, labels: Tensor) -> float:
    r"""The temperature minimising the NLL of :math:`\mathrm{softmax}(z / T)` on the given nodes (L-BFGS on
    :math:`\log T`, float64): temperature scaling's optimum itself, with no early stopping."""
    log_t = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    logits = logits.detach().double()
    optimizer = torch.optim.LBFGS([log_t], lr=0.5, max_iter=100, line_search_fn="strong_wolfe")

    def closure():
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(logits / log_t.clamp(-7, 7).exp(), labels)
        loss.backward()
        return loss

    optimizer.step(closure)
    return float(log_t.detach().clamp(-7, 7).exp())
