"""The Optuna glue: persistent and resumable studies, seeded sampling, pruning, grid, tuned-file output."""

import json
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from flows.optuna_search import SearchRequest, make_objective, run_search
from simcalib.errors import ConfigError
from simcalib.store.tuned import load_tuned_params
from simcalib.tuning import CalibrationObjective, ObjectiveSettings, SearchSpace
from simcalib.tuning.spaces import ParamSpec

SPACES = """
TS:
  default:
    params:
      lr: {low: 0.01, high: 0.1, log: true}
      weight_decay: {low: 1.0e-6, high: 1.0e-2, log: true}
    fixed: {max_epochs: 40, patience: 10}
  small_grid:
    params:
      lr: [0.02, 0.08]
      weight_decay: [0.0, 0.001]
    fixed: {max_epochs: 40, patience: 10}
"""


@pytest.fixture
def request_for(tmp_path):
    spaces = tmp_path / "spaces.yaml"
    spaces.write_text(SPACES)

    def make(**overrides) -> SearchRequest:
        options = dict(dataset="Cora", backbone="GCN", calibrator="TS", trials=4, splits=[0], inits=[0], folds=[0],
                       spaces_file=str(spaces), storage=f"sqlite:///{tmp_path / 'optuna.db'}", track=False,
                       tuned_dir=str(tmp_path / "tuned"), startup_trials=2)
        return SearchRequest(**{**options, **overrides})

    return make


def trials(request: SearchRequest) -> list:
    return optuna.load_study(study_name="Cora_GCN_TS" if request.space == "default" else f"Cora_GCN_TS_{request.space}",
                             storage=request.storage).get_trials()


def test_search_writes_the_best_options_to_the_tuned_file(request_for, tiny_protocol):
    request = request_for()
    result = run_search(request, tiny_protocol)
    assert (result.study_name, result.finished, result.complete, result.new_trials) == ("Cora_GCN_TS", 4, 4, 4)
    stored = trials(request)
    best = min(stored, key=lambda t: t.value)
    assert result.best_params == best.params and result.best_value == best.value
    assert load_tuned_params("Cora", "GCN", "TS", request.tuned_dir) == {**best.params, "max_epochs": 40, "patience": 10}
    entry = yaml.safe_load(Path(result.tuned_path).read_text())["TS"]
    assert entry["optuna_study"] == "Cora_GCN_TS" and entry["trials"] == 4 and entry["objective"] == "nll"
    assert all(len(t.intermediate_values) == 1 for t in stored)  # one report per run


def test_interrupted_search_resumes_and_the_trial_count_continues(request_for, tiny_protocol, monkeypatch):
    request = request_for(trials=5)
    calls = {"n": 0}
    original = CalibrationObjective.run_value

    def interrupt_third_trial(self, run, options):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt  # Ctrl-C in the middle of trial 2
        return original(self, run, options)

    monkeypatch.setattr(CalibrationObjective, "run_value", interrupt_third_trial)
    with pytest.raises(KeyboardInterrupt):
        run_search(request, tiny_protocol)
    first = trials(request)
    assert [t.state for t in first] == [TrialState.COMPLETE, TrialState.COMPLETE, TrialState.FAIL]
    monkeypatch.setattr(CalibrationObjective, "run_value", original)

    result = run_search(request, tiny_protocol)  # the same command again
    resumed = trials(request)
    assert (result.finished, result.new_trials, result.failed) == (5, 3, 1)
    assert [t.number for t in resumed if t.state == TrialState.COMPLETE] == [0, 1, 3, 4, 5]
    assert [t.params for t in resumed[:2]] == [t.params for t in first[:2]]  # finished trials kept as they were
    assert len({tuple(sorted(t.params.items())) for t in resumed}) == 6  # no replayed proposal
    assert run_search(request, tiny_protocol).new_trials == 0  # complete: nothing more to do


def test_same_request_same_trials(request_for, tiny_protocol, tmp_path):
    a = run_search(request_for(trials=3), tiny_protocol)
    b = run_search(request_for(trials=3, storage=f"sqlite:///{tmp_path / 'other.db'}"), tiny_protocol)
    assert a.best_params == b.best_params and a.best_value == b.best_value
    other_seed = run_search(request_for(trials=3, storage=f"sqlite:///{tmp_path / 'seed.db'}", seed=11), tiny_protocol)
    assert other_seed.best_params != a.best_params


def test_a_study_refuses_settings_that_change_what_it_measures(request_for, tiny_protocol, monkeypatch):
    run_search(request_for(trials=1), tiny_protocol)
    with pytest.raises(ConfigError, match=r"Cora_GCN_TS already holds trials measured differently \(objective changed"):
        run_search(request_for(trials=2, objective=ObjectiveSettings(metric="ece")), tiny_protocol)
    with pytest.raises(ConfigError, match=r"measured differently \(runs changed"):
        run_search(request_for(trials=2, folds=[1]), tiny_protocol)
    monkeypatch.setattr("flows.optuna_search.code_fingerprint", lambda: "calibrator code edited")
    with pytest.raises(ConfigError, match=r"measured differently \(code changed"):
        run_search(request_for(trials=2), tiny_protocol)


def test_grid_sampler_tries_each_point_once(request_for, tiny_protocol):
    request = request_for(space="small_grid", sampler="grid", trials=10)
    result = run_search(request, tiny_protocol)
    points = sorted((t.params["lr"], t.params["weight_decay"]) for t in trials(request))
    assert points == [(0.02, 0.0), (0.02, 0.001), (0.08, 0.0), (0.08, 0.001)]
    assert result.finished == 4
    with pytest.raises(ConfigError, match="cannot run as a grid: lr"):
        run_search(request_for(sampler="grid"), tiny_protocol)


class ScriptedObjective:
    """Per-run values given by a script, to exercise the pruner without fitting anything."""

    def __init__(self, values_by_lr: dict):
        self.values_by_lr = values_by_lr

    def run_values(self, options):
        yield from self.values_by_lr[options["lr"]]


def test_pruner_stops_a_trial_whose_running_mean_is_worse_than_the_median():
    space = SearchSpace("TS", "scripted", {"lr": ParamSpec("lr", "categorical", choices=(0.1, 0.2, 0.3))})
    request = SearchRequest("Cora", "GCN", "TS", pruner_startup_trials=2, pruner_warmup_runs=1)
    study = optuna.create_study(pruner=optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=1))
    objective = make_objective(request, space, ScriptedObjective({0.1: [1.0, 1.0, 1.0], 0.2: [1.2, 1.2, 1.2],
                                                                   0.3: [9.0, 9.0, 9.0]}), callback=None)
    for lr in (0.1, 0.2, 0.3):
        study.enqueue_trial({"lr": lr})
    study.optimize(objective, n_trials=3)
    states = [t.state for t in study.trials]
    assert states == [TrialState.COMPLETE, TrialState.COMPLETE, TrialState.PRUNED]
    assert study.trials[2].intermediate_values == {0: 9.0, 1: 9.0}  # stopped after the second run (warm-up: 1)
    assert study.trials[0].user_attrs["run_values"] == [1.0, 1.0, 1.0]


@pytest.mark.slow  # MLflow creates its SQLite schema (~10 s)
def test_trials_are_logged_to_mlflow(request_for, tiny_protocol, tmp_path):
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_search(request_for(trials=2, track=True, tracking_uri=uri), tiny_protocol)
    client = mlflow.MlflowClient(uri)
    experiment = client.get_experiment_by_name("Cora_GCN_TS")
    assert experiment.artifact_location == (tmp_path / "mlartifacts").resolve().as_uri()  # as the study flow's
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"  # the UI's "Model training"
    view = json.loads(experiment.tags["mlflow.sharedViewState.simcalib"])
    assert view["selectedColumns"] == ["metrics.`nll`"] and view["orderByKey"] == "metrics.`nll`"
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 2
    for run in runs:
        assert set(run.data.params) == {"lr", "weight_decay"} and "nll" in run.data.metrics
        assert len(client.get_metric_history(run.info.run_id, "run_nll")) == 1  # one step per tuning run
        assert run.data.tags["state"] == "COMPLETE"
