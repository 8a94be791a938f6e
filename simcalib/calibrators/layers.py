r"""Building blocks shared by the graph calibrators (CaGCN, GATS, SimCalib).

The inputs of a post-hoc calibrator (logits, features, graph) never change while it trains, so anything
derived from them alone is computed once per graph (:class:`GraphInputsCache`) and a GCN's first
propagation is precomputed: :math:`\hat A (x W) = (\hat A x) W`.
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GATConv
from torch_geometric.utils import add_self_loops, remove_self_loops
from torch_geometric.utils import softmax as edge_softmax

import simcalib.calibrators.graph_cache as graph_cache
from simcalib.backbones.models import glorot_, normalized_adjacency
from simcalib.backbones.sparse import SparseOperand
from simcalib.errors import ConfigError

MIN_TEMPERATURE = 1e-3  # floor on every temperature, as TS: keeps z / T finite


def log_softmax_classes(x: Tensor) -> Tensor:
    """``F.log_softmax(x, dim=-1)`` computed with the class dimension leading the node dimension.

    With few classes (K = 3 to 15 here) the CPU kernel for a softmax over the last, contiguous dimension
    reduces one short row at a time; over a leading dimension it runs along the nodes in vector lanes.
    On the 2-core machines of this project a [9, 135, 7] input takes ~180 us forward and ~480 us forward plus
    backward the first way, ~30 us and ~140 us this way (`benchmarks/speed/bench_calibrators.py --kernels`). Equal to
    the plain call to float rounding (the reduction over classes runs in another order), not bit for bit.
    """
    return F.log_softmax(x.transpose(-1, -2), dim=-2).transpose(-1, -2)


def positive_temperature(t: Tensor) -> Tensor:
    """Clamp a temperature that is positive by construction at :data:`MIN_TEMPERATURE` (no 0 or underflow).

    Below the floor the gradient is zero: a fit that reaches it stays there. The baselines (TS, CaGCN, GATS)
    keep this clamp, as the GATS code; SimCalib uses :func:`softplus_temperature`.
    """
    return t.clamp(min=MIN_TEMPERATURE)


def softplus_temperature(raw: Tensor) -> Tensor:
    r""":math:`T = \mathrm{softplus}(r) + \epsilon`, :math:`\epsilon` = :data:`MIN_TEMPERATURE`: positive and
    finite for every ``raw``, with a non-zero gradient everywhere (no dead region below a clamp)."""
    return F.softplus(raw) + MIN_TEMPERATURE


def inverse_softplus_temperature(temperature: float) -> float:
    """The ``raw`` value at which :func:`softplus_temperature` equals ``temperature`` (> MIN_TEMPERATURE)."""
    if temperature <= MIN_TEMPERATURE:
        raise ConfigError(f"an initial temperature must exceed {MIN_TEMPERATURE}, got {temperature}")
    return math.log(math.expm1(temperature - MIN_TEMPERATURE))


def edges_with_self_loops(edge_index: Tensor, num_nodes: int, self_loops: bool = True) -> Tensor:
    """``edge_index`` [2, E] without duplicate self-loops, plus one self-loop per node if ``self_loops``."""
    edge_index, _ = remove_self_loops(edge_index)
    return add_self_loops(edge_index, num_nodes=num_nodes)[0] if self_loops else edge_index


def sum_into(values: Tensor, index: Tensor, num_nodes: int) -> Tensor:
    """Sum the rows of ``values`` [E, ...] into the nodes ``index`` [E]: [N, ...]."""
    out = values.new_zeros((num_nodes, *values.shape[1:]))
    return out.index_add_(0, index, values)


def _row_pointers(sorted_rows: Tensor, num_nodes: int) -> Tensor:
    counts = torch.bincount(sorted_rows, minlength=num_nodes)
    return torch.cat([counts.new_zeros(1), counts.cumsum(0)])


class SortedEdges:
    r"""Edges j -> i sorted by target i, with the CSR structure of the weighted sum over incoming edges.

    ``weighted_sum(w, x)`` computes :math:`\text{out}_i = \sum_{e: j \to i} w_e x_j` as a sparse CSR product
    (differentiable in both ``w`` and ``x``); on CPU this is an order of magnitude faster than
    gather-multiply-``index_add`` on graphs of Physics' size. Per-edge tensors must follow
    ``source``/``target`` order.
    """

    def __init__(self, edge_index: Tensor, num_nodes: int):
        order = torch.argsort(edge_index[1] * num_nodes + edge_index[0])
        self.num_nodes = num_nodes
        self.source, self.target = edge_index[0][order], edge_index[1][order]  # [E], target sorted
        self.row_pointers = _row_pointers(self.target, num_nodes)  # [N + 1]
        self.transpose_order = torch.argsort(self.source * num_nodes + self.target)  # edges sorted by source
        self.transpose_row_pointers = _row_pointers(self.source[self.transpose_order], num_nodes)
        self.transpose_columns = self.target[self.transpose_order]

    def matrix(self, weight: Tensor) -> Tensor:
        """[N, N] sparse CSR with ``weight`` [E] at (target, source)."""
        return torch.sparse_csr_tensor(self.row_pointers, self.source, weight, (self.num_nodes, self.num_nodes),
                                       check_invariants=False)

    def transposed_matrix(self, weight: Tensor) -> Tensor:
        return torch.sparse_csr_tensor(self.transpose_row_pointers, self.transpose_columns,
                                       weight[self.transpose_order], (self.num_nodes, self.num_nodes),
                                       check_invariants=False)

    def weighted_sum(self, weight: Tensor, x: Tensor) -> Tensor:
        r""":math:`\sum_{e: j \to i} w_e x_j` for ``weight`` [E] and ``x`` [N, C]: [N, C]."""
        return _WeightedSum.apply(weight, x, self)

    def softmax(self, score: Tensor) -> Tensor:
        """Softmax of per-edge ``score`` [E] over the incoming edges of each target."""
        return edge_softmax(score, ptr=self.row_pointers, num_nodes=self.num_nodes)


class _WeightedSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, weight: Tensor, x: Tensor, edges: SortedEdges) -> Tensor:
        ctx.save_for_backward(weight, x)
        ctx.edges = edges
        return edges.matrix(weight) @ x

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        weight, x = ctx.saved_tensors
        edges, grad_weight, grad_x = ctx.edges, None, None
        if ctx.needs_input_grad[0]:  # d out_i / d w_e = x_j . grad_out_i, only on the edges (SDDMM)
            pattern = edges.matrix(torch.zeros_like(weight))
            grad_weight = torch.sparse.sampled_addmm(pattern, grad_out.contiguous(), x.T, beta=0.0).values()
        if ctx.needs_input_grad[1]:
            grad_x = edges.transposed_matrix(weight) @ grad_out
        return grad_weight, grad_x, None


class GraphInputsCache:
    """Mixin: ``graph_inputs(graph)`` computes the calibrator's constant inputs once per graph object.

    ``prepare`` (called by ``Calibrator.fit``) fills it; ``forward`` on another graph recomputes it, so a
    fitted calibrator can be applied to any graph (e.g. a permuted copy).
    """

    _inputs_graph = None
    _inputs = None

    def compute_inputs(self, graph) -> object:  # pragma: no cover - each calibrator defines it
        raise NotImplementedError

    def graph_inputs(self, graph):
        if self._inputs_graph is not graph:
            self._inputs = self.compute_inputs(graph)
            self._inputs_graph = graph
        return self._inputs

    def prepare(self, graph) -> None:
        self.graph_inputs(graph)


class TwoLayerGCN(nn.Module):
    r"""Two GCN layers (Kipf & Welling, 2017) to one output per node, as torch_geometric's ``GCNConv``:

    .. math::
        H = \mathrm{dropout}(\mathrm{ReLU}(\hat A x W_1 + b_1)), \qquad
        o = \hat A H W_2 + b_2, \qquad \hat A = D^{-1/2}(A + I)D^{-1/2},

    with Glorot weights and zero biases. ``forward`` takes :math:`\hat A x` precomputed (constant inputs).
    """

    def __init__(self, in_channels: int, hidden: int = 16, out_channels: int = 1, dropout: float = 0.5):
        super().__init__()
        self.dropout = dropout
        self.weight1 = nn.Parameter(torch.empty(in_channels, hidden))
        self.bias1 = nn.Parameter(torch.zeros(hidden))
        self.weight2 = nn.Parameter(torch.empty(hidden, out_channels))
        self.bias2 = nn.Parameter(torch.zeros(out_channels))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        glorot_(self.weight1)
        glorot_(self.weight2)
        nn.init.zeros_(self.bias1)
        nn.init.zeros_(self.bias2)

    @staticmethod
    def propagate_inputs(x: Tensor, edge_index: Tensor, num_nodes: int) -> tuple[Tensor, SparseOperand]:
        r"""(:math:`\hat A x` [N, C], :math:`\hat A`) for constant inputs ``x`` [N, C]; :math:`\hat A` built once
        per edge tensor (:mod:`~simcalib.calibrators.graph_cache`) and shared by every calibrator on the graph."""
        key = ("normalized_adjacency", num_nodes, str(x.device))
        adj = graph_cache.shared(edge_index, key, lambda: normalized_adjacency(edge_index, num_nodes).to(x.device))
        return adj.matmul(x), adj

    def output_bias(self) -> Tensor:
        return self.bias2

    def forward(self, propagated_x: Tensor, adj: SparseOperand) -> Tensor:
        hidden = F.relu(propagated_x @ self.weight1 + self.bias1)  # [N, hidden]
        hidden = F.dropout(hidden, self.dropout, self.training)
        return adj.matmul(hidden @ self.weight2) + self.bias2  # [N, out]


class TwoLayerGAT(nn.Module):
    r"""Two GAT layers (Velickovic et al., 2018) to one output per node:

    .. math::
        H = \mathrm{dropout}(\mathrm{ELU}(\Vert_{h} \textstyle\sum_{j \in N(i) \cup \{i\}} \alpha^h_{ij} W^h x_j)),
        \qquad o_i = \textstyle\sum_{j} \alpha_{ij} W H_j,

    ``heads`` heads of width ``hidden`` (concatenated) then one output head; dropout on the hidden layer.
    """

    def __init__(self, in_channels: int, hidden: int = 16, out_channels: int = 1, dropout: float = 0.5, heads: int = 1):
        super().__init__()
        self.dropout = dropout
        self.conv1 = GATConv(in_channels, hidden, heads=heads, concat=True, add_self_loops=False)
        self.conv2 = GATConv(hidden * heads, out_channels, heads=1, concat=False, add_self_loops=False)

    def reset_parameters(self) -> None:
        self.conv1.reset_parameters()
        self.conv2.reset_parameters()

    def output_bias(self) -> Tensor:
        return self.conv2.bias

    def forward(self, x: Tensor, edge_index_with_loops: Tensor) -> Tensor:
        hidden = F.dropout(F.elu(self.conv1(x, edge_index_with_loops)), self.dropout, self.training)
        return self.conv2(hidden, edge_index_with_loops)  # [N, out]


class GridGCN(nn.Module):
    r""":class:`TwoLayerGCN` with a leading grid dimension: ``points`` independent GCNs trained side by side.

    .. math::
        H_p = \mathrm{dropout}(\mathrm{ReLU}(\hat A x W_{1,p} + b_{1,p})), \qquad
        o_p = \hat A H_p W_{2,p} + b_{2,p}, \qquad p = 1..P,

    one dense product for all points in the first layer and one sparse propagation of the [N, P] outputs in
    the second. Every point starts from the same initialisation and sees the same dropout mask per step
    (one draw of the current RNG, broadcast over P), so point p follows exactly the trajectory it would
    follow if it were trained alone from the same seed.
    """

    def __init__(self, in_channels: int, hidden: int, points: int, dropout: float = 0.5):
        super().__init__()
        self.dropout, self.points = dropout, points
        self.weight1 = nn.Parameter(torch.empty(points, in_channels, hidden))  # [P, C, h]
        self.bias1 = nn.Parameter(torch.zeros(points, hidden))  # [P, h]
        self.weight2 = nn.Parameter(torch.empty(points, hidden, 1))  # [P, h, 1]
        self.bias2 = nn.Parameter(torch.zeros(points, 1))  # [P, 1]
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():  # one draw, copied to every point: the same start whatever P is
            self.weight1.copy_(glorot_(torch.empty(self.weight1.shape[1:])).expand_as(self.weight1))
            self.weight2.copy_(glorot_(torch.empty(self.weight2.shape[1:])).expand_as(self.weight2))
        nn.init.zeros_(self.bias1)
        nn.init.zeros_(self.bias2)

    def output_bias(self) -> Tensor:
        return self.bias2  # [P, 1]

    def zero_output_(self) -> None:
        """Output weights to zero: every point's output starts at its bias on every node."""
        with torch.no_grad():
            self.weight2.zero_()

    @staticmethod
    def prepare(x: Tensor, edge_index: Tensor, num_nodes: int) -> tuple[Tensor, SparseOperand]:
        return TwoLayerGCN.propagate_inputs(x, edge_index, num_nodes)

    @staticmethod
    def restrict(prepared: tuple[Tensor, SparseOperand], nodes: Tensor) -> tuple[Tensor, SparseOperand]:
        r"""Inputs whose outputs are those of ``nodes`` only, [P, n, 1]: :math:`\hat A x` on the nodes' 1-hop
        neighbourhood :math:`N_1` and the rows of :math:`\hat A` for ``nodes`` restricted to :math:`N_1`.
        A loss on a few labelled nodes then costs O(|N_1|), not O(N), per step."""
        propagated_x, adj = prepared
        rows = adj.matrix.to_sparse_coo().index_select(0, nodes).coalesce()  # [n, N]
        neighbourhood, columns = torch.unique(rows.indices()[1], return_inverse=True)  # N_1, positions in it
        restricted = torch.sparse_coo_tensor(torch.stack([rows.indices()[0], columns]), rows.values(),
                                             (len(nodes), len(neighbourhood)), check_invariants=False)
        return propagated_x[neighbourhood], SparseOperand.from_csr(restricted.coalesce().to_sparse_csr())

    def forward(self, prepared: tuple[Tensor, SparseOperand], points: Tensor | None = None) -> Tensor:
        """[P, n, 1] for prepared (or restricted) inputs; ``points``: only those grid points, [p, n, 1]."""
        propagated_x, adj = prepared  # [N_in, C], Â [n, N_in]
        weight1, bias1, weight2, bias2 = self.weight1, self.bias1, self.weight2, self.bias2
        if points is not None:
            weight1, bias1, weight2, bias2 = weight1[points], bias1[points], weight2[points], bias2[points]
        count, channels, width = weight1.shape
        nodes = propagated_x.shape[0]
        # Node-major [N_in, p, h]: the points' first layers are one [C, p*h] product with the bias fused, and the
        # elementwise work runs over contiguous rows; a [p, N_in, h] batch of h-wide products cost ~1.3x more
        # per step on CPU (same values to rounding).
        hidden = torch.addmm(bias1.reshape(count * width), propagated_x,
                             weight1.transpose(0, 1).reshape(channels, count * width))  # [N_in, p*h]
        hidden = F.relu(hidden).view(nodes, count, width)  # [N_in, p, h]
        if self.training and self.dropout > 0:
            keep = torch.rand((nodes, width), device=hidden.device) >= self.dropout  # [N_in, h], shared by points
            hidden = hidden * (keep * (1.0 / (1.0 - self.dropout)))[:, None, :]
        per_point = (hidden * weight2.squeeze(-1)).sum(dim=2)  # [N_in, p]: each point's h-wide dot product
        return (adj.matmul(per_point) + bias2.T).T.unsqueeze(-1)  # [p, n, 1]


class GridGAT(nn.Module):
    """``points`` copies of :class:`TwoLayerGAT` from one initialisation, evaluated one after another
    (GATConv has no batch dimension): [P, N, 1]. Their dropout draws follow each other in the RNG stream.
    Building them draws one network's initialisation, whatever ``points`` is, so the random stream after
    the grid (e.g. the movement branch's initialisation) does not depend on the grid's size."""

    def __init__(self, in_channels: int, hidden: int, points: int, dropout: float = 0.5, heads: int = 1):
        super().__init__()
        self.points = points
        first = TwoLayerGAT(in_channels, hidden, 1, dropout, heads)
        self.nets = nn.ModuleList([first, *(copy.deepcopy(first) for _ in range(points - 1))])
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.nets[0].reset_parameters()
        for net in self.nets[1:]:
            net.load_state_dict(self.nets[0].state_dict())

    def output_bias(self) -> Tensor:
        return torch.stack([net.output_bias() for net in self.nets])  # [P, 1]

    def zero_output_(self) -> None:
        """Output layer's weights to zero: every point's output starts at its bias on every node."""
        with torch.no_grad():
            for net in self.nets:
                for name, parameter in net.conv2.named_parameters():
                    if name != "bias":
                        parameter.zero_()

    def set_output_bias(self, value: float) -> None:
        with torch.no_grad():
            for net in self.nets:
                net.output_bias().fill_(value)

    @staticmethod
    def prepare(x: Tensor, edge_index: Tensor, num_nodes: int) -> tuple[Tensor, Tensor]:
        return x, edges_with_self_loops(edge_index, num_nodes).to(x.device)

    def forward(self, prepared: tuple[Tensor, Tensor], points: Tensor | None = None) -> Tensor:
        chosen = range(self.points) if points is None else points.tolist()
        return torch.stack([self.nets[p](*prepared) for p in chosen])  # [p, N, 1]


def grid_gnn(kind: str, in_channels: int, hidden: int, points: int, dropout: float = 0.5, heads: int = 1) -> nn.Module:
    """A two-layer GCN or GAT (``kind``) with a leading grid dimension of ``points``."""
    if kind == "gcn":
        return GridGCN(in_channels, hidden, points, dropout)
    if kind == "gat":
        return GridGAT(in_channels, hidden, points, dropout, heads)
    raise ConfigError(f"unknown GNN type {kind!r}; choose 'gcn' or 'gat'")
