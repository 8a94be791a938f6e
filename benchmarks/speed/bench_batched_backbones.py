"""Backbone training throughput: the 15 runs of a split trained as one batched model vs one at a time.

For each (dataset, backbone, threads) case, in a fresh child process each (so that the peak resident memory,
VmHWM, belongs to that case alone):

- per-run: ``train_backbone`` (the per-run path) for ``--per-run-models`` of the 15 runs of split 0, a fixed
  number of epochs each (early stopping off), one after another;
- batched: ``train_backbones_batched`` for all 15 runs (5 inits x 3 folds of split 0) at once, same epochs.

It prints epochs/s and model-epochs/s (one model-epoch = one training step and one evaluation of one model)
for both and their ratio. Early stopping is off (patience > epochs) so both paths do the same work.

    python benchmarks/speed/bench_batched_backbones.py [--cases cora:gcn,cora:gat,physics:gcn,physics:gat]
        [--threads 1,2] [--epochs 50] [--per-run-models 3] [--batch-sizes 15,3] [--profile]

Uses $SIMCALIB_DATA_MIRROR / $SIMCALIB_SPLITS_DIR like the CLI. Timings depend on what else the machine is
doing: the load average is printed beside each case.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time
import warnings

from utils import peak_rss_gib  # same folder: run as a script


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f}"


def _case(dataset: str, backbone: str, threads: int, epochs: int, mode: str, per_run_models: int, profile: bool,
          models_per_batch: int | None, queue) -> None:
    import torch

    from simcalib.backbones import train_backbone
    from simcalib.backbones.batched import train_backbones_batched
    from simcalib.experiment.protocol import (
        ProtocolSettings,
        backbone_config,
        load_graph,
        make_runs,
        run_split,
    )

    warnings.filterwarnings("ignore")
    torch.set_num_threads(threads)
    settings = ProtocolSettings(backbone_overrides=(("max_epochs", epochs), ("patience", epochs + 1)))
    runs = make_runs(dataset, backbone, splits=[0])
    graph = load_graph(runs[0].dataset, settings)
    split = run_split(runs[0], settings, graph)
    folds = [tuple(torch.from_numpy(i) for i in split.fold_indices(r.fold)[:2]) for r in runs]
    seeds = [r.seed(settings) for r in runs]
    config = backbone_config(runs[0], settings)
    rss_loaded = peak_rss_gib()
    profiler = None
    if profile:
        profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        profiler.__enter__()
    start = time.perf_counter()
    if mode == "batched":
        outputs = train_backbones_batched(graph, folds, seeds, config, device="cpu", models_per_batch=models_per_batch)
        models = len(outputs)
    else:
        models = min(per_run_models, len(runs))
        for m in range(models):
            train_backbone(graph, folds[m][0], folds[m][1], config, seeds[m], device="cpu")
    elapsed = time.perf_counter() - start
    table = None
    if profiler is not None:
        profiler.__exit__(None, None, None)
        table = profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)
    queue.put((models, elapsed, rss_loaded, peak_rss_gib(), table))


def measure(dataset: str, backbone: str, threads: int, epochs: int, mode: str, per_run_models: int,
            profile: bool = False, models_per_batch: int | None = None):
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_case, args=(dataset, backbone, threads, epochs, mode, per_run_models, profile,
                                                models_per_batch, queue))
    proc.start()
    result = queue.get()
    proc.join()
    if proc.exitcode != 0:
        raise SystemExit(f"{dataset} {backbone} {mode} failed with exit code {proc.exitcode}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", default="cora:gcn,cora:gat,physics:gcn,physics:gat")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--per-run-models", type=int, default=3, help="runs timed one at a time (of the 15)")
    parser.add_argument("--batch-sizes", default="15", help="models per batch to time, e.g. 15,5,3 (15: the whole split)")
    parser.add_argument("--profile", action="store_true", help="print torch.profiler's top operators per case")
    args = parser.parse_args()
    print(f"{'case':<14}{'thr':>4}{'path':>9}{'models':>7}{'seconds':>9}{'epochs/s':>10}{'model-ep/s':>11}"
          f"{'peak GiB':>9}  ratio   load")
    for case in args.cases.split(","):
        dataset, backbone = case.split(":")
        for threads in (int(t) for t in args.threads.split(",")):
            per_run_rate = None
            for mode, size in [("per-run", None)] + [("batched", int(b)) for b in args.batch_sizes.split(",")]:
                load = _load()
                models, elapsed, _, peak, table = measure(dataset, backbone, threads, args.epochs, mode,
                                                          args.per_run_models, args.profile, size)
                # per-run: epochs/s of one model at a time; batched: epochs/s of one batch of `size` models
                rate = models * args.epochs / elapsed
                epochs_per_s = rate if mode == "per-run" else rate / min(size, models)
                per_run_rate = per_run_rate or rate
                ratio = f"{rate / per_run_rate:5.2f}x" if mode == "batched" else "      "
                label = mode if mode == "per-run" else f"batch{size}"
                print(f"{case:<14}{threads:>4}{label:>9}{models:>7}{elapsed:>9.2f}{epochs_per_s:>10.2f}"
                      f"{rate:>11.2f}{peak:>9.2f}  {ratio}  {load}", flush=True)
                if table:
                    print(table, flush=True)


if __name__ == "__main__":
    main()
