"""The headline study on one CUDA device, into its own results folder (``make gpu-study``; not in the test suite).

Runs ``simcalib study run`` on ``--study`` (default ``study/offline.yaml``, its benchmarks as the file lists
them; ``--datasets`` to choose) with ``device: cuda``, a task per run (``task_runner.granularity: run``, what
``auto`` gives on CUDA) and ``--runs-per-device`` K runs in flight on each device (``task_runner.runs_per_device``:
the flow's task runner gets devices x K worker processes), GAT backbones on the kernel chosen for the device
(``backbone.attention: auto``: GATConv), writing ``--out`` (default ``results/gpu``), and prints, when it ends:
the wall time, the runs finished per
minute (distinct runs in the benchmarks' ``results.csv``), the device memory (the largest ``memory.used`` of
``nvidia-smi`` sampled once a second; the study's tasks run in their own processes, so this process's
``torch.cuda.max_memory_allocated`` would not see them) and the utilisation (mean and maximum of those
samples). A GPU pass is another random draw of the protocol (CUDA draws dropout masks from its own
generator): its rows compare with the CPU rows statistically, not bit for bit.

    python benchmarks/gpu/gpu_study.py [--out results/gpu] [--runs-per-device 4] [--datasets Cora,Computers]

Without a CUDA device: one line, exit status 2.
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lease_measure import NO_CUDA_EXIT, PROJECT_ROOT, DeviceSampler, cuda_problem  # noqa: E402


def runs_finished(out: Path) -> int:
    """Distinct runs (dataset, backbone, split, init, fold) with a row in any results.csv under ``out``."""
    runs = set()
    for path in out.rglob("results.csv"):
        with path.open(newline="") as handle:
            for row in csv.DictReader(handle):
                runs.add((row["dataset"], row["backbone"], row["split"], row["init"], row["fold"]))
    return len(runs)


def study_command(study: Path, out: Path, runs_per_device: int, datasets: str | None) -> list[str]:
    command = [sys.executable, "-m", "simcalib.cli", "study", "run", str(study), "--output", str(out),
               "--runner", "processes", "--set", "device=cuda", "--set", "task_runner.granularity=run",
               "--set", f"task_runner.runs_per_device={runs_per_device}", "--set", "backbone.attention=auto",
               "--no-report"]
    if datasets:
        command += ["--set", f"benchmarks.datasets=[{datasets}]"]
    return command


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--study", type=Path, default=PROJECT_ROOT / "study" / "offline.yaml")
    parser.add_argument("--out", type=Path, default=PROJECT_ROOT / "results" / "gpu")
    parser.add_argument("--runs-per-device", type=int, default=4,
                        help="runs in flight on each device, each in its own task process (default 4)")
    parser.add_argument("--datasets", help="comma list (default: the study file's)")
    args = parser.parse_args(argv)
    if (problem := cuda_problem("gpu-study", "run it on a machine with an NVIDIA GPU and a CUDA build of torch")):
        print(problem)
        return NO_CUDA_EXIT
    import torch

    command = study_command(args.study, args.out, args.runs_per_device, args.datasets)
    print("gpu-study: " + " ".join(command), flush=True)
    before = runs_finished(args.out) if args.out.exists() else 0
    start = time.perf_counter()
    with DeviceSampler() as sampler:
        status = subprocess.run(command, cwd=PROJECT_ROOT).returncode
    wall = time.perf_counter() - start
    done = runs_finished(args.out) - before
    stats = sampler.summary()
    memory = "n/a" if stats["memory_used_max_mib"] is None else f"{stats['memory_used_max_mib']:.0f} MiB"
    util = "n/a" if stats["utilisation_mean"] is None else \
        f"{stats['utilisation_mean']:.0f}% mean, {stats['utilisation_max']:.0f}% max"
    print(f"gpu-study: {torch.cuda.get_device_name(0)} x {torch.cuda.device_count()}, "
          f"{args.runs_per_device} runs in flight per device: {wall / 60:.1f} min wall, "
          f"{done} runs finished ({done / wall * 60:.2f} runs/min), device memory {memory}, utilisation {util}; "
          f"rows in {args.out}")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
