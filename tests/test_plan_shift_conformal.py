"""The study files' ``shift`` and ``conformal`` sections: validated, carried by the plan only when declared (so a plan
without them keeps its JSON and digest), turned into benchmark plans of kind shift (one per property, its own
results folder) and conformal whose calibrator digests include the kind's settings, shown by the plan's lines;
a recorded plan of a kind this code does not compute is refused when read."""

from __future__ import annotations

import json

import pytest
import yaml

from simcalib.errors import ConfigError
from simcalib.experiment.node_runs import KINDS
from simcalib.experiment.plan import StudyPlan, plan_study
from simcalib.experiment.study import load_study, study_from_dict

BASE = {"name": "p", "benchmarks": {"datasets": ["Cora"], "backbones": ["GCN"]}, "calibrators": ["UnCal", "TS"],
        "runs": {"splits": 1, "inits": 1, "folds": [0], "generated_splits": True}}


def _plan(**extra) -> StudyPlan:
    return plan_study(study_from_dict({**BASE, **extra}), data=False)


def test_a_plan_without_the_sections_keeps_its_json_and_digest():
    plain = _plan()
    assert "shift" not in plain.to_json() and "conformal" not in plain.to_json()
    assert _plan(shift=None, conformal=None).digest() == plain.digest()
    assert _plan(conformal={}).digest() != plain.digest()


@pytest.mark.parametrize("path", ["study/shift.yaml", "study/conformal.yaml"])
def test_the_study_files_plan_and_survive_json(path):
    plan = plan_study(load_study(path), data=False)
    again = StudyPlan.from_json(json.loads(json.dumps(plan.to_json())))
    assert again == plan and again.digest() == plan.digest()
    calibrators = {c.name for b in plan.benchmarks for c in b.calibrators}
    headline = {c.name for b in plan_study(load_study("study/offline.yaml"), data=False).benchmarks
                for c in b.calibrators}
    assert calibrators == headline
    if path.endswith("shift.yaml"):
        assert plan.shift == {"properties": ["popularity", "locality", "density"], "id_fraction": 0.5}
        assert {b.dataset for b in plan.benchmarks} == {"Cora", "Citeseer", "Pubmed", "Photo", "CS"}
        assert len(plan.benchmarks) == 30 and plan.runs_per_benchmark >= 15 and plan.kinds == ("shift",)
        cora = [b for b in plan.benchmarks if (b.dataset, b.backbone) == ("Cora", "GCN")]
        assert [b.out_dir.name for b in cora] == ["Cora_GCN_popularity", "Cora_GCN_locality", "Cora_GCN_density"]
        assert [b.kind_options_dict["property"] for b in cora] == ["popularity", "locality", "density"]
        assert len({b.name for b in plan.benchmarks}) == 30
        assert all(e.source == "generated" for b in plan.benchmarks for e in b.splits)
        assert any(line.startswith("  shift ") and "45 runs per dataset x backbone" in line for line in plan.lines())
    else:
        assert plan.conformal["alphas"] == [0.1, 0.05] and plan.conformal["scores"] == ["APS", "RAPS", "DAPS"]
        assert len(plan.benchmarks) == 24 and plan.kinds == ("conformal",)
        assert plan.benchmarks[0].kind_options_dict["scores"] == ["APS", "RAPS", "DAPS"]
        assert any(line.startswith("  conformal ") for line in plan.lines())
    assert all(f"[{plan.kinds[0]}]" in line for line in plan.lines() if " runs (splits " in line)


def test_the_kind_and_its_settings_are_part_of_each_calibrator_digest():
    protocol = _plan().benchmarks[0]
    conformal = _plan(conformal={}).benchmarks[0]
    other = _plan(conformal={"quantile_fraction": 0.4}).benchmarks[0]
    shift = _plan(shift={"properties": ["density", "locality"]}).benchmarks
    assert protocol.kind == "protocol" and "kind" not in protocol.to_json()
    assert conformal.kind == "conformal" and conformal.out_dir == protocol.out_dir
    digests = [{c.name: c.digest for c in b.calibrators} for b in (protocol, conformal, other, *shift)]
    for name in ("UnCal", "TS"):
        assert len({d[name] for d in digests}) == len(digests)  # every kind and setting: its own rows
    assert '"conformal":{' in conformal.calibrators[1].definition
    assert [b.out_dir.name for b in shift] == ["Cora_GCN_density", "Cora_GCN_locality"]


def test_a_study_with_both_sections_is_refused():
    with pytest.raises(ConfigError, match="not both"):
        _plan(shift={"properties": ["density"]}, conformal={})


def test_bad_sections_are_refused_naming_the_key():
    with pytest.raises(ConfigError, match="shift"):
        _plan(shift={"properties": ["betweenness"]})
    with pytest.raises(ConfigError, match="conformal"):
        _plan(conformal={"alphas": [1.5]})
    with pytest.raises(ConfigError, match="conformal"):
        _plan(conformal={"score": ["APS"]})


def test_the_schedule_computes_every_kind_a_plan_can_be_and_a_plan_of_another_kind_is_not_read():
    """The schedule computes every kind (node runs: tests/flows/test_study_flow.py), so nothing checks a plan's kind
    before it; a plan recorded with a kind this code does not know is refused when read, in one line."""
    from simcalib.experiment.plan import BenchmarkPlan
    from simcalib.experiment.schedule import COMPUTED_KINDS

    assert COMPUTED_KINDS == KINDS == ("protocol", "shift", "conformal")
    for plan in (_plan(), _plan(conformal={}), _plan(shift={"properties": ["density"]})):
        assert all(BenchmarkPlan.from_json(b.to_json()) == b for b in plan.benchmarks)
    data = {**_plan(conformal={}).benchmarks[0].to_json(), "kind": "coverage"}
    with pytest.raises(ConfigError) as error:
        BenchmarkPlan.from_json(data)
    message = str(error.value)
    assert "\n" not in message and "kind 'coverage' cannot be read" in message and "plan the study again" in message


def test_study_run_refuses_a_study_with_both_kinds_in_one_line_before_any_work(tmp_path, capsys):
    from simcalib.cli import main

    path = tmp_path / "both.yaml"
    path.write_text(yaml.safe_dump({**BASE, "output": str(tmp_path / "out"), "shift": {"properties": ["density"]},
                                    "conformal": {}}))
    assert main(["study", "run", str(path)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "shift" in error and "conformal" in error
    assert not (tmp_path / "out").exists()
