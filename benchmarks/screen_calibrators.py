"""Screen calibrator option sets on labelled nodes only (never test nodes), across benchmarks.

For each (benchmark, run) the calibration fold is split per class into 2 parts; each option set is fitted
on one part (early-stopped on the training folds, as in the protocol) and predicts the other, and ECE
(15 bins, %) and NLL are computed on the pooled held-out predictions: the same "crossfit" objective as
``simcalib tune`` (:mod:`simcalib.tuning.objective`). Used to choose SimCalib's defaults without reading a
test label. Prints a table and writes per-run values to ``--out`` (CSV). The candidates file maps a name to a
calibrator and its options, e.g. ``holdout: {calibrator: SimCalib, options: {stopping: holdout}}`` and
``gats: {calibrator: GATS}``; the screens behind SimCalib's defaults are in ``docs/decisions.md``.

    .venv/bin/python benchmarks/screen_calibrators.py --candidates candidates.yaml \
        --benchmarks Cora:GCN,Citeseer:GCN,Cora:GAT,Citeseer:GAT --splits 0 --inits 0 --out screen.csv
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd
import torch
import yaml

from simcalib.metrics import ece, nll
from simcalib.protocol import ProtocolSettings, make_runs
from simcalib.tuning.objective import CalibrationObjective


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--candidates", required=True, help="YAML: name -> {calibrator: NAME, options: {...}}")
    parser.add_argument("--benchmarks", default="Cora:GCN,Citeseer:GCN,Cora:GAT,Citeseer:GAT")
    parser.add_argument("--splits", default="0")
    parser.add_argument("--inits", default="0")
    parser.add_argument("--folds", default="0,1,2")
    parser.add_argument("--only", default=None, help="comma list of candidate names to run")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    ints = lambda text: [int(v) for v in text.split(",")]  # noqa: E731
    candidates = yaml.safe_load(Path(args.candidates).read_text())
    if args.only:
        candidates = {k: v for k, v in candidates.items() if k in args.only.split(",")}
    settings = ProtocolSettings()
    out = Path(args.out)
    done = pd.read_csv(out) if out.is_file() else pd.DataFrame(columns=["candidate", "run"])
    seen = set(zip(done["candidate"], done["run"]))
    for bench in args.benchmarks.split(","):
        dataset, backbone = bench.split(":")
        runs = make_runs(dataset, backbone, ints(args.splits), ints(args.inits), ints(args.folds))
        objectives = {}
        for name, spec in candidates.items():
            calibrator = spec["calibrator"]
            objective = objectives.setdefault(calibrator, CalibrationObjective(calibrator, runs, settings))
            for run in runs:
                if (name, run.tag()) in seen:
                    continue
                start = time.perf_counter()
                probs, labels = objective.scored_predictions(run, dict(spec.get("options") or {}))
                row = {"candidate": name, "run": run.tag(), "dataset": dataset, "backbone": backbone,
                       "ece": 100 * ece(probs, labels), "nll": nll(probs, labels),
                       "seconds": time.perf_counter() - start}
                pd.DataFrame([row]).to_csv(out, mode="a", header=not out.is_file(), index=False)
                print(row, flush=True)
            for other in objectives.values():  # share backbones/graphs between calibrators
                other._graphs.update(objective._graphs)
    table = pd.read_csv(out)
    summary = table.pivot_table(index="candidate", columns=["dataset", "backbone"], values="ece", aggfunc="mean")
    summary["mean"] = summary.mean(axis=1)
    print(summary.sort_values("mean").round(2).to_string())


if __name__ == "__main__":
    main()
