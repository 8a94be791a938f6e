"""Collecting a study's results: every ``results.csv`` below a folder, and the saved test predictions.

A study writes one results folder per benchmark (``DIR/results.csv``, and with ``--save-predictions``
``DIR/predictions/<Dataset>_<Backbone>_s<split>_i<init>_f<fold>_<Calibrator>.npz``). The report reads all of
them, concatenated; it never retrains. A folder whose rows repeat a run (same dataset, backbone, calibrator,
split, init, fold and label rate), or hold one split or dataset under two digests (two split definitions
pooled as one), is refused with the offending keys (:func:`simcalib.store.integrity.check_results`): a run counted
twice would bias every mean and test. Within :func:`dedupe_identical` (``simcalib report --dedupe``) the first
of repeats that agree in every column but their timing is kept. A run present in two folders of an explicit
list of folders is counted once (the later folder's row).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from simcalib.errors import ConfigError, DataCorruptError, DataMissingError
from simcalib.store.integrity import check_results
from simcalib.store.results_store import KEY_COLUMNS, RESULT_COLUMNS, read_results

_DEDUPE = contextvars.ContextVar("simcalib_report_dedupe", default=False)


@contextlib.contextmanager
def dedupe_identical() -> Iterator[None]:
    """Inside the block, results loading keeps the first of identical repeated rows instead of refusing."""
    token = _DEDUPE.set(True)
    try:
        yield
    finally:
        _DEDUPE.reset(token)

PROTOCOL_LABEL_RATE = 0.15  # 3 folds x 5% of each class (PROTOCOL section 2)
REQUIRED_COLUMNS = [*KEY_COLUMNS, "ece"]
PREDICTION_NAME = re.compile(
    r"^(?P<dataset>[^_]+)_(?P<backbone>[^_]+)_s(?P<split>\d+)_i(?P<init>\d+)_f(?P<fold>\d+)_(?P<calibrator>.+)\.npz$")


@dataclass
class StudyResults:
    """All results rows below one folder, the saved predictions, and notes for the reader."""

    root: Path
    rows: pd.DataFrame  # RESULT_COLUMNS (+ "source"), every label rate
    predictions: pd.DataFrame  # one row per npz file: KEY_COLUMNS + label_rate + path
    notes: list[str] = field(default_factory=list)
    left_out: str = ""  # the study's incomplete benchmarks, whose rows are left out (simcalib.report.completeness)

    @property
    def main_label_rate(self) -> float | None:
        """The label rate of the paper's tables: the protocol's 15% when present, else the most common one."""
        rates = self.rows["label_rate"].dropna()
        if rates.empty:
            return None
        if np.isclose(rates, PROTOCOL_LABEL_RATE).any():
            return PROTOCOL_LABEL_RATE
        return float(rates.round(6).mode().iloc[0])

    def main_rows(self) -> pd.DataFrame:
        """Rows at the main label rate (the data-efficiency runs at other rates are kept out of Tables 1-4)."""
        rate = self.main_label_rate
        if rate is None:
            return self.rows
        return self.rows[np.isclose(self.rows["label_rate"], rate) | self.rows["label_rate"].isna()]

    def main_predictions(self) -> pd.DataFrame:
        rate = self.main_label_rate
        if rate is None or self.predictions.empty:
            return self.predictions
        return self.predictions[np.isclose(self.predictions["label_rate"], rate) | self.predictions["label_rate"].isna()]


def select_splits(study: StudyResults, splits: Sequence[int] | None) -> StudyResults:
    """Only the runs of ``splits`` (e.g. the splits no choice was made on); ``None`` keeps every run."""
    if splits is None:
        return study
    wanted = sorted({int(s) for s in splits})
    present = sorted(int(s) for s in pd.to_numeric(study.rows["split"], errors="coerce").dropna().unique())
    if not set(wanted) & set(present):
        raise ConfigError(f"no results rows for split(s) {wanted}; the results have split(s) {present}")
    keep = lambda frame: frame[pd.to_numeric(frame["split"], errors="coerce").isin(wanted)].reset_index(drop=True)  # noqa: E731
    predictions = keep(study.predictions) if len(study.predictions) else study.predictions
    note = f"Only the runs of split(s) {', '.join(map(str, wanted))} are included (a subset of the protocol's 5 splits)."
    return replace(study, rows=keep(study.rows), predictions=predictions, notes=[*study.notes, note])


def find_results_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("results.csv") if p.is_file())


def read_results_file(path: Path) -> pd.DataFrame:
    """One results.csv, checked for the columns the report needs, repeated runs and mixed digests."""
    try:
        frame = read_results(path)
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise DataCorruptError(f"{path}: not a readable results CSV ({exc}); delete or repair it and rerun") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing and len(frame.columns):
        raise DataCorruptError(f"{path}: missing column(s) {', '.join(missing)}; expected the results format "
                               f"({', '.join(RESULT_COLUMNS)}) written by `simcalib benchmark`")
    return _checked(frame, str(path))


def _checked(rows: pd.DataFrame, where: str) -> pd.DataFrame:
    before = len(rows)
    rows = check_results(rows, where, dedupe=_DEDUPE.get())
    if len(rows) < before:
        _DEDUPED.append(f"{before - len(rows)} identical repeated result row(s) in {where} were counted once (--dedupe).")
    return rows


_DEDUPED: list[str] = []  # notes of the rows --dedupe dropped, collected by load_study_results


def load_study_results(root: str | os.PathLike | Sequence[str | os.PathLike]) -> StudyResults:
    """Read every ``results.csv`` and ``predictions/*.npz`` below ``root`` (a folder or one results.csv).

    ``root`` may also be a list of folders (e.g. the committed 75-run results of the small benchmarks and the
    offline pass of the large ones): each is read as one, then the rows are concatenated; a run present in
    two folders is counted once (the later folder's row), with a note."""
    if not isinstance(root, (str, os.PathLike)):
        roots = [Path(r) for r in root]
        if not roots:
            raise ConfigError("no results folder given; name at least one")
        if len(roots) > 1:
            return _merge([load_study_results(r) for r in roots])
        root = roots[0]
    root = Path(root)
    if not root.exists():
        raise DataMissingError(f"results folder {root} does not exist; pass the --out folder of `simcalib benchmark` "
                               "or a study's output folder")
    files = [root] if root.is_file() else find_results_files(root)
    base = root.parent if root.is_file() else root
    notes: list[str] = []
    frames = []
    _DEDUPED.clear()
    for path in files:
        frame = read_results_file(path)
        if len(frame):
            frames.append(frame.assign(source=str(path.parent.relative_to(base)) or "."))
    if not files:
        notes.append(f"No results.csv found below {root}: every results cell reads 'not run'.")
    rows = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=[*RESULT_COLUMNS, "source"])
    for column in RESULT_COLUMNS:
        if column not in rows.columns:
            rows[column] = np.nan
    rows = _checked(rows, f"the results below {root}")  # the same run in two of its results.csv files
    notes += _DEDUPED
    rows = _drop_non_finite(rows, notes)
    predictions = index_predictions(base if root.is_file() else root, rows)
    return StudyResults(root, rows.reset_index(drop=True), predictions, notes)


def _merge(parts: list[StudyResults]) -> StudyResults:
    """Several folders' results as one study; ``source`` is prefixed with each folder, so it stays unique."""
    notes = [note for part in parts for note in part.notes]
    rows = pd.concat([part.rows.assign(source=[str(part.root / s) for s in part.rows["source"]])
                      for part in parts if len(part.rows)] or [parts[0].rows], ignore_index=True)
    rows = _deduplicate(rows, notes)
    rows = check_results(rows, "the results of " + ", ".join(str(part.root) for part in parts))  # mixed digests
    predictions = pd.concat([part.predictions for part in parts], ignore_index=True)
    root = Path(", ".join(str(part.root) for part in parts))  # shown to the reader as the list it is
    return StudyResults(root, rows.reset_index(drop=True), predictions, notes)


def _deduplicate(rows: pd.DataFrame, notes: list[str]) -> pd.DataFrame:
    if rows.empty:
        return rows
    keys = [*KEY_COLUMNS, "seed", "label_rate"]
    duplicated = rows.duplicated(subset=keys, keep="last")
    if duplicated.any():
        notes.append(f"{int(duplicated.sum())} repeated result rows (same run, seed and label rate) were counted once.")
    return rows[~duplicated]


def _drop_non_finite(rows: pd.DataFrame, notes: list[str]) -> pd.DataFrame:
    """Rows whose ECE is missing or not finite cannot enter a mean; they are reported, not silently used."""
    if rows.empty:
        return rows
    ece = pd.to_numeric(rows["ece"], errors="coerce")
    bad = ~np.isfinite(ece.to_numpy(dtype=float))
    if bad.any():
        where = rows.loc[bad, ["dataset", "backbone", "calibrator"]].drop_duplicates().astype(str).agg("/".join, axis=1)
        notes.append(f"{int(bad.sum())} result rows with a missing or non-finite ECE were left out "
                     f"({', '.join(sorted(where))[:300]}).")
    return rows[~bad]


def index_predictions(root: Path, rows: pd.DataFrame) -> pd.DataFrame:
    """One row per saved prediction file below ``root``, with the label rate of the results.csv beside it."""
    records = []
    for path in sorted(root.rglob("*.npz")):
        if path.parent.name != "predictions" or path.name.endswith(".tmp.npz"):
            continue
        match = PREDICTION_NAME.match(path.name)
        if not match:
            continue
        record = match.groupdict()
        for key in ("split", "init", "fold"):
            record[key] = int(record[key])
        record["label_rate"] = _folder_label_rate(path.parent.parent, root, rows)
        record["path"] = str(path)
        records.append(record)
    columns = [*KEY_COLUMNS, "label_rate", "path"]
    return pd.DataFrame(records, columns=columns)


def _folder_label_rate(folder: Path, root: Path, rows: pd.DataFrame) -> float:
    """The single label rate of ``folder/results.csv`` (NaN when absent or mixed)."""
    if rows.empty:
        return float("nan")
    try:
        source = str(folder.relative_to(root)) or "."
    except ValueError:
        return float("nan")
    rates = rows.loc[rows["source"] == source, "label_rate"].dropna().unique()
    return float(rates[0]) if len(rates) == 1 else float("nan")


@dataclass(frozen=True)
class RunPredictions:
    probs: np.ndarray  # [N_test, K]
    labels: np.ndarray  # [N_test]
    feature_distance: np.ndarray | None  # [N_test] squared Mahalanobis distance to the nearest prototype


def load_predictions(path: str | os.PathLike) -> RunPredictions:
    try:
        with np.load(path) as data:
            probs, labels = np.asarray(data["probs"], dtype=np.float64), np.asarray(data["labels"], dtype=np.int64)
            distance = np.asarray(data["feature_distance"], dtype=np.float64) if "feature_distance" in data else None
    except (OSError, KeyError, ValueError) as exc:
        raise DataCorruptError(f"{path}: not a predictions file with 'probs' and 'labels' ({exc}); "
                               "rerun the benchmark with --save-predictions") from None
    if probs.ndim != 2 or labels.shape != (len(probs),) or (distance is not None and distance.shape != labels.shape):
        raise DataCorruptError(f"{path}: inconsistent shapes probs {probs.shape}, labels {labels.shape}")
    return RunPredictions(probs, labels, distance)


__all__ = ["PROTOCOL_LABEL_RATE", "RunPredictions", "StudyResults", "dedupe_identical", "index_predictions",
           "load_predictions", "load_study_results"]
