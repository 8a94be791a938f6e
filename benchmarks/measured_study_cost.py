"""What the runs of a study actually cost, read back from a real pass, and what the rest of the study will cost.

`bench_study_cost.py` times one run per benchmark in isolation. This script reads the runs that a study (or
`simcalib benchmark`) has already done instead, so its figures are means over every finished run:

- the backbone of each run, from the backbone cache (``<cache>/backbones/<Dataset>/<Backbone>/*.pt`` stores
  the epochs to the early stop and the training seconds of every backbone trained there);
- each calibrator's fit seconds, from the ``fit_seconds`` column of the benchmark's ``results.csv``.

The projection: for each benchmark of ``--study``, (runs the study asks for - runs finished) x (mean backbone
seconds + sum of the calibrators' mean fit seconds), divided by the study's worker processes. Timings are those
of the machine while the pass ran (other processes included); state the load beside the table.

``--across-runs``: outputs of ``bench_calibrators_across_runs.py``. Each line there measures one calibrator's fit
seconds over 15 runs of one benchmark, one run at a time and fitted across the runs (``--batch-calibrators``);
their ratio scales that calibrator's mean fit seconds here, giving the "after" columns and projection. Only
measured pairs are scaled: a calibrator or benchmark without a line keeps its per-run cost (the table says how
many of the benchmark's calibrators were scaled), so the "after" projection never assumes a gain.

    python benchmarks/measured_study_cost.py --results reports/archive/offline_constant_branch/results reports/archive/full/results \\
        [--cache .cache/simcalib] [--study study/offline.yaml] \\
        [--across-runs reports/performance/calibrators_across_runs_*.txt]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import torch

RUN_KEYS = ["split", "init", "fold"]
# a measurement line of bench_calibrators_across_runs.py: benchmark, calibrator, one-by-one s, together s, speed-up
ACROSS_RUNS_LINE = re.compile(r"^(?P<dataset>\S+) (?P<backbone>\S+)\s+(?P<calibrator>\S+)\s+(?P<alone>[\d.]+)\s+"
                              r"(?P<together>[\d.]+)\s+[\d.]+x\s")


def read_across_runs(paths: list[Path]) -> dict[tuple[str, str, str], float]:
    """(dataset, backbone, calibrator) -> fit seconds together / one by one, from the benchmark's outputs."""
    ratios = {}
    for path in paths:
        for line in path.read_text().splitlines():
            match = ACROSS_RUNS_LINE.match(line)
            if match and float(match["alone"]) > 0:
                key = (match["dataset"], match["backbone"], match["calibrator"])
                ratios[key] = float(match["together"]) / float(match["alone"])
    if paths and not ratios:
        sys.exit(f"no measurement line of bench_calibrators_across_runs.py in {', '.join(map(str, paths))}")
    return ratios


def backbone_costs(cache: Path, dataset: str, backbone: str, digests: set[str]) -> pd.DataFrame:
    """One row per cached backbone of the benchmark: epochs, training seconds, seconds per epoch.

    The cache also holds backbones of other studies on the same graph (e.g. the label-rate sweep, whose backbones
    train on fewer labels): where any cached backbone's logits digest is among ``digests`` (the study's rows),
    only those count; ``matched`` says which rule applied.
    """
    from simcalib.experiment.protocol import backbone_digest

    rows = []
    for path in sorted((cache / "backbones" / dataset / backbone).glob("*.pt")):
        saved = torch.load(path, map_location="cpu", weights_only=False)
        if saved.get("epochs"):
            digest = backbone_digest(SimpleNamespace(logits=saved["logits"]))
            rows.append({"epochs": int(saved["epochs"]), "seconds": float(saved["train_seconds"]),
                         "matched": digest in digests})
    frame = pd.DataFrame(rows, columns=["epochs", "seconds", "matched"])
    if frame["matched"].any():
        frame = frame[frame["matched"]]
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
    parser.add_argument("--digests", nargs="*", type=Path, default=[],
                        help="more results folders whose backbone_digest values name the study's backbones in the cache "
                             "(rows of the same runs computed on this machine, e.g. reports/archive/simcalib_joint)")
    parser.add_argument("--across-runs", nargs="*", type=Path, default=[],
                        help="outputs of bench_calibrators_across_runs.py: the 'after' (--batch-calibrators) columns")
    args = parser.parse_args()

    from simcalib.experiment.study import load_study

    study = load_study(args.study)
    names = [c.name for c in study.calibrators]
    runs_asked = study.runs_per_benchmark()
    rows = read_results(args.results)
    ratios = read_across_runs(args.across_runs)
    digest_rows = pd.concat([rows, *(read_results([f]) for f in args.digests)], ignore_index=True)
    digests = set(digest_rows.get("backbone_digest", pd.Series(dtype=str)).dropna().astype(str))
    after_header = f" {'calib s after':>13} {'run s after':>11} {'scaled':>6}" if ratios else ""
    header = (f"{'benchmark':<15} {'runs':>4} {'backbones':>9} {'s/epoch':>8} {'epochs':>7} {'backbone s':>10} "
              f"{'calib s':>8} {'run s':>7}{after_header}  per calibrator: mean fit s")
    print(header)
    measured: list[tuple[int, float, float]] = []  # per benchmark: runs done, run seconds before and after
    unmatched = False
    for dataset, backbone in study.benchmarks():
        mine = rows[(rows["dataset"] == dataset) & (rows["backbone"] == backbone) & rows["calibrator"].isin(names)]
        # a run is finished when every calibrator of the study has its row
        per_run = mine.groupby(RUN_KEYS)["calibrator"].nunique()
        done = int((per_run == len(names)).sum())
        costs = backbone_costs(args.cache, dataset, backbone, digests)
        fits = mine.groupby("calibrator")["fit_seconds"].mean().reindex(names)
        if costs.empty or fits.isna().all():
            print(f"{dataset + ' ' + backbone:<15} {done:>4} {len(costs):>9}  not measured (no cached backbone or no rows)")
            continue
        backbone_s = costs["seconds"].mean()
        calib_s = float(np.nansum(fits.to_numpy()))
        run_s = backbone_s + calib_s
        run_after, after = run_s, ""
        if ratios:
            scaled = {n: v * ratios[(dataset, backbone, n)] for n, v in fits.items()
                      if np.isfinite(v) and (dataset, backbone, n) in ratios}
            calib_after = calib_s - sum(fits[n] for n in scaled) + sum(scaled.values())
            run_after = backbone_s + calib_after
            after = f" {calib_after:>13.1f} {run_after:>11.1f} {len(scaled):>3}/{len(names):<2}"
        measured.append((done, run_s, run_after))
        per = " ".join(f"{n}={v:.1f}" for n, v in fits.items() if np.isfinite(v))
        matched = bool(costs["matched"].all())
        unmatched |= not matched
        backbones = f"{len(costs)}{'' if matched else '*'}"
        print(f"{dataset + ' ' + backbone:<15} {done:>4} {backbones:>9} {costs['s_per_epoch'].mean():>8.3f} "
              f"{costs['epochs'].mean():>7.0f} {backbone_s:>10.1f} {calib_s:>8.1f} {run_s:>7.1f}{after}  {per}")
    workers = study.spec.task_runner.workers

    def projected(seconds: float) -> str:
        return f"{seconds / 3600:.1f} CPU-hours, {seconds / workers / 3600:.1f} h wall on {workers} worker processes"

    after_label = "after (--batch-calibrators, measured calibrators scaled)"
    if unmatched:
        print("\n* no cached backbone matches a digest of the study's rows (other machine): every cached one counts")
    print(f"\nthe whole of {args.study} ({runs_asked} runs per benchmark) on the {len(measured)} benchmarks measured: "
          f"{projected(sum(runs_asked * before for _, before, _ in measured))}")
    if ratios:
        print(f"{after_label}: {projected(sum(runs_asked * after for _, _, after in measured))}")
    print(f"remaining runs of {args.study} on the {len(measured)} benchmarks measured: "
          f"{projected(sum(max(runs_asked - done, 0) * before for done, before, _ in measured))} "
          "(mean run cost of the finished runs; cores otherwise free)")
    if ratios:
        print(f"{after_label}: {projected(sum(max(runs_asked - done, 0) * after for done, _, after in measured))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
