"""The two backbones of the GATS protocol (PROTOCOL section 3).

Both return ``(logits, hidden)``: the output logits z [N, K] and the first-layer representation
X^(1) [N, h] (after the non-linearity, before dropout) that SimCalib's feature similarity uses.
Features come as a :class:`SparseOperand` (sparse CSR with a cached transpose): the bag-of-words graphs
have up to 8.7k features and are never densified.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GATConv
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.utils import add_self_loops, remove_self_loops

from simcalib.backbones.first_layer import SharedFirstLayer
from simcalib.backbones.gat_attention import AttentionGraph, GraphAttention
from simcalib.backbones.sparse import SparseOperand, fast_dropout


def glorot_(weight: Tensor) -> Tensor:
    bound = math.sqrt(6.0 / (weight.size(-2) + weight.size(-1)))
    with torch.no_grad():
        return weight.uniform_(-bound, bound)


def normalized_adjacency(edge_index: Tensor, num_nodes: int) -> SparseOperand:
    r""":math:`\hat A = D^{-1/2}(A + I)D^{-1/2}` as a sparse operand (rows = targets, as GCNConv aggregates)."""
    ei, w = gcn_norm(edge_index, None, num_nodes, add_self_loops=True)
    adj = torch.sparse_coo_tensor(ei.flip(0), w, (num_nodes, num_nodes), check_invariants=False).coalesce().to_sparse_csr()
    return SparseOperand.from_csr(adj)


class GCN(SharedFirstLayer, nn.Module):
    r"""Two-layer GCN (Kipf & Welling, 2017), as torch_geometric's ``GCNConv`` computes it:

    .. math::
        X^{(1)} = \mathrm{ReLU}(\hat A X W_1 + b_1), \qquad z = \hat A\, \mathrm{dropout}(X^{(1)}) W_2 + b_2,

    hidden 64, dropout 0.5 after the first layer, Glorot weights and zero biases. While a trainer trains it, an
    evaluation forward's :math:`X^{(1)}` is kept for the next training forward
    (:mod:`simcalib.backbones.first_layer`).
    """

    def __init__(self, in_channels: int, num_classes: int, hidden: int = 64, dropout: float = 0.5):
        super().__init__()
        self.dropout = dropout
        self.weight1 = nn.Parameter(glorot_(torch.empty(in_channels, hidden)))
        self.bias1 = nn.Parameter(torch.zeros(hidden))
        self.weight2 = nn.Parameter(glorot_(torch.empty(hidden, num_classes)))
        self.bias2 = nn.Parameter(torch.zeros(num_classes))

    @staticmethod
    def prepare_graph(edge_index: Tensor, num_nodes: int) -> SparseOperand:
        return normalized_adjacency(edge_index, num_nodes)

    def forward(self, x: SparseOperand, adj: SparseOperand) -> tuple[Tensor, Tensor]:
        hidden = self._first_layer((x, adj), (self.weight1, self.bias1),
                                   lambda: F.relu(adj.matmul(x.matmul(self.weight1)) + self.bias1))  # [N, hidden]
        h = fast_dropout(hidden, self.dropout, self.training)
        logits = adj.matmul(h @ self.weight2) + self.bias2  # [N, K]
        return logits, hidden


ATTENTION_KERNELS = ("pyg", "csr")
"""How :class:`GAT` computes its attention layers: "pyg", torch_geometric's ``GATConv`` (the default, which
every committed result used), or "csr", :class:`~simcalib.backbones.gat_attention.GraphAttention` (the same
equations, parameters and random draws with per-edge tensors of one scalar per head; faster and smaller on
large graphs on CPU, ``reports/performance/README.md``)."""
DEFAULT_ATTENTION = "pyg"
AUTO_ATTENTION = "auto"
"""A setting (``backbone: {attention: auto}``) resolved per device by :func:`attention_for`."""


def attention_for(device: str | torch.device) -> str:
    """The attention kernel measured faster on ``device``: "csr" on the CPU (``reports/performance/README.md``),
    torch_geometric's ``GATConv`` ("pyg") elsewhere (on CUDA 1.9x faster an epoch than "csr", docs/decisions.md)."""
    return "csr" if torch.device(device).type == "cpu" else "pyg"


class GAT(nn.Module):
    r"""Two-layer GAT (Velickovic et al., 2018): 8 heads x 8 hidden (concatenated), ELU, then one
    output head (not concatenated); dropout 0.5 on the inputs of each layer and on the attention.

    .. math::
        X^{(1)} = \mathrm{ELU}\big(\Vert_{h=1}^{8} \textstyle\sum_{j \in N(i) \cup \{i\}} \alpha^h_{ij} W^h x_j\big),
        \qquad z_i = \textstyle\sum_{j} \alpha_{ij} W x^{(1)}_j

    The first layer's input projection ``X W`` is computed outside the attention layer with the cached
    sparse transpose (the costly part on CPU). ``attention`` picks the attention layer
    (:data:`ATTENTION_KERNELS`); both draw the same initial weights and dropout masks from the global
    generator, so from one seed they take the same training steps up to floating-point rounding.
    """

    def __init__(self, in_channels: int, num_classes: int, hidden: int = 8, heads: int = 8, dropout: float = 0.5,
                 attention: str = DEFAULT_ATTENTION):
        super().__init__()
        if attention not in ATTENTION_KERNELS:
            raise ValueError(f"unknown attention kernel {attention!r}; valid: {', '.join(ATTENTION_KERNELS)}")
        self.dropout = dropout
        self.attention = attention
        self.weight1 = nn.Parameter(glorot_(torch.empty(in_channels, heads * hidden)))
        layer = functools.partial(GATConv, add_self_loops=False) if attention == "pyg" else GraphAttention
        self.conv1 = layer(heads * hidden, hidden, heads=heads, dropout=dropout, concat=True)
        self.conv1.lin = nn.Identity()  # projection done by weight1 above
        self.conv2 = layer(hidden * heads, num_classes, heads=1, dropout=dropout, concat=False)

    @staticmethod
    def prepare_graph(edge_index: Tensor, num_nodes: int, attention: str = DEFAULT_ATTENTION) -> Tensor | AttentionGraph:
        """The graph with self-loops on every node (once, instead of every forward), as the ``edge_index``
        ``GATConv`` takes or, for the "csr" kernel, with its CSR structure built."""
        edge_index, _ = remove_self_loops(edge_index)
        edge_index = add_self_loops(edge_index, num_nodes=num_nodes)[0]
        return edge_index if attention == "pyg" else AttentionGraph.from_edge_index(edge_index, num_nodes)

    def forward(self, x: SparseOperand, graph: Tensor | AttentionGraph) -> tuple[Tensor, Tensor]:
        """``graph``: :meth:`prepare_graph`'s result (either form works with either kernel; the "csr" kernel
        builds the CSR structure of a bare ``edge_index`` on every call)."""
        if self.attention == "pyg" and isinstance(graph, AttentionGraph):
            graph = graph.edge_index
        elif self.attention == "csr" and not isinstance(graph, AttentionGraph):
            graph = AttentionGraph.from_edge_index(graph, x.matrix.size(0))
        projected = x.dropout(self.dropout, self.training).matmul(self.weight1)  # [N, heads * hidden]
        hidden = F.elu(self.conv1(projected, graph))  # [N, heads * hidden]
        logits = self.conv2(fast_dropout(hidden, self.dropout, self.training), graph)  # [N, K]
        return logits, hidden


BACKBONES = {"GCN": GCN, "GAT": GAT}
