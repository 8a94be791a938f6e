"""AutoCal's fit against one fit of each of its candidates, on the same backbone in one process.

For each benchmark (``Dataset:Backbone``), run s0 i0 f0's backbone (from the cache, else trained), then, repeated
``--repeats`` times and interleaved: AutoCal's fit (``parts`` cross-fits of every candidate and the chosen one's
refit) and one fit of each candidate, each seeded as the protocol seeds it. Printed per benchmark: the median CPU
seconds of AutoCal, of each candidate and of the candidates summed, their ratio, and the ratio expected if AutoCal
cost were only its fits (``parts`` x the candidates summed + the chosen one's fit), with the load average beside.
CPU seconds (``time.process_time``) of this one-thread process, so other work on the machine inflates them less
than wall time.

    python benchmarks/speed/autocal_cost.py --benchmarks Cora:GCN Photo:GCN chameleon_filtered:GCN --repeats 3 \
        --generated-splits
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path


def _fit_cpu_seconds(run, settings, output, name: str):
    from simcalib.experiment.protocol import fit_calibrator

    start = time.process_time()
    fitted = fit_calibrator(run, settings, name, {}, output)
    return time.process_time() - start, fitted.model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmarks", nargs="+", default=["Cora:GCN"], metavar="DATASET:BACKBONE")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--generated-splits", action="store_true",
                        help="splits drawn from the seed where no fixed GATS file is found (the heterophilous graphs)")
    args = parser.parse_args(argv)

    import torch

    from simcalib.calibrators.autocal import DEFAULT_CANDIDATES
    from simcalib.experiment.protocol import ProtocolSettings, Run, train_run_backbone

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from utils import cpu_model

    torch.set_num_threads(args.threads)
    print(f"command: python benchmarks/speed/autocal_cost.py {' '.join(sys.argv[1:] if argv is None else argv)}")
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores, torch threads {args.threads}")
    settings = ProtocolSettings(generated_splits=args.generated_splits)
    for benchmark in args.benchmarks:
        dataset, backbone = benchmark.split(":")
        run = Run(dataset, backbone, 0, 0, 0)
        output = train_run_backbone(run, settings)
        seconds: dict[str, list[float]] = {name: [] for name in ("AutoCal", *DEFAULT_CANDIDATES)}
        parts, chosen = None, None
        for _ in range(args.repeats):
            for name in seconds:
                spent, model = _fit_cpu_seconds(run, settings, output, name)
                seconds[name].append(spent)
                if name == "AutoCal":
                    parts, chosen = model.parts, model.selected
        median = {name: statistics.median(values) for name, values in seconds.items()}
        summed = sum(median[name] for name in DEFAULT_CANDIDATES)
        expected = parts * summed + median[chosen]
        load = " ".join(f"{v:.2f}" for v in os.getloadavg())
        print(f"{dataset} {backbone} (s0 i0 f0, {args.repeats} repeats, load average {load}): AutoCal "
              f"{median['AutoCal']:.2f} s CPU (chose {chosen}); candidates " +
              ", ".join(f"{n} {median[n]:.2f}" for n in DEFAULT_CANDIDATES) +
              f"; summed {summed:.2f} s; AutoCal / summed {median['AutoCal'] / summed:.2f} "
              f"(its fits alone: {parts} x summed + {chosen} = {expected:.2f} s, ratio {expected / summed:.2f})",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
