"""Speed of the graph calibrators, printed as measurements against their targets.

1. One SimCalib fit, with its w x t grid, on a Physics GCN backbone (target: under 30 s on 2 cores),
   next to the other graph calibrators' fits on the same backbone (CaGCN, GATS, GETS).
2. SimCalib's batched grid on Cora GCN: one fit of all 9 (w, t) points at once vs the 9 points fitted one at
   a time, and vs one GATS fit (target: SimCalib at most 2x GATS).
3. Where one Cora GCN run spends its time: backbone training vs each calibrator's fit.

    .venv/bin/python benchmarks/speed/bench_calibrators.py [--physics-only | --cora-only | --grid-only | --kernels]
        [--threads 2] [--runs 3 --repeats 3]

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
RUN_CALIBRATORS = ["UnCal", "TS", "VS", "ETS", "CaGCN", "GATS", "SimCalib", "SimCalib_l",
                   "SimCalib_m", "SimCalib_h", "SimCalib_r", "SimCalib_n", "Dirichlet", "IRM", "Spline",
                   "OrderInvariant", "GETS"]


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"


def _fit(run, settings, output, name: str, **options):
    """(seconds, fitted calibrator) of one fit, seeded as the protocol seeds it."""
    from simcalib.experiment.protocol import fit_calibrator

    fitted = fit_calibrator(run, settings, name, options, output)
    return fitted.fit_seconds, fitted.model


def physics_simcalib(threads: int) -> None:
    import torch

    from simcalib.experiment.protocol import ProtocolSettings, Run, train_run_backbone

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

    from simcalib.experiment.protocol import ProtocolSettings, Run, train_run_backbone

    torch.set_num_threads(threads)
    settings = ProtocolSettings()
    run = Run("Cora", "GCN", 0, 0, 0)
    return run, settings, train_run_backbone(run, settings)


def cora_grid_speed(threads: int, runs: int = 3, repeats: int = 3) -> None:
    """SimCalib's batched grid against one GATS fit on the same backbones: the fits alternate (GATS, SimCalib,
    GATS, ...) so that whatever else the machine does weighs on both, and the ratio is the median over the
    ``runs`` runs (split 0, init 0, folds 0.. then init 1 ..., then split 1 ...; 75 = every run of the
    benchmark) x ``repeats`` repetitions of the per-pair ratio."""
    import statistics

    from simcalib.experiment.protocol import Run, train_run_backbone

    if not 1 <= runs <= 75:  # before any backbone is trained
        raise SystemExit(f"--runs must be 1..75 (Cora GCN has 5 splits x 5 inits x 3 folds), got {runs}")
    base, settings, _ = _cora_run(threads)
    before = _load()
    ratios, gats_s, simcalib_s, epochs, per_run = [], [], [], [], []
    for index in range(runs):
        run = Run("Cora", "GCN", index // 15, (index // 3) % 5, index % 3)
        output = train_run_backbone(run, settings)
        for _ in range(repeats):
            gats, gats_model = _fit(run, settings, output, "GATS")
            batched, model = _fit(run, settings, output, "SimCalib")
            ratios.append(batched / gats)
            gats_s.append(gats)
            simcalib_s.append(batched)
        epochs.append((model_epochs(model), gats_model.fit_info["epochs"]))
        per_run.append(statistics.median(ratios[-repeats:]))
        print(f"[cora-gcn grid] {run.tag()}: GATS {statistics.median(gats_s[-repeats:]):.2f} s "
              f"({epochs[-1][1]} epochs), SimCalib {statistics.median(simcalib_s[-repeats:]):.2f} s "
              f"({epochs[-1][0]} epochs of its longest point), ratio {per_run[-1]:.2f}x")
    one_at_a_time = sum(_fit(base, settings, train_run_backbone(base, settings), "SimCalib", w=w, t=t)[0]
                        for w, t in model.points)
    print(f"[cora-gcn grid] SimCalib batched grid ({len(model.points)} points) / GATS fit: median "
          f"{statistics.median(ratios):.2f}x over {runs} runs x {repeats} repeats (min {min(ratios):.2f}, max "
          f"{max(ratios):.2f}; target <= 2x); medians GATS {statistics.median(gats_s):.2f} s, SimCalib "
          f"{statistics.median(simcalib_s):.2f} s; the 9 points of {base.tag()} one at a time {one_at_a_time:.2f} s; "
          f"{threads} threads; before: {before}, after: {_load()}")
    print(f"[cora-gcn grid] runs whose median ratio is at most 2x: {sum(r <= 2 for r in per_run)} of {runs}; "
          f"median of the per-run ratios {statistics.median(per_run):.2f}x")


def model_epochs(model) -> int:
    """Epochs of the longest-training point of a fitted SimCalib grid."""
    return max(point["epochs"] for point in model.fit_info["grid"])


def kernel_speed(threads: int) -> None:
    """The softmax over a short class dimension, as the CPU kernel does it over the last dimension and as
    :func:`simcalib.calibrators.layers.log_softmax_classes` does it (class dimension leading)."""
    import torch
    import torch.nn.functional as F

    from simcalib.calibrators.layers import log_softmax_classes

    torch.set_num_threads(threads)

    def micro(fn, x, reps=300) -> float:
        grad = torch.randn_like(x)
        fn(x)
        start = time.perf_counter()
        for _ in range(reps):
            torch.autograd.grad(fn(x), x, grad)
        return (time.perf_counter() - start) / reps * 1e6

    for shape in [(9, 135, 7), (9, 270, 7), (2708, 7), (7650, 8), (34493, 5)]:
        x = torch.randn(*shape, requires_grad=True)
        plain, classes = micro(lambda v: F.log_softmax(v, dim=-1), x), micro(log_softmax_classes, x)
        print(f"[kernels] log_softmax forward+backward {list(shape)}: last dim {plain:.0f} us, classes leading "
              f"{classes:.0f} us ({plain / classes:.1f}x); {_load()}")


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
    group.add_argument("--kernels", action="store_true", help="only the log-softmax kernel micro-benchmark")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2: the target's cores)")
    parser.add_argument("--runs", type=int, default=3, help="Cora GCN runs of the grid-vs-GATS ratio, 1..75 (default 3)")
    parser.add_argument("--repeats", type=int, default=3, help="repetitions per run of that ratio (default 3)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=UserWarning)
    if args.kernels:
        kernel_speed(args.threads)
        return
    if args.grid_only:
        cora_grid_speed(args.threads, args.runs, args.repeats)
        return
    if not args.cora_only:
        physics_simcalib(args.threads)
    if not args.physics_only:
        cora_grid_speed(args.threads, args.runs, args.repeats)
        cora_run_fractions(args.threads)


if __name__ == "__main__":
    main()
