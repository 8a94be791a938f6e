"""The two backbones of the GATS protocol (PROTOCOL section 3).

Both return ``(logits, hidden)``: the output logits z [N, K] and the first-layer representation
X^(1) [N, h] (after the non-linearity, before dropout) that SimCalib's feature similarity uses.
Features come as a :class:`SparseOperand` (sparse CSR with a cached transpose): the bag-of-words graphs
have up to 8.7k features and are never densified.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GATConv
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.utils import add_self_loops, remove_self_loops

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


class GCN(nn.Module):
    r"""Two-layer GCN (Kipf & Welling, 2017), as torch_geometric's ``GCNConv`` computes it:

    .. math::
        X^{(1)} = \mathrm{ReLU}(\hat A X W_1 + b_1), \qquad z = \hat A\, \mathrm{dropout}(X^{(1)}) W_2 + b_2,

    hidden 64, dropout 0.5 after the first layer, Glorot weights and zero biases.
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
        hidden = F.relu(adj.matmul(x.matmul(self.weight1)) + self.bias1)  # [N, hidden]
        h = fast_dropout(hidden, self.dropout, self.training)
        logits = adj.matmul(h @ self.weight2) + self.bias2  # [N, K]
        return logits, hidden


class GAT(nn.Module):
    r"""Two-layer GAT (Velickovic et al., 2018): 8 heads x 8 hidden (concatenated), ELU, then one
    output head (not concatenated); dropout 0.5 on the inputs of each layer and on the attention.

    .. math::
        X^{(1)} = \mathrm{ELU}\big(\Vert_{h=1}^{8} \textstyle\sum_{j \in N(i) \cup \{i\}} \alpha^h_{ij} W^h x_j\big),
        \qquad z_i = \textstyle\sum_{j} \alpha_{ij} W x^{(1)}_j

    The first layer's input projection ``X W`` is computed outside ``GATConv`` with the cached sparse
    transpose (the costly part on CPU); the attention itself is torch_geometric's ``GATConv``.
    """

    def __init__(self, in_channels: int, num_classes: int, hidden: int = 8, heads: int = 8, dropout: float = 0.5):
        super().__init__()
        self.dropout = dropout
        self.weight1 = nn.Parameter(glorot_(torch.empty(in_channels, heads * hidden)))
        self.conv1 = GATConv(heads * hidden, hidden, heads=heads, dropout=dropout, concat=True, add_self_loops=False)
        self.conv1.lin = nn.Identity()  # projection done by weight1 above
        self.conv2 = GATConv(hidden * heads, num_classes, heads=1, dropout=dropout, concat=False, add_self_loops=False)

    @staticmethod
    def prepare_graph(edge_index: Tensor, num_nodes: int) -> Tensor:
        edge_index, _ = remove_self_loops(edge_index)
        return add_self_loops(edge_index, num_nodes=num_nodes)[0]  # once, instead of every forward

    def forward(self, x: SparseOperand, edge_index: Tensor) -> tuple[Tensor, Tensor]:
        projected = x.dropout(self.dropout, self.training).matmul(self.weight1)  # [N, heads * hidden]
        hidden = F.elu(self.conv1(projected, edge_index))  # [N, heads * hidden]
        logits = self.conv2(fast_dropout(hidden, self.dropout, self.training), edge_index)  # [N, K]
        return logits, hidden


BACKBONES = {"GCN": GCN, "GAT": GAT}
