"""Ways of computing GAT attention without [E, H, C] tensors, timed against torch_geometric's ``GATConv``.

The two attention layers of the GAT backbone (64 -> 8 heads x 8, concatenated; 64 -> K, one head) on a
dataset's graph with self-loops, from a random [N, 64] input, per route: one training forward + backward
(attention dropout 0.5) and one evaluation forward. The routes run in one process, in turn within every
repetition, so a change in the machine's load hits all alike; median and range over the repetitions.

- ``pyg``: ``GATConv`` ([E, H, C] messages and their gradients);
- ``csr``: :class:`simcalib.backbones.gat_attention.GraphAttention` (per head one CSR product; backward with
  the transposed CSR product, sampled dot products and the softmax gradient in closed form);
- ``csr-rand-mask``: the same with ``torch.rand`` dropout masks drawn in CSR order instead of GATConv's
  ``bernoulli_`` masks in edge order (cheaper; a different random stream from the pyg kernel's);
- ``csr-gather-dot``: the same with the sampled dot products as per-head [E, C] gathers and a sum;
- ``heads-expanded``: one CSR product over the block-diagonal [N*H, N*H] graph of all heads, with the
  permutation of the [H, E] coefficients into its order (and back) on every call;
- ``autograd-softmax``: only the aggregation as a custom function; scores, softmax (torch_geometric's
  ``softmax``) and dropout on [E, H] under autograd;
- ``compiled``: ``torch.compile`` of ``GATConv`` (inductor; needs a C++ compiler, compiles on first call).

    python benchmarks/gat_attention_routes.py [--datasets Computers] [--repeats 7] [--routes pyg,csr,...]

Uses $SIMCALIB_DATA_MIRROR like the CLI.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import time
import warnings

import torch
import torch.nn.functional as F
from gat_attention_speed import eval_forward  # same folder: run as a script
from torch import Tensor, nn
from torch_geometric.nn import GATConv
from torch_geometric.utils import softmax as edge_softmax

from simcalib.backbones.gat_attention import AttentionGraph, GraphAttention, _AttentionAggregation

ROUTES = ("pyg", "csr", "csr-rand-mask", "csr-gather-dot", "heads-expanded", "autograd-softmax", "compiled")


class GatherDotGraph(AttentionGraph):
    def sampled_dot(self, left: Tensor, right: Tensor) -> Tensor:
        return (left.index_select(0, self.row) * right.index_select(0, self.col)).sum(-1)  # via [E, C]


class ExpandedGraph:
    """The block-diagonal graph of H heads: row i*H + h holds target i's edges of head h, columns j*H + h, so
    that one CSR product with the [N*H, C] view of [N, H, C] features is all heads' aggregation."""

    def __init__(self, graph: AttentionGraph, heads: int):
        n, e = graph.num_nodes, graph.num_edges
        h = torch.arange(heads)
        self.heads, self.shape = heads, (n * heads, n * heads)
        self.order = self._order(graph.crow.long(), graph.row, graph.lengths, heads)  # expanded k -> [H, E] flat
        self.crow = self._pointers(graph.lengths, heads)
        self.col = (graph.col.view(1, -1) * heads + h.view(-1, 1)).flatten()[self.order].to(graph.col_index.dtype)
        t_source = graph.col[graph.entry_of_t]  # row (source) of each transposed entry
        t_lengths = torch.bincount(graph.col, minlength=n)
        t_order = self._order(graph.t_crow.long(), t_source, t_lengths, heads)
        self.t_values = (h.view(-1, 1) * e + graph.entry_of_t.view(1, -1)).flatten()[t_order]
        self.t_crow = self._pointers(t_lengths, heads)
        self.t_col = (graph.row[graph.entry_of_t].view(1, -1) * heads + h.view(-1, 1)).flatten()[t_order].to(
            graph.col_index.dtype)
        self.inverse = torch.empty_like(self.order)
        self.inverse[self.order] = torch.arange(self.order.numel())

    @staticmethod
    def _pointers(lengths: Tensor, heads: int) -> Tensor:
        counts = lengths.repeat_interleave(heads)
        return torch.cat([counts.new_zeros(1), counts.cumsum(0)]).to(torch.int32)

    @staticmethod
    def _order(crow: Tensor, row: Tensor, lengths: Tensor, heads: int) -> Tensor:
        e = row.numel()
        start = crow[:-1][row]
        within = torch.arange(e) - start
        position = start.view(1, -1) * heads + torch.arange(heads).view(-1, 1) * lengths[row].view(1, -1) + within
        order = torch.empty(heads * e, dtype=torch.long)
        order[position.flatten()] = torch.arange(heads * e)
        return order

    def propagate(self, values: Tensor, x: Tensor) -> Tensor:  # values [H, E], x [N, H, C]
        n, h, c = x.shape
        a = torch.sparse_csr_tensor(self.crow, self.col, values.reshape(-1)[self.order], self.shape,
                                    check_invariants=False)
        return torch.sparse.mm(a, x.reshape(n * h, c)).view(n, h, c)

    def propagate_transposed(self, values: Tensor, g: Tensor) -> Tensor:
        n, h, c = g.shape
        a = torch.sparse_csr_tensor(self.t_crow, self.t_col, values.reshape(-1)[self.t_values], self.shape,
                                    check_invariants=False)
        return torch.sparse.mm(a, g.reshape(n * h, c)).view(n, h, c)

    def sampled_dot(self, g: Tensor, x: Tensor) -> Tensor:
        n, h, c = x.shape
        pattern = torch.sparse_csr_tensor(self.crow, self.col, x.new_zeros(self.col.numel()), self.shape,
                                          check_invariants=False)
        values = torch.sparse.sampled_addmm(pattern, g.reshape(n * h, c), x.reshape(n * h, c).t(), beta=0.0).values()
        return values[self.inverse].view(h, -1)


class _ExpandedAggregation(torch.autograd.Function):
    """As _AttentionAggregation, with each per-head loop replaced by one product over the expanded graph."""

    @staticmethod
    def forward(ctx, x, score_src, score_dst, graph, expanded, negative_slope, multiplier):
        heads = x.size(1)
        lengths = graph.segment_lengths(heads)
        logits = score_src.t().contiguous().index_select(1, graph.col)
        logits += score_dst.t().contiguous().index_select(1, graph.row)
        u = F.leaky_relu(logits, negative_slope)
        u.sub_(torch.segment_reduce(u, "max", lengths=lengths, axis=1).index_select(1, graph.row)).exp_()
        total = torch.segment_reduce(u, "sum", lengths=lengths, axis=1).clamp_min_(1.0)
        weights = u if multiplier is None else u * multiplier
        x = x.contiguous()
        out = expanded.propagate(weights, x) / total.t().unsqueeze(-1)
        ctx.graph, ctx.expanded, ctx.negative_slope = graph, expanded, negative_slope
        ctx.save_for_backward(x, logits, u, weights, multiplier, total, out)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        x, logits, u, weights, multiplier, total, out = ctx.saved_tensors
        graph, expanded = ctx.graph, ctx.expanded
        grad_scaled = (grad_out / total.t().unsqueeze(-1)).contiguous()
        grad_x = expanded.propagate_transposed(weights, grad_scaled)
        grad_logits = expanded.sampled_dot(grad_scaled, x)
        if multiplier is not None:
            grad_logits = grad_logits * multiplier
        row_term = (grad_scaled * out).sum(-1).t().contiguous()
        grad_logits = (grad_logits - row_term.index_select(1, graph.row)) * u
        grad_logits = torch.ops.aten.leaky_relu_backward(grad_logits, logits, ctx.negative_slope, False)
        grad_dst = torch.segment_reduce(grad_logits, "sum", lengths=graph.segment_lengths(x.size(1)), axis=1).t()
        grad_src = grad_logits.new_zeros(x.size(1), graph.num_nodes).index_add_(1, graph.col, grad_logits).t()
        return grad_x, grad_src, grad_dst, None, None, None, None


class _Aggregation(torch.autograd.Function):
    """out^h = A^h x^h for given per-edge weights [H, E]; gradients for the weights and x, per head."""

    @staticmethod
    def forward(ctx, weights, x, graph):
        ctx.graph = graph
        ctx.save_for_backward(weights, x)
        return torch.stack([graph.propagate(weights[h], x[:, h]) for h in range(x.size(1))], dim=1)

    @staticmethod
    def backward(ctx, grad_out):
        weights, x = ctx.saved_tensors
        graph, heads = ctx.graph, x.size(1)
        weights_t = weights.index_select(1, graph.entry_of_t)
        grad_x = torch.stack([graph.propagate_transposed(weights_t[h], grad_out[:, h]) for h in range(heads)], dim=1)
        grad_w = torch.stack([graph.sampled_dot(grad_out[:, h], x[:, h]) for h in range(heads)])
        return grad_w, grad_x, None


class RouteLayer(GraphAttention):
    """GraphAttention's parameters with another route's computation."""

    def __init__(self, route: str, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.route = route

    def forward(self, x: Tensor, graph: AttentionGraph) -> Tensor:
        n, h, c = x.size(0), self.heads, self.out_channels
        x = self.lin(x).view(n, h, c)
        score_src, score_dst = (x * self.att_src).sum(-1), (x * self.att_dst).sum(-1)
        keep = 1.0 - self.dropout
        multiplier = None
        if self.training and self.dropout > 0.0:
            if self.route == "csr-rand-mask":
                multiplier = (torch.rand(h, graph.num_edges, dtype=x.dtype) < keep) / keep
            else:
                mask = torch.empty(graph.num_edges, h, dtype=x.dtype).bernoulli_(keep).div_(keep)
                multiplier = mask.index_select(0, graph.edge_of_entry).t().contiguous()
        if self.route == "heads-expanded":
            expanded = graph.expanded[h]
            out = _ExpandedAggregation.apply(x, score_src, score_dst, graph, expanded, self.negative_slope, multiplier)
        elif self.route == "autograd-softmax":
            logits = F.leaky_relu(score_src[graph.col] + score_dst[graph.row], self.negative_slope)  # [E, H]
            alpha = edge_softmax(logits, graph.row, num_nodes=n)
            if multiplier is not None:
                alpha = alpha * multiplier.t()
            out = _Aggregation.apply(alpha.t().contiguous(), x, graph)
        else:
            out = _AttentionAggregation.apply(x, score_src, score_dst, graph, self.negative_slope, multiplier)
        out = out.reshape(n, h * c) if self.concat else out.mean(dim=1)
        return out + self.bias


class TwoLayers(nn.Module):
    def __init__(self, route: str, num_classes: int):
        super().__init__()
        if route in ("pyg", "compiled"):
            self.conv1 = GATConv(64, 8, heads=8, dropout=0.5, add_self_loops=False)
            self.conv2 = GATConv(64, num_classes, heads=1, concat=False, dropout=0.5, add_self_loops=False)
        elif route == "csr":
            self.conv1 = GraphAttention(64, 8, heads=8, dropout=0.5)
            self.conv2 = GraphAttention(64, num_classes, heads=1, concat=False, dropout=0.5)
        else:
            self.conv1 = RouteLayer(route, 64, 8, heads=8, dropout=0.5)
            self.conv2 = RouteLayer(route, 64, num_classes, heads=1, concat=False, dropout=0.5)
        self.conv1.lin = nn.Identity()  # as in the GAT backbone: the input projection is computed outside
        if route == "compiled":
            self.conv1, self.conv2 = torch.compile(self.conv1), torch.compile(self.conv2)

    def forward(self, x: Tensor, graph) -> Tensor:
        return self.conv2(F.elu(self.conv1(x, graph)), graph)


def _graphs(dataset: str):
    from simcalib.backbones.models import GAT
    from simcalib.data import load_dataset

    data = load_dataset(dataset)
    edge_index = GAT.prepare_graph(data.edge_index, data.num_nodes)
    graph = AttentionGraph.from_edge_index(edge_index, data.num_nodes)
    graph.expanded = {heads: ExpandedGraph(graph, heads) for heads in (1, 8)}
    gather_dot = GatherDotGraph(**{k: v for k, v in graph.__dict__.items() if k != "expanded"})
    return data, {"pyg": edge_index, "compiled": edge_index, "csr-gather-dot": gather_dot}, graph


def _train(model, x, graph) -> float:
    start = time.perf_counter()
    model.train()
    x = x.detach().requires_grad_(True)
    model(x, graph).sum().backward()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default="Computers")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--routes", default=",".join(ROUTES))
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    routes = args.routes.split(",")
    print(f"# python benchmarks/gat_attention_routes.py {shlex.join(sys.argv[1:])}")
    print(f"# torch {torch.__version__}, {args.threads} torch thread(s); {time.strftime('%Y-%m-%d %H:%M %Z')}; "
          "ms: median [min-max] over the repetitions")
    for dataset in args.datasets.split(","):
        data, special, graph = _graphs(dataset)
        x = torch.randn(data.num_nodes, 64, generator=torch.Generator().manual_seed(0))
        models, graphs, first_call = {}, {}, {}
        for route in routes:
            torch.manual_seed(0)
            models[route], graphs[route] = TwoLayers(route, data.num_classes), special.get(route, graph)
            first_call[route] = _train(models[route], x, graphs[route]) + eval_forward(models[route], x, graphs[route])
        with torch.no_grad():  # every route starts from the same seed, hence the same weights
            outputs = {route: models[route].eval()(x, graphs[route]) for route in routes}
        reference = outputs.get("pyg")
        times = {route: ([], []) for route in routes}
        for rep in range(args.repeats):
            for route in (routes if rep % 2 == 0 else routes[::-1]):
                times[route][0].append(_train(models[route], x, graphs[route]))
                times[route][1].append(eval_forward(models[route], x, graphs[route]))
        load = " ".join(f"{v:.2f}" for v in os.getloadavg())
        print(f"\n{dataset}: {data.num_nodes} nodes, {graph.num_edges} edges with self-loops; two attention layers "
              f"(64 -> 8x8 concatenated, 64 -> {data.num_classes}x1); load after {load}")
        print(f"  {'route':18s}{'train fwd+bwd':>26s}{'eval forward':>26s}{'first call s':>14s}{'max |out - pyg|':>17s}")
        for route in routes:
            cells = [f"{statistics.median(t) * 1e3:8.1f} [{min(t) * 1e3:6.1f}-{max(t) * 1e3:6.1f}]" for t in times[route]]
            difference = "" if reference is None else f"{(outputs[route] - reference).abs().max().item():.1e}"
            print(f"  {route:18s}{cells[0]:>26s}{cells[1]:>26s}{first_call[route]:14.1f}{difference:>17s}")


if __name__ == "__main__":
    main()
