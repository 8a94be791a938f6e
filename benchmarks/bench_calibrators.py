"""Speed of the graph calibrators, printed as measurements (targets of issues #3 and #10).

1. One SimCalib fit, with its w x t grid, on a Physics GCN backbone (target: under 30 s on 2 cores),
   next to the other graph calibrators' fits on the same backbone (CaGCN, GATS, GETS).
2. SimCalib's batched grid on Cora GCN: one fit of all 9 (w, t) points at once vs the 9 points fitted one at
   a time, and vs one GATS fit (target: SimCalib at most 2x GATS).
3. Where one Cora GCN run spends its time: backbone training vs each calibrator's fit.

    .venv/bin/python benchmarks/bench_calibrators.py [--physics-only | --cora-only | --grid-only] [--threads 2]

Backbones come from the shared cache (or are trained and cached first: ~1-2 min for Physics GCN on two
free cores); their training time is the one recorded when they were trained. Uses $SIMCALIB_DATA_MIRROR /
$SIMCALIB_SPLITS_DIR like the CLI. Timings depend on what else the machine does: the load average is
printed next to each measurement.
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

GRAPH_CALIBRATORS = ["CaGCN", "GATS", "GETS", "SimCalib"]
RUN_CALIBRATORS = ["UnCal", "TS", "VS", "ETS", "CaGCN", "GATS", "SimCalib", "SimCalib_separate", "SimCalib_l",
                   "SimCalib_m", "SimCalib_h", "SimCalib_r", "SimCalib_n", "Dirichlet", "IRM", "Spline",
                   "OrderInvariant", "GETS"]


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"


def _fit(run, settings, output, name: str, **options):
    """(seconds, fitted calibrator) of one fit, seeded as the protocol seeds it."""
    from simcalib.calibrators import build_calibrator
    from simcalib.protocol import calibration_graph
    from simcalib.seeding import derive_seed, seed_everything

    graph, _ = calibration_graph(run, settings, output)
    seed_everything(derive_seed(run.seed(settings), name))
    model = build_calibrator(name, graph.num_classes, run.dataset, run.backbone, **options)
    start = time.perf_counter()
    model.fit(graph)
    return time.perf_counter() - start, model


def physics_simcalib(threads: int) -> None:
    import torch

    from simcalib.protocol import ProtocolSettings, Run, train_run_backbone

    torch.set_num_threads(threads)
    settings = ProtocolSettings()
    run = Run("Physics", "GCN", 0, 0, 0)
    start = time.perf_counter()
    output = train_run_backbone(run, settings)
    print(f"[physics-gcn] backbone ready in {time.perf_counter() - start:.1f} s "
          f"(recorded training time {output.train_seconds:.1f} s, {output.epochs} epochs)")
    for name in GRAPH_CALIBRATORS:
        before = _load()
        seconds, model = _fit(run, settings, output, name)
        info = model.fit_info
        extra = ""
        if name == "GETS":
            extra = f"; {info['epochs']} epochs (best {info['best_epoch']})"
        if name == "SimCalib":
            extra = (f"; grid of {len(info['grid'])} points, chosen w={info['w']} t={info['t']}, "
                     f"target < 30 s")
        print(f"[physics-gcn] {name} fit {seconds:.1f} s with {threads} threads{extra}; before: {before}")


def _cora_run(threads: int):
    """(run, settings, backbone output) of Cora GCN split 0, init 0, fold 0, with ``threads`` torch threads."""
    import torch

    from simcalib.protocol import ProtocolSettings, Run, train_run_backbone

    torch.set_num_threads(threads)
    settings = ProtocolSettings()
    run = Run("Cora", "GCN", 0, 0, 0)
    return run, settings, train_run_backbone(run, settings)


def cora_grid_speed(threads: int) -> None:
    run, settings, output = _cora_run(threads)
    before = _load()
    gats, _ = _fit(run, settings, output, "GATS")
    batched, model = _fit(run, settings, output, "SimCalib")
    one_at_a_time = sum(_fit(run, settings, output, "SimCalib", w=w, t=t)[0] for w, t in model.points)
    epochs = max(max(point["epochs"]) for point in model.fit_info["grid"])
    print(f"[cora-gcn grid] GATS fit {gats:.2f} s; SimCalib batched grid ({len(model.points)} points, {epochs} "
          f"epochs) {batched:.2f} s = {batched / gats:.2f}x GATS (target <= 2x); the same points one at a time "
          f"{one_at_a_time:.2f} s ({one_at_a_time / batched:.1f}x the batch); {threads} threads; before: {before}, "
          f"after: {_load()}")


def cora_run_fractions(threads: int) -> None:
    run, settings, output = _cora_run(threads)
    before = _load()
    seconds = {"backbone training": output.train_seconds}
    for name in RUN_CALIBRATORS:
        seconds[name], _ = _fit(run, settings, output, name)
    total = sum(seconds.values())
    print(f"[cora-gcn] one run ({run.tag()}), {total:.1f} s in all with {threads} threads; before: {before}, "
          f"after: {_load()}")
    for part, value in seconds.items():
        print(f"[cora-gcn]   {part:<18} {value:7.2f} s  {100 * value / total:5.1f} %")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--physics-only", action="store_true")
    group.add_argument("--cora-only", action="store_true")
    group.add_argument("--grid-only", action="store_true")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2: the target's cores)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=UserWarning)
    if args.grid_only:
        cora_grid_speed(args.threads)
        return
    if not args.cora_only:
        physics_simcalib(args.threads)
    if not args.physics_only:
        cora_grid_speed(args.threads)
        cora_run_fractions(args.threads)


if __name__ == "__main__":
    main()
