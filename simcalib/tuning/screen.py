"""Named option sets of calibrators scored side by side on labelled nodes only: a screen.

A candidates file maps a name to a calibrator and its options::

    holdout_stop: {calibrator: SimCalib, options: {stopping: holdout}}
    gats: {calibrator: GATS}

Each candidate is scored on every run with the search objective (:class:`CalibrationObjective`: by default
NLL and ECE of out-of-part predictions on the calibration fold, never a test node), so a screen and a
search rank options by the same yardstick. Rows are appended to a CSV as they are computed, one per
(candidate, run), and a screen run again with the same file skips the rows it already has.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from simcalib.calibrators import canonical_calibrator
from simcalib.errors import ConfigError, SimCalibError
from simcalib.experiment.protocol import ProtocolSettings, Run
from simcalib.metrics import ece, nll
from simcalib.tuning.objective import CalibrationObjective, ObjectiveSettings

SCREEN_COLUMNS = ["candidate", "calibrator", "run", "dataset", "backbone", "split", "init", "fold", "ece", "nll",
                  "seconds"]


@dataclass(frozen=True)
class Candidate:
    name: str
    calibrator: str
    options: dict = field(default_factory=dict)


def read_candidates(path: str | os.PathLike) -> list[Candidate]:
    """The candidates of a YAML file, validated: a ConfigError naming the file and the candidate otherwise."""
    path = Path(path)
    try:
        content = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"candidates file {path} does not exist") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"candidates file {path} is not valid YAML ({exc})") from None
    if not isinstance(content, dict) or not content:
        raise ConfigError(f"candidates file {path} must map names to {{calibrator: NAME, options: {{...}}}}")
    candidates = []
    for name, spec in content.items():
        if not isinstance(spec, dict) or "calibrator" not in spec or set(spec) - {"calibrator", "options"}:
            raise ConfigError(f"{path}: candidate {name!r} must be {{calibrator: NAME, options: {{...}}}} "
                              f"(options optional), got {spec!r}")
        options = spec.get("options") or {}
        if not isinstance(options, dict):
            raise ConfigError(f"{path}: options of candidate {name!r} must be a mapping, got {options!r}")
        try:
            calibrator = canonical_calibrator(str(spec["calibrator"]))
        except SimCalibError as exc:  # an unknown name: the message lists the valid ones
            raise ConfigError(f"{path}: candidate {name!r}: {exc}") from None
        candidates.append(Candidate(str(name), calibrator, dict(options)))
    return candidates


def screen(candidates: Sequence[Candidate], runs: Sequence[Run], settings: ProtocolSettings, out: str | os.PathLike,
           objective: ObjectiveSettings | None = None,
           progress: Callable[[dict], None] | None = None) -> pd.DataFrame:
    """Score every candidate on every run, appending rows to the CSV ``out``; rows already there are kept and
    not computed again. Returns every row of ``out``."""
    out = Path(out)
    done = pd.read_csv(out) if out.is_file() else pd.DataFrame(columns=SCREEN_COLUMNS)
    missing = [c for c in SCREEN_COLUMNS if c not in done.columns]
    if missing:
        raise ConfigError(f"{out} is not a screen's output (no column {missing[0]!r}); choose another --out")
    seen = set(zip(done["candidate"], done["run"]))
    graphs: dict = {}  # one calibration graph per run, shared by every calibrator's objective
    objectives: dict[str, CalibrationObjective] = {}
    for candidate in candidates:
        objective_of = objectives.setdefault(candidate.calibrator, CalibrationObjective(
            candidate.calibrator, runs, settings, objective, graphs=graphs))
        for run in runs:
            if (candidate.name, run.tag()) in seen:
                continue
            start = time.perf_counter()
            probs, labels = objective_of.scored_predictions(run, dict(candidate.options))
            row = {"candidate": candidate.name, "calibrator": candidate.calibrator, "run": run.tag(),
                   "dataset": run.dataset, "backbone": run.backbone, "split": run.split, "init": run.init,
                   "fold": run.fold, "ece": 100 * ece(probs, labels), "nll": nll(probs, labels),
                   "seconds": time.perf_counter() - start}
            out.parent.mkdir(parents=True, exist_ok=True)
            pd.DataFrame([row], columns=SCREEN_COLUMNS).to_csv(out, mode="a", header=not out.is_file(), index=False)
            if progress is not None:
                progress(row)
    return pd.read_csv(out)


def summarise_screen(rows: pd.DataFrame, order: Iterable[str] | None = None, metric: str = "nll") -> pd.DataFrame:
    """Mean ECE and NLL per candidate and benchmark over its runs, with the run count; candidates sorted by
    their mean ``metric`` (or in ``order``)."""
    summary = rows.groupby(["candidate", "dataset", "backbone"], as_index=False).agg(
        runs=("run", "size"), ece=("ece", "mean"), nll=("nll", "mean"))
    if order is not None:
        rank = {name: i for i, name in enumerate(order)}
        return summary.sort_values(["candidate"], key=lambda s: s.map(rank)).reset_index(drop=True)
    means = summary.groupby("candidate")[metric].mean()
    return summary.sort_values("candidate", key=lambda s: s.map(means), kind="stable").reset_index(drop=True)


__all__ = ["SCREEN_COLUMNS", "Candidate", "read_candidates", "screen", "summarise_screen"]
