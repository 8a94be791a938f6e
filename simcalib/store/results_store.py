"""The results store: one CSV per results folder (``results.csv``), a row per (run, calibrator).

Rows are appended one run at a time and flushed (:func:`append_rows`), so an interrupted benchmark keeps
what it computed; a last line cut off by a kill is not a row (:func:`read_results`) and is moved aside before
the next append. :func:`rewrite_results` replaces a file atomically in the same format. Before runs are
added, :func:`check_results_file` checks the file against their definitions, and :func:`copy_finished_rows`
copies finished rows from another results file (``--resume-from``); both rest on the checks of
:mod:`simcalib.store.integrity`. :func:`summarize` gives each benchmark's mean and std per calibrator.
"""

from __future__ import annotations

import io
import os
from collections.abc import Collection, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from simcalib.errors import ConfigError
from simcalib.metrics import BASE_METRIC_NAMES, BINARY_METRIC_NAMES, ESTIMATOR_NAMES, METRIC_NAMES
from simcalib.store.integrity import (
    BACKBONE_OPTIONS_COLUMN,
    CALIBRATOR_DIGEST_COLUMN,
    CALIBRATOR_OPTIONS_COLUMN,
    DEFINITION_COLUMNS,
    check_append,
    check_results,
    write_error,
)

KEY_COLUMNS = ["dataset", "backbone", "calibrator", "split", "init", "fold"]
# What a fitted calibrator reports of itself (Calibrator.audit): SimCalib's chosen grid point and the mean and
# std of its two temperatures over the test nodes; empty for the other calibrators.
AUDIT_COLUMNS = ["w", "t", "t_feat_mean", "t_feat_std", "t_move_mean", "t_move_std", "t_feat_spearman"]
# Which backbone a row was computed on: a digest of its logits. The same run trained on another CPU (or GPU)
# can be another backbone (float rounding can move the early stop), so rows of one run are comparable only
# if their digests agree; the report pairs runs on it. Empty in rows written before it existed.
# ``figure_bins``: the binned test predictions the paper's figures need (simcalib.analysis.figure_bins), for every
# calibrator; empty in rows written before it existed, and for calibrators other than UnCal, GATS and SimCalib in
# the passes that binned those three only (figure_bins.FIGURE_CALIBRATORS).
# DEFINITION_COLUMNS: the split and processed graph the run was computed on (simcalib.store.integrity); empty
# (unknown) in rows written before they existed.
# ESTIMATOR_NAMES (simcalib.metrics): estimators beside the binned metrics, last, where appending a row to a
# file written before them puts them (append_rows widens its header); such rows read them as missing (NaN).
# BACKBONE_OPTIONS_COLUMN (simcalib.store.integrity): the backbone's non-default settings (e.g. GAT's attention kernel),
# last for the same reason; empty (unknown) in rows written before it existed.
# After them, for the same reason: BINARY_METRIC_NAMES (simcalib.metrics: metrics of p(y = 1), empty for more than
# two classes), ``one_class_backbone`` (the backbone predicts one class on every test node), ``homophily_bins``
# (per local-homophily group of the test nodes: count and ECE, simcalib.analysis.homophily, as JSON), and the calibrator's
# resolved definition (CALIBRATOR_OPTIONS_COLUMN, CALIBRATOR_DIGEST_COLUMN: simcalib.store.integrity).
LATER_COLUMNS = [*BINARY_METRIC_NAMES, "one_class_backbone", "homophily_bins", CALIBRATOR_OPTIONS_COLUMN,
                 CALIBRATOR_DIGEST_COLUMN]
# What a selecting calibrator chose (the audit of simcalib.calibrators.autocal.AutoCal: the candidate's name, and
# every candidate's held-out score as JSON): columns of its rows only, after RESULT_COLUMNS (append_rows keeps a
# row's further columns there), empty in the other calibrators' rows of a file that holds them.
SELECTION_COLUMNS = ["selected", "selection_scores"]
RESULT_COLUMNS = [*KEY_COLUMNS, "seed", *BASE_METRIC_NAMES, "fit_seconds", "label_rate", *AUDIT_COLUMNS,
                  "backbone_digest", "figure_bins", *DEFINITION_COLUMNS, *ESTIMATOR_NAMES, BACKBONE_OPTIONS_COLUMN,
                  *LATER_COLUMNS]


def _complete_length(data: bytes) -> int:
    """How many leading bytes of a results CSV are whole lines. Every row is written with its newline, so a last
    line without one was cut off by a kill (a cut inside its last field still has every field: the newline is
    the only sure sign)."""
    return data.rfind(b"\n") + 1 if data and not data.endswith(b"\n") else len(data)


def read_results(path: str | os.PathLike) -> pd.DataFrame:
    """The rows of a results CSV; a last line cut off by a kill is not a row (the run is computed again)."""
    path = Path(path)
    if not path.is_file() or path.stat().st_size == 0:
        return pd.DataFrame(columns=RESULT_COLUMNS)
    data = path.read_bytes()
    complete = _complete_length(data)
    if complete == 0:
        return pd.DataFrame(columns=RESULT_COLUMNS)
    return pd.read_csv(io.BytesIO(data[:complete]) if complete < len(data) else path)


def _repair_last_line(path: Path) -> bool:
    """Move a cut-off last line of ``path`` into ``<path>.cut`` (kept for inspection), so an append starts on its
    own line and the cut run is computed again; True when the file is then empty."""
    data = path.read_bytes()
    complete = _complete_length(data)
    if complete < len(data):
        with open(path.with_name(path.name + ".cut"), "ab") as fh:
            fh.write(data[complete:] + b"\n")
        with open(path, "r+b") as fh:
            fh.truncate(complete)
    return complete == 0


def result_key(dataset, backbone, calibrator, split, init, fold, seed) -> tuple[str, ...]:
    """What identifies one results row: its :data:`KEY_COLUMNS` and seed, as text (as read back from CSV)."""
    return tuple(map(str, (dataset, backbone, calibrator, split, init, fold, seed)))


def result_keys(results: pd.DataFrame) -> list[tuple[str, ...]]:
    """The :func:`result_key` of every row of ``results``, in order."""
    return [tuple(r) for r in results[[*KEY_COLUMNS, "seed"]].astype(str).itertuples(index=False)]


def run_key(row) -> tuple:
    """The run a results row belongs to (every calibrator of a run shares it)."""
    return tuple(str(row[c]) for c in ("dataset", "backbone", "split", "init", "fold", "seed"))


def known_backbone_digests(results: pd.DataFrame) -> dict[tuple, set[str]]:
    """:func:`run_key` -> the backbone digests its rows in ``results`` name (rows written before the column:
    none)."""
    if "backbone_digest" not in results.columns:
        return {}
    known: dict[tuple, set[str]] = {}
    for row in results.dropna(subset=["backbone_digest"]).to_dict("records"):
        known.setdefault(run_key(row), set()).add(str(row["backbone_digest"]))
    return known


def append_rows(path: Path, rows: Sequence[dict]) -> None:
    """Append rows to a results CSV (header on first write), flushed so a crash keeps them."""
    if not rows:
        return
    frame = pd.DataFrame(rows)
    frame = frame[[c for c in RESULT_COLUMNS if c in frame.columns] + [c for c in frame.columns if c not in RESULT_COLUMNS]]
    try:
        new = not path.is_file() or path.stat().st_size == 0 or _repair_last_line(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if not new:
            header = list(pd.read_csv(path, nrows=0).columns)
            if header != list(frame.columns):  # e.g. a file written before a column existed: widen it, keep every row
                _rewrite_with_columns(path, header, list(frame.columns))
                frame = frame.reindex(columns=list(pd.read_csv(path, nrows=0).columns))
        text = frame.to_csv(header=new, index=False, float_format="%.10g")
        with open(path, "a", newline="") as fh:
            fh.write(text)  # one write per run
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        raise write_error(path, exc) from None


def _rewrite_with_columns(path: Path, header: list[str], extra: list[str]) -> None:
    """Rewrite ``path`` atomically with the union of its columns and ``extra`` (new ones empty)."""
    columns = header + [c for c in extra if c not in header]
    if columns == header:
        return
    rewrite_results(path, pd.read_csv(path).reindex(columns=columns))


def rewrite_results(path: Path, frame: pd.DataFrame) -> None:
    """Replace the results CSV ``path`` by ``frame`` atomically, in the format :func:`append_rows` writes (so the
    cells a caller did not change keep their text)."""
    tmp = path.with_name(path.name + ".tmp")
    frame.to_csv(tmp, index=False, float_format="%.10g")
    tmp.replace(path)


def copy_finished_rows(source: Path, results_path: Path, wanted: Collection[tuple[str, ...]],
                       planned: Sequence[dict] | None = None,
                       definitions: dict[tuple[str, str, str], str] | None = None) -> int:
    """Append to ``results_path`` the rows of ``source`` whose :func:`result_keys` are in ``wanted`` (the
    requested runs and calibrators, with this study seed's run seeds) and that ``results_path`` does not hold
    yet; returns how many. Refused (ConfigError) when a row to copy was computed on another split or graph
    than ``planned`` (the runs' definitions, :func:`simcalib.experiment.protocol.planned_runs`) or ``source`` repeats a
    run. With ``definitions`` ((dataset, backbone, calibrator) -> calibrator digest), a row whose known
    calibrator digest differs is not copied (it is of another definition of that calibrator: the run is
    computed again)."""
    check_resume_source(source)
    try:
        theirs = read_results(source)
    except Exception as exc:
        raise ConfigError(f"--resume-from {source}: not a readable results CSV ({exc})") from None
    missing = [c for c in RESULT_COLUMNS[:7] if c not in theirs.columns]
    if missing:
        raise ConfigError(f"--resume-from {source}: columns {missing} missing; give a results.csv of simcalib benchmark")
    have = set(result_keys(read_results(results_path)))
    take = [k in wanted and k not in have for k in result_keys(theirs)]
    if definitions and CALIBRATOR_DIGEST_COLUMN in theirs.columns:
        take = [t and not _other_definition(row, definitions)
                for t, row in zip(take, theirs.to_dict("records"))]
    rows = check_results(theirs[take], f"--resume-from {source}")
    if planned is not None:
        check_append(rows, planned, source, "--resume-from copies only rows of the same split and data definition: "
                     "run with the split source those rows used (see their split_source column)")
    append_rows(results_path, rows.to_dict("records"))
    return len(rows)


def _other_definition(row: dict, definitions: dict[tuple[str, str, str], str]) -> bool:
    ours = definitions.get((row["dataset"], row["backbone"], row["calibrator"]))
    digest = row.get(CALIBRATOR_DIGEST_COLUMN)
    known = digest is not None and not (isinstance(digest, float) and np.isnan(digest)) and str(digest) != ""
    return ours is not None and known and str(digest) != ours


def check_resume_source(source: str | os.PathLike) -> None:
    """ConfigError unless ``source`` (a --resume-from) is a file."""
    if not Path(source).is_file():
        raise ConfigError(f"--resume-from {source}: no such file; give the path of an existing results.csv")

def check_results_file(path: Path, planned: Sequence[dict],
                       definitions: dict[tuple[str, str, str], str] | None = None) -> pd.DataFrame:
    """The rows of the results file ``path`` when adding the runs ``planned`` (their identities and
    definitions, :func:`simcalib.experiment.protocol.planned_runs`) keeps it one protocol: no run twice, one digest per
    split and dataset, and none other than the runs' own, and (with ``definitions``, see
    :meth:`simcalib.experiment.plan.BenchmarkPlan.definitions`) each calibrator's rows of the definition it runs under now
    (else ConfigError / DataCorruptError naming the file, the run and what differs)."""
    existing = check_results(read_results(path), str(path))
    check_append(existing, planned, path,
                 "use the split source and data of those rows (their split_source column; --splits-dir, "
                 "$SIMCALIB_SPLITS_DIR, --generated-splits), or another --out", definitions)
    return existing


def summarize(results: pd.DataFrame, metrics: Sequence[str] = METRIC_NAMES) -> pd.DataFrame:
    """Mean and population std (ddof=0, as the GATS code) of every metric per benchmark and calibrator; a
    metric the rows do not have (a file written before its column) is NaN, as are runs without it."""
    results = results.assign(**{m: np.nan for m in metrics if m not in results.columns})
    groups = results.groupby(["dataset", "backbone", "calibrator"], sort=False)
    summary = groups[list(metrics)].agg(["mean", lambda s: float(np.std(s, ddof=0))])
    summary.columns = [f"{m}_{'mean' if stat == 'mean' else 'std'}" for m, stat in summary.columns]
    summary.insert(0, "runs", groups.size())
    return summary.reset_index()



__all__ = ["AUDIT_COLUMNS", "KEY_COLUMNS", "LATER_COLUMNS", "RESULT_COLUMNS", "SELECTION_COLUMNS", "append_rows", "check_results_file",
           "check_resume_source", "copy_finished_rows", "known_backbone_digests", "read_results", "result_key",
           "result_keys", "rewrite_results", "run_key", "summarize"]
