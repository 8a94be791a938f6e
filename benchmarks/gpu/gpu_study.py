"""The headline study on one CUDA device, into its own results folder (``make gpu-study``; not in the test suite).

Runs ``simcalib study run`` on ``--study`` (default ``study/offline.yaml``, its benchmarks as the file lists
them; ``--datasets`` to choose) with ``device: cuda`` and ``--workers`` task processes sharing the device,
writing ``--out`` (default ``results/gpu``), and prints, when it ends: the wall time, the runs finished per
minute (distinct runs in the benchmarks' ``results.csv``), the device memory (the largest ``memory.used`` of
``nvidia-smi`` sampled once a second; the study's tasks run in their own processes, so this process's
``torch.cuda.max_memory_allocated`` would not see them) and the utilisation (mean and maximum of those
samples). A GPU pass is another random draw of the protocol (CUDA draws dropout masks from its own
generator): its rows compare with the CPU rows statistically, not bit for bit.

    python benchmarks/gpu/gpu_study.py [--out results/gpu] [--workers 4] [--datasets Cora,Computers]

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


def study_command(study: Path, out: Path, workers: int, datasets: str | None) -> list[str]:
    command = [sys.executable, "-m", "simcalib.cli", "study", "run", str(study), "--output", str(out),
               "--runner", "processes", "--workers", str(workers), "--set", "device=cuda", "--no-report"]
    if datasets:
        command += ["--set", f"benchmarks.datasets=[{datasets}]"]
    return command


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--study", type=Path, default=PROJECT_ROOT / "study" / "offline.yaml")
    parser.add_argument("--out", type=Path, default=PROJECT_ROOT / "results" / "gpu")
    parser.add_argument("--workers", type=int, default=4, help="task processes sharing the device (default 4)")
    parser.add_argument("--datasets", help="comma list (default: the study file's)")
    args = parser.parse_args(argv)
    if (problem := cuda_problem("gpu-study", "run it on a machine with an NVIDIA GPU and a CUDA build of torch")):
        print(problem)
        return NO_CUDA_EXIT
    import torch

    command = study_command(args.study, args.out, args.workers, args.datasets)
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
    print(f"gpu-study: {torch.cuda.get_device_name(0)}, {args.workers} workers: {wall / 60:.1f} min wall, "
          f"{done} runs finished ({done / wall * 60:.2f} runs/min), device memory {memory}, utilisation {util}; "
          f"rows in {args.out}")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
