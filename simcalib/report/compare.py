r"""Two results files compared on the runs both hold: does a recomputation (another machine, a refactor, a
study flow pass) give the rows it replaces?

Rows pair by (split, init, fold, calibrator). :func:`compare` gives, per calibrator, the rows paired and each
numeric column whose values differ (the largest absolute difference :math:`\max_i |a_i - b_i|` and the rows
differing; a value on one side and NaN on the other counts as differing), the mismatches of the identity columns
(backbone, split, data and calibrator digests, seed), and the columns only one side has. :func:`means` gives how
far the differences move what a benchmark reports: per calibrator and column, the mean over the paired rows on
each side, their difference, and that difference over the old rows' standard deviation over runs.

Shapes: ``new`` and ``old`` are results tables (one row per run x calibrator, :data:`RESULT_COLUMNS
<simcalib.store.results_store.RESULT_COLUMNS>` and any others).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

RUN = ["split", "init", "fold"]
KEY = [*RUN, "calibrator"]
IDENTITY = ["backbone_digest", "split_digest", "data_digest", "calibrator_digest", "seed"]


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


__all__ = ["IDENTITY", "KEY", "RUN", "compare", "means"]
