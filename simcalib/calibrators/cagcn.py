"""CaGCN: a GCN over the logits as a node-wise temperature function (Wang et al., NeurIPS 2021)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from simcalib.calibrators.base import CalibrationGraph, TemperatureCalibrator
from simcalib.calibrators.defaults import default_weight_decay
from simcalib.calibrators.layers import GraphInputsCache, TwoLayerGCN, positive_temperature


class CaGCN(GraphInputsCache, TemperatureCalibrator):
    r"""A two-layer GCN over the logits gives every node an inverse temperature:

    .. math::
        \hat p_i = \mathrm{softmax}\big(z_i \cdot \mathrm{softplus}(\mathrm{GCN}(z, A)_i)\big)
                 = \mathrm{softmax}(z_i / T_i), \qquad T_i = 1 / \mathrm{softplus}(\mathrm{GCN}(z, A)_i),

    GCN: K -> ``hidden`` (16) -> 1, ReLU, dropout ``dropout`` (0.5) on the hidden layer; weight decay
    5e-3 (0.03 on CoraFull) from the protocol defaults. As in the GATS code the softplus output multiplies
    the logits (it is the inverse temperature), and only the NLL is minimised (CaGCN's margin regulariser
    is off there too).

    Options (names used by hyperparameter search): ``hidden``, ``dropout``, ``weight_decay``.
    """

    name = "CaGCN"

    def __init__(self, num_classes: int, hidden: int = 16, dropout: float = 0.5, **kwargs):
        kwargs.setdefault("weight_decay", default_weight_decay(self.name))  # without a benchmark: the protocol's
        super().__init__(num_classes, **kwargs)
        self.hidden = hidden
        self.dropout = dropout
        self.gcn = TwoLayerGCN(num_classes, hidden, 1, dropout)

    def compute_inputs(self, graph: CalibrationGraph):
        return TwoLayerGCN.propagate_inputs(graph.logits, graph.edge_index, graph.num_nodes)  # (Â z [N, K], Â)

    def inverse_temperature(self, graph: CalibrationGraph) -> Tensor:
        return F.softplus(self.gcn(*self.graph_inputs(graph)))  # [N, 1]

    def temperature(self, graph: CalibrationGraph) -> Tensor:
        # kept within [1e-3, 1e6]: finite even where the softplus underflows to 0
        return positive_temperature(1.0 / self.inverse_temperature(graph).clamp(min=1e-6))  # [N, 1]
