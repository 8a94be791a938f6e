"""The Prefect flow `report` and its MLflow logging (slow: starts a Prefect test server and MLflow)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow  # imports MLflow (seconds) and starts a Prefect test server


def test_tracking_is_off_without_uri_or_active_run(monkeypatch):
    pytest.importorskip("mlflow")
    from flows.report import log_report_to_mlflow, tracking_configured

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert not tracking_configured(None)
    assert log_report_to_mlflow("unused", None) is None


def test_report_flow_writes_the_report_and_logs_it_to_mlflow(synthetic_study, tmp_path):
    import mlflow
    from prefect.testing.utilities import prefect_test_harness

    from flows.report import REPORT_EXPERIMENT, report_flow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with prefect_test_harness():
        md = report_flow(str(synthetic_study), str(tmp_path / "report"), None, "flow test", 20, 10, uri)
    assert md.endswith("report.md")
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=[REPORT_EXPERIMENT])
    assert len(runs) == 1
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(runs.iloc[0]["run_id"])}
    assert {"report.md", "report.html", "figures", "tables"} <= artifacts
