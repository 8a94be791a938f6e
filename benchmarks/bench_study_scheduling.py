"""How busy the study flow keeps its worker processes, printed as measurements.

A small study (one benchmark, backbones trained into an empty cache, few calibrators: the backbones dominate,
as on the large graphs) runs through ``simcalib study run`` on the processes runner. Printed: the command's wall
seconds, the work its tasks did (backbone ``train_seconds`` from completion.json plus the rows' ``fit_seconds``),
and the share of the workers' time that work filled, ``work / (workers x wall)`` (the wall includes Prefect's
start-up, about 15-25 s, so even a perfect schedule stays below 1).

    .venv/bin/python benchmarks/bench_study_scheduling.py --dataset Cora --backbone GAT --inits 4 --folds 2

Compare two versions of the flow with ``--code`` (a checkout of the other version, e.g. a ``git worktree``): the study
runs from that folder, which ``python -m`` puts first on the path (the script writes a plain study file, which
every version reads). Uses $SIMCALIB_DATA_MIRROR and
$SIMCALIB_SPLITS_DIR like the CLI; run it on otherwise idle cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import yaml


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="Cora")
    parser.add_argument("--backbone", default="GAT")
    parser.add_argument("--inits", type=int, default=4)
    parser.add_argument("--folds", type=int, default=2)
    parser.add_argument("--calibrators", default="UnCal,TS")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--code", type=Path, default=Path(__file__).resolve().parents[1],
                        help="the checkout whose flow runs (default: this one)")
    args = parser.parse_args()

    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        study = {
            "name": "scheduling", "benchmarks": {"datasets": [args.dataset], "backbones": [args.backbone]},
            "calibrators": args.calibrators.split(","),
            "runs": {"splits": 1, "inits": args.inits, "folds": args.folds},
            "data": {"cache_dir": str(folder / "backbones")}, "output": str(folder / "out"),
            "tracking_uri": f"sqlite:///{folder / 'mlflow.db'}", "save_predictions": False, "report": False,
            "task_runner": {"kind": "processes", "workers": args.workers, "torch_threads": 1},
        }
        path = folder / "study.yaml"
        path.write_text(yaml.safe_dump(study, sort_keys=False))
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PREFECT_HOME": str(folder / "prefect"),
               "PYTHONPATH": str(args.code)}
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "simcalib.cli", "study", "run", str(path)], env=env,
                              cwd=args.code, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            sys.exit(f"the study failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        bench = folder / "out" / f"{args.dataset}_{args.backbone}"
        backbones = sum(s["train_seconds"] for s in json.loads((bench / "completion.json").read_text())["backbone_stats"])
        fits = float(pd.read_csv(bench / "results.csv")["fit_seconds"].sum())
    work = backbones + fits
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=args.code, capture_output=True, text=True)
    print(f"flow code: {args.code} ({commit.stdout.strip() or 'not a git checkout'}); load average before: "
          f"{' '.join(f'{x:.2f}' for x in load)}")
    print(f"study: {args.dataset} {args.backbone}, {args.inits * args.folds} runs, calibrators {args.calibrators}, "
          f"{args.workers} worker processes")
    print(f"wall {wall:.1f} s; work {work:.1f} s (backbones {backbones:.1f} s, calibrator fits {fits:.1f} s); "
          f"workers filled {work / (args.workers * wall):.2f}")


if __name__ == "__main__":
    main()
