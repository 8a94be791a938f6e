"""What keeps a results folder trustworthy: each row's run definition, one writer at a time, checked readers.

The rows themselves are read and written by :mod:`simcalib.store.results_store`; this module holds the checks it
applies to them, the folder lock its writers hold, and a fault hook for tests.

* **Run definition.** Every results row records, beside its seed, what else defines its run: ``split_digest``
  (the node indices of its split's folds and test set), ``data_digest`` (the processed graph) and
  ``split_source`` (``fixed:<file>`` or ``generated``). :func:`check_append` refuses to add runs to a file
  whose rows of the same split, dataset or run were computed on another definition; rows written before
  these columns existed have them empty, which counts as unknown (never refused). ``backbone_options`` names
  the backbone's settings beyond the dataset's defaults (``default``, or e.g. ``attention=csr``); a file
  refuses rows of one benchmark trained under other settings than its rows (another kernel trains another
  backbone, so its rows would mix silently).
* **Calibrator definition.** ``calibrator_options`` holds every option a row's calibrator was built with (its
  class and constructor options, resolved for the benchmark: :func:`simcalib.calibrators.calibrator_definition`)
  and ``calibrator_digest`` a digest of them. A file refuses to hold one calibrator of one benchmark under two
  definitions, and :func:`check_append` refuses to add runs of a calibrator whose definition differs from its
  rows already there; rows written before these columns have them empty (unknown, never refused).
* **One writer per folder.** :func:`results_lock` holds ``<folder>/.simcalib.lock`` (``fcntl.flock``, with the
  owner's pid, host and command written inside) for as long as a command writes there. A second command on
  the same folder fails with a line naming the holder, or waits with ``--wait``. The kernel drops the lock of
  a process that dies, so the lock of a killed command is taken over by the next one.
* **Checked readers.** :func:`check_results` refuses a results table that holds a run key twice or one split
  (or dataset) under two digests, listing the offending keys; ``dedupe=True`` keeps the first of duplicates
  that are identical except for their timing.
* **Fault hook.** With ``SIMCALIB_FAULT_KILL_AFTER=N`` a process kills itself (SIGKILL) right after its N-th
  finished run is written (:func:`finished_run`), so tests can interrupt a benchmark or study at an exact
  point and check that the same command resumes it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from simcalib.errors import ConfigError, DataCorruptError, SimCalibError

DEFINITION_COLUMNS = ["split_digest", "data_digest", "split_source"]
BACKBONE_OPTIONS_COLUMN = "backbone_options"
CALIBRATOR_OPTIONS_COLUMN = "calibrator_options"
CALIBRATOR_DIGEST_COLUMN = "calibrator_digest"
# A run's rows are identified by these (the seed follows from them under one study seed).
RUN_KEY = ["dataset", "backbone", "calibrator", "split", "init", "fold", "label_rate"]
LOCK_NAME = ".simcalib.lock"
FAULT_ENV = "SIMCALIB_FAULT_KILL_AFTER"


class ResultsLockedError(SimCalibError):
    """Another process writes to the same results folder."""


class ResultsWriteError(SimCalibError):
    """A results folder cannot be written (read-only, full disk)."""


# ---------------------------------------------------------------------------------------------------------
# Run definitions


def comparable_rate(value) -> float:
    """A label rate as a comparable number (written with 10 significant digits; NaN when unknown)."""
    try:
        return round(float(value), 6)
    except (TypeError, ValueError):
        return float("nan")


def is_known(value) -> bool:
    return value is not None and not (isinstance(value, float) and np.isnan(value)) and str(value) not in ("", "nan")


def _run_tag(row) -> str:
    return (f"{row['dataset']} {row['backbone']} s{int(row['split'])} i{int(row['init'])} f{int(row['fold'])} "
            f"(label rate {comparable_rate(row['label_rate']):g})")


def check_append(existing: pd.DataFrame, planned: Sequence[dict], path: Path, remedy: str,
                 definitions: dict[tuple[str, str, str], str] | None = None) -> None:
    """Refuse (ConfigError, one line) to add the runs ``planned`` (one dict per run: dataset, backbone, split,
    init, fold, label_rate, seed and the :data:`DEFINITION_COLUMNS`) to the results ``existing`` of ``path``
    when a row already there of the same split, dataset or run was computed on another definition, or (with
    ``definitions``: (dataset, backbone, calibrator) -> the calibrator digest the new rows will have) a row of
    the same calibrator and benchmark under another calibrator definition. Empty (unknown) digests in
    ``existing`` are not compared."""
    if existing.empty or not planned:
        return
    check_calibrator_definitions(existing, definitions or {}, path)
    splits, data, seeds, benchmarks = {}, {}, {}, {}
    for run in planned:
        rate = comparable_rate(run["label_rate"])
        splits[(run["dataset"], int(run["split"]), rate)] = run
        data[run["dataset"]] = run
        benchmarks[(run["dataset"], run["backbone"])] = run
        seeds[(run["dataset"], run["backbone"], int(run["split"]), int(run["init"]), int(run["fold"]), rate)] = run
    conflicts: list[str] = []
    columns = set(existing.columns)
    for row in existing.to_dict("records"):
        try:
            rate = comparable_rate(row.get("label_rate"))
            split = int(row["split"])
        except (TypeError, ValueError):
            continue
        ours = splits.get((row["dataset"], split, rate))
        if ours is not None and "split_digest" in columns and is_known(row.get("split_digest")) \
                and str(row["split_digest"]) != ours["split_digest"]:
            conflicts.append(f"{_run_tag(row)} was computed on another split (split_digest {row['split_digest']}, "
                             f"{row.get('split_source') if is_known(row.get('split_source')) else 'source unknown'}) "
                             f"than this one ({ours['split_digest']}, {ours['split_source']})")
            continue
        ours = data.get(row["dataset"])
        if ours is not None and "data_digest" in columns and is_known(row.get("data_digest")) \
                and str(row["data_digest"]) != ours["data_digest"]:
            conflicts.append(f"{_run_tag(row)} was computed on another processed graph of {row['dataset']} "
                             f"(data_digest {row['data_digest']}, here {ours['data_digest']})")
            continue
        ours = benchmarks.get((row["dataset"], row["backbone"]))
        if ours is not None and is_known(row.get(BACKBONE_OPTIONS_COLUMN)) and BACKBONE_OPTIONS_COLUMN in ours \
                and str(row[BACKBONE_OPTIONS_COLUMN]) != ours[BACKBONE_OPTIONS_COLUMN]:
            conflicts.append(f"{_run_tag(row)} was computed on a backbone trained under other settings "
                             f"(backbone_options {row[BACKBONE_OPTIONS_COLUMN]}, here {ours[BACKBONE_OPTIONS_COLUMN]})")
            continue
        try:
            ours = seeds.get((row["dataset"], row["backbone"], split, int(row["init"]), int(row["fold"]), rate))
        except (TypeError, ValueError):
            continue
        if ours is not None and is_known(row.get("seed")) and int(row["seed"]) != int(ours["seed"]):
            conflicts.append(f"{_run_tag(row)} was computed under another seed ({int(row['seed'])}, here "
                             f"{int(ours['seed'])}: another --seed)")
    if conflicts:
        more = f" (and {len(conflicts) - 1} more rows)" if len(conflicts) > 1 else ""
        raise ConfigError(f"{path}: refusing to add runs: {conflicts[0]}{more}; {remedy}")


def check_calibrator_definitions(existing: pd.DataFrame, definitions: dict[tuple[str, str, str], str],
                                 path: Path) -> None:
    """Refuse (ConfigError) when a row of ``existing`` has a known calibrator digest other than the one
    ``definitions`` gives its (dataset, backbone, calibrator): new rows would mix two definitions."""
    if not definitions or CALIBRATOR_DIGEST_COLUMN not in existing.columns:
        return
    for row in existing.to_dict("records"):
        key = (row["dataset"], row["backbone"], row["calibrator"])
        ours = definitions.get(key)
        if ours is not None and is_known(row.get(CALIBRATOR_DIGEST_COLUMN)) and str(row[CALIBRATOR_DIGEST_COLUMN]) != ours:
            raise ConfigError(
                f"{path}: refusing to add runs: its {' '.join(key[:2])} rows of {key[2]} were computed under another "
                f"definition of {key[2]} (calibrator_digest {row[CALIBRATOR_DIGEST_COLUMN]}, here {ours}; their "
                f"options are in the calibrator_options column): move those rows to another file, or give "
                f"{key[2]} the options they were computed with, or use another output folder")


# ---------------------------------------------------------------------------------------------------------
# Checked reading


def _keys_text(frame: pd.DataFrame, limit: int = 6) -> str:
    tags = [f"{r['dataset']}/{r['backbone']}/{r['calibrator']} s{r['split']} i{r['init']} f{r['fold']} "
            f"L={comparable_rate(r['label_rate']):g}" for r in frame.drop_duplicates(subset=RUN_KEY).to_dict("records")]
    return ", ".join(tags[:limit]) + (f" ... ({len(tags)} keys)" if len(tags) > limit else "")


def check_results(frame: pd.DataFrame, where: str, dedupe: bool = False,
                  ignore: Iterable[str] = ("fit_seconds", "source")) -> pd.DataFrame:
    """``frame`` (results rows read from ``where``) when every run key appears once and every split and
    dataset has one digest; else DataCorruptError listing the offending keys. With ``dedupe`` the first of
    rows that repeat a key and agree in every column but ``ignore`` is kept (other repeats still refuse)."""
    if frame.empty or not set(RUN_KEY[:-1]) <= set(frame.columns):
        return frame
    keyed = frame.assign(label_rate=[comparable_rate(v) for v in frame["label_rate"]] if "label_rate" in frame
                         else float("nan"))
    keyed["label_rate"] = keyed["label_rate"].fillna(-1.0)
    repeated = keyed.duplicated(subset=RUN_KEY, keep=False)
    if repeated.any() and dedupe:
        compare = [c for c in keyed.columns if c not in set(ignore)]
        identical_repeat = keyed.astype(str).duplicated(subset=compare, keep="first")
        keep = ~identical_repeat
        frame, keyed = frame[keep.to_numpy()], keyed[keep.to_numpy()]
        repeated = keyed.duplicated(subset=RUN_KEY, keep=False)
    if repeated.any():
        hint = ("they differ, so --dedupe cannot choose; remove the wrong rows" if dedupe else
                "remove the repeats, or rerun with --dedupe to keep the first of identical ones")
        files = (f" in the results.csv of {', '.join(sorted(map(str, set(keyed.loc[repeated, 'source']))))}"
                 if "source" in keyed.columns else "")
        raise DataCorruptError(f"{where}: {int(keyed.duplicated(subset=RUN_KEY).sum())} result row(s) repeat a "
                               f"run{files} ({_keys_text(keyed[repeated])}); a run counted twice would bias every "
                               f"mean and test: {hint}")
    for column, group, what, see in (("split_digest", ["dataset", "split", "label_rate"], "split", "split_source"),
                                     ("data_digest", ["dataset"], "dataset", "split_source"),
                                     (BACKBONE_OPTIONS_COLUMN, ["dataset", "backbone"], "benchmark",
                                      BACKBONE_OPTIONS_COLUMN),
                                     (CALIBRATOR_DIGEST_COLUMN, ["dataset", "backbone", "calibrator"],
                                      "calibrator", CALIBRATOR_OPTIONS_COLUMN)):
        if column not in keyed.columns:
            continue
        known = keyed[[is_known(v) for v in keyed[column]]]
        if known.empty:
            continue
        counts = known.groupby(group)[column].nunique()
        mixed = counts[counts > 1]
        if len(mixed):
            names = ", ".join(" ".join(str(v) for v in (k if isinstance(k, tuple) else (k,))) for k in mixed.index[:6])
            raise DataCorruptError(f"{where}: rows of one {what} were computed on different {column} values ({names}); "
                                   f"they are not one protocol: keep the rows of one {what} definition (see the "
                                   f"{see} column) or put the others in another folder")
    return frame


# ---------------------------------------------------------------------------------------------------------
# One writer per results folder


def _holder(path: Path) -> dict:
    try:
        return json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return {}


def _written_holder(path: Path, patience: float = 2.0) -> dict:
    """The holder's details once it has written them: a process that has just taken the lock writes them a moment
    later, so an empty or half-written record is read again for up to ``patience`` seconds."""
    deadline = time.monotonic() + patience
    holder = _holder(path)
    while not holder and time.monotonic() < deadline:
        time.sleep(0.05)
        holder = _holder(path)
    return holder


def _describe(holder: dict) -> str:
    if not holder:
        return "another process"
    return (f"pid {holder.get('pid')} on {holder.get('host')} ({holder.get('command', '?')}, since "
            f"{holder.get('since', '?')})")


def _alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, TypeError, ValueError):
        return True
    return True


@contextlib.contextmanager
def results_lock(folder: str | os.PathLike, command: str | None = None, wait: bool = False,
                 notify=None) -> Iterator[Path]:
    """Hold the results folder ``folder`` for this process (see the module docstring); ResultsLockedError
    when another process holds it and ``wait`` is false, ResultsWriteError when the folder is not writable.
    ``notify`` (a callable taking one line) hears about waiting and about a lock taken over from a dead
    process. Re-entrant within a process: an inner lock of a folder this process holds is a no-op."""
    folder = Path(folder)
    key = str(folder.resolve())
    if key in _HELD:
        yield folder / LOCK_NAME
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise ResultsWriteError(f"cannot write to the results folder {folder} ({exc.strerror}); make it writable "
                                "or choose another output folder (nothing was computed)") from None
    path = folder / LOCK_NAME
    try:
        previous = _holder(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _written_holder(path)
            if not wait:
                raise ResultsLockedError(
                    f"{folder} is being written by {_describe(holder)}; two writers would duplicate runs: wait "
                    "for it to finish, stop it, or rerun with --wait (or use another output folder)") from None
            if notify:
                notify(f"waiting for {_describe(holder)} to release {folder} ...")
            fcntl.flock(fd, fcntl.LOCK_EX)
            previous = {}
        if previous.get("pid") and previous.get("host") == socket.gethostname() and not _alive(previous["pid"]) \
                and notify:
            notify(f"taking over the lock of {folder} left by {_describe(previous)}, which is no longer running")
        owner = {"pid": os.getpid(), "host": socket.gethostname(),
                 "command": command or " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])[:300],
                 "since": time.strftime("%Y-%m-%d %H:%M:%S")}
        record = (json.dumps(owner) + "\n").encode()
        os.pwrite(fd, record, 0)  # written before the truncation, so a reader never finds the file emptied by us
        os.ftruncate(fd, len(record))
        _HELD.add(key)
        try:
            yield path
        finally:
            _HELD.discard(key)
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # releases the flock


_HELD: set[str] = set()


def write_error(path: Path, exc: OSError) -> ResultsWriteError:
    """The one-line error of a failed results write (rows written before it are kept)."""
    reason = "the disk is full" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
    return ResultsWriteError(f"could not write {path} ({reason}); the rows written before are kept: fix the cause "
                             "and run the same command to compute the rest")


# ---------------------------------------------------------------------------------------------------------
# Fault injection


_finished = 0


def finished_run() -> None:
    """Count one finished (written) run; with ``$SIMCALIB_FAULT_KILL_AFTER=N`` the N-th kills this process."""
    global _finished
    limit = os.environ.get(FAULT_ENV)
    if not limit:
        return
    _finished += 1
    try:
        n = int(limit)
    except ValueError:
        raise ConfigError(f"${FAULT_ENV} must be a whole number of runs, got {limit!r}") from None
    if _finished >= n:
        sys.stdout.flush()
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)


__all__ = ["BACKBONE_OPTIONS_COLUMN", "CALIBRATOR_DIGEST_COLUMN", "CALIBRATOR_OPTIONS_COLUMN", "DEFINITION_COLUMNS", "FAULT_ENV", "LOCK_NAME", "RUN_KEY", "ResultsLockedError", "ResultsWriteError",
           "check_append", "check_calibrator_definitions", "check_results", "finished_run", "results_lock", "write_error"]
