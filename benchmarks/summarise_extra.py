"""Markdown summary of the extra calibrators' runs (issue 13): metric tables and paired Wilcoxon tests.

    .venv/bin/python benchmarks/summarise_extra.py reports/extra/results \\
        [--reference reports/full/results] > summary.md

Reads ``<results>/<Dataset>_<Backbone>/results.csv``. Rows of TS and GATS missing there are taken from the
``--reference`` results of the same runs (same backbone cache, so the same backbones), after checking that
every run present in both has identical TS and GATS metrics; the check's largest difference is printed.
Every number printed comes from these files.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from simcalib.report.render import table_block, to_markdown
from simcalib.report.stats import PAIRED_HEADER, paired_comparison_cells, paired_comparisons
from simcalib.report.tables import EXTRA_CALIBRATORS, sorted_benchmarks

KEYS = ["dataset", "backbone", "split", "init", "fold"]
METRICS = [("ece", "ECE (%)", 2), ("ace", "ACE (%)", 2), ("nll", "NLL", 4), ("brier", "Brier", 4),
           ("accuracy", "accuracy (%)", 2)]
REFERENCES = ("TS", "GATS")


def read_folder(folder: Path) -> pd.DataFrame:
    frames = [pd.read_csv(path) for path in sorted(folder.glob("*/results.csv"))]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=[*KEYS, "calibrator"])


def with_reference_rows(rows: pd.DataFrame, reference: pd.DataFrame) -> tuple[pd.DataFrame, float, int]:
    """``rows`` plus the reference's TS/GATS rows for runs of ``rows`` that lack them; (rows, max |diff|, n checked)."""
    ours = rows[rows["calibrator"].isin(REFERENCES)]
    theirs = reference[reference["calibrator"].isin(REFERENCES)]
    both = ours.merge(theirs, on=[*KEYS, "calibrator"], suffixes=("", "_ref"))
    metrics = [m for m, _, _ in METRICS]
    diff = float(np.abs(both[metrics].to_numpy(float) - both[[f"{m}_ref" for m in metrics]].to_numpy(float)).max()) \
        if len(both) else float("nan")
    runs = rows[KEYS].drop_duplicates()
    wanted = theirs.merge(runs, on=KEYS)
    have = ours[[*KEYS, "calibrator"]]
    missing = wanted.merge(have, on=[*KEYS, "calibrator"], how="left", indicator=True)
    missing = missing[missing["_merge"] == "left_only"].drop(columns="_merge")
    return pd.concat([rows, missing[rows.columns.intersection(missing.columns)]], ignore_index=True), diff, len(both)


def _method_rows(rows: pd.DataFrame, methods: list[str]):
    """(dataset, backbone, method, its rows) for every benchmark in table order and every method that ran there."""
    for dataset, backbone in sorted_benchmarks(zip(rows["dataset"], rows["backbone"])):
        bench = rows[(rows["dataset"] == dataset) & (rows["backbone"] == backbone)]
        for method in methods:
            sub = bench[bench["calibrator"] == method]
            if not sub.empty:
                yield dataset, backbone, method, sub


def metric_table(rows: pd.DataFrame, methods: list[str]) -> str:
    lines = ["| benchmark | method | runs | " + " | ".join(label for _, label, _ in METRICS) + " |",
             "|---|---|---|" + "---|" * len(METRICS)]
    for dataset, backbone, method, sub in _method_rows(rows, methods):
        cells = [f"{sub[m].mean():.{d}f} ± {np.std(sub[m].to_numpy(float), ddof=0):.{d}f}" for m, _, d in METRICS]
        lines.append(f"| {dataset} {backbone} | {method} | {len(sub)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def paired_table(rows: pd.DataFrame, methods: list[str], metric: str = "ece") -> str:
    frame = paired_comparisons(rows, [(m, r) for m in methods for r in REFERENCES], metric)
    return to_markdown([table_block(PAIRED_HEADER, paired_comparison_cells(frame), 3)])


def fit_time_table(rows: pd.DataFrame, methods: list[str]) -> str:
    """Median fit seconds per benchmark and method, and the median ratio to TS's fit in the same run (TS rows
    of this folder only: a ratio is comparable across machine loads, a time is not)."""
    lines = ["| benchmark | method | fits | median fit (s) | max fit (s) | median fit / TS fit, same run |",
             "|---|---|---|---|---|---|"]
    ts = rows[rows["calibrator"] == "TS"][[*KEYS, "fit_seconds"]].rename(columns={"fit_seconds": "ts_seconds"})
    for dataset, backbone, method, sub in _method_rows(rows, methods):
        paired = sub.merge(ts, on=KEYS)
        ratio = f"{(paired['fit_seconds'] / paired['ts_seconds']).median():.2f} ({len(paired)} runs)" \
            if len(paired) else "n/a"
        lines.append(f"| {dataset} {backbone} | {method} | {len(sub)} | {sub['fit_seconds'].median():.3f} | "
                     f"{sub['fit_seconds'].max():.3f} | {ratio} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path)
    parser.add_argument("--reference", type=Path, help="results folder with TS and GATS rows of the same runs")
    args = parser.parse_args()
    rows = read_folder(args.results)
    own_rows = rows
    if args.reference is not None:
        rows, diff, checked = with_reference_rows(rows, read_folder(args.reference))
        print(f"TS/GATS rows present in both folders: {checked}; largest metric difference: {diff:.3g}\n")
    methods = [m for m in (*REFERENCES, *EXTRA_CALIBRATORS) if m in set(rows["calibrator"])]
    print(metric_table(rows, methods) + "\n")
    print("Paired Wilcoxon signed-rank tests on test ECE, runs paired by (split, init, fold):\n")
    print(paired_table(rows, [m for m in EXTRA_CALIBRATORS if m in methods]))
    print("\nFit times (this folder's runs; one torch thread, on a shared, loaded machine):\n")
    print(fit_time_table(own_rows, methods))


if __name__ == "__main__":
    main()
