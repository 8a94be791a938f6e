"""`simcalib ui`: headless Chromium finds the study's runs in the MLflow UI (screenshot in test-artifacts/);
with all three services (slow: a Prefect server migrates its new database first), each answers on 127.0.0.1;
Ctrl-C stops everything it started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from contextlib import contextmanager

import pytest
from mlflow.tracking import MlflowClient
from process_helpers import read_until
from shared_paths import PROJECT_ROOT

from flows.services import free_port, port_in_use
from flows.tracking import runs_table_url

SERVICES = ("mlflow", "optuna", "prefect")
GENAI_OVERVIEW = "No data available for the selected time range"  # MLflow 3's trace charts, empty here


@contextmanager
def simcalib_ui(tracking_uri: str, tmp_path, services: tuple[str, ...]):
    """Start `simcalib ui` on free ports; yield (ports, what it printed); then Ctrl-C it and check it stopped."""
    ports = {name: free_port() for name in SERVICES}
    command = [sys.executable, "-m", "simcalib.cli", "ui", "--only", ",".join(services),
               "--tracking-uri", tracking_uri, "--optuna-storage", f"sqlite:///{tmp_path / 'o.db'}",
               "--log-dir", str(tmp_path / "logs"), *[f"--{name}-port={port}" for name, port in ports.items()]]
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect"), "PYTHONUNBUFFERED": "1"}
    env.pop("PREFECT_API_URL", None)
    process = subprocess.Popen(command, cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    try:
        yield ports, read_until(process, "ready; press Ctrl-C to stop", timeout=240)
    finally:
        process.send_signal(signal.SIGINT)  # what Ctrl-C in a terminal does
        try:
            rest, _ = process.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            raise
    assert process.returncode == 0, rest
    assert rest.rstrip().endswith("stopped")
    assert not any(port_in_use(ports[name]) for name in services)


@pytest.mark.slow  # ~1 min; by default the UI shows the same layout loaded by `simcalib track` (below), which
# tests/flows/test_track.py compares with the flow's
def test_browser_finds_the_study_runs_in_the_mlflow_ui(reference, chromium, artifacts_dir, tmp_path):
    with simcalib_ui(reference.result["tracking_uri"], tmp_path, ("mlflow",)) as (ports, printed):
        mlflow_url = f"http://127.0.0.1:{ports['mlflow']}"
        assert mlflow_url in printed
        client = MlflowClient(mlflow_url)  # the REST API of the UI's server
        experiment = client.get_experiment_by_name(reference.result["experiment"])
        assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
        names = sorted(r.info.run_name for r in client.search_runs([experiment.experiment_id]))
        assert names == ["Cora-GCN", "Cora-GCN-ETS", "Cora-GCN-TS", "Cora-GCN-UnCal", "Cora-GCN-VS"]

        # The link the study prints: the runs table (not the GenAI overview of traces), the calibrators' runs
        # grouped by benchmark, one row each, with the stored view's columns; rendered by the UI's JavaScript.
        page = runs_table_url(mlflow_url, experiment.experiment_id)
        assert page in reference_printout(reference, mlflow_url)
        dom = chromium.dom(page, size=(2400, 1000))  # wide: the table renders only the columns that fit
        assert "matching runs" in dom and GENAI_OVERVIEW not in dom and "Group: Cora-GCN" in dom
        assert all(f"Cora-GCN-{c}" in dom for c in ("UnCal", "TS", "VS", "ETS"))
        assert all(column in dom for column in ("ece_mean", "nll_mean", "brier_mean", "accuracy_change_mean",
                                                "fit_seconds_median"))  # the leaderboard's columns
        png = chromium.screenshot(page, artifacts_dir / "mlflow_ui_study_runs.png")
        from matplotlib.image import imread

        pixels = imread(png)
        assert pixels.shape[:2] == (1000, 1400) and pixels.std() > 0.05  # a rendered page, not a blank one


def test_browser_finds_committed_results_loaded_by_track_in_the_mlflow_ui(chromium, artifacts_dir, tmp_path):
    from test_track import committed_folder

    from flows.track import track_results

    uri = f"sqlite:///{tmp_path / 'committed.db'}"
    summary = track_results(committed_folder(tmp_path), uri)
    with simcalib_ui(uri, tmp_path, ("mlflow",)) as (ports, _):
        page = runs_table_url(f"http://127.0.0.1:{ports['mlflow']}", summary.experiment_id)
        dom = chromium.dom(page, size=(2400, 1000))
        assert "matching runs" in dom and GENAI_OVERVIEW not in dom
        assert "Group: Cora-GCN" in dom and "Group: Citeseer-GAT" in dom
        assert all(f"Cora-GCN-{c}" in dom for c in ("UnCal", "TS", "GATS"))
        assert all(column in dom for column in ("ece_mean", "nll_mean", "brier_mean", "accuracy_change_mean",
                                                "fit_seconds_median"))  # the leaderboard's columns
        chromium.screenshot(page, artifacts_dir / "mlflow_ui_committed_results.png")


def reference_printout(reference, mlflow_url: str) -> str:
    """What `simcalib study run` prints about MLflow for the reference study, with the UI at ``mlflow_url``."""
    import contextlib
    import io

    from simcalib.commands.study import print_outcome

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        print_outcome(reference.result)
    return printed.getvalue().replace("http://127.0.0.1:5000", mlflow_url)


def test_an_empty_optuna_storage_gets_one_line_saying_how_to_fill_it(tmp_path):
    import shlex

    import optuna

    from flows.services import optuna_storage_note
    from simcalib.cli import build_parser

    storage = f"sqlite:///{tmp_path / 'searches.db'}"
    note = optuna_storage_note(storage)
    assert note is not None and "\n" not in note and f"{storage} holds no search yet" in note
    command = shlex.split(note[note.index("`") + 1:note.rindex("`")])
    assert command[:2] == ["simcalib", "tune"]
    args = build_parser().parse_args(command[1:])  # a command the CLI takes, into the same storage
    assert args.storage == storage and args.tuned_dir == ".cache/tuned" and args.trials == 10
    optuna.create_study(storage=storage, study_name="Cora_GCN_TS")
    assert optuna_storage_note(storage) is None  # a storage with a search: the dashboard shows it


@pytest.mark.slow
def test_all_three_dashboards_answer_on_loopback(reference, tmp_path):
    with simcalib_ui(reference.result["tracking_uri"], tmp_path, SERVICES) as (ports, printed):
        urls = {"mlflow": f"http://127.0.0.1:{ports['mlflow']}/health",
                "optuna": f"http://127.0.0.1:{ports['optuna']}/api/studies",
                "prefect": f"http://127.0.0.1:{ports['prefect']}/api/health"}
        assert "holds no search yet; `simcalib tune" in printed  # o.db is empty
        for name, url in urls.items():
            assert f"http://127.0.0.1:{ports[name]}" in printed
            with urllib.request.urlopen(url, timeout=10) as response:
                assert response.status == 200, name
