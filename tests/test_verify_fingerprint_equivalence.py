"""benchmarks/verify_fingerprint_equivalence.py: recomputed tasks against their records, keys against a fingerprint."""

from __future__ import annotations

import json

import pytest
from benchmark_scripts import load_script
from shared_paths import PROJECT_ROOT

import flows.caching
from flows.study import calibrate_and_evaluate, pretrain_backbone
from simcalib.experiment.plan import plan_study
from simcalib.experiment.study import load_study

SCRIPT = PROJECT_ROOT / "benchmarks" / "verify_fingerprint_equivalence.py"
STUDY = """name: tiny
seed: 10
benchmarks: {datasets: [Cora], backbones: [GCN]}
calibrators: [TS, CaGCN]
runs: {splits: 1, inits: 1, folds: 1, label_rate: 0.15}
backbone: {max_epochs: 5}
"""


@pytest.fixture(scope="module")
def verify():
    return load_script(SCRIPT)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A benchmark folder whose finished-tasks.jsonl holds one run's tasks, as the study flow records them."""
    root = tmp_path_factory.mktemp("study")
    study = root / "tiny.yaml"
    study.write_text(STUDY)
    plan = plan_study(load_study(study)).benchmarks[0]
    run, settings = plan.runs[0], plan.settings
    records = [{"key": flows.caching.pretrain_key(run, settings), "result": pretrain_backbone(run, settings, 1)}]
    for entry in plan.calibrators:
        records.append({"key": flows.caching.calibrate_key(run, settings, entry.name, entry.options_dict),
                        "result": calibrate_and_evaluate(run, settings, entry.name, entry.options_dict, torch_threads=1)})
    folder = root / "Cora_GCN"
    folder.mkdir()
    (folder / "finished-tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return study, folder, records


def test_recomputed_tasks_equal_their_records(verify, recorded):
    study, folder, _ = recorded
    lines = []
    assert verify.verify_benchmark(folder, study, flows.caching.library_fingerprint(), 1, lines.append) == []
    assert lines == ["Cora_GCN_s0_i0_f0: backbone and 2 calibrator rows recomputed"]


def test_a_changed_number_is_named(verify, recorded, tmp_path):
    study, folder, records = recorded
    changed = [dict(r, result=dict(r["result"])) for r in records]
    changed[2]["result"]["ece"] += 1e-12  # CaGCN's row
    changed[0]["result"]["best_epoch"] += 1
    (tmp_path / "finished-tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in changed))
    problems = verify.verify_benchmark(tmp_path, study, flows.caching.library_fingerprint(), 1, lambda _: None)
    assert [p.split(" recorded")[0] for p in problems] == ["Cora_GCN_s0_i0_f0 backbone: best_epoch",
                                                          "Cora_GCN_s0_i0_f0 CaGCN: ece"]


def test_records_of_another_fingerprint_are_refused(verify, recorded):
    study, folder, _ = recorded
    (problem,) = verify.verify_benchmark(folder, study, "0123456789abcdef", 1, lambda _: None)
    assert problem.startswith("Cora_GCN_s0_i0_f0: no backbone record under fingerprint 0123456789abcdef's key")


def test_values_are_compared_as_results_csv_stores_them(verify):
    assert verify.stored(0.12345678901234) == "0.123456789" and verify.stored(None) == "" == verify.stored(float("nan"))
    assert verify.stored_differences({"ece": "0.1234567891", "fit_seconds": "1"},
                                     {"ece": 0.12345678912, "fit_seconds": 2}, "r") == []  # beyond 10 digits
    assert verify.stored_differences({"ece": "0.1234567891"}, {"ece": 0.12345678916}, "r") == [
        "r: ece stored '0.1234567891', now '0.1234567892'"]


def test_a_run_in_progress_compares_the_calibrations_recorded_so_far(verify, recorded, tmp_path):
    study, _, records = recorded
    (tmp_path / "finished-tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records[:2]))  # TS only
    lines = []
    assert verify.verify_benchmark(tmp_path, study, flows.caching.library_fingerprint(), 1, lines.append) == []
    assert lines == ["Cora_GCN_s0_i0_f0: backbone and 1 calibrator rows recomputed"]
    (tmp_path / "finished-tasks.jsonl").write_text(json.dumps(records[0]) + "\n")  # the backbone alone
    (problem,) = verify.verify_benchmark(tmp_path, study, flows.caching.library_fingerprint(), 1, lambda _: None)
    assert problem == "Cora_GCN_s0_i0_f0: no calibrator record under fingerprint " \
                      f"{flows.caching.library_fingerprint()}'s keys"


def test_a_complete_benchmark_is_checked_by_its_key_and_stored_rows(verify, recorded, tmp_path):
    from simcalib.store.results_store import append_rows

    study, _, records = recorded
    plan = plan_study(load_study(study)).benchmarks[0]
    key = flows.caching.benchmark_key(list(plan.runs), plan.settings, plan.calibrator_options, set())
    (tmp_path / "completion.json").write_text(json.dumps({"benchmark_key": key, "backbone_stats": [records[0]["result"]]}))
    append_rows(tmp_path / "results.csv", [r["result"] for r in records[1:]])
    lines = []
    assert verify.verify_benchmark(tmp_path, study, flows.caching.library_fingerprint(), 1, lines.append) == []
    assert lines == ["Cora_GCN_s0_i0_f0: backbone and 2 calibrator rows recomputed (results.csv)"]
    (problem,) = verify.verify_benchmark(tmp_path, study, "0123456789abcdef", 1, lambda _: None)
    assert problem.startswith(f"{tmp_path}: completion.json's benchmark key {key} is not fingerprint 0123456789abcdef's")


def test_keys_of_another_fingerprint_are_used_inside_the_block_only(verify, recorded):
    study, _, records = recorded
    plan = plan_study(load_study(study)).benchmarks[0]
    run, settings = plan.runs[0], plan.settings
    ours = flows.caching.pretrain_key(run, settings)
    with verify.keys_of("0123456789abcdef"):
        other = flows.caching.pretrain_key(run, settings)
    assert other != ours and flows.caching.pretrain_key(run, settings) == ours == records[0]["key"]
    with pytest.raises(RuntimeError), verify.keys_of("0123456789abcdef"):
        raise RuntimeError("a failing recomputation")
    assert flows.caching.pretrain_key(run, settings) == ours  # restored after an error too
