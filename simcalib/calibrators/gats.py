"""GATS: graph attention temperature scaling (Hsu et al., "What Makes Graph Neural Networks Miscalibrated?",
NeurIPS 2022), following the layer of the authors' code (PROTOCOL section 4)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from simcalib.backbones.models import glorot_
from simcalib.calibrators.base import CalibrationGraph, TemperatureCalibrator
from simcalib.calibrators.defaults import default_weight_decay
from simcalib.calibrators.layers import (
    GraphInputsCache,
    SortedEdges,
    edges_with_self_loops,
    positive_temperature,
)
from simcalib.calibrators.movement import confidence_gap, logit_products
from simcalib.errors import ConfigError

# Bias initialisation per dataset (GATS configs: 1.5 on CoraFull, 1 elsewhere).
GATS_BIAS = {"CoraFull": 1.5}
MIN_SCALE = 0.05  # floor of the learnable distance scalings a


@dataclass
class GATSInputs:
    sorted_scaled_logits: Tensor  # [N, K] min-max normalised logits, sorted ascending
    edges: SortedEdges  # j -> i, self-loops included (E' edges)
    logit_products: Tensor  # [E'] z_i . z_j (the scalings a_i, a_j divide it in the forward pass)
    at_train: Tensor  # [N] bool: hop distance 0 to the training nodes
    next_to_train: Tensor  # [N] bool: hop distance 1
    confidence_gap: Tensor  # [N, 1] sum_j (c_i - c_j) / deg_i, c = max softmax probability


class GATS(GraphInputsCache, TemperatureCalibrator):
    r"""Node-wise temperatures from attention over the neighbours' sorted logits:

    .. math::
        \alpha_{ij} = \mathrm{softmax}_{j \in N(i) \cup \{i\}}\,
            \mathrm{LeakyReLU}_{0.2}\Big(\frac{z_i}{a_i} \cdot \frac{z_j}{a_j}\Big), \qquad
        \tau^h_i = \mathrm{softplus}\Big(\sum_{j} \alpha_{ij}\, a_j\, \tilde z_j^\top w_h
            + \gamma \frac{1}{|N(i)|+1} \sum_{j} (c_i - c_j)\Big),

    .. math::
        T_i = \frac{1}{H} \sum_{h=1}^{H} \tau^h_i + b, \qquad \hat p_i = \mathrm{softmax}(z_i / T_i),

    where :math:`\tilde z_j` is z_j min-max normalised then sorted, :math:`w_h \in \mathbb{R}^K` (Glorot),
    :math:`c_j = \max_k \mathrm{softmax}(z_j)_k`, :math:`a_j` a learnable scaling for the nodes at hop
    distance 0 (training nodes) and 1 from the training set (initialised to 1; 1 for every other node),
    :math:`\gamma` a learnable confidence coefficient (initialised to 0) and b a learnable bias (``bias``:
    1, 1.5 on CoraFull). Heads ``heads`` = 8, weight decay per benchmark (protocol defaults).
    Hop distances come from :meth:`CalibrationGraph.hops_to_train` (BFS from the training folds).
    Two floors the GATS code lacks keep every fit finite: T >= 1e-3 (b can be learnt negative) and
    a >= 0.05 (a divides the logits).

    Options (names used by hyperparameter search): ``heads``, ``bias``, ``weight_decay``.
    """

    name = "GATS"

    def __init__(self, num_classes: int, heads: int = 8, bias: float = 1.0, negative_slope: float = 0.2, **kwargs):
        kwargs.setdefault("weight_decay", default_weight_decay(self.name))  # without a benchmark: the protocol's
        super().__init__(num_classes, **kwargs)
        if heads < 1:
            raise ConfigError(f"GATS needs at least one head, got {heads}")
        self.heads = heads
        self.negative_slope = negative_slope
        self.head_weights = nn.Parameter(glorot_(torch.empty(num_classes, heads)))  # [K, H]
        self.train_scale = nn.Parameter(torch.ones(1))  # a for hop distance 0
        self.near_scale = nn.Parameter(torch.ones(1))  # a for hop distance 1
        self.confidence_coef = nn.Parameter(torch.zeros(1))  # gamma
        self.bias = nn.Parameter(torch.full((1,), float(bias)))  # b

    @classmethod
    def benchmark_defaults(cls, dataset: str | None, backbone: str | None) -> dict:
        return {"bias": GATS_BIAS.get(dataset, 1.0)}

    def compute_inputs(self, graph: CalibrationGraph) -> GATSInputs:
        z = graph.logits
        low, high = z.min(dim=1, keepdim=True).values, z.max(dim=1, keepdim=True).values
        scaled = (z - low) / (high - low).clamp(min=torch.finfo(z.dtype).tiny)  # [N, K] in [0, 1]
        edges = SortedEdges(edges_with_self_loops(graph.edge_index, graph.num_nodes).to(graph.device), graph.num_nodes)
        hops = graph.hops_to_train()
        return GATSInputs(scaled.sort(dim=1).values, edges, logit_products(z, edges), hops == 0, hops == 1,
                          confidence_gap(z, edges))

    def temperature(self, graph: CalibrationGraph) -> Tensor:
        inputs = self.graph_inputs(graph)
        z, edges = graph.logits, inputs.edges
        source, target = edges.source, edges.target
        ones = torch.ones_like(z[:, 0])
        # a_j divides the logits: kept >= MIN_SCALE so the score cannot blow up to inf/NaN (the GATS code has
        # no floor; a Cora GCN run drove a towards 0 and diverged at epoch ~1000 without one)
        train_scale, near_scale = self.train_scale.clamp(min=MIN_SCALE), self.near_scale.clamp(min=MIN_SCALE)
        scale = torch.where(inputs.at_train, train_scale, torch.where(inputs.next_to_train, near_scale, ones))
        # (z_i / a_i) . (z_j / a_j) = z_i . z_j / (a_i a_j): per-edge scalars only, the products are constants
        score = inputs.logit_products / (scale.index_select(0, target) * scale.index_select(0, source))  # [E']
        alpha = edges.softmax(F.leaky_relu(score, self.negative_slope))  # [E'], sums to 1 per target
        head_messages = inputs.sorted_scaled_logits @ self.head_weights  # [N, H]
        edge_weight = alpha * scale.index_select(0, source)  # [E'], alpha_ij a_j
        attended = edges.weighted_sum(edge_weight, head_messages)  # [N, H]
        per_head = F.softplus(attended + self.confidence_coef * inputs.confidence_gap)  # [N, H]
        return positive_temperature(per_head.mean(dim=1, keepdim=True) + self.bias)  # [N, 1]
