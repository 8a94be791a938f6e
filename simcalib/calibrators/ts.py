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
