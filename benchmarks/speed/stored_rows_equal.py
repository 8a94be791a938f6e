"""Are two sets of benchmark rows equal to every stored digit? Each column but ``fit_seconds`` compared as the
string results.csv stores, rows paired by (calibrator, split, init, fold).

usage: python benchmarks/speed/stored_rows_equal.py BEFORE_DIR AFTER_DIR

BEFORE_DIR and AFTER_DIR hold one ``<Dataset>_<Backbone>/results.csv`` per benchmark (``simcalib benchmark
--out``). Printed per benchmark found in both: the row counts, the columns compared, the columns that differ,
then each row's ``fit_seconds`` before and after. Exit status 1 if any benchmark's rows differ.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

KEY = ["calibrator", "split", "init", "fold"]
IGNORED = ["fit_seconds"]


def main() -> int:
    if len(sys.argv) != 3:
        sys.exit(__doc__.split("\n\n")[1])
    before_dir, after_dir = Path(sys.argv[1]), Path(sys.argv[2])
    differ = False
    for before_csv in sorted(before_dir.glob("*/results.csv")):
        after_csv = after_dir / before_csv.parent.name / "results.csv"
        if not after_csv.exists():
            continue
        a, b = (pd.read_csv(p, dtype=str, keep_default_na=False).sort_values(KEY).reset_index(drop=True)
                for p in (before_csv, after_csv))
        columns = [c for c in a.columns if c not in IGNORED]
        if list(a.columns) != list(b.columns) or not a[KEY].equals(b[KEY]):
            print(f"{before_csv.parent.name}: other rows or columns ({len(a)} vs {len(b)} rows)")
            differ = True
            continue
        changed = {c: int((a[c] != b[c]).sum()) for c in columns if (a[c] != b[c]).any()}
        differ |= bool(changed)
        print(f"{before_csv.parent.name}: {len(a)} rows, {len(columns)} columns compared, "
              f"{'equal' if not changed else 'DIFFER ' + str(changed)}")
        for (_, ra), (_, rb) in zip(a.iterrows(), b.iterrows()):
            print(f"   {ra.calibrator:20s} split {ra.split} init {ra.init} fold {ra.fold}  fit_seconds "
                  f"before {float(ra.fit_seconds):8.2f}  after {float(rb.fit_seconds):8.2f}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
