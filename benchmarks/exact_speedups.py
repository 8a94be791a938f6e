"""Seconds per calibrator fit with the exact reuses and without them, interleaved in one process on one run.

The reuses (GETS's feature products kept from the early-stopping forward, ``GETS._reuse_products``; the graph
structures built once per graph tensor, :mod:`simcalib.calibrators.graph_cache`) are switched off and on by their
private flags; with them off a fit computes what it computed before they existed. Each repeat fits every
calibrator with the reuses off and on (alternating which goes first), checks that both fits give bit-equal
probabilities on every node, and prints the fit seconds and their medians. One warm-up fit per calibrator first
(untimed): it fills the graph cache, whose cost a benchmark pays once per graph and process.

    SIMCALIB_CACHE_DIR=/tmp/backbones python benchmarks/exact_speedups.py --dataset Cora --backbone GCN \\
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
    args = parser.parse_args()

    import torch

    from simcalib.calibrators import graph_cache
    from simcalib.calibrators.gets import GETS
    from simcalib.experiment.protocol import ProtocolSettings, Run, fit_calibrator, train_run_backbone

    torch.set_num_threads(1)
    split, init, fold = (int(v) for v in args.run.split(","))
    run, settings = Run(args.dataset, args.backbone, split, init, fold), ProtocolSettings()
    output = train_run_backbone(run, settings)

    def fitted(name: str, reuse: bool):
        graph_cache._enabled = reuse
        GETS._reuse_products = reuse
        try:
            result = fit_calibrator(run, settings, name, {}, output)
        finally:
            graph_cache._enabled, GETS._reuse_products = True, True
        return result.fit_seconds, result.model.predict_proba(result.graph)

    print(f"{args.dataset} {args.backbone} run {args.run}, {args.repeats} repeats, torch threads 1, "
          f"load average {os.getloadavg()[0]:.1f}")
    for name in args.calibrators.split(","):
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
              f"without {['%.2f' % v for v in seconds[False]]} with {['%.2f' % v for v in seconds[True]]}")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
