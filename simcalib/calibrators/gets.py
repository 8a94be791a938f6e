"""GETS: graph ensemble temperature scaling (Zhuang et al., "GETS: Ensemble Temperature Scaling for
Calibration in Graph Neural Networks", ICLR 2025): graph temperature experts on different inputs, mixed per
node by a sparse (noisy top-k) gate."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from simcalib.backbones.sparse import SparseOperand
from simcalib.calibrators.base import CalibrationGraph, TemperatureCalibrator
from simcalib.calibrators.layers import GraphInputsCache, TwoLayerGCN, positive_temperature
from simcalib.calibrators.training import fit_nll
from simcalib.errors import ConfigError

INPUT_KINDS = ("logits", "features", "degree")
# GETS's seven experts: every non-empty combination of the three inputs
EXPERT_INPUTS = (("logits",), ("features",), ("degree",), ("logits", "features"), ("features", "degree"),
                 ("logits", "degree"), ("logits", "features", "degree"))
NOISE_FLOOR = 1e-2  # added to the gate's noise scale, as in the sparsely-gated MoE
# Per-dataset settings of the GETS code's configs (gets_config/<dataset>.yaml); other datasets get the
# common training rule's lr / epochs / patience and Cora's sizes.
GETS_CONFIGS = {
    "Cora": {"lr": 0.001, "weight_decay": 0.0, "dropout": 0.5, "feature_dim": 16, "degree_dim": 16,
             "max_epochs": 1000, "patience": 50},
    "Citeseer": {"lr": 0.1, "weight_decay": 0.01, "dropout": 0.2, "feature_dim": 32, "degree_dim": 64,
                 "max_epochs": 1000, "patience": 50},
}


@dataclass
class GETSInputs:
    propagated_logits: Tensor  # [N, K] Â z
    propagated_features: Tensor  # [N, h] Â X^(1)
    propagated_ones: Tensor  # [N, 1] Â 1 (what a projection's bias becomes after propagation)
    degree: Tensor  # [N] int64, clamped to the embedding's last row
    adj: SparseOperand  # Â


def cv_squared(x: Tensor) -> Tensor:
    """Squared coefficient of variation var(x) / mean(x)^2 (0 for a single value)."""
    if x.numel() < 2:
        return x.new_zeros(())
    return x.var() / (x.mean().square() + 1e-10)


class GETS(GraphInputsCache, TemperatureCalibrator):
    r"""E = 7 graph temperature experts, one per non-empty subset of the inputs {logits z, features,
    degree}, mixed node by node by a sparse gate:

    .. math::
        o^e = \mathrm{GCN}_e\big(\Vert_{s \in S_e} x^{(s)}, A\big) \in \mathbb{R}^{N}, \qquad
        x^{(z)} = z,\ x^{(f)} = X^{(1)} W_f^e + b_f^e,\ x^{(d)} = \mathrm{Emb}^e(\deg),

    .. math::
        H_i = g_i W_g + \epsilon_i \odot \big(\mathrm{softplus}(g_i W_n) + 10^{-2}\big), \qquad
        G_i = \mathrm{softmax}(\mathrm{KeepTopK}(H_i, k)), \qquad g_i = [z_i \Vert X^{(1)}_i W_p + b_p],

    .. math::
        \hat p_i = \mathrm{softmax}\big(z_i \cdot \mathrm{softplus}(\textstyle\sum_e G_{ie}\, o^e_i)\big)
                 = \mathrm{softmax}(z_i / T_i),

    GCN_e: two GCN layers (in -> ``hidden`` 16 -> 1, ReLU, dropout), :math:`\epsilon \sim N(0, 1)` only
    while training (noisy gating; W_g and W_n start at 0), KeepTopK keeps the k = ``top_k`` (2) largest
    entries (-inf elsewhere). The training loss adds the load-balancing term of the sparsely-gated MoE,
    ``balance`` (1) x (CV²(importance) + CV²(load)), importance = :math:`\sum_i G_i`, load = the smooth
    probability of each expert being in the top k (the number of nodes routed to it without noise).

    Each expert outputs one value per node, so T_i is a positive scalar and the calibrator is
    **accuracy-preserving**. (The GETS code's experts output K values, a per-class scaling that can
    change the argmax; the paper describes a temperature.) Features: the backbone's first-layer
    representation X^(1), the node features a :class:`CalibrationGraph` carries (GETS projects the raw
    input features). Degree: in-degree, embedded (``degree_dim``) up to the fitted graph's maximum.
    Settings per dataset from the GETS configs (:data:`GETS_CONFIGS`: lr, weight decay, dropout, widths,
    1000 epochs, patience 50), else the common rule. Early stopping on the training folds' NLL, as for
    every calibrator here.

    Options: ``hidden``, ``dropout``, ``feature_dim``, ``degree_dim``, ``top_k``, ``balance``,
    ``noisy_gating``, ``lr``, ``weight_decay``, ``max_epochs``, ``patience``.
    """

    name = "GETS"

    def __init__(self, num_classes: int, hidden: int = 16, dropout: float = 0.5, feature_dim: int = 16,
                 degree_dim: int = 16, top_k: int = 2, balance: float = 1.0, noisy_gating: bool = True, **kwargs):
        kwargs.setdefault("weight_decay", 0.0)
        super().__init__(num_classes, **kwargs)
        if not 1 <= top_k <= len(EXPERT_INPUTS):
            raise ConfigError(f"GETS's top_k must be between 1 and {len(EXPERT_INPUTS)}, got {top_k}")
        if min(hidden, feature_dim, degree_dim) < 1:
            raise ConfigError("GETS's hidden, feature_dim and degree_dim must be >= 1")
        self.hidden, self.dropout, self.top_k, self.balance = hidden, dropout, top_k, balance
        self.feature_dim, self.degree_dim, self.noisy_gating = feature_dim, degree_dim, noisy_gating
        widths = {"logits": num_classes, "features": feature_dim, "degree": degree_dim}
        self.experts = nn.ModuleList(
            TwoLayerGCN(sum(widths[s] for s in inputs), hidden, 1, dropout) for inputs in EXPERT_INPUTS)
        experts = len(EXPERT_INPUTS)
        self.gate_weight = nn.Parameter(torch.zeros(num_classes + feature_dim, experts))  # W_g
        self.noise_weight = nn.Parameter(torch.zeros(num_classes + feature_dim, experts))  # W_n
        # sized on the first graph (prepare): the feature width and the largest degree are the graph's;
        # keyed by expert index, only for the experts that take that input
        self.feature_projections: nn.ModuleDict | None = None  # W_f^e
        self.degree_embeddings: nn.ModuleDict | None = None  # Emb^e
        self.gate_projection: nn.Linear | None = None  # W_p
        self.balance_loss = torch.zeros(())

    @classmethod
    def benchmark_defaults(cls, dataset: str | None, backbone: str | None) -> dict:
        return dict(GETS_CONFIGS.get(dataset, {}))

    def prepare(self, graph: CalibrationGraph) -> None:
        if self.feature_projections is None:
            feature_width = graph.hidden.shape[1]
            max_degree = int(graph.degree().max().item()) if graph.num_nodes else 0
            self.feature_projections = nn.ModuleDict({
                str(e): nn.Linear(feature_width, self.feature_dim)
                for e, kinds in enumerate(EXPERT_INPUTS) if "features" in kinds}).to(graph.device)
            self.degree_embeddings = nn.ModuleDict({
                str(e): nn.Embedding(max_degree + 1, self.degree_dim)
                for e, kinds in enumerate(EXPERT_INPUTS) if "degree" in kinds}).to(graph.device)
            self.gate_projection = nn.Linear(feature_width, self.feature_dim).to(graph.device)
        super().prepare(graph)

    def compute_inputs(self, graph: CalibrationGraph) -> GETSInputs:
        ones = torch.ones(graph.num_nodes, 1, device=graph.device)
        constant = torch.cat([graph.logits, graph.hidden, ones], dim=1)
        propagated, adj = TwoLayerGCN.propagate_inputs(constant, graph.edge_index, graph.num_nodes)
        k, h = graph.num_classes, graph.hidden.shape[1]
        largest = next(iter(self.degree_embeddings.values())).num_embeddings - 1
        degree = graph.degree().long().clamp(max=largest)
        return GETSInputs(propagated[:, :k], propagated[:, k:k + h], propagated[:, k + h:], degree, adj)

    def expert_outputs(self, graph: CalibrationGraph) -> Tensor:
        """o [N, E]: every expert's output (before the gate).

        The E two-layer GCNs are evaluated together (same equations as :class:`TwoLayerGCN`'s forward,
        with their parameters): one sparse product for all degree embeddings and one for all second layers.
        """
        inputs = self.graph_inputs(graph)
        keys = list(self.degree_embeddings)
        embedded = torch.cat([self.degree_embeddings[key](inputs.degree) for key in keys], dim=1)
        degree_parts = dict(zip(keys, inputs.adj.matmul(embedded).split(self.degree_dim, dim=1)))  # Â Emb(deg)
        first_layers = []
        for e, (expert, kinds) in enumerate(zip(self.experts, EXPERT_INPUTS)):
            parts = []
            if "logits" in kinds:
                parts.append(inputs.propagated_logits)
            if "features" in kinds:  # Â (X W + 1 b^T) = (Â X) W + (Â 1) b^T
                projection = self.feature_projections[str(e)]
                parts.append(inputs.propagated_features @ projection.weight.T + inputs.propagated_ones * projection.bias)
            if "degree" in kinds:
                parts.append(degree_parts[str(e)])
            first_layers.append(F.relu(torch.cat(parts, dim=1) @ expert.weight1 + expert.bias1))  # [N, hidden]
        hidden = F.dropout(torch.cat(first_layers, dim=1), self.dropout, self.training)  # [N, E * hidden]
        second = torch.cat([h @ expert.weight2 for h, expert in zip(hidden.split(self.hidden, dim=1), self.experts)], 1)
        return inputs.adj.matmul(second) + torch.cat([expert.bias2 for expert in self.experts])  # [N, E]

    def gates(self, graph: CalibrationGraph) -> tuple[Tensor, Tensor]:
        """(G [N, E], rows with k non-zero entries summing to 1; the load-balancing loss)."""
        gate_input = torch.cat([graph.logits, self.gate_projection(graph.hidden)], dim=1)
        clean = gate_input @ self.gate_weight  # [N, E]
        experts, k = clean.shape[1], self.top_k
        noisy_now = self.noisy_gating and self.training
        if noisy_now:
            noise_scale = F.softplus(gate_input @ self.noise_weight) + NOISE_FLOOR
            scores = clean + torch.randn_like(clean) * noise_scale
        else:
            scores = clean
        top_values, top_index = scores.topk(min(k + 1, experts), dim=1)
        gates = torch.zeros_like(scores).scatter(1, top_index[:, :k], F.softmax(top_values[:, :k], dim=1))
        if noisy_now and k < experts:
            # P(expert e stays in the top k when its own noise is redrawn): threshold is the k-th best
            # of the others, i.e. the (k+1)-th score if e is in, the k-th if not
            in_top = scores > top_values[:, k:k + 1]
            threshold = torch.where(in_top, top_values[:, k:k + 1], top_values[:, k - 1:k])
            load = torch.distributions.Normal(0.0, 1.0).cdf((clean - threshold) / noise_scale).sum(0)
        else:
            load = (gates > 0).float().sum(0)
        balance_loss = self.balance * (cv_squared(gates.sum(0)) + cv_squared(load))
        return gates, balance_loss

    def inverse_temperature(self, graph: CalibrationGraph) -> Tensor:
        gates, balance_loss = self.gates(graph)
        if self.training:
            self.balance_loss = balance_loss
        return F.softplus((gates * self.expert_outputs(graph)).sum(1, keepdim=True))  # [N, 1]

    def temperature(self, graph: CalibrationGraph) -> Tensor:
        # kept within [1e-3, 1e6] as CaGCN's: finite where the softplus underflows to 0
        return positive_temperature(1.0 / self.inverse_temperature(graph).clamp(min=1e-6))  # [N, 1]

    def fit(self, graph: CalibrationGraph, fit_idx: Tensor | None = None, stop_idx: Tensor | None = None) -> GETS:
        fit_idx, stop_idx = self.check_fit_nodes(graph, fit_idx, stop_idx)
        self.to(graph.device)
        self.prepare(graph)
        self.fit_info = fit_nll(self, graph, fit_idx, stop_idx, penalty=lambda: self.balance_loss)
        self.eval()
        return self
