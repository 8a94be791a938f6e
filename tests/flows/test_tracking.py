"""MLflow tracking: structure of the runs, no loss or duplication under concurrent logging, idempotence."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from flows.tracking import (
    LEADERBOARD_METRICS,
    TAG_CONTENT,
    BenchmarkRecord,
    StudyTracker,
    artifact_location,
    calibrator_hyperparameters,
    runs_table_url,
)
from simcalib.metrics import METRIC_NAMES
from simcalib.store.results_store import summarize

CALIBRATORS = ["UnCal", "TS", "GATS"]


def record(dataset: str, runs: int = 3, shift: float = 0.0) -> BenchmarkRecord:
    rng = np.random.default_rng(len(dataset))
    rows = [{"dataset": dataset, "backbone": "GCN", "calibrator": c, "split": 0, "init": 0, "fold": f, "seed": f,
             **{m: float(rng.random() + shift) for m in METRIC_NAMES}, "fit_seconds": 0.1, "label_rate": 0.15}
            for f in range(runs) for c in CALIBRATORS]
    results = pd.DataFrame(rows)
    return BenchmarkRecord(study="t", dataset=dataset, backbone="GCN", results=results, summary=summarize(results),
                           params={"study_seed": 10, "splits": [0]},
                           calibrator_params={c: {"lr": 0.01} for c in CALIBRATORS})


def active_runs(client: MlflowClient, experiment_id: str) -> pd.DataFrame:
    runs = client.search_runs([experiment_id], max_results=1000)
    return pd.DataFrame([{"name": r.info.run_name, "parent": r.data.tags.get("mlflow.parentRunId"), "id": r.info.run_id,
                          "status": r.info.status} for r in runs])


def test_concurrent_logging_neither_loses_nor_duplicates_runs(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    datasets = ["Cora", "Citeseer", "Pubmed", "Photo", "CS", "Physics"]
    jobs = [record(d) for d in datasets] * 2  # every benchmark logged twice, from 4 threads at once
    with ThreadPoolExecutor(max_workers=4) as pool:
        outcomes = list(pool.map(lambda r: StudyTracker(uri, "study-t").log_benchmark(r), jobs))

    assert sum(logged for _, logged in outcomes) == len(datasets)  # the second copy of each was a no-op
    tracker = StudyTracker(uri, "study-t")
    runs = active_runs(tracker.client, tracker.experiment_id)
    parents = runs[runs["parent"].isna()]
    assert sorted(parents["name"]) == sorted(f"{d}-GCN" for d in datasets)
    assert (runs["status"] == "FINISHED").all()
    for _, parent in parents.iterrows():
        children = runs[runs["parent"] == parent["id"]]
        assert sorted(children["name"]) == sorted(f"{parent['name']}-{c}" for c in CALIBRATORS)
    assert len(runs) == len(datasets) * (1 + len(CALIBRATORS))


def test_the_study_experiment_opens_as_a_model_training_runs_table(tmp_path):
    tracker = StudyTracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "study-t")
    tracker.log_benchmark(record("Cora"))
    tags = tracker.client.get_experiment(tracker.experiment_id).tags
    assert tags["mlflow.experimentKind"] == "custom_model_development"
    view = json.loads(tags["mlflow.sharedViewState.simcalib"])
    assert view["selectedColumns"] == ["params.`calibrator`", *(f"metrics.`{m}`" for m in LEADERBOARD_METRICS),
                                       "metrics.`ece_std`"]
    assert view["groupBy"]["groupByKeys"] == [{"mode": "tag", "groupByData": "simcalib.benchmark"}]
    shown = tracker.client.search_runs([tracker.experiment_id], view["searchFilter"])  # the table's rows
    assert sorted(r.info.run_name for r in shown) == [f"Cora-GCN-{c}" for c in sorted(CALIBRATORS)]
    assert runs_table_url("http://127.0.0.1:5000/", tracker.experiment_id) == (
        f"http://127.0.0.1:5000/#/experiments/{tracker.experiment_id}/runs"
        "?workflowType=machine_learning&viewStateShareKey=simcalib")


def test_new_results_replace_the_benchmark_run(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = StudyTracker(uri, "study-t")
    first, _ = tracker.log_benchmark(record("Cora"))
    second, logged = tracker.log_benchmark(record("Cora", shift=1.0))
    assert logged and second != first
    runs = active_runs(tracker.client, tracker.experiment_id)
    assert len(runs) == 1 + len(CALIBRATORS) and set(runs["parent"].dropna()) == {second}
    assert tracker.client.get_run(first).info.lifecycle_stage == "deleted"  # soft-deleted: restorable in the UI
    assert tracker.client.get_run(second).data.tags[TAG_CONTENT] == record("Cora", shift=1.0).content_hash()


def test_metrics_summaries_and_per_run_steps(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = StudyTracker(uri, "study-t")
    rec = record("Cora", runs=4)
    parent, _ = tracker.log_benchmark(rec)
    child = next(r for r in tracker.children(parent) if r.info.run_name == "Cora-GCN-GATS")
    gats = rec.results[rec.results["calibrator"] == "GATS"]
    assert child.data.metrics["ece_mean"] == pytest.approx(gats["ece"].mean())
    assert child.data.metrics["ece_std"] == pytest.approx(gats["ece"].std(ddof=0))
    history = tracker.client.get_metric_history(child.info.run_id, "brier")
    assert [m.step for m in history] == [0, 1, 2, 3] and [m.value for m in history] == pytest.approx(list(gats["brier"]))
    assert tracker.client.get_run(parent).data.metrics["ece_mean.TS"] == pytest.approx(
        rec.results.loc[rec.results.calibrator == "TS", "ece"].mean())


def test_each_calibrators_run_carries_the_leaderboard_metrics_side_by_side(tmp_path):
    tracker = StudyTracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "study-t")
    rec = record("Cora", runs=4)
    rows = rec.results.copy()
    rows.loc[rows["calibrator"] == "GATS", "fit_seconds"] = [0.5, 2.0, 1.0, 4.0]
    rows.loc[rows["calibrator"] == "UnCal", "accuracy"] = 80.0
    rows.loc[rows["calibrator"] == "GATS", "accuracy"] = [79.0, 81.0, 78.0, 80.0]  # changes both ways: -0.5
    rec = BenchmarkRecord(**{**rec.__dict__, "results": rows, "summary": summarize(rows)})
    parent, _ = tracker.log_benchmark(rec)
    children = {r.data.tags["simcalib.calibrator"]: r.data.metrics for r in tracker.children(parent)}
    assert all(set(LEADERBOARD_METRICS) <= set(m) for m in children.values())  # one comparable set per calibrator
    accuracy = rows.pivot_table(index="fold", columns="calibrator", values="accuracy")
    gats = children["GATS"]
    assert gats["accuracy_change_mean"] == pytest.approx((accuracy["GATS"] - accuracy["UnCal"]).mean()) == -0.5
    assert gats["fit_seconds_median"] == pytest.approx(1.5) and children["UnCal"]["accuracy_change_mean"] == 0.0
    for name in ("nll", "brier"):
        assert gats[f"{name}_mean"] == pytest.approx(rows.loc[rows.calibrator == "GATS", name].mean())
    on_parent = tracker.client.get_run(parent).data.metrics  # and on the benchmark's run, one column per calibrator
    assert on_parent["fit_seconds_median.GATS"] == pytest.approx(1.5)
    assert on_parent["accuracy_change_mean.TS"] == pytest.approx(children["TS"]["accuracy_change_mean"])

    without = rows[rows["calibrator"] != "UnCal"]  # nothing to change accuracy against: no such metric, no NaN
    from flows.tracking import leaderboard_metrics

    assert set(leaderboard_metrics(without, "TS")) == {"ece_mean", "nll_mean", "brier_mean", "fit_seconds_median"}


def test_every_calibrator_hyperparameter_is_resolved():
    params = calibrator_hyperparameters("SimCalib_l", "Cora", "GCN", {"w": 0.8})
    assert params["feature_input"] == "logits"  # the ablation's preset
    assert params["w"] == 0.8 and params["lr"] == 0.01 and params["max_epochs"] == 2000 and params["patience"] == 100
    assert calibrator_hyperparameters("GATS", "Cora", "GAT", {})["weight_decay"] == 0.01  # the protocol's default
    assert calibrator_hyperparameters("TS", "Cora", "GCN", {})["weight_decay"] == 0.0


def test_sqlite_tracking_keeps_artifacts_beside_the_database(tmp_path):
    assert artifact_location(f"sqlite:///{tmp_path / 'm.db'}") == (tmp_path / "mlartifacts").as_uri()
    assert artifact_location("http://127.0.0.1:5000") is None


def test_a_shift_or_conformal_benchmark_logs_the_means_of_its_columns(tmp_path):
    """The rows of node_runs.evaluate_run carry ID/OOD and conformal columns: their means are logged beside the
    leaderboard's metrics, ``@`` spelled ``_at_``."""
    from flows.tracking import leaderboard_metrics

    rows = pd.DataFrame({"calibrator": ["TS", "TS"], "split": [0, 1], "init": [0, 0], "fold": [0, 0],
                         "id_ece": [2.0, 4.0], "ood_ece": [6.0, 8.0], "ood_minus_id_ece": [4.0, 4.0],
                         "APS_coverage@0.1": [0.9, 0.92], "DAPS_set_size@0.05": [2.0, 3.0], "n_id_test": [5, 5]})
    metrics = leaderboard_metrics(rows, "TS")
    assert metrics == {"id_ece_mean": 3.0, "ood_ece_mean": 7.0, "ood_minus_id_ece_mean": 4.0,
                       "APS_coverage_at_0.1_mean": pytest.approx(0.91), "DAPS_set_size_at_0.05_mean": 2.5}
    tracker = StudyTracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "study-k")
    run = tracker.client.create_run(tracker.experiment_id).info.run_id
    tracker._batch(run, metrics=list(metrics.items()))  # MLflow takes these keys
    assert tracker.client.get_run(run).data.metrics["APS_coverage_at_0.1_mean"] == pytest.approx(0.91)
