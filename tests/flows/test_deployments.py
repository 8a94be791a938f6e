"""prefect.yaml: three study deployments on a process work pool; and (slow) a real server and worker on loopback
running one of them, started and stopped as the README says (worker first, with SIGINT; then the server)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from shared_paths import PROJECT_ROOT

from simcalib.experiment.study import load_study


def test_prefect_yaml_deploys_the_three_studies():
    from prefect.flows import load_flow_from_entrypoint

    config = yaml.safe_load((PROJECT_ROOT / "prefect.yaml").read_text())
    deployments = {d["name"]: d for d in config["deployments"]}
    assert set(deployments) == {"quick", "offline", "paper"}
    for name, deployment in deployments.items():
        assert deployment["work_pool"]["name"] == "simcalib"
        assert deployment["parameters"] == {"study_file": f"study/{name}.yaml"}
        load_study(PROJECT_ROOT / deployment["parameters"]["study_file"])  # each deployed study file is valid
        assert deployment["entrypoint"] == "flows/study.py:study_flow"
    assert [s["cron"] for s in deployments["offline"]["schedules"]] == ["0 2 * * 6"]  # weekly
    assert "schedules" not in deployments["quick"] and "schedules" not in deployments["paper"]
    cwd = os.getcwd()
    try:
        os.chdir(PROJECT_ROOT)  # entrypoints are relative to the project root
        flow = load_flow_from_entrypoint(deployments["quick"]["entrypoint"])
    finally:
        os.chdir(cwd)
    assert flow.name == "study"


DEPLOYMENT_ENV = ("SIMCALIB_DATA_MIRROR", "SIMCALIB_SPLITS_DIR")  # what a flow run needs to find the data


def test_every_scheduled_deployment_is_created_paused_and_every_one_names_the_data_it_needs(monkeypatch):
    from prefect.utilities.templating import apply_values

    config = yaml.safe_load((PROJECT_ROOT / "prefect.yaml").read_text())
    scheduled = [d for d in config["deployments"] if d.get("schedules") or d.get("schedule")]
    assert [d["name"] for d in scheduled] == ["offline"]
    for deployment in scheduled:
        schedules = deployment.get("schedules") or [deployment["schedule"]]
        paused = deployment.get("paused") is True or all(s.get("active") is False for s in schedules)
        assert paused, f"{deployment['name']}: a schedule would start runs as soon as it is deployed"
    environment = {"SIMCALIB_DATA_MIRROR": "/data/pyg", "SIMCALIB_SPLITS_DIR": "/data/splits"}
    for name, value in environment.items():  # the deploying shell's (Prefect reads $VAR from os.environ)
        monkeypatch.setenv(name, value)
    for deployment in config["deployments"]:
        env = deployment["work_pool"]["job_variables"]["env"]
        assert set(DEPLOYMENT_ENV) <= set(env), deployment["name"]
        resolved = apply_values(env, dict(os.environ), remove_notset=False)  # as `prefect deploy` reads them
        assert {k: resolved[k] for k in DEPLOYMENT_ENV} == environment


@pytest.mark.slow
def test_a_worker_runs_a_deployment_on_a_loopback_server(study_env, tmp_path):
    from flows.services import executable, free_port, prefect_server, prefect_worker

    study_file = study_env.write("deployed", calibrators=["UnCal", "TS"], runs={"splits": 1, "inits": 1, "folds": 1})
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect")}
    env.pop("PREFECT_API_URL", None)
    server = prefect_server(free_port(), tmp_path / "logs", env={"PREFECT_HOME": env["PREFECT_HOME"]})
    api = f"{server.url}/api"
    env["PREFECT_API_URL"] = api
    prefect = executable("prefect")

    def cli(*args: str, timeout: float = 300) -> str:
        done = subprocess.run([prefect, *args], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True,
                              timeout=timeout)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    worker = None
    try:
        server.start().wait_healthy(timeout=180)
        cli("work-pool", "create", "simcalib", "--type", "process")
        cli("--no-prompt", "deploy", "--all")
        worker = prefect_worker("simcalib", api, tmp_path / "logs", env={"PREFECT_HOME": env["PREFECT_HOME"]}).start()
        out = cli("deployment", "run", "study/quick", "--param", f"study_file={study_file}", "--watch",
                  "--watch-timeout", "300", timeout=360)
        assert "Completed" in out, out
        schedules = cli("deployment", "inspect", "study/offline")
        assert "0 2 * * 6" in schedules and "'paused': True" in schedules  # deployed paused
    finally:
        if worker is not None:
            assert worker.stop() == 0  # SIGINT: a process worker exits cleanly on it
        server.stop()
    assert server.process.returncode is not None
    results = Path(yaml.safe_load(study_file.read_text())["output"]) / "Cora_GCN" / "results.csv"
    assert results.read_text().count("\n") == 3  # header + UnCal + TS of the one run
