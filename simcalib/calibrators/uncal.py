"""UnCal: the uncalibrated backbone, p_i = softmax(z_i)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from simcalib.calibrators.base import CalibrationGraph, Calibrator


class UnCal(Calibrator):
    r""":math:`\hat p_i = \mathrm{softmax}(z_i)`: the reference every calibrator is compared with."""

    name = "UnCal"
    needs_graph = False

    def forward(self, graph: CalibrationGraph) -> Tensor:
        return F.log_softmax(graph.logits, dim=-1)
