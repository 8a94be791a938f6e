"""Paired Wilcoxon tests between calibrators over the runs of committed results (no training).

Pairs runs by (split, init, fold) per benchmark, as the report's SimCalib-vs-GATS test, for any pairs of
calibrators and optionally a subset of splits (held-out views). Prints one Markdown table.

    .venv/bin/python benchmarks/paired_tests.py reports/archive/simcalib_joint/criterion \\
        --pairs SimCalib:GATS,SimCalib_separate:GATS,SimCalib:SimCalib_separate --splits 1,2,3,4
"""

from __future__ import annotations

import argparse

from simcalib.report.render import table_block, to_markdown
from simcalib.report.results import load_study_results
from simcalib.report.stats import PAIRED_HEADER, paired_comparison_cells, paired_comparisons


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", help="folders (or results.csv files) to read; rows are pooled")
    parser.add_argument("--pairs", default="SimCalib:GATS", help="comma list of METHOD:REFERENCE")
    parser.add_argument("--splits", default=None, help="comma list of splits to keep (default: all)")
    parser.add_argument("--metric", default="ece")
    args = parser.parse_args()
    import pandas as pd

    rows = pd.concat([load_study_results(path).rows for path in args.results], ignore_index=True)
    if args.splits:
        rows = rows[rows["split"].isin([int(s) for s in args.splits.split(",")])]
    pairs = [tuple(pair.split(":")) for pair in args.pairs.split(",")]
    frame = paired_comparisons(rows, pairs, args.metric)
    print(to_markdown([table_block(PAIRED_HEADER, paired_comparison_cells(frame), 3)]))

if __name__ == "__main__":
    main()
