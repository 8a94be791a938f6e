"""GAT epoch time and peak memory: the "csr" attention kernel against torch_geometric's ``GATConv`` ("pyg").

For each dataset, one process builds both GAT backbones from the same seed (hence the same weights) on
the same inputs and times, per repetition, one training step (forward, cross-entropy on 5% of the nodes,
backward, Adam step) and one evaluation forward (``torch.no_grad``) of each kernel, alternating which
kernel goes first, so that a change in the machine's load hits both alike. It prints the median and the
range over the repetitions of the training step, the evaluation forward and their sum (one epoch of
``train_backbone``), and the ratio of the medians (pyg / csr).

``--gcn``: the GCN backbone of the same dataset is timed in the same loop (one more model in the alternation),
so that both backbones of a study are measured under one load; its epoch is printed beside the GAT kernels'.

Peak memory: each kernel trains a few epochs in a fresh child process of its own, which reports its peak
resident set (VmHWM, and ``ru_maxrss``) after loading the graph and at the end, so the two peaks never mix.

    python benchmarks/speed/gat_attention_speed.py [--datasets Cora,Computers,Physics] [--repeats 9]
        [--memory-epochs 3] [--threads 1] [--gcn] [--note "..."]

Uses $SIMCALIB_DATA_MIRROR like the CLI. Timings depend on what else the machine is doing: the load
average is printed before and after each dataset.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
import warnings

from utils import cpu_model, ru_maxrss_kib, vm_hwm_kib  # same folder: run as a script

KERNELS = ("pyg", "csr")
GCN = "gcn"  # the GCN backbone, timed beside the two GAT kernels with --gcn


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def _peak_rss_mib() -> tuple[float, float]:
    """(VmHWM, ru_maxrss) of this process in MiB. ``ru_maxrss`` of a child is at least its parent's resident
    size (:mod:`utils`); VmHWM is the child's own. The parent starts the children before it loads
    anything, so the two agree there."""
    return vm_hwm_kib() / 1024, ru_maxrss_kib() / 1024


def setup_backbone(dataset: str, kernel: str | None = None, seed: int = 0, backbone: str = "GAT", device="cpu"):
    """(model, optimizer, x, graph, y, train_idx) of one ``backbone`` on ``dataset`` on ``device`` (GAT with the
    attention ``kernel``; None: the model's default), Adam as ``train_backbone``, 5% of the nodes to train on."""
    import torch

    from simcalib.backbones.models import BACKBONES
    from simcalib.backbones.training import graph_inputs
    from simcalib.data import load_dataset

    options = {} if kernel is None else {"attention": kernel}
    data = load_dataset(dataset)
    torch.manual_seed(seed)
    model = BACKBONES[backbone](data.num_features, data.num_classes, **options).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    x, graph = graph_inputs(data, backbone, torch.device(device), **options)
    train_idx = torch.randperm(data.num_nodes, generator=torch.Generator().manual_seed(seed))[: data.num_nodes // 20]
    return model, optimizer, x, graph, data.y.to(device), train_idx.to(device)


def _no_sync() -> None:
    pass


def train_step(model, optimizer, x, graph, y, train_idx, sync=_no_sync) -> float:
    """Seconds of one training step (forward, cross-entropy on ``train_idx``, backward, Adam step); ``sync``
    waits for the device before the clock is read (``torch.cuda.synchronize`` on CUDA)."""
    import torch.nn.functional as F

    sync()
    start = time.perf_counter()
    model.train()
    optimizer.zero_grad()
    logits, _ = model(x, graph)
    F.cross_entropy(logits[train_idx], y[train_idx]).backward()
    optimizer.step()
    sync()
    return time.perf_counter() - start


def eval_forward(model, x, graph, sync=_no_sync) -> float:
    """Seconds of one evaluation forward pass (no gradient); ``sync`` as :func:`train_step`."""
    import torch

    sync()
    start = time.perf_counter()
    model.eval()
    with torch.no_grad():
        model(x, graph)
    sync()
    return time.perf_counter() - start


def _memory_child(dataset: str, kernel: str, epochs: int, threads: int) -> None:
    """Runs in a child process: a few epochs of one kernel; prints its peak RSS as one JSON line."""
    import torch

    warnings.filterwarnings("ignore")
    torch.set_num_threads(threads)
    model, optimizer, x, graph, y, train_idx = setup_backbone(dataset, kernel)
    after_setup = _peak_rss_mib()[0]
    for _ in range(epochs):
        train_step(model, optimizer, x, graph, y, train_idx)
        eval_forward(model, x, graph)
    vm_hwm, maxrss = _peak_rss_mib()
    print(json.dumps({"after_setup_mib": after_setup, "peak_mib": vm_hwm, "ru_maxrss_mib": maxrss}))


def _peak_memory(dataset: str, kernel: str, epochs: int, threads: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--memory-child", dataset, kernel, "--memory-epochs", str(epochs),
                          "--threads", str(threads)], capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _summary(seconds: list[float]) -> str:
    ms = [s * 1e3 for s in seconds]
    return f"{statistics.median(ms):8.1f} [{min(ms):6.1f}-{max(ms):6.1f}]"


def _time_dataset(dataset: str, repeats: int, gcn: bool = False) -> dict:
    import torch

    from simcalib.backbones.gat_attention import AttentionGraph

    setups = {kernel: setup_backbone(dataset, kernel) for kernel in KERNELS}
    if gcn:
        setups[GCN] = setup_backbone(dataset, backbone="GCN")
    models = tuple(setups)
    edge_index = setups["pyg"][3]
    start = time.perf_counter()
    AttentionGraph.from_edge_index(edge_index, setups["pyg"][4].numel())
    structure_seconds = time.perf_counter() - start
    with torch.no_grad():  # same seed, same weights: the two kernels compute the same model
        model_pyg, model_csr = setups["pyg"][0].eval(), setups["csr"][0].eval()
        x, graph_pyg, graph_csr = setups["pyg"][2], setups["pyg"][3], setups["csr"][3]
        difference = (model_pyg(x, graph_pyg)[0] - model_csr(x, graph_csr)[0]).abs().max().item()
    for kernel in models:  # warm-up: first-call allocations and library initialisation are not timed
        model, optimizer, x, graph, y, train_idx = setups[kernel]
        train_step(model, optimizer, x, graph, y, train_idx)
        eval_forward(model, x, graph)
    times = {kernel: {"train": [], "eval": [], "epoch": []} for kernel in models}
    for rep in range(repeats):
        for kernel in (models if rep % 2 == 0 else models[::-1]):
            model, optimizer, x, graph, y, train_idx = setups[kernel]
            train = train_step(model, optimizer, x, graph, y, train_idx)
            evaluation = eval_forward(model, x, graph)
            times[kernel]["train"].append(train)
            times[kernel]["eval"].append(evaluation)
            times[kernel]["epoch"].append(train + evaluation)
    return {"times": times, "num_nodes": setups["pyg"][4].numel(), "num_edges": edge_index.size(1),
            "difference": difference, "structure_seconds": structure_seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default="Cora,Computers,Physics")
    parser.add_argument("--repeats", type=int, default=9, help="timed epochs per kernel (alternating)")
    parser.add_argument("--memory-epochs", type=int, default=3, help="epochs of each peak-memory child process")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory child processes")
    parser.add_argument("--gcn", action="store_true", help="also time the dataset's GCN backbone in the same loop")
    parser.add_argument("--note", default="", help="a line about the machine's state, printed in the header")
    parser.add_argument("--memory-child", nargs=2, metavar=("DATASET", "KERNEL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        _memory_child(*args.memory_child, args.memory_epochs, args.threads)
        return

    datasets = args.datasets.split(",")
    # Children first, while this process is small (see _peak_rss_mib).
    peaks = {} if args.no_memory else {(d, k): _peak_memory(d, k, args.memory_epochs, args.threads)
                                       for d in datasets for k in KERNELS}

    import torch

    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    print(f"# python benchmarks/speed/gat_attention_speed.py {shlex.join(sys.argv[1:])}")
    print(f"# {cpu_model()}, {os.cpu_count()} cores; torch {torch.__version__}, {args.threads} torch thread(s); "
          f"{time.strftime('%Y-%m-%d %H:%M %Z')}")
    if args.note:
        print(f"# {args.note}")
    print("# times in ms: median [min-max] over the repetitions; ratio = pyg median / csr median")
    for dataset in datasets:
        load_before = _load()
        result = _time_dataset(dataset, args.repeats, args.gcn)
        times = result["times"]
        print(f"\n{dataset} GAT: {result['num_nodes']} nodes, {result['num_edges']} edges with self-loops; "
              f"{args.repeats} repetitions; load {load_before} -> {_load()}")
        print(f"  eval logits max |pyg - csr| from the same seed: {result['difference']:.2e}; "
              f"the csr kernel's graph structure built in {result['structure_seconds']:.2f} s (once per graph)")
        print(f"  {'':18s}{'pyg':>24s}{'csr':>24s}{'ratio':>8s}")
        for part, label in (("train", "train step"), ("eval", "eval forward"), ("epoch", "epoch (both)")):
            ratio = statistics.median(times["pyg"][part]) / statistics.median(times["csr"][part])
            print(f"  {label:18s}{_summary(times['pyg'][part]):>24s}{_summary(times['csr'][part]):>24s}{ratio:7.2f}x")
        if args.gcn:
            print(f"  {'GCN backbone':18s}" + "".join(f"  {label} {_summary(times[GCN][part])}" for part, label in
                                                       (("train", "train"), ("eval", "eval"), ("epoch", "epoch"))))
        if peaks:
            print(f"  peak RSS in MiB, {args.memory_epochs} epochs in a process of its own per kernel: VmHWM "
                  "(ru_maxrss; after loading the graph and building the model in brackets)")
            for kernel in KERNELS:
                p = peaks[dataset, kernel]
                print(f"    {kernel}: {p['peak_mib']:.0f} ({p['ru_maxrss_mib']:.0f}; [{p['after_setup_mib']:.0f}]), "
                      f"training adds {p['peak_mib'] - p['after_setup_mib']:.0f}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
