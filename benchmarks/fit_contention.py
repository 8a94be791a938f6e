"""Calibrator fit times of one run, fitted by one process alone and by N processes at once on one torch thread each.

The study flow runs two worker processes on the two cores, and its calibrator fits take longer than the same fits
did in the committed rows' ``fit_seconds``. This measures how much of that is the two processes sharing the
machine (memory bandwidth, last-level cache, the frequency of a busy package) rather than the code: the same fits
of the same backbone, alone and as N simultaneous copies, each copy on one core's worth of threads. Run it on an
otherwise idle machine; the load average before each phase is printed beside it.

    python benchmarks/fit_contention.py --dataset Photo --backbone GCN --calibrators GETS,GATS,CaGCN,SimCalib,TS \\
        --copies 1 2 --repeats 2

The backbone is trained (or taken from the backbone cache, $SIMCALIB_CACHE_DIR) first, in this process.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch is imported here or in a spawned copy


def _run(dataset: str, backbone: str, split: int, init: int, fold: int):
    from simcalib.experiment.protocol import ProtocolSettings, Run

    return Run(dataset, backbone, split, init, fold), ProtocolSettings()


def fit_times(dataset: str, backbone: str, split: int, init: int, fold: int, calibrators: list[str],
              repeats: int, start_at: float) -> dict[str, list[float]]:
    """Each calibrator fitted ``repeats`` times on the run's cached backbone: seconds per fit. Waits until
    ``start_at`` (time.time()) so that simultaneous copies start their fits together."""
    import torch

    from simcalib.experiment.protocol import fit_calibrator, train_run_backbone

    torch.set_num_threads(1)
    run, settings = _run(dataset, backbone, split, init, fold)
    output = train_run_backbone(run, settings)  # from the cache the parent filled
    time.sleep(max(0.0, start_at - time.time()))
    seconds: dict[str, list[float]] = {}
    for _ in range(repeats):
        for name in calibrators:
            seconds.setdefault(name, []).append(fit_calibrator(run, settings, name, {}, output).fit_seconds)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="Photo")
    parser.add_argument("--backbone", default="GCN")
    parser.add_argument("--run", default="0,0,0", help="split,init,fold")
    parser.add_argument("--calibrators", default="GETS,GATS,CaGCN,SimCalib,TS")
    parser.add_argument("--copies", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    split, init, fold = (int(x) for x in args.run.split(","))
    calibrators = [c.strip() for c in args.calibrators.split(",") if c.strip()]

    import torch

    from simcalib.experiment.protocol import train_run_backbone

    torch.set_num_threads(1)
    run, settings = _run(args.dataset, args.backbone, split, init, fold)
    start = time.perf_counter()
    output = train_run_backbone(run, settings)
    print(f"# {run.tag()}: backbone ready in {time.perf_counter() - start:.1f} s (its recorded training "
          f"{output.train_seconds:.1f} s); calibrators {', '.join(calibrators)}; {args.repeats} fit(s) each; "
          f"torch {torch.__version__}, {os.cpu_count()} CPUs")
    medians: dict[int, dict[str, float]] = {}
    for copies in args.copies:
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        with ProcessPoolExecutor(copies, mp_context=get_context("spawn")) as pool:
            start_at = time.time() + 20.0  # the copies import torch and load the graph first
            futures = [pool.submit(fit_times, args.dataset, args.backbone, split, init, fold, calibrators,
                                   args.repeats, start_at) for _ in range(copies)]
            results = [f.result() for f in futures]
        medians[copies] = {c: statistics.median(s for r in results for s in r[c]) for c in calibrators}
        per = "  ".join(f"{c} {medians[copies][c]:.2f}" for c in calibrators)
        print(f"{copies} cop{'y' if copies == 1 else 'ies'} at once (load before: {load}): median fit s  {per}")
    if 1 in medians:
        for copies in (c for c in args.copies if c != 1):
            ratio = "  ".join(f"{c} {medians[copies][c] / medians[1][c]:.2f}x" for c in calibrators)
            print(f"{copies} copies against 1: {ratio}")


if __name__ == "__main__":
    main()
