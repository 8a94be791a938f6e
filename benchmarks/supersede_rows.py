"""Move the rows of some calibrators out of a results.csv into a superseded file (kept for provenance).

For rows that must be recomputed, e.g. because they came from backbones trained on another machine than the
rows they are compared with (``backbone_digest``, ``reports/full/superseded/README.md``). The moved rows are
appended to DEST; SOURCE is rewritten without them in one atomic replace. A benchmark command run afterwards
computes the moved calibrators again, since its results.csv no longer holds them.

    .venv/bin/python benchmarks/supersede_rows.py reports/full/results/Cora_GAT/results.csv \\
        reports/full/superseded/amd_epyc/Cora_GAT/results.csv --calibrators UnCal,TS,VS,ETS,CaGCN,GATS
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from simcalib.protocol import append_rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("dest", type=Path)
    parser.add_argument("--calibrators", required=True, help="comma list, or 'all'")
    args = parser.parse_args()
    rows = pd.read_csv(args.source)
    moved = rows["calibrator"].notna() if args.calibrators == "all" else rows["calibrator"].isin(
        args.calibrators.split(","))
    if not moved.any():
        print(f"no rows of {args.calibrators} in {args.source}", file=sys.stderr)
        return 2
    append_rows(args.dest, rows[moved].to_dict("records"))
    tmp = args.source.with_suffix(".csv.tmp")
    rows[~moved].to_csv(tmp, index=False, float_format="%.10g")
    tmp.replace(args.source)
    print(f"moved {int(moved.sum())} rows ({rows[moved].groupby('calibrator').size().to_dict()}) "
          f"to {args.dest}; {int((~moved).sum())} stay in {args.source}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
