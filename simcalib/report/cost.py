r"""What a study costs, read back from its finished runs, and what the rest of it will cost.

Per benchmark of the study (a protocol or conformal study's dataset x backbone; a shift study's dataset x backbone
x property, counted in that property's results folder), from what a pass left on disk:

* a backbone's cost, from the backbone cache (every cached backbone stores the epochs to its early stop and its
  training seconds); where the cache also holds backbones of other studies on the same graph, only those whose
  logits digest is among the rows' ``backbone_digest`` count. A benchmark with no backbone in the cache takes its
  seconds per run from a table of recorded backbone seconds, where one is given (``recorded``: for instance the
  headline's, ``reports/performance/reprojected_cost.csv``), marked as such; without either it is not projected;
* each calibrator's fit seconds :math:`f_c`, the mean ``fit_seconds`` of its rows. A calibrator with no row on a
  benchmark takes the seconds of the same calibrator on the most similar benchmark with rows (the same backbone
  first, then the nearest node count), scaled by node count: :math:`f_c(b) = f_c(b') \, n(b) / n(b')`; the source
  may be any benchmark of the rows read, planned by the study or not. A calibrator with no row anywhere has no
  cost to project: it is named (``unmeasured``), never counted as free.

The rest of the study: with :math:`R` runs asked per benchmark, :math:`r_c` rows of calibrator :math:`c` and
:math:`m` runs without any row (with recorded backbone seconds, also the runs with only some of their rows: the cache
holds no backbone of theirs), :math:`m\, t_\text{backbone} + \sum_c \max(R - r_c, 0)\, f_c` CPU-seconds; wall
time on :math:`w` worker processes, either that over :math:`w` or the makespan of the runs as tasks in the
study's order (:func:`makespan`). Timings are the machine's while the pass ran, load included.

Shapes: ``fits`` is a frame indexed by (dataset, backbone), one column per calibrator, NaN where a benchmark
has no row of it.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from simcalib.errors import ConfigError

RUN_KEYS = ["split", "init", "fold"]


def fill_unmeasured(fits: pd.DataFrame, nodes: Mapping[str, int]) -> tuple[pd.DataFrame, dict]:
    """Mean fit seconds for every (benchmark, calibrator), the missing ones projected by node count.

    A missing cell takes the calibrator's seconds on the benchmark with rows of it that is most similar: the
    same backbone first, then the smallest ``|log(nodes / nodes of the source)|``, scaled by
    ``nodes / nodes of the source``. A calibrator without a row anywhere stays NaN.
    Returns the filled copy and ``{(dataset, backbone, calibrator): (source dataset, source backbone)}``.
    """
    filled, sources = fits.copy(), {}
    for calibrator in fits.columns:
        measured = fits[calibrator].dropna()
        if measured.empty:
            continue
        for dataset, backbone in fits.index[fits[calibrator].isna()]:
            source = min(measured.index, key=lambda b: (b[1] != backbone, abs(math.log(nodes[dataset] / nodes[b[0]]))))
            filled.loc[(dataset, backbone), calibrator] = measured[source] * nodes[dataset] / nodes[source[0]]
            sources[dataset, backbone, calibrator] = source
    return filled, sources


def check_projection(fits: pd.DataFrame, nodes: Mapping[str, int], targets: list[tuple[str, str]],
                     min_seconds: float = 1.0) -> pd.Series:
    """The rule of :func:`fill_unmeasured` tried where the answer is known: for each calibrator with a row on every
    benchmark, its cells on ``targets`` are hidden and projected from the others; returns, per calibrator, the
    projected total fit seconds on ``targets`` / the measured total (calibrators whose measured total is under
    ``min_seconds`` left out: a ratio of near-zeros)."""
    complete = [n for n in fits.columns if fits[n].notna().all() and fits.loc[targets, n].sum() >= min_seconds]
    hidden = fits[complete].copy()
    hidden.loc[targets] = np.nan
    projected, _ = fill_unmeasured(hidden, nodes)
    return projected.loc[targets].sum() / fits.loc[targets, complete].sum()


def makespan(durations: Sequence[float], workers: int) -> float:
    """Time until the last job ends when each job, in the given order, starts on the worker that is free first
    (a task runner's queue of ``workers`` processes)."""
    if workers < 1:
        raise ConfigError(f"makespan needs at least one worker, got {workers}; set task_runner.workers >= 1")
    free = [0.0] * workers
    for duration in durations:
        heapq.heapreplace(free, free[0] + duration)  # free[0]: the earliest free worker (a heap's smallest)
    return max(free)


def backbone_costs(cache: Path, dataset: str, backbone: str, digests: set[str]) -> pd.DataFrame:
    """One row per cached backbone of the benchmark: epochs, training seconds, seconds per epoch, ``matched``
    (its logits digest is among ``digests``; where any is, only those rows are kept)."""
    import torch

    from simcalib.experiment.protocol import backbone_digest

    class _Outputs:  # what backbone_digest reads of a backbone's outputs
        def __init__(self, logits):
            self.logits = logits

    rows = []
    for path in sorted((Path(cache) / "backbones" / dataset / backbone).glob("*.pt")):
        saved = torch.load(path, map_location="cpu", weights_only=False)
        if saved.get("epochs"):
            rows.append({"epochs": int(saved["epochs"]), "seconds": float(saved["train_seconds"]),
                         "matched": backbone_digest(_Outputs(saved["logits"])) in digests})
    frame = pd.DataFrame(rows, columns=["epochs", "seconds", "matched"])
    if frame["matched"].any():
        frame = frame[frame["matched"]]
    frame["s_per_epoch"] = frame["seconds"] / frame["epochs"].clip(lower=1)
    return frame


def recorded_backbone_seconds(path: str | Path, column: str = "backbone_s") -> dict[tuple[str, str], float]:
    """``{(dataset, backbone): seconds}`` from a CSV with columns ``dataset``, ``backbone`` and ``column`` (a
    backbone's training seconds per run), rows without a number left out."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"no backbone seconds table at {path}; name a CSV with columns dataset, backbone and "
                          f"{column} (e.g. reports/performance/reprojected_cost.csv)")
    table = pd.read_csv(path)
    missing = [c for c in ("dataset", "backbone", column) if c not in table.columns]
    if missing:
        raise ConfigError(f"{path} lacks column(s) {', '.join(missing)}; it needs dataset, backbone and a column "
                          "of backbone seconds per run (name it with --backbone-column)")
    seconds = pd.to_numeric(table[column], errors="coerce")
    return {(str(d), str(b)): float(s) for d, b, s in zip(table["dataset"], table["backbone"], seconds)
            if np.isfinite(s)}


def read_results(folders: Sequence[str | Path]) -> pd.DataFrame:
    """Every results.csv below ``folders``, each row with the name of its file's ``folder`` (a shift study's
    properties of one dataset and backbone have a folder each), one row per (folder, benchmark, calibrator, run,
    seed) (a later file's wins)."""
    paths = [p for folder in folders for p in sorted(Path(folder).rglob("results.csv"))]
    if not paths:
        raise ConfigError(f"no results.csv below {', '.join(map(str, folders))}; name a study's output folder")
    rows = pd.concat([pd.read_csv(p).assign(folder=p.parent.name) for p in paths], ignore_index=True)
    return rows.drop_duplicates(subset=["folder", "dataset", "backbone", "calibrator", *RUN_KEYS, "seed"], keep="last")


def study_cost(rows: pd.DataFrame, benchmarks: Sequence[tuple[str, str] | tuple[str, str, str]], calibrators: Sequence[str],
               runs_asked: int | Mapping[str, int], cache: Path, nodes: Mapping[str, int],
               recorded: Mapping[tuple[str, str], float] | None = None) -> tuple[pd.DataFrame, dict]:
    """Per benchmark: runs done (every calibrator has its row), runs with rows, cached backbones counted, mean
    epochs, seconds per epoch, backbone seconds, the calibrators' fit seconds summed, a run's seconds, the
    remaining CPU-seconds, the remaining runs' seconds as tasks (``tasks``: a list) and the calibrators without a
    fit to count (``unmeasured``: no row of theirs below the folders read, so calib s and the rest leave them out).
    A benchmark is (dataset, backbone), its runs counted in the rows of any folder, or (dataset, backbone, folder)
    where several benchmarks share a dataset and backbone (a shift study's properties), its runs counted in the
    rows of that folder only; the fit seconds of a dataset and backbone are the mean over all its rows (the
    table's ``folder``: None, or the folder).
    ``runs_asked``: the planned runs of every benchmark, or per dataset (a study's ``runs.per_dataset``). Fits of
    benchmarks the study does not plan serve as sources of the projection where ``nodes`` has their dataset.
    ``backbone_source`` says where a benchmark's backbone seconds come from: ``"cache"``, ``"recorded"`` (no
    cached backbone, ``recorded`` holds the benchmark: its seconds per run, no epochs) or ``None`` (neither: left
    out, with NaN costs). Also returns the projected fits of :func:`fill_unmeasured`."""
    names = list(calibrators)
    keys = [(b[0], b[1], b[2] if len(b) > 2 else None) for b in benchmarks]
    pairs = list(dict.fromkeys((dataset, backbone) for dataset, backbone, _ in keys))
    digests = set(rows.get("backbone_digest", pd.Series(dtype=str)).dropna().astype(str))
    ours = rows[rows["calibrator"].isin(names)]
    sources = sorted({(d, b) for d, b in zip(ours["dataset"], ours["backbone"]) if d in nodes} - set(pairs))
    fits = pd.DataFrame(np.nan, index=pd.MultiIndex.from_tuples([*pairs, *sources]), columns=names)
    for (dataset, backbone), mine in ours.groupby(["dataset", "backbone"]):
        if (dataset, backbone) in fits.index:
            fits.loc[(dataset, backbone)] = mine.groupby("calibrator")["fit_seconds"].mean().reindex(names)
    filled, projected = fill_unmeasured(fits, nodes)
    planned = set(pairs)
    projected = {key: source for key, source in projected.items() if key[:2] in planned}
    table = []
    for dataset, backbone, folder in keys:
        mine = ours[(ours["dataset"] == dataset) & (ours["backbone"] == backbone)]
        if folder is not None and "folder" in mine.columns:
            mine = mine[mine["folder"] == folder]
        per_run = mine.groupby(RUN_KEYS)["calibrator"].nunique()
        done, with_rows = int((per_run == len(names)).sum()), len(per_run)
        per_calibrator = mine.groupby("calibrator").size().reindex(names, fill_value=0)
        costs = backbone_costs(cache, dataset, backbone, digests)
        fit = filled.loc[(dataset, backbone)]
        calib_s = float(np.nansum(fit.to_numpy()))
        entry = {"dataset": dataset, "backbone": backbone, "folder": folder, "done": done, "with_rows": with_rows,
                 "backbones": len(costs), "epochs": math.nan, "s_per_epoch": math.nan, "backbone_s": math.nan,
                 "calib_s": calib_s, "run_s": math.nan, "remaining_s": math.nan, "tasks": [],
                 "unmeasured": [n for n in names if np.isnan(fit[n])], "backbone_source": None}
        cached = not costs.empty
        if cached or (dataset, backbone) in (recorded or {}):
            backbone_s = float(costs["seconds"].mean()) if cached else float(recorded[dataset, backbone])
            asked = runs_asked[dataset] if isinstance(runs_asked, Mapping) else runs_asked
            missing_runs = max(asked - with_rows, 0)
            # a run with some of its rows trains its backbone again unless the cache holds backbones
            partial = 0 if cached else with_rows - done
            missing_fits = float(np.nansum([max(asked - per_calibrator[n], 0) * fit[n] for n in names]))
            # fits of the runs that have some rows, spread over them (none: the difference is float rounding)
            rest = missing_fits - missing_runs * calib_s if with_rows else 0.0
            spread = [rest / with_rows] * with_rows if rest > 0 else [0.0] * partial
            spread[:partial] = [t + backbone_s for t in spread[:partial]]  # the partial runs' backbones
            tasks = [backbone_s + calib_s] * missing_runs + spread
            if cached:
                entry.update(epochs=float(costs["epochs"].mean()), s_per_epoch=float(costs["s_per_epoch"].mean()))
            entry.update(backbone_source="cache" if cached else "recorded", backbone_s=backbone_s,
                         run_s=backbone_s + calib_s, remaining_s=(missing_runs + partial) * backbone_s + missing_fits,
                         tasks=tasks)
        table.append(entry)
    return pd.DataFrame(table), projected


__all__ = ["backbone_costs", "check_projection", "fill_unmeasured", "makespan", "read_results",
           "recorded_backbone_seconds", "study_cost"]
