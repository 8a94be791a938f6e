"""Do two results files agree on the runs both hold? Per calibrator: every numeric column's largest difference.

usage: python benchmarks/compare_rows.py NEW OLD [--ignore fit_seconds,seed] [--splits 2,3,4] [--means ece,accuracy]

NEW and OLD are results.csv files; OLD may also be ``git:REV:PATH`` (the file as committed at REV, e.g.
``git:HEAD:reports/offline/results/Computers_GCN/results.csv``), so a benchmark the study flow has just rewritten
is compared with the rows it replaces. Rows pair by (split, init, fold, calibrator). Printed: the row and run
counts of each file, then per calibrator the rows paired and each numeric column whose values differ (largest
absolute difference, rows differing; a value on one side and NaN on the other counts as differing), then the
mismatches of the digest columns (backbone, split, data, calibrator) and seeds where both files have them. Columns
only one file has are listed, not compared. This is the check each ``flow_pass`` benchmark entry of
``reports/offline/provenance.yaml`` states. ``--splits`` keeps the runs of those splits only; ``--means`` prints,
per calibrator, each column's mean over the paired rows in both files and the difference, also in units of the
old rows' standard deviation over runs: how far the rows' differences (another machine's backbones, say) move
the numbers a benchmark reports.
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys

import numpy as np
import pandas as pd

RUN = ["split", "init", "fold"]
KEY = [*RUN, "calibrator"]
IDENTITY = ["backbone_digest", "split_digest", "data_digest", "calibrator_digest", "seed"]


def read_rows(source: str) -> pd.DataFrame:
    """A results file from a path or from ``git:REV:PATH`` (run in the current directory's repository)."""
    if source.startswith("git:"):
        rev, _, path = source[4:].partition(":")
        shown = subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True, text=True)
        if shown.returncode != 0:
            sys.exit(f"{source}: git show failed: {shown.stderr.strip()}")
        return pd.read_csv(io.StringIO(shown.stdout))
    return pd.read_csv(source)


def compare(new: pd.DataFrame, old: pd.DataFrame, ignore: set[str]) -> dict:
    """Per calibrator the paired rows and, per numeric column that differs, (largest difference, rows differing);
    the identity columns' mismatches; the columns only one side has."""
    paired = new.merge(old, on=KEY, suffixes=("_new", "_old"))
    shared = [c for c in new.columns if c in old.columns and c not in KEY and c not in ignore and c not in IDENTITY]
    numeric = [c for c in shared if pd.api.types.is_numeric_dtype(new[c]) and pd.api.types.is_numeric_dtype(old[c])]
    calibrators = {}
    for name, group in paired.groupby("calibrator", sort=True):
        differing = {}
        for column in numeric:
            a = group[f"{column}_new"].to_numpy(float)
            b = group[f"{column}_old"].to_numpy(float)
            both_nan = np.isnan(a) & np.isnan(b)
            one_nan = np.isnan(a) ^ np.isnan(b)
            gap = np.where(both_nan | one_nan, 0.0, np.abs(a - b))
            rows = int(((gap > 0) | one_nan).sum())
            if rows:
                differing[column] = (float(gap.max()), rows)
        calibrators[name] = {"rows": len(group), "differing": differing}
    identity = {}
    for column in IDENTITY:
        if f"{column}_new" in paired and f"{column}_old" in paired:
            both = paired[f"{column}_new"].notna() & paired[f"{column}_old"].notna()
            identity[column] = (int((paired.loc[both, f"{column}_new"].astype(str)
                                     != paired.loc[both, f"{column}_old"].astype(str)).sum()), int(both.sum()))
    return {"calibrators": calibrators, "identity": identity, "runs": paired.groupby(RUN).ngroups,
            "only_new": sorted(set(new.columns) - set(old.columns)),
            "only_old": sorted(set(old.columns) - set(new.columns))}


def means(new: pd.DataFrame, old: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """Per calibrator and column: the mean over the paired rows in each file, the difference, and the difference
    over the old rows' standard deviation."""
    paired = new.merge(old, on=KEY, suffixes=("_new", "_old"))
    table = []
    for name, group in paired.groupby("calibrator", sort=True):
        for column in columns:
            a, b = group[f"{column}_new"].astype(float), group[f"{column}_old"].astype(float)
            spread = b.std()
            table.append({"calibrator": name, "column": column, "rows": len(group), "new": a.mean(), "old": b.mean(),
                          "diff": a.mean() - b.mean(),
                          "diff_over_std": (a.mean() - b.mean()) / spread if spread > 0 else float("nan")})
    return pd.DataFrame(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("new")
    parser.add_argument("old", help="a results.csv, or git:REV:PATH")
    parser.add_argument("--ignore", default="fit_seconds", help="columns not compared (default: fit_seconds)")
    parser.add_argument("--splits", help="compare the runs of these splits only (e.g. 2,3,4)")
    parser.add_argument("--means", help="columns whose means over the paired rows are printed (e.g. ece,accuracy)")
    args = parser.parse_args(argv)
    new, old = read_rows(args.new), read_rows(args.old)
    if args.splits:
        splits = [int(s) for s in args.splits.split(",")]
        new, old = new[new["split"].isin(splits)], old[old["split"].isin(splits)]
    for label, frame in (("new", new), ("old", old)):
        print(f"{label}: {len(frame)} rows, {frame.groupby(RUN).ngroups} runs, {frame['calibrator'].nunique()} "
              f"calibrators")
    result = compare(new, old, set(filter(None, args.ignore.split(","))))
    print(f"runs in both: {result['runs']}")
    for name, entry in result["calibrators"].items():
        differing = ", ".join(f"{c} {gap:.3g} ({rows} rows)" for c, (gap, rows) in entry["differing"].items())
        print(f"  {name:18s} {entry['rows']:4d} rows  {'differing: ' + differing if differing else 'equal'}")
    for column, (mismatches, compared) in result["identity"].items():
        print(f"{column}: {mismatches} of {compared} differ")
    for label in ("only_new", "only_old"):
        if result[label]:
            print(f"columns {label.replace('_', ' in ')}: {', '.join(result[label])}")
    if args.means:
        print("means over the paired rows (diff_over_std: the difference over the old rows' std over runs)")
        print(means(new, old, args.means.split(",")).to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
