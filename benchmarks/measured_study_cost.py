"""What the runs of a study actually cost, read back from a real pass, and what the rest of the study will cost.

`bench_study_cost.py` times one run per benchmark in isolation. This script reads the runs that a study (or
`simcalib benchmark`) has already done instead, so its figures are means over every finished run:

- the backbone of each run, from the backbone cache (``<cache>/backbones/<Dataset>/<Backbone>/*.pt`` stores
  the epochs to the early stop and the training seconds of every backbone trained there);
- each calibrator's fit seconds, from the ``fit_seconds`` column of the benchmark's ``results.csv``.

The projection: for each benchmark of ``--study``, (runs the study asks for - runs finished) x (mean backbone
seconds + sum of the calibrators' mean fit seconds), divided by the study's worker processes. Timings are those
of the machine while the pass ran (other processes included); state the load beside the table.

    python benchmarks/measured_study_cost.py --results reports/offline/results reports/full/results \\
        [--cache .cache/simcalib] [--study study/offline.yaml]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch

RUN_KEYS = ["split", "init", "fold"]


def backbone_costs(cache: Path, dataset: str, backbone: str) -> pd.DataFrame:
    """One row per cached backbone of the benchmark: epochs, training seconds, seconds per epoch."""
    rows = []
    for path in sorted((cache / "backbones" / dataset / backbone).glob("*.pt")):
        saved = torch.load(path, map_location="cpu", weights_only=False)
        if saved.get("epochs"):
            rows.append({"epochs": int(saved["epochs"]), "seconds": float(saved["train_seconds"])})
    frame = pd.DataFrame(rows, columns=["epochs", "seconds"])
    frame["s_per_epoch"] = frame["seconds"] / frame["epochs"].clip(lower=1)
    return frame


def read_results(folders: list[Path]) -> pd.DataFrame:
    frames = [pd.read_csv(p) for folder in folders for p in sorted(folder.rglob("results.csv"))]
    if not frames:
        sys.exit(f"no results.csv below {', '.join(map(str, folders))}")
    rows = pd.concat(frames, ignore_index=True)
    return rows.drop_duplicates(subset=["dataset", "backbone", "calibrator", *RUN_KEYS, "seed"], keep="last")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--results", nargs="+", type=Path, required=True, help="results folders (results.csv below)")
    parser.add_argument("--cache", type=Path, default=Path(".cache/simcalib"), help="backbone cache of the runs")
    parser.add_argument("--study", default="study/offline.yaml", help="the study whose remaining runs are projected")
    args = parser.parse_args()

    from simcalib.study import load_study

    study = load_study(args.study)
    names = [c.name for c in study.calibrators]
    runs_asked = study.runs_per_benchmark()
    rows = read_results(args.results)
    header = (f"{'benchmark':<15} {'runs':>4} {'backbones':>9} {'s/epoch':>8} {'epochs':>7} {'backbone s':>10} "
              f"{'calib s':>8} {'run s':>7}  per calibrator: mean fit s")
    print(header)
    remaining_total, measured_total = 0.0, 0
    for dataset, backbone in study.benchmarks():
        mine = rows[(rows["dataset"] == dataset) & (rows["backbone"] == backbone) & rows["calibrator"].isin(names)]
        # a run is finished when every calibrator of the study has its row
        per_run = mine.groupby(RUN_KEYS)["calibrator"].nunique()
        done = int((per_run == len(names)).sum())
        costs = backbone_costs(args.cache, dataset, backbone)
        fits = mine.groupby("calibrator")["fit_seconds"].mean().reindex(names)
        if costs.empty or fits.isna().all():
            print(f"{dataset + ' ' + backbone:<15} {done:>4} {len(costs):>9}  not measured (no cached backbone or no rows)")
            continue
        backbone_s = costs["seconds"].mean()
        calib_s = float(np.nansum(fits.to_numpy()))
        run_s = backbone_s + calib_s
        remaining_total += max(runs_asked - done, 0) * run_s
        measured_total += 1
        per = " ".join(f"{n}={v:.1f}" for n, v in fits.items() if np.isfinite(v))
        print(f"{dataset + ' ' + backbone:<15} {done:>4} {len(costs):>9} {costs['s_per_epoch'].mean():>8.3f} "
              f"{costs['epochs'].mean():>7.0f} {backbone_s:>10.1f} {calib_s:>8.1f} {run_s:>7.1f}  {per}")
    workers = study.spec.task_runner.workers
    print(f"\nremaining runs of {args.study} on the {measured_total} benchmarks measured: "
          f"{remaining_total / 3600:.1f} CPU-hours, {remaining_total / workers / 3600:.1f} h wall on {workers} "
          f"worker processes (mean run cost of the finished runs; cores otherwise free)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
