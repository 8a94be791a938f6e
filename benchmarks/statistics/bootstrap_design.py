"""Which resampling unit the report's bootstrap intervals need: runs, or whole splits (no training).

On committed results (by default the headline study), for every Table 1 cell (benchmark x calibrator, ECE) and
every SimCalib - GATS paired difference with runs from two or more splits:

* the share of the run-to-run variance that lies between splits (one-way random-effects intraclass
  correlation, ICC, with the split as the group);
* the width of the 95% percentile interval that resamples whole splits over the width of the one that
  resamples runs one by one (simcalib.report.bootstrap, same seed and resample count).

Then the coverage of the true mean by three 95% intervals on simulated benchmarks of the study's shapes
(5 splits x 3 runs, 5 x 15), normal split effects and run noise at given ICCs: runs resampled (percentile),
splits resampled (percentile, the report's), splits resampled (BCa).

    .venv/bin/python benchmarks/statistics/bootstrap_design.py [results folder ...] [--reps 1000]
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd
from scipy import stats

from simcalib.report.bootstrap import mean_interval, split_icc
from simcalib.report.results import load_study_results
from simcalib.report.stats import PAIR_KEYS
from simcalib.report.tables import MAIN_METHODS


def cells(rows: pd.DataFrame) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(label, values, splits) of every Table 1 ECE cell and SimCalib - GATS difference with >= 2 splits."""
    out = []
    for (d, b, c), g in rows[rows["calibrator"].isin(MAIN_METHODS)].groupby(["dataset", "backbone", "calibrator"]):
        out.append((f"{d} {b} {c}", g["ece"].to_numpy(float), g["split"].to_numpy()))
    left = rows[rows["calibrator"] == "SimCalib"][[*PAIR_KEYS, "ece"]]
    right = rows[rows["calibrator"] == "GATS"][[*PAIR_KEYS, "ece"]]
    pairs = left.merge(right, on=PAIR_KEYS, suffixes=("_m", "_r"))
    for (d, b), g in pairs.groupby(["dataset", "backbone"]):
        out.append((f"{d} {b} SimCalib-GATS", (g["ece_m"] - g["ece_r"]).to_numpy(float), g["split"].to_numpy()))
    return [c for c in out if len(np.unique(c[2])) >= 2]


def measured(rows: pd.DataFrame) -> pd.DataFrame:
    records = []
    for label, values, splits in cells(rows):
        by_split, by_run = mean_interval(values, splits), mean_interval(values)
        width_split = by_split.high - by_split.low
        width_run = by_run.high - by_run.low
        records.append({"cell": label, "runs": len(values), "splits": len(np.unique(splits)),
                        "icc": split_icc(values, splits),
                        "width_ratio": width_split / width_run if width_run > 0 else np.nan})
    return pd.DataFrame(records)


def coverage(icc: float, splits: int, per_split: int, reps: int, seed: int = 0) -> dict[str, float]:
    """Share of ``reps`` simulated benchmarks whose 95% interval holds the true mean (0), per interval kind."""
    rng = np.random.default_rng(seed)
    hits = {"runs, percentile": 0, "splits, percentile": 0, "splits, BCa": 0}
    group = np.repeat(np.arange(splits), per_split)
    for _ in range(reps):
        values = (np.sqrt(icc) * rng.normal(size=splits)[group]
                  + np.sqrt(1 - icc) * rng.normal(size=splits * per_split))
        sums = np.array([values[group == s].sum() for s in range(splits)])
        counts = np.full(splits, float(per_split))
        ratio = lambda s, c, axis=-1: s.sum(axis=axis) / c.sum(axis=axis)  # noqa: E731
        for name, data, method in (("runs, percentile", (values, np.ones_like(values)), "percentile"),
                                   ("splits, percentile", (sums, counts), "percentile"),
                                   ("splits, BCa", (sums, counts), "BCa")):
            ci = stats.bootstrap(data, ratio, paired=True, vectorized=True, n_resamples=999, method=method,
                                 rng=rng).confidence_interval
            hits[name] += int(ci.low <= 0 <= ci.high)
    return {k: v / reps for k, v in hits.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="*", default=["reports/offline/results"])
    parser.add_argument("--reps", type=int, default=1000)
    args = parser.parse_args()
    study = load_study_results(args.results if len(args.results) > 1 else args.results[0])
    table = measured(study.main_rows())
    pd.set_option("display.width", 160)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    for kind, part in (("Table 1 cells", table[~table["cell"].str.contains("-GATS")]),
                       ("SimCalib - GATS differences", table[table["cell"].str.contains("-GATS")])):
        print(f"\n{kind}: {len(part)}; split ICC median {part['icc'].median():.2f} "
              f"(quartiles {part['icc'].quantile(0.25):.2f}-{part['icc'].quantile(0.75):.2f}); "
              f"width splits / runs median {part['width_ratio'].median():.2f} "
              f"(range {part['width_ratio'].min():.2f}-{part['width_ratio'].max():.2f})")
    print(f"\ncoverage of the true mean by nominal 95% intervals, {args.reps} simulated benchmarks each:")
    for icc in (0.0, 0.1, float(round(table["icc"].median(), 2)), 0.5):
        for per_split in (3, 15):
            cover = coverage(icc, 5, per_split, args.reps)
            print(f"  ICC {icc:.2f}, 5 splits x {per_split:2d} runs: "
                  + ", ".join(f"{k} {v:.3f}" for k, v in cover.items()))


if __name__ == "__main__":
    main()
