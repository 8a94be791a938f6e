"""benchmarks/speed/run_cost_on_device.py: the run and calibrators it times are the study's, as the study resolves them."""

from __future__ import annotations

import pytest
from benchmark_scripts import load_script
from shared_paths import PROJECT_ROOT

SCRIPT = PROJECT_ROOT / "benchmarks" / "speed" / "run_cost_on_device.py"
OFFLINE = PROJECT_ROOT / "study" / "offline.yaml"


@pytest.fixture(scope="module")
def run_cost():
    return load_script(SCRIPT)


def test_the_timed_run_is_the_benchmarks_first_with_the_studys_calibrators(run_cost):
    run, settings, chosen = run_cost.plan_run(OFFLINE, "Cora", "GAT", "cpu", None)
    assert (run.dataset, run.backbone, run.split, run.init, run.fold) == ("Cora", "GAT", 0, 0, 0)
    assert settings.device == "cpu"
    names = [name for name, _ in chosen]
    assert len(names) == 21 and {"SimCalib", "GATS", "GETS", "WATS"} <= set(names)
    _, _, subset = run_cost.plan_run(OFFLINE, "Cora", "GAT", "cpu", ["TS", "GATS"])
    assert [name for name, _ in subset] == [n for n in names if n in ("TS", "GATS")]


def test_a_calibrator_outside_the_study_is_named(run_cost):
    with pytest.raises(SystemExit, match="Nonexistent not in offline.yaml"):
        run_cost.plan_run(OFFLINE, "Cora", "GAT", "cpu", ["TS", "Nonexistent"])
