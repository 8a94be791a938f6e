"""Committed results into MLflow: ``simcalib track <folder>`` without recomputing anything.

A results folder (``<folder>/results/<Dataset>_<Backbone>/results.csv``, or the benchmark folders directly)
is logged in the layout the study flow logs (:mod:`flows.tracking`): one parent run per benchmark with a
nested run per calibrator (means, stds, per-run values as steps, reliability diagram from the rows' figure
data or saved predictions), in one experiment named after the folder. What the flow records from the live
study is read from the folder instead: the benchmark's provenance (``<folder>/provenance.yaml``: command,
code commit, machine, dates) as parameters, and each calibrator's definition from its rows'
``calibrator_options`` (``not recorded`` for rows written before that column). The rendered report
(``report.md``, ``report.html``, ``summary.md``, ``figures/``, ``tables/``, ``significance/``) goes to one run of
its own.

Idempotent: a benchmark or report whose content is already logged is skipped (content hashes, as for a
resumed study), so a second call adds nothing; changed rows replace the older runs of that benchmark.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from simcalib.errors import ConfigError
from simcalib.store.integrity import CALIBRATOR_OPTIONS_COLUMN, check_results
from simcalib.store.results_store import read_results, summarize

from .tracking import TAG_BENCHMARK, TAG_CONTENT, TAG_ROLE, TAG_STUDY, BenchmarkRecord, StudyTracker

REPORT_PARTS = ("report.md", "report.html", "summary.md", "README.md", "provenance.yaml", "figures", "tables",
                "significance")
NOT_RECORDED = "not recorded"


@dataclass
class TrackSummary:
    experiment: str
    experiment_id: str
    logged: list[str] = field(default_factory=list)  # benchmarks (and "report") logged now
    unchanged: list[str] = field(default_factory=list)  # already there with the same content


def benchmark_folders(folder: Path) -> list[Path]:
    """The benchmark folders (each holding a results.csv) of a results folder or of the report folder above it."""
    root = folder / "results" if (folder / "results").is_dir() else folder
    found = sorted(p.parent for p in root.glob("*/results.csv"))
    if not found:
        raise ConfigError(f"{folder}: no <benchmark>/results.csv below it (nor below {folder}/results); give a "
                          "results folder such as reports/offline")
    return found


def read_provenance(folder: Path) -> dict:
    """``folder``'s provenance.yaml as a mapping ({} without one); ConfigError naming the file if it is not YAML."""
    path = folder / "provenance.yaml"
    if not path.is_file():
        return {}
    try:
        return yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc}); fix the file or move it aside") from None


def _flat(prefix: str, value) -> dict:
    """Nested provenance as ``a.b`` parameters."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            out.update(_flat(f"{prefix}.{key}" if prefix else str(key), item))
        return out
    return {prefix: value}


def calibrator_definitions(rows: pd.DataFrame) -> dict[str, dict]:
    """calibrator -> the options its rows record (one definition per calibrator, as a results file holds), or
    ``{"definition": "not recorded"}`` for rows written before the column existed."""
    out = {}
    for name, group in rows.groupby("calibrator", sort=True):
        texts = group[CALIBRATOR_OPTIONS_COLUMN].dropna().unique() if CALIBRATOR_OPTIONS_COLUMN in group else []
        out[str(name)] = json.loads(texts[0]) if len(texts) else {"definition": NOT_RECORDED}
    return out


def benchmark_record(experiment: str, folder: Path, provenance: dict) -> BenchmarkRecord:
    rows = check_results(read_results(folder / "results.csv"), str(folder / "results.csv"))
    if rows.empty:
        raise ConfigError(f"{folder / 'results.csv'} holds no rows")
    benchmarks = rows[["dataset", "backbone"]].drop_duplicates()
    if len(benchmarks) != 1:
        raise ConfigError(f"{folder / 'results.csv'} holds rows of {len(benchmarks)} benchmarks; one per folder")
    dataset, backbone = map(str, benchmarks.iloc[0])
    runs = rows[["split", "init", "fold"]].drop_duplicates()
    params = {
        "study": experiment, "results_folder": str(folder), "source": "committed results (simcalib track)",
        "runs": len(runs), "calibrators": sorted(rows["calibrator"].unique()),
        "splits": sorted(int(s) for s in runs["split"].unique()), "inits": sorted(int(i) for i in runs["init"].unique()),
        "label_rate": sorted(float(r) for r in rows["label_rate"].dropna().unique()),
        "run_seeds": sorted(int(s) for s in rows["seed"].unique()), "seed_rule": "simcalib.seeding.run_seed",
        **{f"provenance.{k}": v for k, v in _flat("", {key: value for key, value in provenance.items()
                                                         if key != "benchmarks"}).items()},
        **{f"provenance.benchmark.{k}": v for k, v in
           _flat("", (provenance.get("benchmarks") or {}).get(folder.name, {})).items()},
    }
    params["git_commit"] = params.get("provenance.benchmark.code_commit", "unknown")
    files = [p for p in (folder / "results.csv", folder / "splits.json") if p.is_file()]
    predictions = folder / "predictions"
    return BenchmarkRecord(study=experiment, dataset=dataset, backbone=backbone, results=rows, summary=summarize(rows),
                           params=params, calibrator_params=calibrator_definitions(rows), files=files,
                           predictions_dir=predictions if predictions.is_dir() else None)


def _report_files(folder: Path) -> list[Path]:
    files = []
    for part in REPORT_PARTS:
        path = folder / part
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files += sorted(p for p in path.rglob("*") if p.is_file())
    return files


def _content_hash(files: list[Path], root: Path) -> str:
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def log_report(tracker: StudyTracker, experiment: str, folder: Path) -> bool | None:
    """The rendered report of ``folder`` as one run (role ``report``); None when there is none, False when the
    same content is already logged."""
    files = _report_files(folder)
    if not any(p.name in ("report.md", "report.html") for p in files):
        return None
    content = _content_hash(files, folder)
    query = f"tags.`{TAG_ROLE}` = 'report'"
    existing = tracker.client.search_runs([tracker.experiment_id], query, max_results=100)
    if any(r.info.status == "FINISHED" and r.data.tags.get(TAG_CONTENT) == content for r in existing):
        return False
    for run in existing:
        tracker.client.delete_run(run.info.run_id)
    tags = {TAG_STUDY: experiment, TAG_ROLE: "report", TAG_CONTENT: content, TAG_BENCHMARK: "report"}
    run_id = tracker.client.create_run(tracker.experiment_id, tags=tags, run_name="report").info.run_id
    with tempfile.TemporaryDirectory(prefix="simcalib-track-") as tmp:  # one upload, the report's own layout
        staging = Path(tmp) / "report"
        for path in files:
            target = staging / path.relative_to(folder)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
        tracker.client.log_artifacts(run_id, str(staging))
    tracker.client.set_terminated(run_id, "FINISHED")
    return True


def track_results(folder: str | Path, tracking_uri: str, experiment: str | None = None,
                  notify=None) -> TrackSummary:
    """Log the committed results below ``folder`` (and its rendered report, if any) to ``tracking_uri``."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ConfigError(f"{folder}: no such folder; give a results folder such as reports/offline")
    experiment = experiment or folder.as_posix().rstrip("/")
    provenance = read_provenance(folder)
    records = [benchmark_record(experiment, f, provenance) for f in benchmark_folders(folder)]  # all read first
    tracker = StudyTracker(tracking_uri, experiment)
    summary = TrackSummary(experiment, tracker.experiment_id)
    for record in records:
        _, logged = tracker.log_benchmark(record)
        (summary.logged if logged else summary.unchanged).append(record.name)
        if notify:
            notify(f"{record.name}: {len(record.results)} rows, {record.summary.shape[0]} calibrators "
                   f"({'logged' if logged else 'already logged, unchanged'})")
    reported = log_report(tracker, experiment, folder)
    if reported is not None:
        (summary.logged if reported else summary.unchanged).append("report")
    return summary


__all__ = ["TrackSummary", "benchmark_folders", "benchmark_record", "calibrator_definitions", "log_report",
           "track_results"]
