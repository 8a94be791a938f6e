"""What each benchmark of a study costs, and the projected wall time of the whole study.

For each benchmark (dataset x backbone) of the study file, one run (split 0, init 0, fold 0), one torch
thread, in a fresh child process (so that its peak resident memory, VmHWM, is its own):

- the backbone trained from scratch under the GATS rule (an empty temporary cache): seconds per epoch and
  epochs to the early stop (with ``--batch-runs``: the 15 runs of split 0 trained together, and the batch's
  wall time divided by 15 counted per run);
- every calibrator of the study on that backbone: fit seconds and whole-call seconds (fit, predictions and
  metrics);
- the peak resident memory of the process.

The projection for the study: runs per benchmark x (backbone seconds + all calibrator call seconds), summed
over benchmarks, divided by the study's task-runner workers (the processes layout: one run per core, one
torch thread each). It assumes every run costs what run (0, 0, 0) cost and that the cores are otherwise free.

    python benchmarks/bench_study_cost.py [--study study/offline.yaml] [--benchmarks Cora:GCN,...]
        [--out reports/performance/study_cost.jsonl] [--batch-runs]

Each finished benchmark is appended to ``--out`` (JSON lines) at once, and benchmarks already there are
skipped, so the script can be stopped and resumed; ``--table`` prints the table and projection of what the
file holds. The load average before and after each benchmark is recorded beside it: timings taken on a busy
machine are slower than on an idle one.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing as mp
import os
import tempfile
import time
import warnings
from pathlib import Path

from peak_memory import peak_rss_gib  # same folder: run as a script


def _load() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()]




def _measure(study_path: str, dataset: str, backbone: str, batch_runs: bool, queue) -> None:
    import torch

    from simcalib.experiment.protocol import Run, evaluate_calibrator, train_run_backbone
    from simcalib.experiment.study import load_study, plan_study

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    study = load_study(study_path, {"benchmarks": {"datasets": [dataset], "backbones": [backbone]}})
    plan = plan_study(study)[0]
    with tempfile.TemporaryDirectory() as cache:
        settings = dataclasses.replace(study.settings(), cache_dir=cache)
        run = Run(plan.dataset, plan.backbone, 0, 0, 0)
        start = time.perf_counter()
        if batch_runs:
            from simcalib.experiment.protocol import train_split_backbones

            runs = [Run(plan.dataset, plan.backbone, 0, i, f) for i in range(5) for f in range(3)]
            output = train_split_backbones(runs, settings)[0]
        else:
            runs = [run]
            output = train_run_backbone(run, settings)
        backbone_seconds = (time.perf_counter() - start) / len(runs)  # batched: the batch's time per run
        calibrators = {}
        for name, options in plan.calibrators:
            start = time.perf_counter()
            row = evaluate_calibrator(run, settings, name, options, output)
            calibrators[name] = {"fit_seconds": row["fit_seconds"], "call_seconds": time.perf_counter() - start,
                                 "ece": row["ece"]}
    queue.put({
        "dataset": plan.dataset, "backbone": plan.backbone, "trainer": "batched" if batch_runs else "per-run",
        "backbone_seconds": backbone_seconds, "epochs": output.epochs, "best_epoch": output.best_epoch,
        "seconds_per_epoch": backbone_seconds / output.epochs if batch_runs else output.train_seconds / output.epochs, "calibrators": calibrators,
        "peak_rss_gib": peak_rss_gib(), "runs_per_benchmark": study.runs_per_benchmark(),
        "workers": study.spec.task_runner.workers,
    })


def measure(study_path: str, dataset: str, backbone: str, batch_runs: bool) -> dict:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    load_before = _load()
    proc = ctx.Process(target=_measure, args=(study_path, dataset, backbone, batch_runs, queue))
    proc.start()
    result = queue.get()
    proc.join()
    if proc.exitcode != 0:
        raise SystemExit(f"{dataset} {backbone} failed with exit code {proc.exitcode}")
    return {**result, "load_before": load_before, "load_after": _load(),
            "measured_at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}


def run_seconds(row: dict) -> float:
    """Wall seconds of one run of the benchmark: its backbone plus every calibrator call."""
    return row["backbone_seconds"] + sum(c["call_seconds"] for c in row["calibrators"].values())


def print_table(rows: list[dict]) -> None:
    if not rows:
        print("no benchmark measured yet")
        return
    names = list(rows[0]["calibrators"])
    print(f"{'benchmark':<16}{'trainer':>8}{'s/epoch':>9}{'epochs':>7}{'backbone s':>11}{'calib s':>9}"
          f"{'run s':>8}{'peak GiB':>9}  load before -> after")
    for row in rows:
        calib = sum(c["call_seconds"] for c in row["calibrators"].values())
        print(f"{row['dataset'] + ' ' + row['backbone']:<16}{row['trainer']:>8}{row['seconds_per_epoch']:>9.4f}"
              f"{row['epochs']:>7}{row['backbone_seconds']:>11.1f}{calib:>9.1f}{run_seconds(row):>8.1f}"
              f"{row['peak_rss_gib']:>9.2f}  {row['load_before']} -> {row['load_after']}")
    print("\ncalibrator fit seconds (whole call in brackets: fit, predictions, metrics):")
    print(f"{'benchmark':<16}" + "".join(f"{n[:11]:>12}" for n in names))
    for row in rows:
        print(f"{row['dataset'] + ' ' + row['backbone']:<16}"
              + "".join(f"{row['calibrators'][n]['fit_seconds']:>5.1f}({row['calibrators'][n]['call_seconds']:>4.1f})"
                        .rjust(12) for n in names))
    total = sum(row["runs_per_benchmark"] * run_seconds(row) for row in rows)
    workers = rows[0]["workers"]
    print(f"\nprojection for the {len(rows)} benchmarks measured: {total / 3600:.1f} CPU-hours; "
          f"{total / workers / 3600:.1f} h wall on {workers} cores ({workers} worker processes x 1 thread), "
          f"assuming run (0,0,0) is typical and the cores are free")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--study", default="study/offline.yaml")
    parser.add_argument("--benchmarks", default=None, help="comma list like Cora:GCN,Physics:GAT (default: the study's)")
    parser.add_argument("--out", default="reports/performance/study_cost.jsonl")
    parser.add_argument("--batch-runs", action="store_true", help="train the backbone with the batched trainer "
                        "(all 15 runs of split 0 together; the time is that of the batch)")
    parser.add_argument("--table", action="store_true", help="only print the table of what --out holds")
    args = parser.parse_args()
    out = Path(args.out)
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()] if out.is_file() else []
    if not args.table:
        from simcalib.experiment.study import load_study

        study = load_study(args.study)
        wanted = ([tuple(b.split(":")) for b in args.benchmarks.split(",")] if args.benchmarks
                  else study.benchmarks())
        trainer = "batched" if args.batch_runs else "per-run"
        done = {(r["dataset"].lower(), r["backbone"].lower(), r["trainer"]) for r in rows}
        for dataset, backbone in wanted:
            if (dataset.lower(), backbone.lower(), trainer) in done:
                continue
            row = measure(args.study, dataset, backbone, args.batch_runs)
            out.parent.mkdir(parents=True, exist_ok=True)
            with open(out, "a") as fh:
                fh.write(json.dumps(row) + "\n")
            rows.append(row)
            print(f"{dataset} {backbone}: run {run_seconds(row):.1f} s (backbone {row['backbone_seconds']:.1f} s, "
                  f"{row['epochs']} epochs), peak {row['peak_rss_gib']:.2f} GiB", flush=True)
    print_table(rows)


if __name__ == "__main__":
    main()
