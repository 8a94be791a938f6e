r"""Graph attention (Velickovic et al., 2018) with per-edge tensors of one scalar per head.

:class:`GraphAttention` computes the equations of torch_geometric's ``GATConv`` (no edge features, no
residual, self-loops added by the caller):

.. math::
    e^h_{ij} = \mathrm{LeakyReLU}_{0.2}\big(a^{h\top}_{src} W^h x_j + a^{h\top}_{dst} W^h x_i\big), \qquad
    \alpha^h_{ij} = \frac{\exp e^h_{ij}}{\sum_{k \in N(i)} \exp e^h_{ik}},

    \text{out}_i = \Vert_{h=1}^{H} \textstyle\sum_{j \in N(i)} \mathrm{dropout}(\alpha^h_{ij})\, W^h x_j + b
    \quad \text{(concat)} \qquad \text{or} \qquad
    \frac{1}{H} \textstyle\sum_h \sum_{j \in N(i)} \mathrm{dropout}(\alpha^h_{ij})\, W^h x_j + b \quad \text{(mean)}.

``GATConv`` gathers ``W x_j`` for every edge, an [E, H, C] tensor, and so does its backward; on a large
graph these gathers and scatters are most of a training step on CPU. Here every per-edge quantity is one
scalar per head ([H, E], in CSR order: edges sorted by target):

- forward: the scores e, their softmax over each target's edges (segment max and sum), then per head one
  sparse CSR x dense product ``A^h (W^h X)`` with ``A^h_{ij} = dropout(alpha^h_{ij})``;
- backward (:class:`_AttentionAggregation`): ``grad (W^h X) = (A^h)^T grad out^h`` with the transpose's
  structure built once, ``dL/dA^h_{ij} = grad out^h_i . W^h x_j`` as a sampled dense-dense product (only
  at the E stored positions), and the softmax's gradient in closed form,
  ``dL/de_ij = alpha_ij (m_ij dL/dA_ij - grad out_i . out_i)`` (m: the dropout multiplier; the second
  term is the softmax's row sum, one dot product per node).

The graph's CSR structure, the edge -> CSR permutation and the transpose are built once per graph
(:class:`AttentionGraph`). Parameters have ``GATConv``'s names, shapes and initialisation, drawn in the
same order from the global generator, and attention dropout draws the mask ``F.dropout`` draws on CPU
(``bernoulli_`` over [E, H] in ``edge_index`` order), so on CPU a model built and trained from one seed
sees the same weights and dropout masks with either layer and differs only by floating-point rounding.
(``torch.rand`` masks drawn directly in CSR order are cheaper, at the price of that correspondence:
``docs/decisions.md``.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def _glorot_(weight: Tensor) -> Tensor:
    """U(-b, b), b = sqrt(6 / (fan_in + fan_out)) over the last two dimensions (torch_geometric's ``glorot``)."""
    bound = math.sqrt(6.0 / (weight.size(-2) + weight.size(-1)))
    with torch.no_grad():
        return weight.uniform_(-bound, bound)


@dataclass
class AttentionGraph:
    """A graph's structure for :class:`GraphAttention`: CSR by target, its transpose, and the permutations
    between edge order, CSR order and transposed order. Built once per graph; constant afterwards."""

    edge_index: Tensor  # [2, E] (source, target), the order dropout masks are drawn in
    num_nodes: int
    row: Tensor  # [E] int64, target of each CSR entry (non-decreasing)
    col: Tensor  # [E] int64, source of each CSR entry
    lengths: Tensor  # [N] int64, entries per target (in-degree)
    crow: Tensor  # [N + 1] CSR row pointers (int32 where it fits: MKL's products are faster with it)
    col_index: Tensor  # [E] the CSR column indices, crow's dtype
    edge_of_entry: Tensor  # [E] int64: CSR entry k is edge edge_of_entry[k]
    t_crow: Tensor  # [N + 1] row pointers of the transpose (rows = sources)
    t_col_index: Tensor  # [E] its column indices (targets)
    entry_of_t: Tensor  # [E] int64: transposed entry k is CSR entry entry_of_t[k]

    @classmethod
    def from_edge_index(cls, edge_index: Tensor, num_nodes: int) -> AttentionGraph:
        src, dst = edge_index[0].long(), edge_index[1].long()
        # Stable sorts: multi-edges keep their relative order, so the structure is deterministic.
        edge_of_entry = torch.argsort(dst * num_nodes + src, stable=True)
        row, col = dst[edge_of_entry], src[edge_of_entry]
        entry_of_t = torch.argsort(col * num_nodes + row, stable=True)
        fits_int32 = max(num_nodes, row.numel()) < 2**31
        index_dtype = torch.int32 if fits_int32 else torch.int64
        lengths = torch.bincount(row, minlength=num_nodes)
        t_lengths = torch.bincount(col, minlength=num_nodes)

        def pointers(counts: Tensor) -> Tensor:
            return torch.cat([counts.new_zeros(1), counts.cumsum(0)]).to(index_dtype)

        return cls(
            edge_index=edge_index, num_nodes=num_nodes, row=row, col=col, lengths=lengths,
            crow=pointers(lengths), col_index=col.to(index_dtype), edge_of_entry=edge_of_entry,
            t_crow=pointers(t_lengths), t_col_index=row[entry_of_t].to(index_dtype), entry_of_t=entry_of_t,
        )

    @property
    def num_edges(self) -> int:
        return self.row.numel()

    def to(self, device) -> AttentionGraph:
        moved = {name: (value.to(device) if isinstance(value, Tensor) else value)
                 for name, value in self.__dict__.items()}
        return AttentionGraph(**moved)

    def segment_lengths(self, heads: int) -> Tensor:
        return self.lengths.expand(heads, self.num_nodes)  # [H, N], for segment_reduce along the edge axis

    def propagate(self, values: Tensor, dense: Tensor) -> Tensor:
        """sum_j values[ij] dense[j] per target i: [E] (CSR order) x [N, C] -> [N, C]."""
        matrix = torch.sparse_csr_tensor(self.crow, self.col_index, values, (self.num_nodes, self.num_nodes),
                                         check_invariants=False)
        return torch.sparse.mm(matrix, dense)

    def propagate_transposed(self, values_t: Tensor, dense: Tensor) -> Tensor:
        """sum_i values[ij] dense[i] per source j; ``values_t`` in transposed order ([E] -> [N, C])."""
        matrix = torch.sparse_csr_tensor(self.t_crow, self.t_col_index, values_t,
                                         (self.num_nodes, self.num_nodes), check_invariants=False)
        return torch.sparse.mm(matrix, dense)

    def sampled_dot(self, left: Tensor, right: Tensor) -> Tensor:
        """left[i] . right[j] at every CSR entry (i, j): [N, C], [N, C] -> [E], without an [E, C] tensor."""
        pattern = torch.sparse_csr_tensor(self.crow, self.col_index, left.new_zeros(self.num_edges),
                                          (self.num_nodes, self.num_nodes), check_invariants=False)
        return torch.sparse.sampled_addmm(pattern, left, right.t(), beta=0.0).values()


class _AttentionAggregation(torch.autograd.Function):
    r"""out_i^h = sum_j dropout(softmax_j(LeakyReLU(s_src_j^h + s_dst_i^h))) x_j^h with every per-edge
    tensor [H, E]; the backward is written out so that autograd never gathers x per edge.

    The softmax's normalisation is applied per node: with u_ij = exp(e_ij - max_k e_ik) and
    t_i = sum_j u_ij, out_i = (sum_j u_ij m_ij x_j) / t_i, so no per-edge division is needed, in the
    forward or in the backward (which works with grad_out_i / t_i)."""

    @staticmethod
    def forward(ctx, x: Tensor, score_src: Tensor, score_dst: Tensor, graph: AttentionGraph,
                negative_slope: float, multiplier: Tensor | None) -> Tensor:
        # x [N, H, C]; score_src, score_dst [N, H]; multiplier [H, E] (0 or 1/(1-p), CSR order) or None
        heads = x.size(1)
        lengths = graph.segment_lengths(heads)
        logits = score_src.t().contiguous().index_select(1, graph.col)  # [H, E]
        logits += score_dst.t().contiguous().index_select(1, graph.row)
        unnormalised = F.leaky_relu(logits, negative_slope)
        top = torch.segment_reduce(unnormalised, "max", lengths=lengths, axis=1)  # [H, N]
        unnormalised.sub_(top.index_select(1, graph.row)).exp_()  # u <= 1: exp never overflows
        # Each non-empty row holds its maximum's exp(0) = 1, so its total is >= 1; a node without
        # incoming edges gets 1 instead of 0 (its output is 0, as a sum over no edges).
        total = torch.segment_reduce(unnormalised, "sum", lengths=lengths, axis=1).clamp_min_(1.0)  # [H, N]
        weights = unnormalised if multiplier is None else unnormalised * multiplier  # [H, E]
        out = torch.stack([graph.propagate(weights[h], x[:, h]) for h in range(heads)], dim=1)  # [N, H, C]
        out /= total.t().unsqueeze(-1)
        ctx.graph, ctx.negative_slope = graph, negative_slope
        ctx.save_for_backward(x, logits, unnormalised, weights, multiplier, total, out)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out: Tensor):
        x, logits, unnormalised, weights, multiplier, total, out = ctx.saved_tensors
        graph: AttentionGraph = ctx.graph
        heads = x.size(1)
        grad_scaled = grad_out / total.t().unsqueeze(-1)  # [N, H, C]: grad_out_i / t_i
        grad_x = None
        if ctx.needs_input_grad[0]:
            weights_t = weights.index_select(1, graph.entry_of_t)  # [H, E] in transposed order
            grad_x = torch.stack([graph.propagate_transposed(weights_t[h], grad_scaled[:, h])
                                  for h in range(heads)], dim=1)  # [N, H, C]
        grad_src = grad_dst = None
        if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
            # dL/dalpha_ij / t_i = m_ij grad_out_i . x_j / t_i, sampled at the edges only
            grad_logits = torch.stack([graph.sampled_dot(grad_scaled[:, h], x[:, h]) for h in range(heads)])  # [H, E]
            if multiplier is not None:
                grad_logits *= multiplier
            # softmax: dL/de_ij = alpha_ij (dL/dalpha_ij - sum_k alpha_ik dL/dalpha_ik), and that sum is
            # grad_out_i . out_i; alpha_ij = u_ij / t_i
            row_term = (grad_scaled * out).sum(-1).t().contiguous()  # [H, N]
            grad_logits.sub_(row_term.index_select(1, graph.row)).mul_(unnormalised)
            grad_logits = torch.ops.aten.leaky_relu_backward(grad_logits, logits, ctx.negative_slope, False)
            lengths = graph.segment_lengths(heads)
            grad_dst = torch.segment_reduce(grad_logits, "sum", lengths=lengths, axis=1).t()  # [N, H]
            grad_src = grad_logits.new_zeros(heads, graph.num_nodes).index_add_(1, graph.col, grad_logits).t()
        return grad_x, grad_src, grad_dst, None, None, None


class GraphAttention(nn.Module):
    """One GAT layer: ``GATConv(in_channels, out_channels, heads, concat, dropout, add_self_loops=False)``
    with the same parameters (``lin.weight`` [H*C, in], ``att_src`` and ``att_dst`` [1, H, C], ``bias``
    [H*C] or [C]), computed without per-edge feature tensors. ``forward(x, graph)`` takes an
    :class:`AttentionGraph` (build it once per graph) or an ``edge_index`` (built on every call)."""

    def __init__(self, in_channels: int, out_channels: int, heads: int = 1, concat: bool = True,
                 dropout: float = 0.0, negative_slope: float = 0.2, bias: bool = True):
        super().__init__()
        self.in_channels, self.out_channels, self.heads = in_channels, out_channels, heads
        self.concat, self.dropout, self.negative_slope = concat, dropout, negative_slope
        self.lin = nn.utils.skip_init(nn.Linear, in_channels, heads * out_channels, bias=False)  # no draw here
        self.att_src = nn.Parameter(torch.empty(1, heads, out_channels))
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_channels))
        self.bias = nn.Parameter(torch.empty(heads * out_channels if concat else out_channels)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # GATConv draws its projection twice (its Linear initialises itself, then GATConv re-initialises it);
        # drawing twice here keeps the global random stream, hence every later draw, aligned with it.
        if isinstance(self.lin, nn.Linear):
            _glorot_(self.lin.weight)
            _glorot_(self.lin.weight)
        _glorot_(self.att_src)
        _glorot_(self.att_dst)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, x: Tensor, graph: AttentionGraph | Tensor) -> Tensor:
        n = x.size(0)
        if not isinstance(graph, AttentionGraph):
            graph = AttentionGraph.from_edge_index(graph, n)
        h, c = self.heads, self.out_channels
        x = self.lin(x).view(n, h, c)  # [N, H, C]
        score_src = (x * self.att_src).sum(-1)  # [N, H]
        score_dst = (x * self.att_dst).sum(-1)
        multiplier = None
        if self.training and self.dropout > 0.0:
            # The mask F.dropout draws over [E, H] in edge order (GATConv's draw), permuted to CSR order.
            keep = 1.0 - self.dropout
            mask = torch.empty(graph.num_edges, h, dtype=x.dtype, device=x.device).bernoulli_(keep).div_(keep)
            multiplier = mask.index_select(0, graph.edge_of_entry).t().contiguous()  # [H, E]
        out = _AttentionAggregation.apply(x, score_src, score_dst, graph, self.negative_slope, multiplier)
        out = out.reshape(n, h * c) if self.concat else out.mean(dim=1)
        return out if self.bias is None else out + self.bias

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}, heads={self.heads}, concat={self.concat}"
