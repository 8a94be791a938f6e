"""Merge re-measured calibrator rows (same runs, same backbones) into a committed results.csv, checked.

usage: python benchmarks/merge_calibrator_rows.py COMMITTED_RESULTS_CSV NEW_RESULTS_CSV [NEW ...]

For calibrators computed later on the runs of a committed results file (e.g. `simcalib benchmark ... --calibrators
WATS --out OUT` on the headline's runs), so that their rows join the committed ones only where they are on the same
backbones.
- every new row's run must be in the committed file with the same backbone_digest (same backbone), else abort;
- a new row whose run and calibrator the committed file already holds must equal it (ece, nll, accuracy, brier,
  to 1e-9: a recomputation of the same definition) and replaces it; otherwise it is added.
"""
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from simcalib.store.integrity import check_results
from simcalib.store.results_store import RESULT_COLUMNS, read_results, rewrite_results

committed_path = Path(sys.argv[1])
committed = read_results(committed_path)
new = pd.concat([read_results(p) for p in sys.argv[2:]], ignore_index=True)
run = ["dataset", "backbone", "split", "init", "fold", "seed"]
digests = committed.dropna(subset=["backbone_digest"]).groupby(run)["backbone_digest"].agg(set)
bad = sum(1 for row in new.to_dict("records")
          if tuple(row[c] for c in run) not in digests.index or digests.loc[tuple(row[c] for c in run)] != {row["backbone_digest"]})
if bad:
    sys.exit(f"{bad} new rows are not on the committed rows' backbones: abort")
keys = run + ["calibrator"]
old = committed.set_index(keys)
again = new.set_index(keys).index.intersection(old.index)
report = []
if len(again):
    fresh = new.set_index(keys).loc[again]
    diffs = {m: float(np.nanmax(np.abs(old.loc[again, m].astype(float) - fresh[m].astype(float))))
             for m in ("ece", "nll", "accuracy", "brier")}
    if max(diffs.values()) > 1e-9:
        sys.exit(f"recomputed rows differ from the committed ones: {diffs}")
    digest_same = (old.loc[again, "calibrator_digest"].astype(str) == fresh["calibrator_digest"].astype(str)).all()
    report.append(f"{len(again)} rows recomputed equal the committed ones (max abs diff {diffs}; same definition "
                  f"digest: {digest_same}) and replace them")
    committed = committed[~committed.set_index(keys).index.isin(again)]
merged = pd.concat([committed, new], ignore_index=True)
columns = [c for c in RESULT_COLUMNS if c in merged.columns] + [c for c in merged.columns if c not in RESULT_COLUMNS]
merged = check_results(merged[columns], str(committed_path))
rewrite_results(committed_path, merged)
print(committed_path, "new rows by calibrator", new.groupby("calibrator").size().to_dict(), *report, sep="\n  ")
