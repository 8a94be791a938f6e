"""How often SimCalib chose each (w, t) grid point, and the temperatures it fitted, per benchmark.

Reads the audit columns of the results rows (``w``, ``t``, ``t_feat_mean``... written by
:meth:`simcalib.calibrators.SimCalib.audit`): a reader can check which mixtures the grid search picked and
whether the feature temperature varies over nodes at all (a std near 0 means G_feat acts as one
temperature).
"""

from __future__ import annotations

import pandas as pd

from simcalib.analysis.feature_signal import MIN_NODEWISE_CV
from simcalib.report.tables import benchmark_sort_key

SIMCALIB_PREFIX = "SimCalib"
TEMPERATURE_COLUMNS = ("t_feat_mean", "t_feat_std", "t_move_mean", "t_move_std")


def _point_label(w: float, t: float) -> str:
    return f"w={w:g}" if pd.isna(t) else f"w={w:g} t={t:g}"


def feature_branch_audit(runs: pd.DataFrame) -> pd.Series:
    """Whether a SimCalib variant's T_feat is node-wise over its runs: the share of runs whose coefficient of
    variation over test nodes reaches :data:`MIN_NODEWISE_CV`, the median Spearman correlation of T_feat with
    the nearest-prototype distance, and ``inert`` when fewer than half the runs are node-wise."""
    cv = runs["t_feat_std"] / runs["t_feat_mean"]
    if cv.notna().sum() == 0:
        return pd.Series({"nodewise_share": float("nan"), "t_feat_spearman": float("nan"), "feature_branch": ""})
    share = float((cv >= MIN_NODEWISE_CV).mean())
    rho = runs["t_feat_spearman"].median() if "t_feat_spearman" in runs.columns else float("nan")
    return pd.Series({"nodewise_share": share, "t_feat_spearman": rho,
                      "feature_branch": "node-wise" if share >= 0.5 else "inert"})


def grid_choices(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (benchmark, SimCalib variant): runs, the count of each chosen grid point, and the mean over
    runs of each temperature summary. Empty when no row carries a chosen ``w``."""
    if "w" not in rows.columns:
        return pd.DataFrame()
    chosen = rows[rows["calibrator"].astype(str).str.startswith(SIMCALIB_PREFIX) & rows["w"].notna()].copy()
    if chosen.empty:
        return pd.DataFrame()
    chosen["point"] = [_point_label(w, t) for w, t in zip(chosen["w"], chosen["t"])]
    counts = chosen.pivot_table(index=["dataset", "backbone", "calibrator"], columns="point", values="ece",
                                aggfunc="size", fill_value=0)
    points = sorted(counts.columns, key=lambda label: [float(part.split("=")[1]) for part in label.split()])
    groups = chosen.groupby(["dataset", "backbone", "calibrator"])
    temperatures = groups[list(TEMPERATURE_COLUMNS)].mean()
    branch = groups.apply(feature_branch_audit, include_groups=False)
    table = pd.concat([counts[points].sum(axis=1).rename("runs"), counts[points], temperatures, branch],
                      axis=1).reset_index()
    order = sorted(range(len(table)), key=lambda i: (*benchmark_sort_key((table.at[i, "dataset"], table.at[i, "backbone"])),
                                                     table.at[i, "calibrator"]))
    return table.iloc[order].reset_index(drop=True)


def grid_choices_grid(table: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """(header, body) of :func:`grid_choices` as text cells, for the report's Markdown/HTML tables."""
    header = ["benchmark", "calibrator", *[str(c) for c in table.columns[3:]]]
    body = []
    for _, row in table.iterrows():
        cells = [f"{row['dataset']} {row['backbone']}", row["calibrator"]]
        for column in table.columns[3:]:
            value = row[column]
            if column == "feature_branch":
                cells.append(str(value))
            elif column in ("nodewise_share", "t_feat_spearman") or column in TEMPERATURE_COLUMNS:
                cells.append("" if pd.isna(value) else f"{value:.2f}" if column == "nodewise_share" else f"{value:.3f}")
            else:
                cells.append("" if pd.isna(value) else f"{int(value)}")
        body.append(cells)
    return header, body


__all__ = ["feature_branch_audit", "grid_choices", "grid_choices_grid"]
