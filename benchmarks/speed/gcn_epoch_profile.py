"""Where a GCN backbone epoch spends its time: ``torch.profiler`` over a short training, beside each product alone.

One process, one torch thread. Three measurements on the same run (default Computers GCN split 0 init 0 fold 0,
its fixed split, the protocol's backbone settings):

1. **The epoch in the trainer**: :func:`~simcalib.backbones.training.train_backbone` with ``max_epochs`` =
   ``--epochs`` (every epoch a training step and an evaluation forward, as in the study), wall seconds per
   epoch from its ``train_seconds`` and the process's CPU seconds (``time.process_time``) per epoch; repeated
   ``--repeats`` times, the medians printed. On a shared machine the two differ by the time spent waiting for
   a core.
2. **The profile**: the same training under ``torch.profiler`` (CPU, ``record_shapes``), the operators by self
   CPU time (the sparse products' ``aten::_sparse_csr_mm``/``addmm``, dropout's ``rand_like``, ``log_softmax``,
   the index ops, Adam's ``_foreach`` ops, the autograd bookkeeping), per epoch.
3. **The products alone**: each product and elementwise pass of one epoch timed in isolation (median of
   ``--repeats`` x 10 calls), with its floating-point operations and the bytes it must move at least (the
   sparse matrix's values and indices once, its dense operand and its output once), so the epoch's
   compute-bound and bandwidth-bound floors can be set beside the measured epoch.
4. **X's products in two other layouts**: CSR with int32 indices (the kernel converts int64 indices to int32
   on every call) and a dense X, CPU time and whether the result is bit-equal to the CSR product used.

``torch.profiler``'s times are the thread's wall time inside each operator (a wait for a core included).

    python benchmarks/speed/gcn_epoch_profile.py --dataset Computers --epochs 30 --repeats 3 \\
        --out reports/performance/gcn_epoch_profile.txt
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import time
from contextlib import redirect_stdout

os.environ.setdefault("OMP_NUM_THREADS", "1")


def median_seconds(fn, repeats: int, inner: int = 10) -> tuple[float, float]:
    """(wall, CPU) seconds per call: medians over ``repeats`` rounds of ``inner`` calls."""
    fn()  # warm-up
    wall, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        for _ in range(inner):
            fn()
        wall.append((time.perf_counter() - start) / inner)
        cpu.append((time.process_time() - start_cpu) / inner)
    return statistics.median(wall), statistics.median(cpu)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="Computers")
    parser.add_argument("--run", default="0,0,0", help="split,init,fold")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--top", type=int, default=25, help="operators listed in the profile table")
    parser.add_argument("--out", help="also write the output here")
    args = parser.parse_args(argv)
    buffer = io.StringIO()
    with redirect_stdout(buffer):
        profile(args)
    text = buffer.getvalue()
    sys.stdout.write(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)


def profile(args) -> None:
    import dataclasses

    import torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    from simcalib.backbones.models import GCN
    from simcalib.backbones.sparse import fast_dropout
    from simcalib.backbones.training import graph_inputs, train_backbone
    from simcalib.experiment.protocol import ProtocolSettings, Run, backbone_config, load_graph, run_split

    torch.set_num_threads(1)
    split, init, fold = (int(v) for v in args.run.split(","))
    settings = ProtocolSettings()
    run = Run(args.dataset, "GCN", split, init, fold)
    graph = load_graph(run.dataset, settings)
    train_idx, cal_idx, _ = (torch.from_numpy(a) for a in run_split(run, settings, graph).fold_indices(fold))
    config = dataclasses.replace(backbone_config(run, settings), max_epochs=args.epochs, patience=10**6)
    print(f"# python benchmarks/speed/gcn_epoch_profile.py {' '.join(sys.argv[1:])}")
    print(f"# load average at start {os.getloadavg()[0]:.2f}; torch {torch.__version__}, threads "
          f"{torch.get_num_threads()}; {run.tag()}; {config}")

    # 1. the epoch in the trainer
    epoch_ms, epoch_cpu_ms = [], []
    for _ in range(args.repeats):
        start_cpu = time.process_time()
        output = train_backbone(graph, train_idx, cal_idx, config, run.seed(settings), "cpu")
        epoch_cpu_ms.append(1000 * (time.process_time() - start_cpu) / output.epochs)  # set-up included
        epoch_ms.append(1000 * output.train_seconds / output.epochs)
    trainer_ms, trainer_cpu_ms = statistics.median(epoch_ms), statistics.median(epoch_cpu_ms)
    print(f"\n## 1. trainer: {args.epochs} epochs, ms per epoch (training step + evaluation forward) over "
          f"{args.repeats} trainings: wall {', '.join(f'{m:.1f}' for m in epoch_ms)} (median {trainer_ms:.1f}); "
          f"CPU of the process {', '.join(f'{m:.1f}' for m in epoch_cpu_ms)} (median {trainer_cpu_ms:.1f}, the "
          f"set-up spread over the epochs included); wall / CPU {trainer_ms / trainer_cpu_ms:.2f}")

    # 2. the profile: a training of --epochs epochs less a training of 1 epoch (the set-up: sparse transposes,
    # the normalised adjacency, the first allocations), per remaining epoch
    def profiled(epochs: int):
        with torch_profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            out = train_backbone(graph, train_idx, cal_idx, dataclasses.replace(config, max_epochs=epochs),
                                 run.seed(settings), "cpu")
        return out, prof

    def by_key(prof, shapes: bool) -> dict:
        table = {}
        for e in prof.key_averages(group_by_input_shape=shapes):
            key = (e.key, str(e.input_shapes)) if shapes else e.key
            count, self_us = table.get(key, (0, 0.0))
            table[key] = (count + e.count, self_us + e.self_cpu_time_total)
        return table

    output, long_prof = profiled(args.epochs)
    _, short_prof = profiled(1)
    per = output.epochs - 1
    print(f"\n## 2. torch.profiler: a {output.epochs}-epoch training less a 1-epoch training (its set-up), per "
          f"epoch ({1000 * output.train_seconds / output.epochs:.1f} ms per epoch under the profiler); self CPU ms "
          f"per epoch by operator, the top {args.top}")
    for shapes in (False, True):
        long, short = by_key(long_prof, shapes), by_key(short_prof, shapes)
        diff = {k: ((c - short.get(k, (0, 0.0))[0]) / per, (t - short.get(k, (0, 0.0))[1]) / 1000 / per)
                for k, (c, t) in long.items()}
        total = sum(t for _, t in diff.values())
        if not shapes:
            print(f"{'operator':<44} {'calls/epoch':>11} {'self ms/epoch':>13} {'share':>6}")
            for key, (calls, ms) in sorted(diff.items(), key=lambda kv: kv[1][1], reverse=True)[:args.top]:
                print(f"{key[:44]:<44} {calls:>11.1f} {ms:>13.2f} {ms / total:>6.1%}")
            print(f"{'all operators':<44} {'':>11} {total:>13.2f}")
            set_up = sum(t for _, t in short.values()) / 1000 - total
            print(f"the set-up (the 1-epoch training less one epoch): {set_up:.0f} ms once per training")
        else:
            print("\nthe products and copies by input shapes (self CPU ms per epoch, >= 0.5 ms):")
            for (key, shape), (calls, ms) in sorted(diff.items(), key=lambda kv: kv[1][1], reverse=True):
                if ms >= 0.5 and key in ("aten::addmm", "aten::mm", "aten::copy_", "aten::index", "aten::mul"):
                    print(f"  {key:<14} {shape[:80]:<80} {calls:>5.1f} calls {ms:>8.2f} ms")

    # 3. the products alone
    x, adj = graph_inputs(graph, "GCN", torch.device("cpu"))
    torch.manual_seed(0)
    model = GCN(graph.num_features, graph.num_classes)
    n, f = x.matrix.shape
    h_dim, k = model.weight1.shape[1], model.weight2.shape[1]
    nnz_x, nnz_a = x.matrix.values().numel(), adj.matrix.values().numel()
    xw = torch.sparse.mm(x.matrix, model.weight1.detach())
    hidden = torch.relu(torch.sparse.mm(adj.matrix, xw))
    g_h = torch.randn(n, h_dim)
    hw2 = hidden @ model.weight2.detach()
    g_k = torch.randn(n, k)

    def csr_bytes(nnz: int, rows: int) -> int:
        return nnz * (4 + 8) + (rows + 1) * 8  # float32 values, int64 columns and rows

    items = [  # (name, per epoch, function, flops, minimum bytes)
        ("X W1 (sparse [N,F] x [F,64])", 2, lambda: torch.sparse.mm(x.matrix, model.weight1.detach()),
         2 * nnz_x * h_dim, csr_bytes(nnz_x, n) + f * h_dim * 4 + n * h_dim * 4),
        ("A (X W1) (sparse [N,N] x [N,64])", 2, lambda: torch.sparse.mm(adj.matrix, xw),
         2 * nnz_a * h_dim, csr_bytes(nnz_a, n) + 2 * n * h_dim * 4),
        ("A^T grad (backward, [N,N] x [N,64])", 1, lambda: torch.sparse.mm(adj.transpose, g_h),
         2 * nnz_a * h_dim, csr_bytes(nnz_a, n) + 2 * n * h_dim * 4),
        ("X^T grad (backward, [F,N] x [N,64])", 1, lambda: torch.sparse.mm(x.transpose, g_h),
         2 * nnz_x * h_dim, csr_bytes(nnz_x, f) + n * h_dim * 4 + f * h_dim * 4),
        ("h W2 (dense [N,64] x [64,K])", 2, lambda: hidden @ model.weight2.detach(),
         2 * n * h_dim * k, (n * h_dim + n * k) * 4),
        ("A (h W2) (sparse [N,N] x [N,K])", 2, lambda: torch.sparse.mm(adj.matrix, hw2),
         2 * nnz_a * k, csr_bytes(nnz_a, n) + 2 * n * k * 4),
        ("A^T grad (backward, [N,N] x [N,K])", 1, lambda: torch.sparse.mm(adj.transpose, g_k),
         2 * nnz_a * k, csr_bytes(nnz_a, n) + 2 * n * k * 4),
        ("grad W2, grad h (dense backward)", 1, lambda: (hidden.t() @ g_k, g_k @ model.weight2.detach().t()),
         4 * n * h_dim * k, (2 * n * h_dim + n * k) * 4),
        ("dropout on [N,64] (rand_like, >=, two *)", 1, lambda: fast_dropout(hidden, 0.5, True),
         4 * n * h_dim, 4 * n * h_dim * 4),
        ("relu + bias on [N,64] (forward)", 2, lambda: torch.relu(xw + model.bias1.detach()),
         2 * n * h_dim, 3 * n * h_dim * 4),
        ("log_softmax + NLL on the labelled rows", 2, lambda: F.cross_entropy(hw2[train_idx], graph.y[train_idx]),
         0, 0),
    ]
    print(f"\n## 3. each product alone (median of {args.repeats} x 10 calls), N={n}, F={f}, nnz(X)={nnz_x} "
          f"({nnz_x / (n * f):.1%} dense), nnz(A_hat)={nnz_a}")
    print("(rates from the CPU time: GFLOP/s = the pass's floating-point operations / its CPU seconds; GB/s = the "
          "bytes it must move at least / its CPU seconds)")
    print(f"{'pass':<44} {'per epoch':>9} {'wall ms':>8} {'CPU ms':>7} {'CPU ms/epoch':>12} {'GFLOP/s':>8} "
          f"{'GB/s (min)':>10}")
    isolated = isolated_cpu = 0.0
    for name, per_epoch, fn, flops, nbytes in items:
        seconds, cpu = median_seconds(fn, args.repeats)
        isolated += per_epoch * seconds
        isolated_cpu += per_epoch * cpu
        rate = f"{flops / cpu / 1e9:8.2f}" if flops else f"{'':>8}"
        band = f"{nbytes / cpu / 1e9:10.2f}" if nbytes else f"{'':>10}"
        print(f"{name:<44} {per_epoch:>9} {1000 * seconds:>8.2f} {1000 * cpu:>7.2f} {1000 * per_epoch * cpu:>12.2f} "
              f"{rate} {band}")
    print(f"{'sum of the passes alone':<44} {'':>9} {1000 * isolated:>8.1f} {'':>7} {1000 * isolated_cpu:>12.2f}")
    print(f"\nthe trainer's epoch: wall {trainer_ms:.1f} ms against the passes alone {1000 * isolated:.1f} ms "
          f"({trainer_ms / (1000 * isolated):.2f}x); CPU {trainer_cpu_ms:.1f} ms against {1000 * isolated_cpu:.1f} ms "
          f"({trainer_cpu_ms / (1000 * isolated_cpu):.2f}x)")

    # 4. two other layouts of X's products: int32 indices (what the CSR kernel converts int64 indices to on each
    # call: the copies of X's and A_hat's indices in the profile) and a dense X
    m = x.matrix
    m32 = torch.sparse_csr_tensor(m.crow_indices().int(), m.col_indices().int(), m.values(), m.shape,
                                  check_invariants=False)
    t = x.transpose
    t32 = torch.sparse_csr_tensor(t.crow_indices().int(), t.col_indices().int(), t.values(), t.shape,
                                  check_invariants=False)
    dense = m.to_dense()
    w1 = model.weight1.detach()
    print(f"\n## 4. X's products in other layouts (CPU ms per call, median of {args.repeats} x 10 calls)")
    print(f"{'product':<22} {'CSR int64 (used)':>16} {'CSR int32':>10} {'dense X':>8}  int32 bit-equal  dense bit-equal "
          f"(max abs difference)")
    for name, csr, csr32, full in (("X W1", lambda: torch.sparse.mm(m, w1), lambda: torch.sparse.mm(m32, w1),
                                     lambda: dense @ w1),
                                    ("X^T grad", lambda: torch.sparse.mm(t, g_h), lambda: torch.sparse.mm(t32, g_h),
                                     lambda: dense.t() @ g_h)):
        times = [1000 * median_seconds(fn, args.repeats)[1] for fn in (csr, csr32, full)]
        reference = csr()
        print(f"{name:<22} {times[0]:>16.2f} {times[1]:>10.2f} {times[2]:>8.2f}  {str(torch.equal(reference, csr32())):>15}"
              f"  {str(torch.equal(reference, full())):>15} ({(reference - full()).abs().max().item():.2e})")
    print(f"# load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
