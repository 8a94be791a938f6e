"""GCN backbone training with the shared first layer and without it, interleaved in one process on one run per graph.

The shared first layer (:mod:`simcalib.backbones.first_layer`: the early-stopping forward's X^(1) taken by the next
training forward) is switched off and on by its private flag ``SharedFirstLayer._reuse_first_layer``; with it off a
training computes what it computed before the flag existed. Each repeat trains the run's GCN with the reuse off
and on (alternating which goes first) on the CPU with one torch thread, checks that both give bit-equal logits and
hidden layers, the same kept and last epochs and validation numbers, and prints the CPU seconds
(``time.process_time``) and wall seconds per epoch, then the medians. The backbone digest is compared with the
committed rows' ``backbone_digest`` of that run when a results.csv is given (``--results``, one
``<Dataset>_GCN/results.csv`` per graph; a digest differs where the committed backbone trained on another CPU
model, see ``reports/offline/provenance.yaml``). Exit status 1 if a pair differs or a digest differs.

    python benchmarks/speed/gcn_shared_first_layer.py --datasets Cora,Pubmed --repeats 2 \\
        --results reports/offline/results
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")


def committed_digest(results: Path | None, dataset: str, split: int, init: int, fold: int) -> str | None:
    path = None if results is None else results / f"{dataset}_GCN" / "results.csv"
    if path is None or not path.exists():
        return None
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            if (row["split"], row["init"], row["fold"]) == (str(split), str(init), str(fold)) and row["backbone_digest"]:
                return row["backbone_digest"]
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default="Cora")
    parser.add_argument("--run", default="0,0,0", help="split,init,fold")
    parser.add_argument("--repeats", type=int, default=1, help="pairs (off, on) per graph")
    parser.add_argument("--results", type=Path, default=None, help="folder of <Dataset>_GCN/results.csv")
    parser.add_argument("--epochs", type=int, default=None,
                        help="train this many epochs (max_epochs and patience) instead of the protocol's early "
                             "stopping: for timing repeats; the committed digest is then not compared")
    parser.add_argument("--only-on", action="store_true",
                        help="one training with the reuse per graph (its digest against the committed row), no pair")
    args = parser.parse_args()

    import torch

    from simcalib.backbones.first_layer import SharedFirstLayer
    from simcalib.backbones.training import train_backbone
    from simcalib.experiment.protocol import (
        ProtocolSettings,
        Run,
        backbone_config,
        backbone_digest,
        load_graph,
        run_split,
    )

    torch.set_num_threads(1)
    split, init, fold = (int(v) for v in args.run.split(","))
    settings = ProtocolSettings()
    failed = False
    print(f"GCN run {args.run}, {args.repeats} pair(s) per graph, "
          f"{'early stopping' if args.epochs is None else f'{args.epochs} epochs'}, torch threads 1, device cpu, "
          f"load average {' '.join(f'{v:.1f}' for v in os.getloadavg())}", flush=True)
    for dataset in args.datasets.split(","):
        run = Run(dataset, "GCN", split, init, fold)
        graph = load_graph(dataset, settings)
        train_idx, cal_idx, _ = run_split(run, settings, graph).fold_indices(fold)
        train_idx, cal_idx = torch.as_tensor(train_idx), torch.as_tensor(cal_idx)
        config, seed = backbone_config(run, settings), run.seed(settings)
        if args.epochs is not None:
            config = dataclasses.replace(config, max_epochs=args.epochs, patience=args.epochs)
        per_epoch: dict[bool, dict[str, list[float]]] = {r: {"cpu": [], "wall": []} for r in (False, True)}
        outputs = {}
        for repeat in range(1 if args.only_on else args.repeats):
            for reuse in ((True,) if args.only_on else (False, True) if repeat % 2 == 0 else (True, False)):
                SharedFirstLayer._reuse_first_layer = reuse
                try:
                    cpu, wall = time.process_time(), time.perf_counter()
                    out = train_backbone(graph, train_idx, cal_idx, config, seed, device="cpu")
                    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
                finally:
                    SharedFirstLayer._reuse_first_layer = True
                per_epoch[reuse]["cpu"].append(cpu / out.epochs)
                per_epoch[reuse]["wall"].append(wall / out.epochs)
                print(f"{dataset:10s} reuse {'on ' if reuse else 'off'}  epochs {out.epochs:4d} (kept {out.best_epoch:4d})"
                      f"  cpu {cpu:8.2f} s  wall {wall:8.2f} s  cpu/epoch {1e3 * cpu / out.epochs:8.2f} ms"
                      f"  wall/epoch {1e3 * wall / out.epochs:8.2f} ms  digest {backbone_digest(out)}"
                      f"  load {os.getloadavg()[0]:.1f}", flush=True)
                previous = outputs.setdefault(reuse, out)
                outputs[reuse] = out
                if not torch.equal(previous.logits, out.logits):
                    print(f"{dataset}: two trainings with reuse {reuse} differ (not deterministic)")
                    failed = True
        on = outputs[True]
        stored = None if args.epochs is not None else committed_digest(args.results, dataset, split, init, fold)
        digest = backbone_digest(on)
        same_stored = "no committed row" if stored is None else ("equal" if stored == digest else f"DIFFERS ({stored})")
        failed |= stored is not None and stored != digest
        if args.only_on:
            print(f"{dataset:10s} SUMMARY reuse on only: digest {digest}, committed row: {same_stored}", flush=True)
            continue
        off = outputs[False]
        equal = (torch.equal(off.logits, on.logits) and torch.equal(off.hidden, on.hidden)
                 and (off.best_epoch, off.epochs, off.val_accuracy, off.val_nll)
                 == (on.best_epoch, on.epochs, on.val_accuracy, on.val_nll))
        failed |= not equal
        cpu_off, cpu_on = (statistics.median(per_epoch[r]["cpu"]) for r in (False, True))
        wall_off, wall_on = (statistics.median(per_epoch[r]["wall"]) for r in (False, True))
        print(f"{dataset:10s} SUMMARY outputs {'bit-equal' if equal else 'DIFFER'} (logits, hidden, kept epoch "
              f"{on.best_epoch}, epochs {on.epochs}, val accuracy, val NLL); digest {digest}, committed row: "
              f"{same_stored}; median per epoch off -> on: cpu {1e3 * cpu_off:.2f} -> {1e3 * cpu_on:.2f} ms "
              f"({cpu_on / cpu_off:.3f}), wall {1e3 * wall_off:.2f} -> {1e3 * wall_on:.2f} ms ({wall_on / wall_off:.3f})",
              flush=True)
    print(f"load average at the end {' '.join(f'{v:.1f}' for v in os.getloadavg())}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
