"""Same statistics? The batched trainer's results against the per-run trainer's committed ones.

Both are draws of the same protocol with different random streams, so they should agree within the
run-to-run noise. Runs are paired by (split, init, fold): same split and fold, other initialisation and
dropout stream. For each calibrator and metric it prints both means, the paired mean difference with its
95% interval, the per-run std (the noise scale), and two tests of "no difference": the paired t-test and
the Wilcoxon signed-rank test (scipy.stats), and the Wilcoxon p Holm-adjusted over every row of the table
(``wilcoxon_holm``): with 7 calibrators x 2 metrics, one raw p near 0.01 is what chance alone gives.

    python benchmarks/statistics/compare_batched_statistics.py results/batched/Cora_GCN/results.csv \\
        reports/archive/full/results/Cora_GCN/results.csv [--metrics ece,accuracy]

Any two results files of the same runs compare the same way; ``--names`` labels the two columns, e.g.
``--names intel,amd`` for the per-run trainer on two machines (reports/archive/full/superseded/amd_epyc/).
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd
from scipy import stats

from simcalib.report.bootstrap import fixed_digits, interval_text
from simcalib.report.stats import holm

RUN = ["split", "init", "fold"]


def compare(batched: pd.DataFrame, per_run: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    rows = []
    for calibrator in [c for c in batched["calibrator"].unique() if c in set(per_run["calibrator"])]:
        a = batched[batched["calibrator"] == calibrator].set_index(RUN)
        b = per_run[per_run["calibrator"] == calibrator].set_index(RUN)
        runs = a.index.intersection(b.index)
        for metric in metrics:
            x, y = a.loc[runs, metric].to_numpy(float), b.loc[runs, metric].to_numpy(float)
            diff = x - y
            half = stats.t.ppf(0.975, len(diff) - 1) * diff.std(ddof=1) / np.sqrt(len(diff))
            rows.append({
                "calibrator": calibrator, "metric": metric, "runs": len(runs),
                "batched": x.mean(), "per_run": y.mean(), "diff": diff.mean(),
                "diff_ci95": interval_text(diff.mean() - half, diff.mean() + half, fixed_digits(2)),
                "std_per_run": y.std(ddof=0),
                "t_p": stats.ttest_rel(x, y).pvalue,
                "wilcoxon_p": stats.wilcoxon(x, y).pvalue if np.any(diff != 0) else 1.0,
            })
    table = pd.DataFrame(rows)
    table["wilcoxon_holm"] = holm(table["wilcoxon_p"].tolist()) if len(table) else []
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("batched")
    parser.add_argument("per_run")
    parser.add_argument("--metrics", default="ece,accuracy")
    parser.add_argument("--names", default="batched,per_run", help="labels of the two files' columns")
    parser.add_argument("--calibrators", default=None,
                        help="compare only these (comma-separated), e.g. those defined alike in both files")
    args = parser.parse_args()
    first, second = args.names.split(",")
    frames = [pd.read_csv(path) for path in (args.batched, args.per_run)]
    if args.calibrators:
        keep = args.calibrators.split(",")
        frames = [frame[frame["calibrator"].isin(keep)] for frame in frames]
    table = compare(*frames, args.metrics.split(","))
    table = table.rename(columns={"batched": first, "per_run": second})
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))


if __name__ == "__main__":
    main()
