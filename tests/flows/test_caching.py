"""Cache keys: everything a task's numbers depend on, and nothing else."""

from __future__ import annotations

import dataclasses

import pytest

import flows.caching
from flows.caching import (
    benchmark_key,
    calibrate_across_runs_key,
    calibrate_key,
    library_fingerprint,
    pretrain_key,
)
from simcalib.errors import ConfigError
from simcalib.experiment.protocol import ProtocolSettings, Run

RUN = Run("Cora", "GCN", 0, 1, 2)
SETTINGS = ProtocolSettings(device="cpu", backbone_overrides=(("max_epochs", 20),))


def test_keys_are_stable_and_readable():
    assert pretrain_key(RUN, SETTINGS) == pretrain_key(Run("Cora", "GCN", 0, 1, 2), ProtocolSettings(
        device="cpu", backbone_overrides=(("max_epochs", 20),)))
    assert pretrain_key(RUN, SETTINGS).startswith("pretrain-Cora_GCN_s0_i1_f2-")
    assert calibrate_key(RUN, SETTINGS, "TS", {}).startswith("calibrate-Cora_GCN_s0_i1_f2-TS-")
    assert len(library_fingerprint()) == 16


def test_what_changes_numbers_changes_the_key():
    base = calibrate_key(RUN, SETTINGS, "TS", {"lr": 0.01})
    assert calibrate_key(RUN, SETTINGS, "TS", {"lr": 0.02}) != base
    assert calibrate_key(RUN, SETTINGS, "VS", {"lr": 0.01}) != base
    assert calibrate_key(Run("Cora", "GCN", 0, 1, 1), SETTINGS, "TS", {"lr": 0.01}) != base
    for change in ({"study_seed": 11}, {"fold_rate": 0.02}, {"backbone_overrides": (("max_epochs", 30),)}):
        assert calibrate_key(RUN, dataclasses.replace(SETTINGS, **change), "TS", {"lr": 0.01}) != base


def test_a_fit_across_runs_has_its_own_key_naming_every_run():
    runs = [Run("Cora", "GCN", 0, 1, fold) for fold in range(3)]
    key = calibrate_across_runs_key(runs, SETTINGS, "TS", {})
    assert key.startswith("calibrate-runs-Cora-GCN-s0-3runs-TS-")
    assert key not in {calibrate_key(run, SETTINGS, "TS", {}) for run in runs}  # other rounding: never shared
    assert calibrate_across_runs_key(runs[:2], SETTINGS, "TS", {}) != key
    assert calibrate_across_runs_key(runs, SETTINGS, "TS", {"lr": 0.02}) != key
    assert calibrate_across_runs_key(runs, dataclasses.replace(SETTINGS, study_seed=11), "TS", {}) != key


def test_a_benchmark_key_changes_with_any_run_calibrator_fit_path_or_the_code(monkeypatch):
    runs = [Run("Cora", "GCN", 0, 1, fold) for fold in range(3)]
    options = {"UnCal": {}, "TS": {"lr": 0.01}}
    base = benchmark_key(runs, SETTINGS, options, set())
    assert benchmark_key(list(reversed(runs)), SETTINGS, options, set()) == base  # a set of tasks, not a sequence
    assert benchmark_key(runs[:2], SETTINGS, options, set()) != base
    assert benchmark_key(runs, SETTINGS, {"UnCal": {}}, set()) != base
    assert benchmark_key(runs, SETTINGS, {**options, "TS": {"lr": 0.02}}, set()) != base
    assert benchmark_key(runs, SETTINGS, options, {"TS"}) != base  # fitted on the split's runs together
    monkeypatch.setattr(flows.caching, "library_fingerprint", lambda: "edited-library")
    assert benchmark_key(runs, SETTINGS, options, set()) != base


def test_locations_do_not_change_the_key(tmp_path):
    moved = dataclasses.replace(SETTINGS, data_root=str(tmp_path), mirror=str(tmp_path), cache_dir=str(tmp_path))
    assert pretrain_key(RUN, moved) == pretrain_key(RUN, SETTINGS)
    assert calibrate_key(RUN, moved, "TS", {}) == calibrate_key(RUN, SETTINGS, "TS", {})


def test_the_fixed_split_file_content_is_part_of_the_key(splits_dir, monkeypatch):
    with_files = dataclasses.replace(SETTINGS, splits_dir=str(splits_dir))
    generated = dataclasses.replace(SETTINGS, splits_dir="none", generated_splits=True)  # no fixed files
    assert pretrain_key(RUN, with_files) != pretrain_key(RUN, generated)


def test_an_equivalence_keeps_the_earlier_fingerprint_for_that_exact_source_only(tmp_path, monkeypatch):
    source = flows.caching.source_fingerprint()
    table = tmp_path / "fingerprint_equivalences.yaml"
    table.write_text(f"equivalences:\n  - {{fingerprint: '{source}', same_numbers_as: 'earlier000000000'}}\n")
    monkeypatch.setattr(flows.caching, "EQUIVALENCES", table)
    library_fingerprint.cache_clear()
    try:
        assert library_fingerprint() == "earlier000000000"
        base = calibrate_key(RUN, SETTINGS, "TS", {})
        monkeypatch.setattr(flows.caching, "source_fingerprint", lambda: "edited-further")  # any further edit
        library_fingerprint.cache_clear()
        assert library_fingerprint() == "edited-further" and calibrate_key(RUN, SETTINGS, "TS", {}) != base
    finally:
        library_fingerprint.cache_clear()


def test_equivalences_chain_and_refuse_a_cycle():
    assert flows.caching.canonical_fingerprint("c", {"c": "b", "b": "a"}) == "a"
    assert flows.caching.canonical_fingerprint("z", {"c": "b"}) == "z"
    with pytest.raises(ConfigError, match="c -> b -> c form a cycle"):
        flows.caching.canonical_fingerprint("c", {"c": "b", "b": "c"})


def test_a_malformed_equivalences_file_is_named(tmp_path):
    assert flows.caching.read_equivalences(tmp_path / "absent.yaml") == {}
    bad = tmp_path / "eq.yaml"
    bad.write_text("equivalences:\n  - {fingerprint: a}\n")
    with pytest.raises(ConfigError, match="eq.yaml: not a list of equivalences.*same_numbers_as"):
        flows.caching.read_equivalences(bad)
    bad.write_text("equivalences:\n  - {fingerprint: a, same_numbers_as: b}\n  - {fingerprint: a, same_numbers_as: c}\n")
    with pytest.raises(ConfigError, match="listed twice"):
        flows.caching.read_equivalences(bad)


def test_the_committed_equivalences_file_reads():
    table = flows.caching.read_equivalences()
    assert all(len(old) == 16 and old != new for new, old in table.items())
