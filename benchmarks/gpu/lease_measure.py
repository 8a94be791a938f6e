"""Throughput of the headline study on one device, measured inside a short device lease.

One command does the whole measurement within ``--budget-seconds`` (default 300 s of cells, counted once the
workers are up; with the install, the workers' start and a cell that overruns its share, one device call of
about 6 minutes, so a rerun still fits in 15 minutes of device time):

1. **torch with CUDA**: checked; where it is missing, :func:`install_commands` gives the pip lines, which are
   printed, run (``--install``) and timed.
2. **A sample of runs of every benchmark** of the study file (``--runs``, default 6, the first runs of each
   benchmark's plan, with ``backbone: {attention: auto}``: GATConv on CUDA), each run one unit of the library's
   schedule (:class:`simcalib.experiment.schedule.Schedule` with ``granularity: run``; its backbone trained on the
   device, then every calibrator of the study fitted and evaluated there), with K runs in flight per device for
   each K of ``--k`` (default 1,4,8, the study's ``task_runner.runs_per_device``): the schedule gives each run a
   device index in turn, never more than K on a device, and a pool of devices x K worker processes computes them.
   A fresh backbone cache and results folder per (benchmark, K) cell, so every backbone is trained. Each cell gets an equal share of the time left; once its share is
   spent no further run of the cell starts (its first K runs always start), and the cell's throughput is its
   finished runs over its wall time. Every K is measured on a benchmark before the next benchmark; a cell
   whose turn comes after the budget is skipped and named in the report.
3. **Runs per minute** per benchmark and K, device memory (``torch.cuda.max_memory_allocated`` per worker)
   and utilisation (``nvidia-smi`` sampled once a second, where present), CUDA MPS as found (used where its
   daemon runs, never required), and the whole study's projected
   wall time on one device: for each K, the sum over benchmarks of (the benchmark's runs in the study) /
   (its runs per minute), against one hour.

The report goes to ``--out`` (default ``reports/performance/gpu/``): ``lease_measure.txt`` and
``lease_measure.json`` (one record per cell).

``--dry-run-cpu --fake-devices N`` runs the same code paths on CPU (workers assigned to N devices named
``cpu``), for checking the script before a lease::

    python benchmarks/gpu/lease_measure.py --dry-run-cpu --fake-devices 1 --runs 1 --k 1 --benchmarks Cora:GCN \
        --calibrators TS --max-epochs 5 --out /tmp/lease

Without a CUDA device and without ``--dry-run-cpu``: one line, exit status 2. Uses $SIMCALIB_DATA_MIRROR and
$SIMCALIB_SPLITS_DIR like the CLI.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing as mp
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
if str(PROJECT_ROOT) not in sys.path:  # the checkout's simcalib in the spawned workers too
    sys.path.insert(0, str(PROJECT_ROOT))
DEFAULT_OUT = PROJECT_ROOT / "reports" / "performance" / "gpu"
NO_CUDA_EXIT = 2
TORCH_VERSION = "2.13.0"
CUDA_INDEX = "https://download.pytorch.org/whl/cu130"
HOUR_MINUTES = 60.0


def install_commands(python: str = sys.executable) -> list[list[str]]:
    """The pip lines that give this interpreter torch with CUDA and the project (printed before they run)."""
    return [[python, "-m", "pip", "install", "-q", f"torch=={TORCH_VERSION}", "--index-url", CUDA_INDEX],
            [python, "-m", "pip", "install", "-q", "-e", str(PROJECT_ROOT)]]


def cuda_problem(prefix: str = "lease-measure",
                 hint: str = "use --install on a machine with an NVIDIA GPU, or --dry-run-cpu to check the script "
                             "here") -> str | None:
    """None when torch sees a CUDA device; else the one-line reason."""
    try:
        import torch
    except ImportError:
        return f"{prefix}: torch is not installed; {hint}"
    if torch.version.cuda is None:
        return f"{prefix}: no CUDA device (torch {torch.__version__} is a CPU-only build); {hint}"
    if not torch.cuda.is_available():
        return f"{prefix}: no CUDA device visible to torch {torch.__version__} (CUDA {torch.version.cuda}); " \
               "check nvidia-smi and CUDA_VISIBLE_DEVICES"
    return None


def ensure_torch(install: bool, log) -> float:
    """Seconds spent installing (0 when torch already sees CUDA or ``install`` is False)."""
    if cuda_problem() is None or not install:
        return 0.0
    start = time.perf_counter()
    for command in install_commands():
        log("install: " + " ".join(command))
        subprocess.run(command, check=True)
    return time.perf_counter() - start


def device_of(index: int, devices: int, cpu: bool) -> str:
    """The device of the ``index``-th run in flight: the schedule hands device indices out in turn."""
    return "cpu" if cpu else f"cuda:{index % devices}"


# ---- worker processes -------------------------------------------------------------------------------------------

def _init_worker(threads: int, cuda: bool) -> None:
    import torch

    torch.set_num_threads(threads)
    if cuda:
        for index in range(torch.cuda.device_count()):
            torch.zeros(1, device=f"cuda:{index}")  # CUDA contexts created here, not charged to the first run
    import simcalib.experiment.plan  # noqa: F401  (the library's imports, not charged to the first run either)
    import simcalib.experiment.schedule  # noqa: F401


def _ready(_: int) -> int:
    """A no-op task that holds its worker half a second, so that every worker of a pool starts."""
    time.sleep(0.5)
    return os.getpid()


def run_task(unit) -> dict:
    """One run unit (its backbone, then every calibrator) on the unit's device, timed; the unit's result with the
    timings."""
    import torch

    from simcalib.experiment.schedule import compute_unit, unit_settings

    device = unit_settings(unit).device
    cuda = device.startswith("cuda")
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    result = compute_unit(unit)
    sync()
    (stats,) = result["backbones"]
    return {**result, "seconds": time.perf_counter() - start, "backbone_seconds": stats["train_seconds"],
            "epochs": stats["epochs"], "calibrators": len(unit.calibrators), "device": device, "pid": os.getpid(),
            "torch_threads": torch.get_num_threads(),
            "max_memory_mib": torch.cuda.max_memory_allocated(device) / 2**20 if cuda else None}


def sample_plan(study: Path, dataset: str, backbone: str, runs: int, device: str, options: dict):
    """The first ``runs`` runs of the benchmark's plan on ``device`` (``attention: auto``), the chosen calibrators,
    backbone epochs capped by ``options["max_epochs"]`` when given."""
    from simcalib.experiment.plan import plan_one_benchmark

    plan = plan_one_benchmark(study, dataset, backbone, overrides={"device": device, "backbone": {"attention": "auto"}})
    settings = plan.settings
    if options.get("max_epochs"):
        overrides_now = dict(settings.backbone_overrides) | {"max_epochs": options["max_epochs"]}
        settings = dataclasses.replace(settings, backbone_overrides=tuple(sorted(overrides_now.items())))
    chosen = tuple(c for c in plan.calibrators if not options.get("calibrators") or c.name in options["calibrators"])
    return dataclasses.replace(plan, settings=settings, runs=plan.runs[:runs], seeds=plan.seeds[:runs],
                               calibrators=chosen)


# ---- device sampling --------------------------------------------------------------------------------------------

class DeviceSampler:
    """``nvidia-smi`` utilisation and memory once a second while a cell runs (nothing where it is absent)."""

    QUERY = ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits"]

    def __init__(self, period: float = 1.0):
        self.period, self.samples, self._stop = period, [], threading.Event()
        self.available = shutil.which("nvidia-smi") is not None
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                out = subprocess.run(self.QUERY, capture_output=True, text=True, timeout=5).stdout.split("\n")[0]
                util, memory = (float(v) for v in out.split(","))
                self.samples.append((util, memory))
            except (OSError, ValueError, subprocess.SubprocessError):
                pass
            self._stop.wait(self.period)

    def __enter__(self):
        if self.available:
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self.available:
            self._thread.join()

    def summary(self) -> dict:
        if not self.samples:
            return {"utilisation_mean": None, "utilisation_max": None, "memory_used_max_mib": None}
        utils = [u for u, _ in self.samples]
        return {"utilisation_mean": sum(utils) / len(utils), "utilisation_max": max(utils),
                "memory_used_max_mib": max(m for _, m in self.samples)}


# ---- the measurement --------------------------------------------------------------------------------------------

def study_benchmarks(study: Path, chosen: list[str] | None) -> list[tuple[str, str, int]]:
    """(dataset, backbone, runs in the study) of the study's benchmarks, or of ``chosen`` (``Cora:GCN`` or
    ``Cora`` for both backbones) among them."""
    from simcalib.experiment.plan import plan_study
    from simcalib.experiment.study import load_study

    plan = plan_study(load_study(study))
    every = [(b.dataset, b.backbone, len(b.runs)) for b in plan.benchmarks]
    if not chosen:
        return every
    picked = [b for b in every if any(c.lower() in (b[0].lower(), f"{b[0]}:{b[1]}".lower()) for c in chosen)]
    unknown = [c for c in chosen if not any(c.lower() in (b[0].lower(), f"{b[0]}:{b[1]}".lower()) for b in every)]
    if unknown:
        raise SystemExit(f"lease-measure: --benchmarks {', '.join(unknown)} not in {study.name}; choose from "
                         f"{', '.join(f'{d}:{b}' for d, b, _ in every)}")
    return picked


def measure_cell(pool, sampler_cls, plan, k: int, devices: int, seconds: float) -> dict:
    """Runs of the sample ``plan`` as run units of the library's schedule, K in flight per device, until every run
    is done or ``seconds`` are spent (no run starts after that; the first ones always start)."""
    from simcalib.experiment.schedule import Schedule, device_layout

    with tempfile.TemporaryDirectory(prefix="lease-cell-") as folder, sampler_cls() as sampler:
        cell_plan = dataclasses.replace(plan, out_dir=Path(folder) / "results",
                                        settings=dataclasses.replace(plan.settings, cache_dir=str(Path(folder) / "cache")))
        layout = device_layout(plan.settings.device, "run", runs_per_device=k, devices=devices)
        schedule = Schedule([cell_plan], layout)
        start = time.perf_counter()
        pending, results = {}, []
        while True:
            if time.perf_counter() - start < seconds or not results and not pending:
                pending.update({pool.apply_async(run_task, (unit,)): unit for unit in schedule.submit()})
            if not pending:
                break
            done = [p for p in pending if p.ready()]
            for p in done:
                result = p.get()
                schedule.finished(pending.pop(p), result)  # rows through the ledger into the cell's results.csv
                results.append(result)
            if not done:
                time.sleep(0.05)
        wall = time.perf_counter() - start
    memories = [r["max_memory_mib"] for r in results if r["max_memory_mib"] is not None]
    return {"dataset": plan.dataset, "backbone": plan.backbone, "k": k, "runs_planned": len(plan.runs),
            "runs_done": len(results), "wall_seconds": wall,
            "runs_per_minute": len(results) / wall * 60 if wall > 0 else None,
            "run_seconds_mean": sum(r["seconds"] for r in results) / len(results),
            "backbone_seconds_mean": sum(r["backbone_seconds"] for r in results) / len(results),
            "epochs_mean": sum(r["epochs"] for r in results) / len(results),
            "devices_used": sorted({r["device"] for r in results}),
            "max_memory_mib": max(memories) if memories else None, **sampler.summary()}


def project(cells: list[dict], benchmarks: list[tuple[str, str, int]]) -> dict:
    """For each K measured on every benchmark: the study's projected minutes on one device, and the best K per
    benchmark (its highest runs per minute) combined."""
    by = {(c["dataset"], c["backbone"], c["k"]): c for c in cells if c["runs_per_minute"]}
    ks = sorted({c["k"] for c in cells})
    out = {}
    for k in ks:
        if all((d, b, k) in by for d, b, _ in benchmarks):
            out[f"K={k}"] = sum(n / by[(d, b, k)]["runs_per_minute"] for d, b, n in benchmarks)
    if all(any((d, b, k) in by for k in ks) for d, b, _ in benchmarks):
        out["best K per benchmark"] = sum(n / max(by[(d, b, k)]["runs_per_minute"] for k in ks if (d, b, k) in by)
                                          for d, b, n in benchmarks)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--study", type=Path, default=PROJECT_ROOT / "study" / "offline.yaml")
    parser.add_argument("--benchmarks", help="comma list, e.g. Cora:GCN,Physics (default: every benchmark of the study)")
    parser.add_argument("--runs", type=int, default=6, help="sample of runs per benchmark and K (default 6)")
    parser.add_argument("--k", default="1,4,8", help="runs in flight per device (task_runner.runs_per_device), comma "
                                                     "list (default 1,4,8)")
    parser.add_argument("--budget-seconds", type=float, default=300.0,
                        help="time for all the cells together (default 300); each cell gets an equal share of what "
                             "is left, a cell whose turn comes after the budget is skipped")
    parser.add_argument("--calibrators", help="comma subset of the study's calibrators (default: all)")
    parser.add_argument("--max-epochs", type=int, help="cap backbone epochs (dry runs only)")
    parser.add_argument("--install", action="store_true", help="install torch with CUDA when it is missing")
    parser.add_argument("--dry-run-cpu", action="store_true", help="the same code paths on CPU, no CUDA needed")
    parser.add_argument("--fake-devices", type=int, default=1, help="with --dry-run-cpu: devices to spread workers over")
    parser.add_argument("--threads", type=int, help="torch threads per worker (default: cores / K)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    began = time.perf_counter()
    lines: list[str] = []

    def log(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    try:
        ks = sorted({int(v) for v in args.k.split(",") if v.strip()})
    except ValueError:
        print(f"lease-measure: --k expects a comma list of integers, got {args.k!r}", file=sys.stderr)
        return NO_CUDA_EXIT
    if not ks or min(ks) < 1 or args.runs < 1 or args.fake_devices < 1:
        print("lease-measure: --k values, --runs and --fake-devices must be at least 1", file=sys.stderr)
        return NO_CUDA_EXIT
    install_seconds = 0.0 if args.dry_run_cpu else ensure_torch(args.install, log)
    if not args.dry_run_cpu and (problem := cuda_problem()) is not None:
        print(problem)
        return NO_CUDA_EXIT
    import torch

    devices = args.fake_devices if args.dry_run_cpu else torch.cuda.device_count()
    device_name = "cpu (dry run)" if args.dry_run_cpu else torch.cuda.get_device_name(0)
    benchmarks = study_benchmarks(args.study, [b.strip() for b in args.benchmarks.split(",")] if args.benchmarks
                                  else None)
    options = {"calibrators": [c.strip() for c in args.calibrators.split(",")] if args.calibrators else None,
               "max_epochs": args.max_epochs}
    log(f"lease-measure: {device_name} x {devices}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
        f"{platform.node()}, {time.strftime('%Y-%m-%d %H:%M:%S')}")
    log(f"install: {install_seconds:.1f} s" + ("" if install_seconds else " (torch with CUDA already present)"
                                                if not args.dry_run_cpu else " (dry run)"))
    log(f"study {args.study.name}: {len(benchmarks)} benchmarks, {sum(n for *_, n in benchmarks)} runs; sample "
        f"{args.runs} runs per benchmark and K, K in {ks}, budget {args.budget_seconds:.0f} s")
    from simcalib.experiment.schedule import mps_status

    log(f"devices: runs in flight spread over {devices} device(s) in turn: "
        f"{', '.join(device_of(w, devices, args.dry_run_cpu) for w in range(max(ks) * devices))}; "
        f"{'CUDA MPS not used (dry run)' if args.dry_run_cpu else mps_status()}")
    device = "cpu" if args.dry_run_cpu else "cuda"
    cells: list[dict] = []
    skipped: list[str] = []
    context = mp.get_context("spawn")  # CUDA in the workers: never fork a process that holds a context
    cores = os.cpu_count() or 1
    total_cells = len(ks) * len(benchmarks)
    pools = {}
    try:
        for k in ks:  # one pool of devices x K workers per K, alive for the whole measurement (spawned once)
            workers = devices * k
            threads = args.threads or max(1, cores // workers)
            pools[k] = context.Pool(workers, initializer=_init_worker, initargs=(threads, not args.dry_run_cpu))
        warm = time.perf_counter()
        for k, pool in pools.items():  # every worker started and initialised before the first cell
            pool.map(_ready, range(devices * k), chunksize=1)
        log(f"workers: {sum(devices * k for k in ks)} started in {time.perf_counter() - warm:.1f} s (spawn, CUDA "
            "context, imports)")
        cells_began = time.perf_counter()  # the budget is the cells'
        for dataset, backbone, _ in benchmarks:  # every K on one benchmark before the next benchmark
            plan = sample_plan(args.study, dataset, backbone, args.runs, device, options)
            for k in ks:
                left = args.budget_seconds - (time.perf_counter() - cells_began)
                if left <= 0:
                    skipped.append(f"{dataset}:{backbone} K={k}")
                    continue
                share = left / (total_cells - len(cells) - len(skipped))
                cell = measure_cell(pools[k], DeviceSampler, plan, k, devices, share)
                cells.append(cell)
                log(f"  K={k} {dataset:<10}{backbone:<4} {cell['runs_done']}/{args.runs} runs in "
                    f"{cell['wall_seconds']:6.1f} s: {cell['runs_per_minute']:6.2f} runs/min; run "
                    f"{cell['run_seconds_mean']:.1f} s (backbone {cell['backbone_seconds_mean']:.1f} s, "
                    f"{cell['epochs_mean']:.0f} epochs); memory {_mib(cell['max_memory_mib'])}, "
                    f"util {_pct(cell['utilisation_mean'])} mean / {_pct(cell['utilisation_max'])} max")
    finally:
        for pool in pools.values():
            pool.terminate()
            pool.join()
    if skipped:
        log(f"skipped for the budget: {', '.join(skipped)}")
    projection = project(cells, benchmarks)
    log("projected wall time of the whole study on one device:")
    for key, minutes in projection.items():
        verdict = "within" if minutes <= HOUR_MINUTES else "over"
        log(f"  {key}: {minutes:.1f} min ({verdict} one hour)")
    log(f"measurement: {time.perf_counter() - began:.1f} s")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "lease_measure.txt").write_text("\n".join(lines) + "\n")
    (args.out / "lease_measure.json").write_text(json.dumps(
        {"device": device_name, "devices": devices, "torch": torch.__version__, "install_seconds": install_seconds,
         "study": args.study.name, "benchmarks": [list(b) for b in benchmarks], "k": ks, "cells": cells,
         "projected_minutes": projection, "skipped": skipped, "command": sys.argv}, indent=1) + "\n")
    return 0


def _mib(value) -> str:
    return "n/a" if value is None else f"{value:.0f} MiB"


def _pct(value) -> str:
    return "n/a" if value is None else f"{value:.0f}%"


if __name__ == "__main__":
    raise SystemExit(main())
