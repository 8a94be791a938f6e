"""Calibrators fitted across the runs of a split vs one run at a time, printed as measurements.

For each benchmark: the runs of one split (5 inits x 3 folds) on the cached per-run backbones; each stackable
calibrator fitted run by run (``simcalib.experiment.protocol.fit_calibrator``, the study's path) and on all runs at once
(``fit_calibrator_across_runs``, ``simcalib benchmark --batch-calibrators``), in one process, one torch thread,
alternating the two paths per calibrator so that load changes hit both. Prints the fit seconds of both (summed
over the runs), the speed-up, the largest test-ECE difference (points) between the two paths' models and how
many runs stopped at another epoch (float rounding on flat plateaus), then the peak RSS. Also times one
SimCalib fit with its grid and with one grid point, the evidence for leaving SimCalib per run.

    .venv/bin/python benchmarks/speed/bench_calibrators_across_runs.py --benchmarks Cora:GCN Cora:GAT [--split 0]
    .venv/bin/python benchmarks/speed/bench_calibrators_across_runs.py --benchmarks Photo:GAT --first-pass

``--first-pass``: the 15 runs of the offline study's first pass (splits 0-4, init 0, folds 0-2) instead of one
split's, so that the large benchmarks use the backbones cached by that pass (runs of one graph need not share
a split to be fitted together).

Backbones missing from the cache are trained first (minutes on the large graphs); uses $SIMCALIB_CACHE_DIR,
$SIMCALIB_DATA_MIRROR and $SIMCALIB_SPLITS_DIR like the CLI.
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

from utils import ru_maxrss_kib  # same folder: run as a script

STACKED = ["TS", "VS", "ETS", "CaGCN", "GATS"]


def ece_on_test_nodes(fitted, labels) -> float:
    """Test ECE (points) of a fitted calibrator (``simcalib.experiment.protocol.FittedCalibrator``)."""
    from simcalib.metrics import compute_metrics

    probs = fitted.model.predict_proba(fitted.graph).cpu()[fitted.test_idx]
    return compute_metrics(probs, labels[fitted.test_idx])["ece"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--benchmarks", nargs="+", default=["Cora:GCN", "Cora:GAT"], metavar="DATASET:BACKBONE")
    parser.add_argument("--split", type=int, default=0)
    parser.add_argument("--first-pass", action="store_true", help="splits 0-4 x init 0 x folds 0-2 (cached large backbones)")
    parser.add_argument("--calibrators", default=",".join(STACKED))
    args = parser.parse_args()

    import torch

    from simcalib.experiment.protocol import (
        ProtocolSettings,
        fit_calibrator,
        fit_calibrator_across_runs,
        load_graph,
        make_runs,
        train_run_backbone,
    )

    warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
    torch.set_num_threads(1)
    settings = ProtocolSettings(cache_dir=os.environ.get("SIMCALIB_CACHE_DIR"))
    which = "splits 0-4 x init 0 x 3 folds" if args.first_pass else f"split {args.split}, 5 inits x 3 folds"
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; one torch thread; {which}; "
          "fit seconds summed over the 15 runs")
    print(f"{'benchmark':<15} {'calibrator':<9} {'one by one s':>12} {'together s':>10} {'speed-up':>8} "
          f"{'max |dECE|':>10} {'other epoch':>11}  load")
    for item in args.benchmarks:
        dataset, backbone = item.split(":")
        runs = (make_runs(dataset, backbone, range(5), [0], range(3)) if args.first_pass
                else make_runs(dataset, backbone, [args.split], range(5), range(3)))
        outputs = [train_run_backbone(run, settings) for run in runs]
        labels = load_graph(dataset, settings).y
        for name in args.calibrators.split(","):
            start = time.perf_counter()
            alone = [fit_calibrator(run, settings, name, None, output) for run, output in zip(runs, outputs)]
            alone_seconds = time.perf_counter() - start
            start = time.perf_counter()
            together = fit_calibrator_across_runs(runs, settings, name, None, outputs)
            together_seconds = time.perf_counter() - start

            differences = [abs(ece_on_test_nodes(a, labels) - ece_on_test_nodes(b, labels)) for a, b in zip(alone, together)]
            other_epoch = sum(a.model.fit_info.get("best_epoch") != b.model.fit_info.get("best_epoch")
                              for a, b in zip(alone, together))
            load = " ".join(f"{v:.1f}" for v in os.getloadavg())
            print(f"{dataset + ' ' + backbone:<15} {name:<9} {alone_seconds:12.2f} {together_seconds:10.2f} "
                  f"{alone_seconds / together_seconds:7.1f}x {max(differences):10.2e} {other_epoch:8d}/15  {load}",
                  flush=True)
        for options, what in (({}, "grid"), ({"w": 0.8, "t": 0.5}, "one point")):
            fitted = fit_calibrator(runs[0], settings, "SimCalib", options, outputs[0])
            epochs = fitted.model.fit_info.get("epochs")
            print(f"{dataset + ' ' + backbone:<15} SimCalib ({what}), run 0: {fitted.fit_seconds:.2f} s, {epochs} epochs, "
                  f"{1000 * fitted.fit_seconds / epochs:.1f} ms/epoch", flush=True)
    peak = ru_maxrss_kib() / 2**20
    print(f"# peak RSS {peak:.2f} GiB")


if __name__ == "__main__":
    main()
