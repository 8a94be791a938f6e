"""Speed and memory of the foundation, printed as measurements against their targets.

1. The 75 Cora-GCN runs of the protocol with UnCal, TS, VS and ETS, from an empty backbone cache
   (target: under 5 minutes on 2 cores).
2. Peak resident memory while training one Physics GAT backbone (target: under 6 GB), measured in a
   child process so that the peak belongs to that training alone.

    .venv/bin/python benchmarks/speed/bench_foundation.py [--runs-only | --memory-only] [--epochs N] [--workers N]

The runs go through ``run_benchmark(..., workers=N)`` as ``simcalib benchmark --workers N`` does (default: one
process per core, one torch thread each).

Uses $SIMCALIB_DATA_MIRROR / $SIMCALIB_SPLITS_DIR like the CLI (the Makefile sets them). Timings depend on
what else the machine is doing: the script prints the load average next to each measurement.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import tempfile
import time
import warnings

from utils import ru_maxrss_kib  # same folder: run as a script


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"


def time_cora_gcn(threads: int, workers: int) -> None:
    import torch

    from simcalib.experiment.executor import BenchmarkRequest, run_benchmark
    from simcalib.experiment.protocol import ProtocolSettings
    from simcalib.store.results_store import summarize

    torch.set_num_threads(1 if workers > 1 else threads)
    with tempfile.TemporaryDirectory() as tmp:
        settings = ProtocolSettings(cache_dir=f"{tmp}/cache")
        request = BenchmarkRequest("Cora", "GCN", ["UnCal", "TS", "VS", "ETS"])
        load_before = _load()
        start = time.perf_counter()
        results = run_benchmark(request, settings, f"{tmp}/out", workers=workers)
        elapsed = time.perf_counter() - start
    print(f"[cora-gcn] {results[['split', 'init', 'fold']].drop_duplicates().shape[0]} runs x 4 calibrators "
          f"in {elapsed:.1f} s ({elapsed / 60:.2f} min; target < 5 min) with "
          f"{f'{workers} worker processes x 1 thread' if workers > 1 else f'{threads} threads'}; before: {load_before}, after: {_load()}")
    fit = results.groupby("calibrator")["fit_seconds"].sum()
    print("[cora-gcn] calibrator fit seconds (sum over runs): " + ", ".join(f"{k} {v:.1f}" for k, v in fit.items()))
    summary = summarize(results).set_index("calibrator")
    print("[cora-gcn] ECE mean: " + ", ".join(f"{k} {v:.2f}" for k, v in summary["ece_mean"].items()))


def _train_physics_gat(epochs: int, queue) -> None:
    import torch

    from simcalib.backbones import BackboneConfig, train_backbone
    from simcalib.experiment.protocol import ProtocolSettings, Run, load_graph, run_split

    warnings.filterwarnings("ignore")
    settings = ProtocolSettings()
    run = Run("Physics", "GAT", 0, 0, 0)
    graph = load_graph("Physics", settings)
    train_idx, cal_idx, _ = run_split(run, settings, graph).fold_indices(0)
    rss_loaded = ru_maxrss_kib() / 2**20
    config = BackboneConfig("GAT", weight_decay=0.0, max_epochs=epochs)
    out = train_backbone(graph, torch.from_numpy(train_idx), torch.from_numpy(cal_idx), config, seed=0, device="cpu")
    peak = ru_maxrss_kib() / 2**20  # KiB -> GiB
    queue.put((rss_loaded, peak, out.epochs, out.train_seconds))


def physics_gat_memory(epochs: int) -> None:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_train_physics_gat, args=(epochs, queue))
    proc.start()
    proc.join()
    if proc.exitcode != 0:
        raise SystemExit(f"Physics GAT training failed with exit code {proc.exitcode}")
    rss_loaded, peak, n_epochs, seconds = queue.get()
    print(f"[physics-gat] peak RSS {peak:.2f} GiB (target < 6 GB; {rss_loaded:.2f} GiB after loading the graph), "
          f"{n_epochs} epochs in {seconds:.1f} s = {seconds / n_epochs:.3f} s/epoch; {_load()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs-only", action="store_true")
    parser.add_argument("--memory-only", action="store_true")
    parser.add_argument("--epochs", type=int, default=50, help="Physics GAT epochs (the peak is reached in the first)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads (one process)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="runs in parallel processes, one thread each (default: one per core; 1: --threads)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    if not args.memory_only:
        time_cora_gcn(args.threads, args.workers)
    if not args.runs_only:
        physics_gat_memory(args.epochs)


if __name__ == "__main__":
    main()
