"""The Prefect flow `tune` (slow: starts a Prefect test server)."""

import optuna
import pytest

from flows.tune import parse_benchmark
from simcalib.errors import ConfigError, UnknownNameError

SPACES = """
TS:
  default:
    params:
      lr: {low: 0.01, high: 0.1, log: true}
    fixed: {max_epochs: 40, patience: 10}
VS:
  default:
    params:
      weight_decay: {low: 1.0e-6, high: 1.0e-2, log: true}
    fixed: {max_epochs: 40, patience: 10}
"""


def test_benchmarks_are_parsed_and_validated():
    assert parse_benchmark("cora/gcn") == ("Cora", "GCN")
    assert parse_benchmark("CoraFull-GAT") == ("CoraFull", "GAT")
    with pytest.raises(ConfigError, match="must read DATASET/BACKBONE"):
        parse_benchmark("Cora")
    with pytest.raises(UnknownNameError, match="unknown dataset 'Coraa'"):
        parse_benchmark("Coraa/GCN")


@pytest.mark.slow
def test_flow_runs_one_search_per_benchmark_and_calibrator(tiny_protocol, tmp_path):
    from prefect.testing.utilities import prefect_test_harness

    from flows.tune import tune

    spaces = tmp_path / "spaces.yaml"
    spaces.write_text(SPACES)
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    with prefect_test_harness(server_startup_timeout=120):
        results = tune(benchmarks=["Cora/GCN"], calibrators=["TS", "VS"], trials=2, splits=[0], inits=[0], folds=[0],
                       spaces_file=str(spaces), storage=storage, track=False, tuned_dir=str(tmp_path / "tuned"),
                       cache_dir=tiny_protocol.cache_dir, splits_dir=tiny_protocol.splits_dir, max_epochs=20)
    assert [r["study_name"] for r in results] == ["Cora_GCN_TS", "Cora_GCN_VS"]
    assert all(r["finished"] == 2 for r in results)
    stored = {s.study_name: s.n_trials for s in optuna.get_all_study_summaries(storage)}
    assert stored == {"Cora_GCN_TS": 2, "Cora_GCN_VS": 2}
    assert (tmp_path / "tuned" / "Cora_GCN.yaml").read_text().count("optuna_study") == 2
