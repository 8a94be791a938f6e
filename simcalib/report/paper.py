"""The paper's published tables (``paper/table*.csv``) in one long format.

Every table becomes rows ``(table, dataset, backbone, method, metric, mean, std)`` with method names as in our
results (``SimCalib_l``, ``SimCalib_w0.5``, ...), so "paper vs ours" is a join. The folder is an option
(``--paper-dir``) or ``$SIMCALIB_PAPER_DIR``; when neither is given or the files are absent, the comparison is
skipped with a note rather than failing the report.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from simcalib.errors import DataCorruptError

PAPER_DIR_ENV = "SIMCALIB_PAPER_DIR"
PAPER_FILES = {
    "table1": "table1_ece.csv",
    "table2": "table2_ace_corafull.csv",
    "table3": "table3_ablation_ece.csv",
    "table4": "table4_w_sweep_corafull.csv",
}
LONG_COLUMNS = ["table", "dataset", "backbone", "method", "metric", "mean", "std"]


def w_method(w: float) -> str:
    """Results name of a w-sweep run: ``SimCalib_w0.5`` (Table 4)."""
    return f"SimCalib_w{float(w):g}"


@dataclass
class PaperTables:
    folder: Path | None
    long: pd.DataFrame  # LONG_COLUMNS
    notes: list[str] = field(default_factory=list)

    def table(self, key: str) -> pd.DataFrame:
        return self.long[self.long["table"] == key]

    def has(self, key: str) -> bool:
        return bool((self.long["table"] == key).any())


def resolve_paper_dir(paper_dir: str | os.PathLike | None) -> Path | None:
    if paper_dir:
        return Path(paper_dir)
    env = os.environ.get(PAPER_DIR_ENV)
    return Path(env) if env else None


def _wide_to_long(frame: pd.DataFrame, key: str) -> pd.DataFrame:
    """``dataset, backbone, X_mean, X_std, ...`` -> long rows."""
    methods = [c[: -len("_mean")] for c in frame.columns if c.endswith("_mean")]
    rows = []
    for _, r in frame.iterrows():
        for m in methods:
            rows.append({"table": key, "dataset": r["dataset"], "backbone": r["backbone"], "method": m,
                         "metric": "ece", "mean": float(r[f"{m}_mean"]), "std": float(r.get(f"{m}_std", np.nan))})
    return pd.DataFrame(rows, columns=LONG_COLUMNS)


def _parse(key: str, frame: pd.DataFrame) -> pd.DataFrame:
    if key in ("table1", "table3"):
        return _wide_to_long(frame, key)
    if key == "table2":  # CoraFull ACE, means only: backbone, UnCal, GATS, SimCalib
        methods = [c for c in frame.columns if c != "backbone"]
        rows = [{"table": key, "dataset": "CoraFull", "backbone": r["backbone"], "method": m, "metric": "ace",
                 "mean": float(r[m]), "std": np.nan} for _, r in frame.iterrows() for m in methods]
        return pd.DataFrame(rows, columns=LONG_COLUMNS)
    if key == "table4":  # CoraFull w sweep: backbone, w, ece_mean, ece_std
        rows = [{"table": key, "dataset": "CoraFull", "backbone": r["backbone"], "method": w_method(r["w"]),
                 "metric": "ece", "mean": float(r["ece_mean"]), "std": float(r["ece_std"])} for _, r in frame.iterrows()]
        return pd.DataFrame(rows, columns=LONG_COLUMNS)
    raise KeyError(key)


def load_paper_tables(paper_dir: str | os.PathLike | None = None) -> PaperTables:
    """The paper's tables from ``paper_dir`` (or ``$SIMCALIB_PAPER_DIR``); missing parts become notes."""
    folder = resolve_paper_dir(paper_dir)
    notes: list[str] = []
    parts = []
    if folder is None:
        notes.append(f"No paper folder given (--paper-dir or ${PAPER_DIR_ENV}): paper-vs-ours comparisons are skipped.")
    elif not folder.is_dir():
        notes.append(f"Paper folder {folder} does not exist: paper-vs-ours comparisons are skipped.")
        folder = None
    else:
        for key, name in PAPER_FILES.items():
            path = folder / name
            if not path.is_file():
                notes.append(f"{path} is absent: the comparison with the paper's {key} is skipped.")
                continue
            try:
                parts.append(_parse(key, pd.read_csv(path)))
            except (KeyError, ValueError, pd.errors.ParserError) as exc:
                raise DataCorruptError(f"{path}: unexpected layout ({exc}); restore the paper's CSV") from None
    long = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=LONG_COLUMNS)
    return PaperTables(folder, long, notes)


__all__ = ["PAPER_DIR_ENV", "PAPER_FILES", "PaperTables", "load_paper_tables", "resolve_paper_dir", "w_method"]
