"""Cost of the ``homophily_bins`` column of a results row on a large graph.

Times (median of ``--repeats``) the local homophily of every node (:func:`simcalib.analysis.homophily.local_homophily`,
once per loaded graph in the study) and the per-row summary of the test nodes
(:func:`simcalib.analysis.homophily.summarise` + JSON), against the metrics every row already computes
(:func:`simcalib.metrics.compute_metrics`) on the same test probabilities (random Dirichlet rows: the cost does
not depend on their values). Test nodes: 85% of the nodes, as in the GATS protocol.

    python benchmarks/homophily_overhead.py [--datasets tolokers,Physics] [--repeats 5] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from simcalib.analysis.homophily import local_homophily, summarise, to_json
from simcalib.data import load_dataset
from simcalib.graph import in_degree
from simcalib.metrics import compute_metrics


def _median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(name: str, repeats: int, rng: np.random.Generator) -> str:
    """One line: the per-graph and per-row costs on ``name``."""
    graph = load_dataset(name)
    n = graph.num_nodes
    test = np.sort(rng.choice(n, int(0.85 * n), replace=False))
    probs = rng.dirichlet(np.ones(graph.num_classes), size=len(test))
    y = graph.y[test].numpy()
    degree = in_degree(graph.edge_index, n)[test]
    node_h = local_homophily(graph.edge_index, graph.y, n)
    per_graph = _median_seconds(lambda: local_homophily(graph.edge_index, graph.y, n), repeats)
    per_row = _median_seconds(lambda: to_json(summarise(probs, y, node_h[test])), repeats)
    metrics = _median_seconds(lambda: compute_metrics(probs, y, degree=degree), repeats)
    return (f"{name}: {n} nodes, {graph.num_edges} directed edges, {len(test)} test nodes | local homophily "
            f"(once per graph) {1000 * per_graph:.1f} ms | homophily_bins per row {1000 * per_row:.1f} ms | "
            f"compute_metrics per row {1000 * metrics:.1f} ms ({100 * per_row / metrics:.1f}% of it)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="tolokers,Physics")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    for name in args.datasets.split(","):
        print(measure(name, args.repeats, rng), flush=True)


if __name__ == "__main__":
    main()
