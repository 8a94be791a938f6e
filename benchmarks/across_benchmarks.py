"""The paper's across-benchmark test (Wilcoxon over per-benchmark mean ECE) on results pooled from several
folders, the first folder that has a benchmark supplying all of its rows (no training).

Used to test a re-measured calibrator on the benchmarks re-run in one folder and on the others from a second
folder, with each benchmark's source printed:

    .venv/bin/python benchmarks/across_benchmarks.py reports/feature_branch/results reports/archive/offline_constant_branch/results \\
        --method SimCalib --references UnCal,TS,VS,ETS,CaGCN,GATS,SimCalib_decay_all
"""

from __future__ import annotations

import argparse

import pandas as pd

from simcalib.report.render import table_block, to_markdown
from simcalib.report.results import load_study_results
from simcalib.report.stats import across_benchmarks_all


def pooled_means(folders: list[str], metric: str) -> tuple[pd.DataFrame, dict]:
    """Per-benchmark mean of ``metric`` per calibrator, each benchmark from the first folder that has it."""
    means, sources = [], {}
    for folder in folders:
        rows = load_study_results(folder).rows
        for (dataset, backbone), block in rows.groupby(["dataset", "backbone"]):
            if (dataset, backbone) in sources:
                continue
            sources[(dataset, backbone)] = (folder, block.groupby("calibrator").size().max())
            means.append(block.groupby("calibrator")[metric].mean().rename((dataset, backbone)))
    return pd.DataFrame(means), sources


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", help="results folders in order of precedence")
    parser.add_argument("--method", default="SimCalib")
    parser.add_argument("--references", default=None, help="comma list (default: every other calibrator)")
    parser.add_argument("--metric", default="ece")
    args = parser.parse_args()
    means, sources = pooled_means(args.results, args.metric)
    for (dataset, backbone), (folder, runs) in sorted(sources.items()):
        has = "yes" if args.method in means.columns and pd.notna(means.loc[(dataset, backbone), args.method]) else "no"
        print(f"{dataset:>10} {backbone}: {folder} ({runs} runs; {args.method}: {has})")
    references = args.references.split(",") if args.references else None
    frame = across_benchmarks_all(means, args.method, references)
    cells = [[r.method, r.reference, str(r.n), f"{r.wins}/{r.n}", f"{100 * r.relative_reduction:+.1f}%",
              f"{r.pvalue:.3g}", f"{r.pvalue_holm:.3g}"] for r in frame.itertuples()]
    header = ["Method", "Reference", "Benchmarks", "Method lower", "Mean relative reduction", "p", "p (Holm)"]
    print(to_markdown([table_block(header, cells, 2)]))


if __name__ == "__main__":
    main()
