"""Copy the rows of some calibrators from one results.csv into another (runs of the same benchmark).

Used to bring runs computed in a side folder (e.g. ``reports/extra/results``, from the same backbone cache)
into the main results, so that one report holds every calibrator of a run. Refuses rows whose
(calibrator, split, init, fold, seed) the target already holds, and checks first that the calibrators both
files hold on the same runs (e.g. TS, GATS) agree, which they do only if both came from the same backbones.

    .venv/bin/python benchmarks/merge_results.py reports/extra/results/Cora_GCN/results.csv \\
        reports/full/results/Cora_GCN/results.csv --calibrators Dirichlet,IRM,Spline,OrderInvariant,GETS
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from simcalib.protocol import append_rows

KEYS = ["dataset", "backbone", "calibrator", "split", "init", "fold", "seed"]
CHECKED = ["ece", "nll", "accuracy"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("target", type=Path)
    parser.add_argument("--calibrators", required=True, help="comma list of the calibrators to copy")
    parser.add_argument("--tolerance", type=float, default=1e-5, help="largest metric difference on shared rows")
    args = parser.parse_args()
    source, target = pd.read_csv(args.source), pd.read_csv(args.target)
    shared = source.merge(target, on=KEYS, suffixes=("_s", "_t"))
    if shared.empty:
        print("no run and calibrator in both files: nothing shows that they share backbones", file=sys.stderr)
        return 2
    diff = float(np.nanmax(np.abs(shared[[f"{m}_s" for m in CHECKED]].to_numpy(float)
                                  - shared[[f"{m}_t" for m in CHECKED]].to_numpy(float))))
    print(f"{len(shared)} rows in both files; largest |difference| of {', '.join(CHECKED)}: {diff:.3g}")
    if diff > args.tolerance:
        print(f"the files disagree beyond {args.tolerance:g}: not the same backbones, nothing copied", file=sys.stderr)
        return 2
    wanted = source[source["calibrator"].isin(args.calibrators.split(","))]
    clash = wanted.merge(target[KEYS], on=KEYS)
    if len(clash):
        print(f"{len(clash)} of these rows are already in {args.target}: nothing copied", file=sys.stderr)
        return 2
    append_rows(args.target, wanted.to_dict("records"))
    print(f"copied {len(wanted)} rows ({wanted.groupby('calibrator').size().to_dict()}) into {args.target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
