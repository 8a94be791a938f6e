"""GETS: graph ensemble temperature scaling (Zhuang et al., "GETS: Ensemble Temperature Scaling for
Calibration in Graph Neural Networks", ICLR 2025): graph experts on different inputs, mixed per node by a
sparse (noisy top-k) gate."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn.conv.gcn_conv import gcn_norm

import simcalib.calibrators.graph_cache as graph_cache
from simcalib.backbones.models import normalized_adjacency
from simcalib.backbones.sparse import SparseOperand
from simcalib.calibrators.base import CalibrationGraph, Calibrator
from simcalib.calibrators.layers import GraphInputsCache, TwoLayerGCN, positive_temperature
from simcalib.calibrators.simcalib import class_halves
from simcalib.calibrators.training import fit_nll
from simcalib.errors import ConfigError

INPUT_KINDS = ("logits", "features", "degree")
# GETS's seven experts: every non-empty combination of the three inputs
EXPERT_INPUTS = (("logits",), ("features",), ("degree",), ("logits", "features"), ("features", "degree"),
                 ("logits", "degree"), ("logits", "features", "degree"))
NOISE_FLOOR = 1e-2  # added to the gate's noise scale, as in the sparsely-gated MoE
# The GETS code's per-dataset settings (gets_config/<dataset>.yaml; self_loops: its dataset loader adds
# self-loops to Cora and Citeseer only). Other datasets: the class defaults (the common training rule's lr /
# epochs / patience, Cora's sizes, self-loops), docs/calibrators.md.
_GETS_TRAINING = {"max_epochs": 1000, "patience": 50}
GETS_CONFIGS = {
    "Cora": {"lr": 0.001, "weight_decay": 0.0, "dropout": 0.5, "hidden": 16, "feature_dim": 16, "degree_dim": 16,
             "top_k": 2, "balance": 1.0, "self_loops": True, **_GETS_TRAINING},
    "Citeseer": {"lr": 0.1, "weight_decay": 0.01, "dropout": 0.2, "hidden": 16, "feature_dim": 32, "degree_dim": 64,
                 "top_k": 2, "balance": 1.0, "self_loops": True, **_GETS_TRAINING},
    "Computers": {"lr": 0.1, "weight_decay": 0.0, "dropout": 0.8, "hidden": 16, "feature_dim": 64, "degree_dim": 16,
                  "top_k": 2, "balance": 1.0, "self_loops": False, **_GETS_TRAINING},
    "Photo": {"lr": 0.1, "weight_decay": 0.001, "dropout": 0.8, "hidden": 32, "feature_dim": 64, "degree_dim": 32,
              "top_k": 2, "balance": 0.1, "self_loops": False, **_GETS_TRAINING},
    "CS": {"lr": 0.1, "weight_decay": 0.0, "dropout": 0.8, "hidden": 16, "feature_dim": 64, "degree_dim": 32,
           "top_k": 1, "balance": 1.0, "self_loops": False, **_GETS_TRAINING},
    "Physics": {"lr": 0.1, "weight_decay": 0.001, "dropout": 0.2, "hidden": 16, "feature_dim": 64, "degree_dim": 64,
                "top_k": 1, "balance": 1.0, "self_loops": False, **_GETS_TRAINING},
}
CHOICES = {"expert_output": ("classwise", "temperature"), "features": ("raw", "hidden"),
           "degree_embedding": ("fixed", "trained"), "stopping": ("train", "holdout")}


@dataclass
class GETSInputs:
    propagated_logits: Tensor  # [N, K] Â z
    propagated_ones: Tensor  # [N, 1] Â 1 (what a projection's bias becomes after propagation)
    degree: Tensor  # [N] int64, clamped to the embedding's last row
    adj: SparseOperand  # Â
    features: SparseOperand | Tensor | None  # X [N, F] ("raw"; sparse with its transpose, or dense)
    propagated_features: Tensor | None  # [N, h] Â X^(1) ("hidden")
    propagated_degree: Tensor | None  # [N, D * degree_dim] Â Emb(deg) of the D degree experts ("fixed")


def cv_squared(x: Tensor) -> Tensor:
    """Squared coefficient of variation var(x) / mean(x)^2 (0 for a single value)."""
    if x.numel() < 2:
        return x.new_zeros(())
    return x.var() / (x.mean().square() + 1e-10)


def expert_adjacency(edge_index: Tensor, num_nodes: int, self_loops: bool) -> SparseOperand:
    r""":math:`\hat A = \tilde D^{-1/2} \tilde A \tilde D^{-1/2}`, :math:`\tilde A = A + I` with ``self_loops``,
    else :math:`A` (an isolated node then aggregates nothing)."""
    if self_loops:
        return normalized_adjacency(edge_index, num_nodes)
    ei, w = gcn_norm(edge_index, None, num_nodes, add_self_loops=False)
    adj = torch.sparse_coo_tensor(ei.flip(0), w, (num_nodes, num_nodes), check_invariants=False)
    return SparseOperand.from_csr(adj.coalesce().to_sparse_csr())


def _times(x: SparseOperand | Tensor, weight: Tensor) -> Tensor:
    return x.matmul(weight) if isinstance(x, SparseOperand) else x @ weight


class GETS(GraphInputsCache, Calibrator):
    r"""E = 7 graph experts, one per non-empty subset of the inputs {logits z, node features X, degree},
    mixed node by node by a sparse gate (the GETS code's model):

    .. math::
        o^e = \hat A\, \mathrm{dropout}\big(\mathrm{ReLU}(\hat A\, x^e W^e_1 + b^e_1)\big) W^e_2 + b^e_2
              \in \mathbb{R}^{N \times K}, \qquad
        x^e = \Vert_{s \in S_e} x^{(s)},\ x^{(z)} = z,\ x^{(f)} = X W_f^e + b_f^e,\ x^{(d)} = E^e_{\deg},

    .. math::
        H_i = g_i W_g + \epsilon_i \odot \big(\mathrm{softplus}(g_i W_n) + 10^{-2}\big), \qquad
        G_i = \mathrm{softmax}(\mathrm{KeepTopK}(H_i, k)), \qquad g_i = [z_i \Vert X_i W_p + b_p],

    .. math::
        \hat p_i = \mathrm{softmax}\big(z_i \odot \mathrm{softplus}(\textstyle\sum_e G_{ie}\, o^e_i)\big),

    a per-class scaling of the logits (it can change the argmax: ``accuracy_preserving`` is False).
    X: the graph's node features (each expert and the gate through their own linear map); E^e: a random
    N(0, 1) table [max degree + 1, ``degree_dim``] per degree expert, drawn once and never trained (the GETS
    code creates it after its optimiser, so it holds no trained parameter); deg: in-degree, clamped to the
    table's last row. :math:`\hat A`: symmetric GCN normalisation, with self-loops (``self_loops``).
    :math:`\epsilon \sim N(0, 1)` only while training (noisy gating; W_g and W_n start at 0), KeepTopK keeps
    the k = ``top_k`` largest entries (-inf elsewhere). The training loss adds the load-balancing term of the
    sparsely-gated MoE, ``balance`` x (CV²(importance) + CV²(load)), importance = :math:`\sum_i G_i`, load =
    the smooth probability of each expert being in the top k (the number of nodes routed to it without
    noise). Fitted on the calibration fold with Adam, early-stopped on the training folds' NLL (the common
    rule, also the GETS code's), with the GETS configs per dataset (:data:`GETS_CONFIGS`: lr, weight decay,
    dropout, widths, top-k, balance, 1000 epochs, patience 50).

    Variants (options; registered presets in :mod:`simcalib.calibrators`):

    * ``expert_output="temperature"``: each expert outputs one value, :math:`o^e \in \mathbb{R}^N`, and
      :math:`\hat p_i = \mathrm{softmax}(z_i / T_i)`, :math:`T_i = 1 / \mathrm{softplus}(\sum_e G_{ie} o^e_i)`
      (clamped to [1e-3, 1e6]): accuracy-preserving;
    * ``features="hidden"``: X is the backbone's first-layer representation X^(1) instead of the node features;
    * ``degree_embedding="trained"``: E^e is an ``nn.Embedding`` trained with the rest;
    * ``stopping="holdout"``: fitted on one per-class half of the calibration fold, early-stopped on the
      other half's NLL.

    Options: ``hidden``, ``dropout``, ``feature_dim``, ``degree_dim``, ``top_k``, ``balance``,
    ``noisy_gating``, ``self_loops``, the four above, ``lr``, ``weight_decay``, ``max_epochs``, ``patience``.
    """

    name = "GETS"
    accuracy_preserving = False  # the class's default (classwise); an instance sets its own
    _reuse_products = True  # private switch: False recomputes the feature products in every forward

    def __init__(self, num_classes: int, hidden: int = 16, dropout: float = 0.5, feature_dim: int = 16,
                 degree_dim: int = 16, top_k: int = 2, balance: float = 1.0, noisy_gating: bool = True,
                 self_loops: bool = True, expert_output: str = "classwise", features: str = "raw",
                 degree_embedding: str = "fixed", stopping: str = "train", **kwargs):
        kwargs.setdefault("weight_decay", 0.0)
        super().__init__(num_classes, **kwargs)
        if not 1 <= top_k <= len(EXPERT_INPUTS):
            raise ConfigError(f"GETS's top_k must be between 1 and {len(EXPERT_INPUTS)}, got {top_k}")
        if min(hidden, feature_dim, degree_dim) < 1:
            raise ConfigError("GETS's hidden, feature_dim and degree_dim must be >= 1")
        given = {"expert_output": expert_output, "features": features, "degree_embedding": degree_embedding,
                 "stopping": stopping}
        for option, value in given.items():
            if value not in CHOICES[option]:
                raise ConfigError(f"GETS's {option} must be one of {CHOICES[option]}, got {value!r}")
        self.hidden, self.dropout, self.top_k, self.balance = hidden, dropout, top_k, balance
        self.feature_dim, self.degree_dim, self.noisy_gating = feature_dim, degree_dim, noisy_gating
        self.self_loops, self.expert_output, self.features = self_loops, expert_output, features
        self.degree_embedding, self.stopping = degree_embedding, stopping
        self.accuracy_preserving = expert_output == "temperature"
        outputs = num_classes if expert_output == "classwise" else 1
        widths = {"logits": num_classes, "features": feature_dim, "degree": degree_dim}
        self.experts = nn.ModuleList(
            TwoLayerGCN(sum(widths[s] for s in inputs), hidden, outputs, dropout) for inputs in EXPERT_INPUTS)
        experts = len(EXPERT_INPUTS)
        self.gate_weight = nn.Parameter(torch.zeros(num_classes + feature_dim, experts))  # W_g
        self.noise_weight = nn.Parameter(torch.zeros(num_classes + feature_dim, experts))  # W_n
        # sized on the first graph (prepare): the feature width and the largest degree are the graph's;
        # keyed by expert index, only for the experts that take that input
        self.feature_projections: nn.ModuleDict | None = None  # W_f^e
        self.degree_embeddings: nn.ModuleDict | None = None  # E^e, "trained"
        self.degree_keys: list[str] = []  # E^e, "fixed": buffers degree_table_<e>, [max degree + 1, degree_dim]
        self.gate_projection: nn.Linear | None = None  # W_p
        self.balance_loss = torch.zeros(())
        # feature products kept from the early-stopping forward for the next training forward (``_reused``);
        # only while ``fit`` runs
        self._kept_products: dict = {}
        self._fitting = False

    @classmethod
    def benchmark_defaults(cls, dataset: str | None, backbone: str | None) -> dict:
        return dict(GETS_CONFIGS.get(dataset, {}))

    def feature_matrix(self, graph: CalibrationGraph) -> Tensor:
        """X: the node features ("raw") or the backbone's first-layer representation ("hidden")."""
        return graph.require_features(self.name) if self.features == "raw" else graph.require_hidden(self.name)

    def prepare(self, graph: CalibrationGraph) -> None:
        if self.feature_projections is None:
            feature_width = self.feature_matrix(graph).shape[1]
            max_degree = int(graph.degree().max().item()) if graph.num_nodes else 0
            degree_experts = [str(e) for e, kinds in enumerate(EXPERT_INPUTS) if "degree" in kinds]
            self.feature_projections = nn.ModuleDict({
                str(e): nn.Linear(feature_width, self.feature_dim)
                for e, kinds in enumerate(EXPERT_INPUTS) if "features" in kinds}).to(graph.device)
            if self.degree_embedding == "trained":
                self.degree_embeddings = nn.ModuleDict({
                    key: nn.Embedding(max_degree + 1, self.degree_dim) for key in degree_experts}).to(graph.device)
            else:
                self.degree_embeddings = nn.ModuleDict()
                self.degree_keys = degree_experts
                for key in degree_experts:  # N(0, 1), as nn.Embedding's initialisation
                    table = torch.randn(max_degree + 1, self.degree_dim).to(graph.device)
                    self.register_buffer(f"degree_table_{key}", table)
            self.gate_projection = nn.Linear(feature_width, self.feature_dim).to(graph.device)
        super().prepare(graph)

    def restore_state(self, state: dict, attributes: dict) -> None:
        """The modules :meth:`prepare` sizes on the first graph, sized from a saved ``state``, then the state."""
        if self.feature_projections is None:
            feature_width = state["gate_projection.weight"].shape[1]
            degree_experts = [str(e) for e, kinds in enumerate(EXPERT_INPUTS) if "degree" in kinds]
            self.feature_projections = nn.ModuleDict({
                str(e): nn.Linear(feature_width, self.feature_dim)
                for e, kinds in enumerate(EXPERT_INPUTS) if "features" in kinds})
            if self.degree_embedding == "trained":
                rows = state[f"degree_embeddings.{degree_experts[0]}.weight"].shape[0]
                self.degree_embeddings = nn.ModuleDict({
                    key: nn.Embedding(rows, self.degree_dim) for key in degree_experts})
            else:
                self.degree_embeddings = nn.ModuleDict()
                self.degree_keys = degree_experts
                for key in degree_experts:
                    self.register_buffer(f"degree_table_{key}", torch.empty_like(state[f"degree_table_{key}"]))
            self.gate_projection = nn.Linear(feature_width, self.feature_dim)
        super().restore_state(state, attributes)

    def degree_tables(self) -> dict[str, Tensor]:
        """E^e [max degree + 1, degree_dim] per degree expert (its key: the expert's index)."""
        if self.degree_embedding == "trained":
            return {key: embedding.weight for key, embedding in self.degree_embeddings.items()}
        return {key: getattr(self, f"degree_table_{key}") for key in self.degree_keys}

    def compute_inputs(self, graph: CalibrationGraph) -> GETSInputs:
        largest = next(iter(self.degree_tables().values())).shape[0] - 1
        degree = graph.degree().long().clamp(max=largest)
        if self.features == "hidden":  # Â [z | X^(1) | 1], as one product
            ones = torch.ones(graph.num_nodes, 1, device=graph.device)
            constant = torch.cat([graph.logits, graph.require_hidden(self.name), ones], dim=1)
            adj = self._adjacency(graph)
            propagated = adj.matmul(constant)
            k, h = graph.num_classes, graph.hidden.shape[1]
            logits, hidden, ones = propagated[:, :k], propagated[:, k:k + h], propagated[:, k + h:]
            features = None
        else:
            ones = torch.ones(graph.num_nodes, 1, device=graph.device)
            adj = self._adjacency(graph)
            propagated = adj.matmul(torch.cat([graph.logits, ones], dim=1))
            logits, ones, hidden = propagated[:, :-1], propagated[:, -1:], None
            x = graph.require_features(self.name)
            # X with its transpose (a sparse X): a function of X alone, built once per feature tensor
            features = graph_cache.shared(x, ("gets_features", str(x.device)), lambda: SparseOperand.from_csr(x)) \
                if x.layout != torch.strided else x
        propagated_degree = None
        if self.degree_embedding == "fixed":  # constant: Â E(deg) once
            tables = self.degree_tables()
            propagated_degree = adj.matmul(torch.cat([tables[key][degree] for key in self.degree_keys], dim=1))
        return GETSInputs(logits, ones, degree, adj, features, hidden, propagated_degree)

    def _adjacency(self, graph: CalibrationGraph) -> SparseOperand:
        """Â of the experts (with its transpose), built once per edge tensor, node count and ``self_loops``."""
        key = ("gets_adjacency", graph.num_nodes, self.self_loops, str(graph.device))
        return graph_cache.shared(graph.edge_index, key, lambda: expert_adjacency(
            graph.edge_index, graph.num_nodes, self.self_loops).to(graph.device))

    def _reused(self, slot: str, inputs: GETSInputs, parameters: list[Tensor], compute) -> Tensor | dict:
        r"""``compute()``, or the value the last evaluation-mode call computed with the same parameters.

        After each optimiser step the early-stopping forward (evaluation mode, no gradient) computes the
        feature products with exactly the parameters the next training forward uses, and nothing random
        enters before them (the gate's noise comes after :math:`X W_p`, dropout after the experts' first
        layer). That forward records their autograd history (the same operations a training forward
        records), and the next call with unchanged parameters (same tensors, same in-place version counters)
        takes the stored value: the training forward then backpropagates through the same operations on the
        same tensors, so the gradients are bit for bit those of a recomputation. A value is taken by at most
        one training forward (its backward frees the history)."""
        key = (inputs, tuple((p, p._version) for p in parameters))
        kept = self._kept_products.get(slot)
        if self._reuse_products and kept is not None and self._same_key(kept[0], key):
            if self.training:
                del self._kept_products[slot]
            return kept[1]
        keep = (self._reuse_products and self._fitting and not self.training
                and not torch.is_inference_mode_enabled())
        with torch.enable_grad() if keep else contextlib.nullcontext():
            value = compute()
        if keep:
            self._kept_products[slot] = (key, value)
        else:
            self._kept_products.pop(slot, None)
        return value

    @staticmethod
    def _same_key(a: tuple, b: tuple) -> bool:
        return a[0] is b[0] and len(a[1]) == len(b[1]) and all(
            p is q and v == w for (p, v), (q, w) in zip(a[1], b[1]))

    def projected_features(self, graph: CalibrationGraph, inputs: GETSInputs) -> dict[str, Tensor]:
        r""":math:`\hat A (X W_f^e + 1 b_f^e)` [N, feature_dim] per feature expert."""
        keys = list(self.feature_projections)
        projections = [self.feature_projections[key] for key in keys]

        def compute() -> dict[str, Tensor]:
            if self.features == "hidden":  # (Â X^(1)) W + (Â 1) b^T
                return {key: inputs.propagated_features @ p.weight.T + inputs.propagated_ones * p.bias
                        for key, p in zip(keys, projections)}
            weight = torch.cat([p.weight for p in projections], dim=0).T  # [F, experts * feature_dim]
            propagated = inputs.adj.matmul(_times(inputs.features, weight))  # Â X W
            parts = propagated.split(self.feature_dim, dim=1)
            return {key: part + inputs.propagated_ones * p.bias for key, part, p in zip(keys, parts, projections)}

        parameters = [t for p in projections for t in (p.weight, p.bias)]
        return self._reused("features", inputs, parameters, compute)

    def expert_outputs(self, graph: CalibrationGraph) -> Tensor:
        """o [N, E, C]: every expert's output before the gate (C = K classwise, 1 temperature).

        The E two-layer GCNs are evaluated together (same equations as :class:`TwoLayerGCN`'s forward,
        with their parameters): one sparse product for all feature projections, one for all degree tables
        and one for all second layers.
        """
        inputs = self.graph_inputs(graph)
        if self.degree_embedding == "trained":
            keys = list(self.degree_embeddings)
            embedded = torch.cat([self.degree_embeddings[key](inputs.degree) for key in keys], dim=1)
            propagated_degree = inputs.adj.matmul(embedded)  # Â E(deg)
        else:
            keys, propagated_degree = self.degree_keys, inputs.propagated_degree
        degree_parts = dict(zip(keys, propagated_degree.split(self.degree_dim, dim=1)))
        feature_parts = self.projected_features(graph, inputs)
        first_layers = []
        for e, (expert, kinds) in enumerate(zip(self.experts, EXPERT_INPUTS)):
            parts = []
            if "logits" in kinds:
                parts.append(inputs.propagated_logits)
            if "features" in kinds:
                parts.append(feature_parts[str(e)])
            if "degree" in kinds:
                parts.append(degree_parts[str(e)])
            first_layers.append(F.relu(torch.cat(parts, dim=1) @ expert.weight1 + expert.bias1))  # [N, hidden]
        hidden = F.dropout(torch.cat(first_layers, dim=1), self.dropout, self.training)  # [N, E * hidden]
        second = torch.cat([h @ expert.weight2 for h, expert in zip(hidden.split(self.hidden, dim=1), self.experts)], 1)
        out = inputs.adj.matmul(second) + torch.cat([expert.bias2 for expert in self.experts])  # [N, E * C]
        return out.view(graph.num_nodes, len(self.experts), -1)  # [N, E, C]

    def gates(self, graph: CalibrationGraph) -> tuple[Tensor, Tensor]:
        """(G [N, E], rows with k non-zero entries summing to 1; the load-balancing loss)."""
        inputs, projection = self.graph_inputs(graph), self.gate_projection

        def compute() -> Tensor:
            if self.features == "raw":  # X W_p + b_p, X sparse or dense
                return _times(inputs.features, projection.weight.T) + projection.bias
            return projection(graph.hidden)

        projected = self._reused("gate", inputs, [projection.weight, projection.bias], compute)
        gate_input = torch.cat([graph.logits, projected], dim=1)  # [N, K + feature_dim]
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

    def scaling(self, graph: CalibrationGraph) -> Tensor:
        r""":math:`\mathrm{softplus}(\sum_e G_{ie} o^e_i)`: [N, K] classwise, [N, 1] (= 1 / T_i) temperature."""
        gates, balance_loss = self.gates(graph)
        if self.training:
            self.balance_loss = balance_loss
        outputs = self.expert_outputs(graph)  # [N, E, C]
        if self.expert_output == "temperature":
            return F.softplus((gates * outputs[..., 0]).sum(1, keepdim=True))  # [N, 1]
        return F.softplus((gates.unsqueeze(-1) * outputs).sum(1))  # [N, K]

    def temperature(self, graph: CalibrationGraph) -> Tensor:
        """T [N, 1] of ``expert_output="temperature"``, kept within [1e-3, 1e6] as CaGCN's (finite where the
        softplus underflows to 0)."""
        if self.expert_output != "temperature":
            raise ConfigError("GETS with classwise expert outputs scales each class apart and has no temperature; "
                              "use expert_output='temperature' (GETS_ap) for one")
        return positive_temperature(1.0 / self.scaling(graph).clamp(min=1e-6))  # [N, 1]

    def forward(self, graph: CalibrationGraph) -> Tensor:
        if self.expert_output == "temperature":
            return F.log_softmax(graph.logits / self.temperature(graph), dim=-1)
        return F.log_softmax(graph.logits * self.scaling(graph), dim=-1)  # [N, K]

    def fit(self, graph: CalibrationGraph, fit_idx: Tensor | None = None, stop_idx: Tensor | None = None) -> GETS:
        fit_idx, stop_idx = self.check_fit_nodes(graph, fit_idx, stop_idx)
        if self.stopping == "holdout":  # one draw: same global seed, same halves
            seed = int(torch.randint(0, 2**31 - 1, ()).item())
            fit_idx, stop_idx = class_halves(fit_idx, graph.labels[fit_idx], seed)
        self.to(graph.device)
        self.prepare(graph)
        self._fitting, self._kept_products = True, {}
        try:
            self.fit_info = fit_nll(self, graph, fit_idx, stop_idx, penalty=lambda: self.balance_loss)
        finally:
            self._fitting, self._kept_products = False, {}
        self.eval()
        return self
