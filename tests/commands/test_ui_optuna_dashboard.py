"""`simcalib ui` serves the Optuna dashboard on the search storage, and it renders a real search in
headless Chromium (slow: starts a server and a browser). The screenshot is kept in test-artifacts/."""

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from process_helpers import read_until

from flows.optuna_search import SearchRequest, run_search
from flows.services import free_port

pytestmark = pytest.mark.slow
PROJECT_ROOT = Path(__file__).resolve().parents[2]
SPACES = "TS:\n  default:\n    params:\n      lr: {low: 0.01, high: 0.1, log: true}\n    fixed: {max_epochs: 40, patience: 10}\n"


def test_optuna_dashboard_shows_the_study(tiny_protocol, tmp_path, chromium, artifacts_dir):
    spaces = tmp_path / "spaces.yaml"
    spaces.write_text(SPACES)
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    run_search(SearchRequest("Cora", "GCN", "TS", trials=4, splits=[0], inits=[0], folds=[0], spaces_file=str(spaces),
                             storage=storage, track=False, tuned_dir=str(tmp_path / "tuned"), startup_trials=2),
               tiny_protocol)

    port = free_port()
    command = [sys.executable, "-m", "simcalib.cli", "ui", "--only", "optuna", "--optuna-storage", storage,
               "--optuna-port", str(port), "--log-dir", str(tmp_path / "logs")]
    process = subprocess.Popen(command, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True)
    try:
        read_until(process, "ready", timeout=120)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies", timeout=30) as response:
            studies = {s["study_name"]: s["study_id"] for s in json.load(response)["study_summaries"]}
        assert "Cora_GCN_TS" in studies

        dom = chromium.dom(f"http://127.0.0.1:{port}/dashboard")
        assert "Cora_GCN_TS" in dom  # rendered by the app's JavaScript, not in the served HTML

        png = chromium.screenshot(f"http://127.0.0.1:{port}/dashboard/studies/{studies['Cora_GCN_TS']}",
                                  artifacts_dir / "optuna_dashboard_Cora_GCN_TS.png")
        from matplotlib.image import imread

        pixels = imread(png)
        assert pixels.shape[:2] == (1000, 1400) and pixels.std() > 0.05  # a rendered page, not a blank one
    finally:
        process.send_signal(signal.SIGINT)  # `simcalib ui` stops its services on Ctrl-C
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            raise
    assert process.returncode == 0
