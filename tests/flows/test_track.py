"""`simcalib track`: committed results into MLflow in the study flow's layout, once."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest
from mlflow.entities import ViewType
from mlflow.tracking import MlflowClient
from report.synthetic import write_benchmark
from shared_paths import PROJECT_ROOT

from flows.track import NOT_RECORDED, read_provenance, track_results
from flows.tracking import PARENT_TAG, TAG_ROLE
from simcalib.calibrators import calibrator_definition
from simcalib.store.integrity import CALIBRATOR_DIGEST_COLUMN, CALIBRATOR_OPTIONS_COLUMN

CALIBRATORS = ("UnCal", "TS", "GATS")


def committed_folder(root):
    """A report folder as reports/offline holds one: two benchmarks' rows, provenance, a rendered report. The
    Cora GCN rows record their calibrators' definitions; the Citeseer GAT rows predate that column."""
    folder = root / "reports" / "demo"
    write_benchmark(folder / "results" / "Cora_GCN", "Cora", "GCN", CALIBRATORS, splits=(0, 1), predictions=False)
    write_benchmark(folder / "results" / "Citeseer_GAT", "Citeseer", "GAT", CALIBRATORS, splits=(0,),
                    predictions=False)
    path = folder / "results" / "Cora_GCN" / "results.csv"
    rows = pd.read_csv(path)
    definitions = {c: calibrator_definition(c, "Cora", "GCN") for c in CALIBRATORS}
    rows[CALIBRATOR_OPTIONS_COLUMN] = [definitions[c].text for c in rows["calibrator"]]
    rows[CALIBRATOR_DIGEST_COLUMN] = [definitions[c].digest for c in rows["calibrator"]]
    rows.to_csv(path, index=False)
    (folder / "provenance.yaml").write_text("machine: {cpu: Intel Xeon, cores: 2}\nbenchmarks:\n"
                                            "  Cora_GCN: {code_commit: abc1234, runs: 6}\n")
    (folder / "report.md").write_text("# report\n")
    (folder / "figures").mkdir()
    (folder / "figures" / "a.csv").write_text("x\n1\n")
    return folder


def runs_of(uri: str, experiment: str) -> list:
    client = MlflowClient(uri)
    experiment_id = client.get_experiment_by_name(experiment).experiment_id
    return client.search_runs([experiment_id], run_view_type=ViewType.ACTIVE_ONLY, max_results=1000)


def test_committed_results_are_logged_once_in_the_study_flows_layout(tmp_path):
    folder = committed_folder(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    first = track_results(folder, uri)
    assert first.experiment == folder.as_posix() and sorted(first.logged) == ["Citeseer-GAT", "Cora-GCN", "report"]
    runs = runs_of(uri, first.experiment)
    by_name = {r.info.run_name: r for r in runs}
    assert len(by_name) == len(runs) == 2 + 2 * len(CALIBRATORS) + 1  # no name twice
    cora = by_name["Cora-GCN"]
    assert cora.data.tags[TAG_ROLE] == "benchmark" and cora.data.params["runs"] == "6"
    assert cora.data.params["provenance.benchmark.code_commit"] == "abc1234" == cora.data.params["git_commit"]
    assert cora.data.params["provenance.machine.cpu"] == "Intel Xeon"
    gats = by_name["Cora-GCN-GATS"]
    assert gats.data.tags[PARENT_TAG] == cora.info.run_id
    assert gats.data.params["weight_decay"] == "0.005" and gats.data.params["class"] == "GATS"
    assert gats.data.metrics["runs"] == 6.0
    mean = pd.read_csv(folder / "results" / "Cora_GCN" / "results.csv").query("calibrator == 'GATS'")["ece"].mean()
    assert abs(gats.data.metrics["ece_mean"] - mean) < 1e-9
    assert by_name["Citeseer-GAT-TS"].data.params["definition"] == NOT_RECORDED

    second = track_results(folder, uri)  # nothing new: nothing added
    assert second.logged == [] and sorted(second.unchanged) == ["Citeseer-GAT", "Cora-GCN", "report"]
    assert sorted(r.info.run_id for r in runs_of(uri, first.experiment)) == sorted(r.info.run_id for r in runs)

    path = folder / "results" / "Citeseer_GAT" / "results.csv"  # a benchmark's rows change: it alone is replaced
    pd.read_csv(path).iloc[:-1].to_csv(path, index=False)
    third = track_results(folder, uri)
    assert third.logged == ["Citeseer-GAT"]
    after = {r.info.run_name: r for r in runs_of(uri, first.experiment)}
    assert len(after) == len(runs) and after["Cora-GCN"].info.run_id == cora.info.run_id
    assert after["Citeseer-GAT"].info.run_id != by_name["Citeseer-GAT"].info.run_id


def test_track_prints_the_link_to_the_runs_table(tmp_path, capsys):
    from flows.tracking import runs_table_url
    from simcalib.cli import main

    folder = committed_folder(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["track", str(folder), "--tracking-uri", uri, "--mlflow-port", "5005"]) == 0
    experiment_id = MlflowClient(uri).get_experiment_by_name(folder.as_posix()).experiment_id
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == f"runs table: {runs_table_url('http://127.0.0.1:5005', experiment_id)}"
    assert last.startswith(f"runs table: http://127.0.0.1:5005/#/experiments/{experiment_id}/runs?")


def test_track_refuses_a_folder_without_results_in_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    done = subprocess.run([sys.executable, "-m", "simcalib.cli", "track", str(tmp_path / "empty"), "--tracking-uri",
                           f"sqlite:///{tmp_path / 'm.db'}"], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'empty'}: no <benchmark>/results.csv below it (nor below {tmp_path / 'empty'}/results); "
        "give a results folder such as reports/offline"]
    assert not (tmp_path / "m.db").exists()  # refused before the store was touched


def test_the_definition_of_each_calibrator_comes_from_its_rows(tmp_path):
    from flows.track import calibrator_definitions

    folder = committed_folder(tmp_path)
    rows = pd.read_csv(folder / "results" / "Cora_GCN" / "results.csv")
    assert calibrator_definitions(rows)["GATS"] == json.loads(calibrator_definition("GATS", "Cora", "GCN").text)


COMMITTED_PROVENANCE = sorted(
    path.relative_to(PROJECT_ROOT) for path in (PROJECT_ROOT / "reports").rglob("provenance.yaml")
)


@pytest.mark.parametrize("path", COMMITTED_PROVENANCE, ids=str)
def test_every_committed_provenance_file_reads_as_track_reads_it(path):
    """`simcalib track` turns a folder's provenance.yaml into parameters; an unquoted ': ' in a free-text value
    makes the file invalid YAML, and tracking that folder would stop with an error."""
    provenance = read_provenance((PROJECT_ROOT / path).parent)
    assert isinstance(provenance, dict) and provenance, f"{path}: empty or not a mapping"
