"""Seconds per calibrator fit with the exact reuses and without them, interleaved in one process on one run.

The reuses (GETS's feature products kept from the early-stopping forward, ``GETS._reuse_products``; the graph
structures built once per graph tensor, :mod:`simcalib.calibrators.graph_cache`) are switched off and on by their
private flags; with them off a fit computes what it computed before they existed. Each repeat fits every
calibrator with the reuses off and on (alternating which goes first), checks that both fits give bit-equal
probabilities on every node, and prints the fit seconds and their medians. One warm-up fit per calibrator first
(untimed): it fills the graph cache, whose cost a benchmark pays once per graph and process.

    SIMCALIB_CACHE_DIR=/tmp/backbones python benchmarks/speed/exact_speedups.py --dataset Cora --backbone GCN \\
        --calibrators GETS,GETS_ap --repeats 3

The backbone is trained (or taken from the backbone cache, $SIMCALIB_CACHE_DIR) first, in this process.
"""

from __future__ import annotations

import argparse
import os
import statistics

os.environ.setdefault("OMP_NUM_THREADS", "1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="Cora")
    parser.add_argument("--backbone", default="GCN")
    parser.add_argument("--run", default="0,0,0", help="split,init,fold")
    parser.add_argument("--calibrators", default="GETS")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--attention", choices=("pyg", "csr"),
                        help="GAT's attention kernel (the studies' backbone.attention; default: the protocol's)")
    parser.add_argument("--no-warm-up", action="store_true",
                        help="no untimed first fit: the first fit with the reuses also builds the graph cache")
    parser.add_argument("--structures", action="store_true",
                        help="instead: seconds to build each graph structure the cache shares (what every fit "
                             "after a graph's first saves), and GETS's feature products per epoch")
    args = parser.parse_args()
    if args.structures:
        structures(args.dataset, args.run, args.repeats)
        return

    import torch

    from simcalib.calibrators import graph_cache
    from simcalib.calibrators.gets import GETS
    from simcalib.experiment.protocol import ProtocolSettings, Run, fit_calibrator, train_run_backbone

    torch.set_num_threads(1)
    split, init, fold = (int(v) for v in args.run.split(","))
    overrides = (("attention", args.attention),) if args.attention and args.backbone.upper() == "GAT" else ()
    run, settings = Run(args.dataset, args.backbone, split, init, fold), ProtocolSettings(backbone_overrides=overrides)
    output = train_run_backbone(run, settings)

    def fitted(name: str, reuse: bool):
        graph_cache._enabled = reuse
        GETS._reuse_products = reuse
        try:
            result = fit_calibrator(run, settings, name, {}, output)
        finally:
            graph_cache._enabled, GETS._reuse_products = True, True
        return result.fit_seconds, result.model.predict_proba(result.graph)

    print(f"{args.dataset} {args.backbone} run {args.run} (backbone {output.epochs} epochs), {args.repeats} repeats, torch threads 1, "
          f"load average {os.getloadavg()[0]:.1f}")
    for name in args.calibrators.split(","):
        if not args.no_warm_up:
            fitted(name, True)  # warm-up: fills the graph cache
        seconds: dict[bool, list[float]] = {False: [], True: []}
        for repeat in range(args.repeats):
            probs = {}
            for reuse in ((False, True) if repeat % 2 == 0 else (True, False)):
                s, probs[reuse] = fitted(name, reuse)
                seconds[reuse].append(s)
            if not torch.equal(probs[False], probs[True]):
                raise SystemExit(f"{name}: the fits with and without the reuses differ")
        off, on = statistics.median(seconds[False]), statistics.median(seconds[True])
        print(f"{name:14s} without {off:8.2f} s  with {on:8.2f} s  ({off / on:.2f}x)  probabilities bit-equal; "
              f"without {[f'{v:.2f}' for v in seconds[False]]} with {[f'{v:.2f}' for v in seconds[True]]}")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


def structures(dataset: str, run_text: str, repeats: int) -> None:
    import time

    import torch

    from simcalib.backbones.models import normalized_adjacency
    from simcalib.backbones.sparse import SparseOperand
    from simcalib.calibrators.gets import GETS_CONFIGS, expert_adjacency
    from simcalib.calibrators.layers import SortedEdges, edges_with_self_loops
    from simcalib.calibrators.wats import wavelet_features
    from simcalib.experiment.protocol import ProtocolSettings, Run, load_graph, run_split
    from simcalib.graph import hop_distance

    torch.set_num_threads(1)
    split, init, fold = (int(v) for v in run_text.split(","))
    settings = ProtocolSettings()
    graph = load_graph(dataset, settings)
    train_idx, _, _ = run_split(Run(dataset, "GCN", split, init, fold), settings, graph).fold_indices(fold)
    n, edge_index, x = graph.num_nodes, graph.edge_index, graph.x.float()
    dense = x.layout == torch.strided
    width = 4 * GETS_CONFIGS.get(dataset, {}).get("feature_dim", 16)  # the four feature experts' W_f
    weight = torch.randn(x.shape[1], width)
    adj = expert_adjacency(edge_index, n, False)
    operand = x if dense else SparseOperand.from_csr(x)
    product = x @ weight if dense else operand.matmul(weight)
    cases = {
        "GETS adjacency (expert_adjacency)": lambda: expert_adjacency(edge_index, n, False),
        "normalised adjacency (CaGCN, GATS, G_feat)": lambda: normalized_adjacency(edge_index, n),
        "sorted edges with self-loops (SimCalib)": lambda: SortedEdges(edges_with_self_loops(edge_index, n), n),
        "hop distances to the training nodes": lambda: hop_distance(edge_index, n, torch.from_numpy(train_idx)),
        "WATS wavelet features (order 2, heat)": lambda: wavelet_features(edge_index, n, 2, 1.2),
        f"GETS X W_f, X [{n}, {x.shape[1]}] {'dense' if dense else 'sparse'} x [{x.shape[1]}, {width}]":
            lambda: x @ weight if dense else operand.matmul(weight),
        f"GETS A (X W_f), [N, {width}]": lambda: adj.matmul(product),
    }
    if not dense:
        cases["GETS sparse X with its transpose"] = lambda: SparseOperand.from_csr(x)
    print(f"{dataset}: {n} nodes, {edge_index.shape[1]} directed edges, median of {repeats}, torch threads 1, "
          f"load average {os.getloadavg()[0]:.1f}")
    for name, build in cases.items():
        seconds = []
        for _ in range(repeats):
            start = time.perf_counter()
            build()
            seconds.append(time.perf_counter() - start)
        print(f"  {name:60s} {1000 * statistics.median(seconds):9.1f} ms")


if __name__ == "__main__":
    main()
