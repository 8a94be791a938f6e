"""Write `figure_bins` into committed rows written before that column existed, where a recomputation reproduces them.

The report's reliability, confidence and feature-similarity figures are drawn from the `figure_bins` column of
results.csv (:mod:`simcalib.figure_bins`); rows of the earlier passes have none, so their benchmarks were missing
from the figures. For every run of RESULTS whose rows of the figure calibrators lack it, this fits the calibrator
again as the protocol fits it (backbone from the cache, trained where absent; calibrator options from --study,
e.g. the grid criterion and tie rule the pass pinned) and writes the recomputed bins into the committed row only
if the recomputation reproduces that row: |ECE difference| <= --tolerance (percentage points) and, for SimCalib,
the same (w, t). Otherwise the row keeps no bins and is counted, so a figure never pools a run whose table
number it would contradict. Nothing else of the file changes; it is rewritten atomically after every run, so a
kill loses at most the run in flight and the same command resumes.

    python benchmarks/backfill_figure_bins.py reports/full/results/Cora_GCN/results.csv --study study/offline.yaml
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

from simcalib.figure_bins import FIGURE_CALIBRATORS

KEYS = ["split", "init", "fold"]


def reproduces(committed: pd.Series, recomputed: dict, tolerance: float) -> str | None:
    """None if ``recomputed`` reproduces the ``committed`` row, else why not."""
    difference = abs(float(recomputed["ece"]) - float(committed["ece"]))
    if not difference <= tolerance:
        return f"ECE {recomputed['ece']:.4f} vs committed {committed['ece']:.4f}"
    for column in ("w", "t"):
        old, new = committed.get(column), recomputed.get(column)
        if not (_missing(old) and _missing(new)) and (_missing(old) or _missing(new) or abs(float(old) - float(new)) > 1e-9):
            return f"{column} {new} vs committed {old}"
    return None


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path, help="one benchmark's results.csv (rewritten in place)")
    parser.add_argument("--study", default="study/offline.yaml", help="calibrator options and seed of the pass")
    parser.add_argument("--calibrators", default=",".join(FIGURE_CALIBRATORS))
    parser.add_argument("--tolerance", type=float, default=0.01, help="largest |ECE difference|, percentage points")
    args = parser.parse_args()

    import torch

    from simcalib.protocol import (
        ProtocolSettings,
        Run,
        evaluate_calibrator,
        rewrite_results,
        train_run_backbone,
    )
    from simcalib.study import load_study

    torch.set_num_threads(1)
    frame = pd.read_csv(args.results, dtype={"backbone_digest": str})
    if "figure_bins" not in frame:
        frame["figure_bins"] = None
    frame["figure_bins"] = frame["figure_bins"].astype(object)
    benchmarks = frame[["dataset", "backbone", "label_rate"]].drop_duplicates()
    if len(benchmarks) != 1:
        print(f"{args.results}: expected the rows of one benchmark at one label rate, got {len(benchmarks)}", file=sys.stderr)
        return 2
    dataset, backbone, label_rate = benchmarks.iloc[0]
    study = load_study(args.study)
    options = study.benchmark_options(dataset, backbone)
    settings = ProtocolSettings(study_seed=study.spec.seed, fold_rate=float(label_rate) / 3)
    wanted = frame["calibrator"].isin(args.calibrators.split(",")) & frame["figure_bins"].isna()
    runs = frame.loc[wanted, KEYS].drop_duplicates().sort_values(KEYS).itertuples(index=False)
    filled = refused = 0
    for split, init, fold in runs:
        run = Run(dataset, backbone, int(split), int(init), int(fold))
        output = train_run_backbone(run, settings)
        for index in frame.index[wanted & (frame["split"] == split) & (frame["init"] == init) & (frame["fold"] == fold)]:
            committed = frame.loc[index]
            if int(committed["seed"]) != run.seed(settings):
                print(f"{run.tag()}: seed {committed['seed']} is not the study's {run.seed(settings)}; skipped")
                refused += 1
                continue
            row = evaluate_calibrator(run, settings, committed["calibrator"], options.get(committed["calibrator"]), output)
            why = reproduces(committed, row, args.tolerance)
            if why is None:
                frame.at[index, "figure_bins"] = row["figure_bins"]
                filled += 1
            else:
                print(f"{run.tag()} {committed['calibrator']}: not reproduced ({why}); left without bins", flush=True)
                refused += 1
        rewrite_results(args.results, frame)  # the protocol's format: cells not filled here keep their text
    print(f"{args.results}: bins written to {filled} rows, {refused} rows not reproduced "
          f"(tolerance {args.tolerance} ECE points)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
