"""The plan: a study resolved once into immutable data that the runs read, equal after a JSON round trip."""

from __future__ import annotations

import dataclasses
import json

import pytest

from simcalib.errors import ConfigError
from simcalib.experiment.plan import BenchmarkPlan, StudyPlan, plan_benchmark, plan_one_benchmark, plan_study
from simcalib.experiment.protocol import ProtocolSettings, run_definition, run_split
from simcalib.experiment.study import load_study, study_from_dict


@pytest.fixture
def settings(tmp_path, mirror_dir):
    return ProtocolSettings(data_root=str(tmp_path / "data"), mirror=str(mirror_dir), cache_dir=str(tmp_path / "cache"),
                            device="cpu", backbone_overrides=(("max_epochs", 15),))


def study(tmp_path, mirror_dir, splits_dir, **runs):
    return study_from_dict({
        "name": "p", "benchmarks": {"datasets": ["Cora"], "backbones": ["GCN", "GAT"]},
        "calibrators": {"TS": {"lr": 0.05}, "UnCal": None},
        "runs": {"splits": [0, 1], "inits": 1, "folds": [0, 2], **runs}, "output": str(tmp_path / "out"),
        "data": {"mirror": str(mirror_dir), "splits_dir": str(splits_dir), "root": str(tmp_path / "data")}})


def test_a_study_plan_survives_json_and_is_frozen(tmp_path, mirror_dir, splits_dir):
    plan = plan_study(study(tmp_path, mirror_dir, splits_dir))
    text = json.dumps(plan.to_json())
    again = StudyPlan.from_json(json.loads(text))
    assert again == plan and again.digest() == plan.digest()
    assert [b.name for b in plan.benchmarks] == ["Cora-GCN", "Cora-GAT"]
    cora = plan.benchmarks[0]
    assert [(r.split, r.fold) for r in cora.runs] == [(0, 0), (0, 2), (1, 0), (1, 2)]
    assert cora.seeds == tuple(r.seed(cora.settings) for r in cora.runs)
    assert [(c.name, c.options_dict) for c in cora.calibrators] == [("TS", {"lr": 0.05}), ("UnCal", {})]
    assert [(e.split, e.source) for e in cora.splits] == [(0, "fixed"), (1, "fixed")]
    assert all(e.file and e.file_sha256 and e.digest for e in cora.splits)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cora.data_digest = "x"  # type: ignore[misc]
    with pytest.raises(ConfigError, match="plan of version 0"):
        StudyPlan.from_json({**plan.to_json(), "version": 0})


def test_the_planned_definitions_are_those_the_runs_record(tmp_path, mirror_dir, splits_dir):
    """What the integrity checks compare with a results file: the values a run's rows carry."""
    cora = plan_study(study(tmp_path, mirror_dir, splits_dir)).benchmarks[1]
    for planned, run in zip(cora.planned_runs(), cora.runs):
        assert {k: planned[k] for k in ("split_digest", "data_digest", "split_source", "backbone_options")} == \
            run_definition(run, cora.settings)
        assert planned["seed"] == run.seed(cora.settings)
    from simcalib.calibrators import calibrator_definition

    ts = calibrator_definition("TS", "Cora", "GAT", lr=0.05)
    assert cora.definitions()[("Cora", "GAT", "TS")] == ts.digest and cora.calibrators[0].definition == ts.text


def test_runs_read_the_splits_folder_the_plan_resolved(tmp_path, settings, splits_dir, monkeypatch):
    """The environment is read once, when planning: a worker with another $SIMCALIB_SPLITS_DIR reads the same files."""
    monkeypatch.setenv("SIMCALIB_SPLITS_DIR", str(splits_dir))
    plan = plan_benchmark("cora", "gcn", [0], [0], [1], [("ts", None, None)], settings, tmp_path / "out")
    assert plan.settings.splits_dir == str(splits_dir) and plan.splits_origin == "$SIMCALIB_SPLITS_DIR"
    monkeypatch.setenv("SIMCALIB_SPLITS_DIR", "none")
    split = run_split(plan.runs[0], plan.settings)
    assert split.source == plan.splits[0].file and "fixed GATS files" in plan.describe_splits()


def test_a_plan_without_data_knows_no_digests_and_refuses_to_stand_for_rows(tmp_path, settings, splits_dir):
    settings = dataclasses.replace(settings, splits_dir=str(splits_dir))
    plan = plan_benchmark("Cora", "GCN", [0], [0], [0], [("UnCal", None, None)], settings, tmp_path, data=False)
    assert not plan.has_data and plan.splits[0].digest is None and plan.splits[0].file_sha256
    assert BenchmarkPlan.from_json(json.loads(json.dumps(plan.to_json()))) == plan
    with pytest.raises(ValueError, match="without the data"):
        plan.planned_runs()


def test_bad_input_is_refused_when_planning(tmp_path, settings, splits_dir):
    settings = dataclasses.replace(settings, splits_dir=str(splits_dir))
    with pytest.raises(ConfigError, match="split\\(s\\) 7 have no fixed split file"):
        plan_benchmark("Cora", "GCN", [7], [0], [0], [], settings, tmp_path, data=False)
    with pytest.raises(ConfigError, match="invalid options for calibrator TS: nope"):
        plan_benchmark("Cora", "GCN", [0], [0], [0], [("TS", {"nope": 1}, None)], settings, tmp_path, data=False)
    with pytest.raises(ConfigError, match="folds must be within 0..2"):
        plan_benchmark("Cora", "GCN", [0], [0], [3], [], settings, tmp_path, data=False)


def test_the_printed_plan_has_one_line_per_benchmark_and_per_definition(tmp_path, mirror_dir, splits_dir):
    plan = plan_study(study(tmp_path, mirror_dir, splits_dir))
    lines = plan.lines()
    assert sum(line.startswith("    Cora-G") for line in lines) == 2
    assert [line.split()[0] for line in lines if line.startswith("    ") and "on " in line] == ["TS", "UnCal"]
    assert any("splits       Cora: split(s) 0,1 from the fixed GATS files" in line for line in lines)
    assert "2 benchmarks, 2 calibrators, 8 runs (4 per benchmark): 8 pretrain + 16 calibrate tasks" in lines[1]


def test_one_benchmark_of_a_study_file_is_planned_as_the_study_plans_it(tmp_path, mirror_dir, splits_dir):
    path = tmp_path / "p.yaml"
    path.write_text(f"""name: p
benchmarks: {{datasets: [Cora, Citeseer], backbones: [GCN, GAT]}}
calibrators: {{TS: {{lr: 0.05}}, UnCal: null}}
runs: {{splits: [0, 1], inits: 1, folds: [0, 2]}}
output: {tmp_path / "out"}
data: {{mirror: {mirror_dir}, splits_dir: {splits_dir}, root: {tmp_path / "data"}}}
""")
    whole = plan_study(load_study(path))
    assert plan_one_benchmark(path) == whole.benchmarks[0]
    citeseer_gat = plan_one_benchmark(path, "Citeseer", "GAT")
    assert citeseer_gat == next(b for b in whole.benchmarks if b.name == "Citeseer-GAT")
    on_cpu = plan_one_benchmark(path, "Citeseer", "GAT", overrides={"device": "cpu", "runs": {"splits": [1]}})
    assert on_cpu.name == "Citeseer-GAT" and on_cpu.settings.device == "cpu"
    assert {r.split for r in on_cpu.runs} == {1}
