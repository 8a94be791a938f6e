"""MLflow tracking of a study: one experiment per study, one parent run per benchmark, one nested run per
calibrator.

* Parent run ``<Dataset>-<Backbone>``: params (study seed, runs, label rate, backbone hyperparameters, run
  seeds, package versions, git commit), backbone metrics, each calibrator's mean ECE, and artifacts (the
  benchmark's ``results.csv`` and ``summary.csv``, the study file).
* Nested run ``<Dataset>-<Backbone>-<Calibrator>``: every hyperparameter of the calibrator (constructor
  defaults, protocol weight decay, registry preset, study options), each metric's mean and population std
  (``ece_mean``, ``ece_std``, ...) and its per-run values as steps (``ece`` at step i = i-th run in
  (split, init, fold) order), the leaderboard's metrics (:func:`leaderboard_metrics`), and a reliability
  diagram of all runs' test predictions pooled.

Logging happens in the flow's own process, from one thread at a time (a lock), through ``MlflowClient`` with
explicit run ids (no fluent active-run state), so parallel tasks can neither lose nor duplicate runs. It is
idempotent: a benchmark whose identical content is already logged (a resumed study) is skipped, and older
runs of the same benchmark in the study's experiment are soft-deleted (restorable in the MLflow UI), so the
experiment holds exactly one parent run per benchmark.

In the MLflow UI (3.x) the study and tuning experiments are marked as model-training experiments (experiment
tag ``mlflow.experimentKind = custom_model_development``) and carry a shared view of their runs table
(experiment tag ``mlflow.sharedViewState.<key>``: the calibrators' nested runs grouped by benchmark, one row
per calibrator, with the columns ECE, ACE, NLL and accuracy). MLflow 3.17's UI takes the landing page (GenAI
overview or runs table) from its GenAI / Model-training switch, i.e. the URL parameter ``workflowType`` or
the browser's stored choice, not from the tag; it takes default columns only from a shared view named in the
URL, and a shared view cannot expand parent runs (it drops ``runsExpanded``), hence the grouping by the
benchmark tag. So :func:`runs_table_url` is the link that opens the runs table with those rows and columns.
"""

from __future__ import annotations

import hashlib
import json
import platform
import re
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import numpy as np
import pandas as pd
from mlflow.entities import Metric, Param, ViewType
from mlflow.tracking import MlflowClient

from simcalib.metrics import METRIC_NAMES

TAG_STUDY = "simcalib.experiment.study"
TAG_BENCHMARK = "simcalib.benchmark"
TAG_ROLE = "simcalib.role"
TAG_CONTENT = "simcalib.content_hash"
TAG_CALIBRATOR = "simcalib.calibrator"
PARENT_TAG = "mlflow.parentRunId"
PACKAGES = ("simcalib", "torch", "torch_geometric", "numpy", "scipy", "pandas", "prefect", "mlflow", "pydantic")
BATCH = 500  # metrics per log_batch call (MLflow allows 1000)
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"  # MLflow 3's experiment type (read by its API and tooling)
MODEL_TRAINING = "custom_model_development"  # the kind's value for classic (non-GenAI) experiments
SHARED_VIEW_PREFIX = "mlflow.sharedViewState."  # + key: a runs-table view the UI opens with ?viewStateShareKey=key
VIEW_KEY = "simcalib"
# what the leaderboard ranks calibrators by, on every calibrator's nested run (and on the benchmark's parent run
# as ``<metric>.<calibrator>``), so MLflow's compare view of a benchmark's nested runs sets them side by side
LEADERBOARD_METRICS = ("ece_mean", "nll_mean", "brier_mean", "accuracy_change_mean", "fit_seconds_median")
STUDY_COLUMNS = (*LEADERBOARD_METRICS, "ece_std")  # the runs table's columns (as many as a wide screen shows)


def artifact_location(tracking_uri: str) -> str | None:
    """For a SQLite tracking file, an artifact folder beside it (``mlartifacts``); else the server's default."""
    if tracking_uri.startswith("sqlite:///"):
        database = Path(tracking_uri[len("sqlite:///"):])
        return (database.parent / "mlartifacts").resolve().as_uri()
    return None


def metric_column(name: str) -> str:
    """The UI's key of a metric column (its canonical sort key)."""
    return f"metrics.`{name}`"


def mark_model_training(client: MlflowClient, experiment_id: str, metrics: tuple[str, ...] | list[str],
                        params: tuple[str, ...] | list[str] = (), search_filter: str = "",
                        order_by: str | None = None, group_by_tag: str | None = None) -> None:
    """Tag ``experiment_id`` as a model-training experiment and store the runs-table view of
    :func:`runs_table_url`: the runs matching ``search_filter`` (MLflow search syntax), with ``params`` and
    ``metrics`` columns, sorted ascending by the metric ``order_by`` (None: newest first, the UI's default),
    in groups by the run tag ``group_by_tag`` if given."""
    view = {"selectedColumns": [f"params.`{p}`" for p in params] + [metric_column(m) for m in metrics],
            "searchFilter": search_filter}
    if order_by is not None:
        view.update(orderByKey=metric_column(order_by), orderByAsc=True)
    if group_by_tag is not None:
        view["groupBy"] = {"aggregateFunction": "average", "groupByKeys": [{"mode": "tag", "groupByData": group_by_tag}]}
    client.set_experiment_tag(experiment_id, EXPERIMENT_KIND_TAG, MODEL_TRAINING)
    client.set_experiment_tag(experiment_id, SHARED_VIEW_PREFIX + VIEW_KEY, json.dumps(view, sort_keys=True))


def runs_table_url(ui_url: str, experiment_id: str) -> str:
    """The MLflow UI page of ``experiment_id``'s runs table in Model-training mode with the stored columns."""
    return (f"{ui_url.rstrip('/')}/#/experiments/{experiment_id}/runs"
            f"?workflowType=machine_learning&viewStateShareKey={VIEW_KEY}")


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def git_commit(folder: str | Path = ".") -> str:
    """The commit of ``folder``'s checkout, with ``-dirty`` when files differ from it; ``unknown`` outside git."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=folder,
                                capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{commit}-dirty" if status else commit


def calibrator_hyperparameters(name: str, dataset: str, backbone: str, options: dict) -> dict:
    """Every constructor option of calibrator ``name`` as it is built on (dataset, backbone), with its class:
    the resolved definition its results rows record (:func:`simcalib.calibrators.calibrator_definition`)."""
    from simcalib.calibrators import calibrator_definition

    return dict(calibrator_definition(name, dataset, backbone, **options).options)


def leaderboard_metrics(results: pd.DataFrame, calibrator: str) -> dict[str, float]:
    """The leaderboard's metrics of ``calibrator`` on one benchmark's rows: mean ECE, NLL and Brier score over
    runs; ``accuracy_change_mean``, the mean over runs of its accuracy minus UnCal's on the same run (split,
    init, fold; in the rows' unit, points); ``fit_seconds_median``, the median fit time. A metric the rows
    cannot give (no UnCal run, no fit time recorded) is left out, never logged as NaN."""
    keys = ["split", "init", "fold"]
    rows = results[results["calibrator"] == calibrator]
    out = {}
    for metric in ("ece", "nll", "brier"):
        values = pd.to_numeric(rows[metric], errors="coerce") if metric in rows else pd.Series(dtype=float)
        if values.notna().any():
            out[f"{metric}_mean"] = float(values.mean())
    if "accuracy" in results:
        uncal = results[results["calibrator"] == "UnCal"][[*keys, "accuracy"]].rename(columns={"accuracy": "uncal"})
        paired = rows[[*keys, "accuracy"]].merge(uncal, on=keys)
        change = pd.to_numeric(paired["accuracy"], errors="coerce") - pd.to_numeric(paired["uncal"], errors="coerce")
        if change.notna().any():
            out["accuracy_change_mean"] = float(change.mean())
    seconds = pd.to_numeric(rows["fit_seconds"], errors="coerce") if "fit_seconds" in rows else pd.Series(dtype=float)
    if seconds.notna().any():
        out["fit_seconds_median"] = float(seconds.median())
    out.update(kind_metrics(rows))
    return out


KIND_COLUMN = re.compile(r"^(?:(?:id|ood|ood_minus_id)_(?:ece|nll|brier|accuracy)|"
                         r"[A-Za-z]+_(?:coverage|set_size|singleton_hit)@[0-9.]+)$")


def kind_metrics(rows: pd.DataFrame) -> dict[str, float]:
    """Mean over runs of the columns of a shift or conformal benchmark's rows (simcalib.experiment.node_runs):
    ``id_ece``, ``ood_ece``, ``ood_minus_id_ece`` & co.; ``APS_coverage@0.1`` logged as ``APS_coverage_at_0.1``
    (MLflow keys take no ``@``). None for the protocol's rows."""
    out = {}
    for column in rows.columns:
        if KIND_COLUMN.match(str(column)):
            values = pd.to_numeric(rows[column], errors="coerce")
            if values.notna().any():
                out[f"{str(column).replace('@', '_at_')}_mean"] = float(values.mean())
    return out


@dataclass
class BenchmarkRecord:
    """What is logged for one benchmark (built by the study flow after its aggregate task)."""

    study: str
    dataset: str
    backbone: str
    results: pd.DataFrame  # RESULT_COLUMNS rows of this benchmark
    summary: pd.DataFrame  # simcalib.store.results_store.summarize(results)
    params: dict  # benchmark-level parameters
    calibrator_params: dict[str, dict]  # calibrator -> hyperparameters
    backbone_metrics: dict[str, float] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)  # parent-run artifacts
    predictions_dir: Path | None = None  # saved test predictions, for reliability diagrams
    variant: str = ""  # tells the label rates of a sweep apart: "-rate0.05"

    @property
    def name(self) -> str:
        return f"{self.dataset}-{self.backbone}{self.variant}"

    def content_hash(self) -> str:
        """Identity of what would be logged: results rows (as written), parameters and file contents."""
        digest = hashlib.sha256()
        digest.update(self.results.to_csv(index=False, float_format="%.10g").encode())
        digest.update(json.dumps([self.params, self.calibrator_params], sort_keys=True, default=str).encode())
        digest.update(json.dumps(LEADERBOARD_METRICS).encode())  # what is logged of them: another set, another run
        return digest.hexdigest()[:16]


class StudyTracker:
    """Logs benchmarks of one study to MLflow (thread-safe; one instance per flow run)."""

    _lock = threading.Lock()  # class-wide: SQLite takes one writer at a time, and so do we

    def __init__(self, tracking_uri: str, experiment_name: str):
        self.tracking_uri = tracking_uri
        self.experiment_name = experiment_name
        self.client = MlflowClient(tracking_uri=tracking_uri)
        with self._lock:
            experiment = self.client.get_experiment_by_name(experiment_name)
            if experiment is None:
                self.experiment_id = self.client.create_experiment(
                    experiment_name, artifact_location=artifact_location(tracking_uri))
            else:
                self.experiment_id = experiment.experiment_id
                if experiment.lifecycle_stage == "deleted":
                    self.client.restore_experiment(self.experiment_id)
            mark_model_training(self.client, self.experiment_id, STUDY_COLUMNS, params=("calibrator",),
                                search_filter=f"tags.`{TAG_ROLE}` = 'calibrator'", group_by_tag=TAG_BENCHMARK)

    def benchmark_runs(self, benchmark: str, view: int = ViewType.ACTIVE_ONLY) -> list:
        query = f"tags.`{TAG_BENCHMARK}` = '{benchmark}' and tags.`{TAG_ROLE}` = 'benchmark'"
        return list(self.client.search_runs([self.experiment_id], query, run_view_type=view, max_results=1000))

    def children(self, parent_id: str) -> list:
        return list(self.client.search_runs([self.experiment_id], f"tags.`{PARENT_TAG}` = '{parent_id}'",
                                            max_results=1000))

    def log_benchmark(self, record: BenchmarkRecord) -> tuple[str, bool]:
        """Log ``record``; returns (parent run id, whether anything was logged now)."""
        with self._lock:
            content = record.content_hash()
            existing = self.benchmark_runs(record.name)
            for run in existing:
                if run.info.status == "FINISHED" and run.data.tags.get(TAG_CONTENT) == content:
                    return run.info.run_id, False
            for run in existing:  # stale (other content) or never finished (killed mid-logging)
                for child in self.children(run.info.run_id):
                    self.client.delete_run(child.info.run_id)
                self.client.delete_run(run.info.run_id)
            return self._log(record, content), True

    # -----------------------------------------------------------------------------------------------------

    def _log(self, record: BenchmarkRecord, content: str) -> str:
        tags = {TAG_STUDY: record.study, TAG_BENCHMARK: record.name, TAG_ROLE: "benchmark", TAG_CONTENT: content,
                "mlflow.source.git.commit": str(record.params.get("git_commit", "unknown"))}
        parent = self.client.create_run(self.experiment_id, tags=tags, run_name=record.name).info.run_id
        summary = record.summary.set_index("calibrator")
        metrics = [(k, v) for k, v in record.backbone_metrics.items()]
        metrics += [(f"{name}.{c}", value) for c in summary.index
                    for name, value in leaderboard_metrics(record.results, c).items()]
        self._batch(parent, params=record.params, metrics=metrics)
        for path in record.files:
            self.client.log_artifact(parent, str(path))
        for calibrator in summary.index:
            self._log_calibrator(record, parent, calibrator, summary.loc[calibrator])
        self.client.set_terminated(parent, "FINISHED")
        return parent

    def _log_calibrator(self, record: BenchmarkRecord, parent: str, calibrator: str, summary: pd.Series) -> None:
        tags = {TAG_STUDY: record.study, TAG_BENCHMARK: record.name, TAG_ROLE: "calibrator",
                TAG_CALIBRATOR: calibrator, PARENT_TAG: parent}
        child = self.client.create_run(self.experiment_id, tags=tags,
                                       run_name=f"{record.name}-{calibrator}").info.run_id
        rows = record.results[record.results["calibrator"] == calibrator].sort_values(["split", "init", "fold"])
        metrics = [("runs", float(len(rows)))]
        # a metric the rows lack (written before its column) is not logged, rather than logged as NaN
        metrics += [(f"{m}_{stat}", float(summary[f"{m}_{stat}"])) for m in METRIC_NAMES for stat in ("mean", "std")
                    if np.isfinite(summary.get(f"{m}_{stat}", np.nan))]
        metrics += [(name, value) for name, value in leaderboard_metrics(record.results, calibrator).items()
                    if name not in dict(metrics)]  # ece_mean & co. are logged above from the summary
        steps = [(m, float(value), step) for m in METRIC_NAMES if m in rows
                 for step, value in enumerate(rows[m]) if np.isfinite(value)]
        params = {"calibrator": calibrator, **record.calibrator_params.get(calibrator, {})}
        self._batch(child, params=params, metrics=metrics, steps=steps)
        with tempfile.TemporaryDirectory(prefix="simcalib-mlflow-") as folder:
            figure = self._reliability_png(record, calibrator, Path(folder))
            if figure is not None:
                self.client.log_artifact(child, str(figure))
        self.client.set_terminated(child, "FINISHED")

    def _batch(self, run_id: str, params: dict | None = None, metrics: list | None = None,
               steps: list | None = None) -> None:
        now = int(time.time() * 1000)
        entries = [Metric(k, v, now, 0) for k, v in metrics or []] + [Metric(k, v, now, s) for k, v, s in steps or []]
        # MLflow params are strings of at most 6000 characters; longer ones (none expected) are cut visibly
        param_list = [Param(str(k), _param_text(v)) for k, v in (params or {}).items()]
        for start in range(0, max(len(param_list), 1), 100):
            if param_list[start:start + 100]:
                self.client.log_batch(run_id, params=param_list[start:start + 100], synchronous=True)
        for start in range(0, len(entries), BATCH):
            self.client.log_batch(run_id, metrics=entries[start:start + BATCH], synchronous=True)

    def _reliability_png(self, record: BenchmarkRecord, calibrator: str, folder: Path) -> Path | None:
        """Reliability diagram of every run's test predictions of ``calibrator`` pooled, as a PNG file, from the
        same binned runs as the report's figures (saved predictions, else the rows' ``figure_bins``); None when
        there are neither."""
        from simcalib.analysis.figure_bins import pool
        from simcalib.analysis.plots import reliability_diagram_from_bins
        from simcalib.report.figures import figure_bins_frame
        from simcalib.report.results import index_predictions

        predictions = (index_predictions(Path(record.predictions_dir).parent, pd.DataFrame())
                       if record.predictions_dir is not None else pd.DataFrame())
        pooled = pool(figure_bins_frame(predictions, record.results, methods=(calibrator,))["bins"])
        if pooled is None:
            return None
        ax = reliability_diagram_from_bins(*pooled.reliability(), title=f"{record.name} {calibrator} ({pooled.runs} runs)")
        path = folder / f"reliability_{calibrator}.png"
        ax.figure.savefig(path, dpi=110)
        return path


def _param_text(value) -> str:
    if isinstance(value, float):
        text = repr(value)
    elif isinstance(value, (list, tuple, dict)):
        text = json.dumps(value, default=str)
    elif isinstance(value, np.generic):
        text = repr(value.item())
    else:
        text = str(value)
    return text if len(text) <= 6000 else text[:5980] + "...(truncated)"


__all__ = [
    "BenchmarkRecord", "LEADERBOARD_METRICS", "StudyTracker", "artifact_location", "calibrator_hyperparameters",
    "kind_metrics",
    "git_commit", "leaderboard_metrics", "mark_model_training", "package_versions", "runs_table_url",
]
