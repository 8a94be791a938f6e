"""How often SimCalib chose each (w, t) grid point, and the temperatures it fitted, per benchmark.

Reads the audit columns of the results rows (``w``, ``t``, ``t_feat_mean``... written by
:meth:`simcalib.calibrators.SimCalib.audit`): a reader can check which mixtures the grid search picked and
whether the feature temperature varies over nodes at all (a std near 0 means G_feat acts as one
temperature).
"""

from __future__ import annotations

import pandas as pd

from simcalib.report.tables import benchmark_sort_key

SIMCALIB_PREFIX = "SimCalib"
TEMPERATURE_COLUMNS = ("t_feat_mean", "t_feat_std", "t_move_mean", "t_move_std")


def _point_label(w: float, t: float) -> str:
    return f"w={w:g}" if pd.isna(t) else f"w={w:g} t={t:g}"


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
    temperatures = chosen.groupby(["dataset", "backbone", "calibrator"])[list(TEMPERATURE_COLUMNS)].mean()
    table = pd.concat([counts[points].sum(axis=1).rename("runs"), counts[points], temperatures], axis=1).reset_index()
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
            cells.append("" if pd.isna(value) else (f"{value:.3f}" if column in TEMPERATURE_COLUMNS else f"{int(value)}"))
        body.append(cells)
    return header, body


__all__ = ["grid_choices", "grid_choices_grid"]
