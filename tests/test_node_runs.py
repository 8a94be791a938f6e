"""Runs on other node divisions (simcalib.experiment.node_runs) on Cora with 20-epoch backbones: the conformal
run fits every calibrator on the same fit part and never reads a quantile or test label when fitting; the shift
run's rows carry ID and OOD metrics; both are reproducible from the run's identity."""

from __future__ import annotations

import numpy as np
import pytest

from simcalib.conformal import conformal_split, conformal_split_seed
from simcalib.experiment import node_runs
from simcalib.experiment.protocol import Run, load_graph, run_split


@pytest.fixture(scope="module")
def run():
    return Run("Cora", "GCN", 0, 0, 1)


def test_a_conformal_run_fits_every_calibrator_on_the_same_fit_part(tiny_protocol, run, monkeypatch):
    seen = []
    fit = node_runs.fit_calibrator_on

    def recording(run_, settings, calibrator, output, train_idx, cal_idx):
        seen.append((calibrator.name, train_idx.copy(), cal_idx.copy()))
        return fit(run_, settings, calibrator, output, train_idx, cal_idx)

    monkeypatch.setattr(node_runs, "fit_calibrator_on", recording)
    rows = node_runs.evaluate_conformal_run(run, tiny_protocol, ["UnCal", "TS"], alphas=(0.1,))
    graph = load_graph("Cora", tiny_protocol)
    train_idx, cal_idx, test_idx = run_split(run, tiny_protocol, graph).fold_indices(run.fold)
    fit_idx, quantile_idx = conformal_split(cal_idx, graph.y.numpy(), conformal_split_seed(run.seed(tiny_protocol)))
    assert [name for name, *_ in seen] == ["UnCal", "TS"]
    for _, train, cal in seen:
        assert np.array_equal(train, train_idx) and np.array_equal(cal, fit_idx)
        assert not set(cal) & set(quantile_idx) and not set(cal) & set(test_idx)
    assert [row["calibrator"] for row in rows] == ["UnCal", "TS"]
    assert rows[0]["n_quantile"] == len(quantile_idx) and rows[0]["n_fit"] == len(fit_idx)
    for row in rows:
        assert 0.5 < row["APS_coverage@0.1"] <= 1 and row["DAPS_set_size@0.1"] >= 0
    monkeypatch.undo()
    again = node_runs.evaluate_conformal_run(run, tiny_protocol, ["UnCal", "TS"], alphas=(0.1,))
    assert _numbers(again) == _numbers(rows)


def test_a_shift_run_gives_id_and_ood_rows(tiny_protocol, run):
    rows = node_runs.evaluate_shift_run(run, tiny_protocol, ["TS"], "popularity")
    (row,) = rows
    assert row["shift_property"] == "popularity" and row["n_ood_test"] == 1354
    assert {"id_ece", "ood_ece", "ood_minus_id_accuracy"} <= set(row)
    split = node_runs.shift_run_split(run, tiny_protocol, "popularity")
    assert not set(np.concatenate(split.folds)) & set(split.ood_test)
    assert _numbers(node_runs.evaluate_shift_run(run, tiny_protocol, ["TS"], "popularity")) == _numbers(rows)


def _numbers(rows):
    """The rows without their fit times (wall clock)."""
    return [{k: v for k, v in row.items() if k != "fit_seconds"} for row in rows]


@pytest.mark.parametrize("kind, options", [("conformal", None), ("shift", {"property": "density", "id_fraction": 0.5})])
def test_evaluate_run_rows_make_the_ledger_count_the_run_done(tiny_protocol, run, tmp_path, kind, options,
                                                              monkeypatch):
    from simcalib.errors import ConfigError
    from simcalib.experiment.ledger import read_ledger
    from simcalib.experiment.plan import plan_benchmark
    from simcalib.experiment.study import ConformalSpec
    from simcalib.store.results_store import append_rows, check_results_file

    options = options if options is not None else ConformalSpec().model_dump()
    plan = plan_benchmark("Cora", "GCN", [0], [0], [1, 2], [("UnCal", None, None), ("TS", None, None)], tiny_protocol,
                          tmp_path / "Cora_GCN", kind=kind, kind_options=options)
    ledger = read_ledger(plan)
    assert ledger.todo(run) == ["UnCal", "TS"]
    fitted = []
    fit = node_runs.fit_calibrator_on
    monkeypatch.setattr(node_runs, "fit_calibrator_on", lambda run_, settings, calibrator, *rest: (
        fitted.append(calibrator), fit(run_, settings, calibrator, *rest))[1])
    rows = node_runs.evaluate_run(plan, run, ["TS"])
    assert fitted == [plan.calibrator("TS")] and fitted[0] is plan.calibrators[1]  # the plan's entry, as planned
    assert [r["calibrator"] for r in rows] == ["TS"] and rows[0]["calibrator_digest"] == plan.calibrators[1].digest
    check_results_file(ledger.results, plan.planned_runs(), plan.definitions())
    append_rows(ledger.results, ledger.accept(rows))
    # the file's rows agree with the plan's split and data digests: more runs may be added
    check_results_file(ledger.results, plan.planned_runs(), plan.definitions())
    assert read_ledger(plan).todo(run) == ["UnCal"]
    append_rows(ledger.results, ledger.accept(node_runs.evaluate_run(plan, run, read_ledger(plan).todo(run))))
    after = read_ledger(plan)
    assert after.todo(run) == [] and after.runs_left() == [Run("Cora", "GCN", 0, 0, 2)] and not after.superseded
    with pytest.raises(ConfigError, match="not in the plan"):
        node_runs.evaluate_run(plan, run, ["VS"])
    with pytest.raises(ConfigError, match="name calibrators as the plan names them"):
        node_runs.evaluate_run(plan, run, ["ts"])  # no name is resolved again after the plan
    with pytest.raises(ConfigError, match="not one of the plan's runs"):
        node_runs.evaluate_run(plan, Run("Cora", "GCN", 3, 0, 0), ["TS"])
