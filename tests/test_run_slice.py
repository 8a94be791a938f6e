"""benchmarks/shift_conformal/run_slice.py stopped by SIGTERM in the middle of a run: it stops, keeps the rows it
wrote and records the pass with the reason, so the slice resumes from its rows and its provenance stays whole."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import yaml
from benchmark_scripts import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "shift_conformal" / "run_slice.py"


def test_sigterm_during_a_run_stops_the_slice_and_records_the_pass(tmp_path, monkeypatch):
    import simcalib.experiment.node_runs as node_runs

    study = {"name": "slice", "benchmarks": {"datasets": ["Cora"], "backbones": ["GCN"]}, "calibrators": ["UnCal"],
             "runs": {"splits": 1, "inits": 2, "folds": [0], "generated_splits": True}, "conformal": {}}
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(study))
    calls = []

    def terminated(benchmark, run, todo):  # a scheduler's SIGTERM arrives while the run computes
        calls.append(run.tag())
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("SIGTERM did not interrupt the run")

    def ignored(signum, frame):  # without the script's own handler the test fails instead of ending pytest
        pass

    monkeypatch.setattr(node_runs, "evaluate_run", terminated)
    previous = signal.signal(signal.SIGTERM, ignored)
    out = tmp_path / "results"
    try:
        assert load_script(SCRIPT).main(["--study", str(tmp_path / "study.yaml"), "--out", str(out),
                                         "--datasets", "Cora", "--backbones", "GCN"]) == 0
        assert signal.getsignal(signal.SIGTERM) is ignored  # the script's handler is gone after it
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert len(calls) == 1
    record = yaml.safe_load((out / "provenance.yaml").read_text())["passes"][-1]
    assert record["stopped"].startswith("interrupted in Cora")
    assert list(record["benchmarks"].values()) == [
        {"runs_with_all_chosen_calibrators": 0, "runs_planned": 2, "rows_added": 0}]
    names = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
             if line.startswith("model name")] if Path("/proc/cpuinfo").is_file() else []
    if names:  # the CPU model, on which the backbones and so the pairing of the rows depend
        assert record["machine"]["cpu"] == names[0]
