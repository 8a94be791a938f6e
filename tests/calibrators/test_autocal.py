"""AutoCal and simcalib.select_calibrator: what the cross-fitting sees, what it chooses, its seeds, its errors, the
saved winner and the `simcalib select` command."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
from graph_fixtures import NUM_CLASSES, single_thread, tiny_graph, tiny_problem

import simcalib
from simcalib.calibrators import (
    CALIBRATORS,
    TS,
    CalibrationGraph,
    CalibratorEntry,
    build_calibrator,
    load_calibrator,
    saved_metadata,
)
from simcalib.calibrators.autocal import fold_view, stratified_parts
from simcalib.calibrators.base import HIDDEN_LABEL
from simcalib.calibrators.selection import RankedCandidate, select_calibrator
from simcalib.cli import main
from simcalib.errors import ConfigError
from simcalib.store.results_store import SELECTION_COLUMNS, append_rows, read_results

QUICK = {"max_epochs": 40, "patience": 10}

pytestmark = pytest.mark.usefixtures(single_thread.__name__)


def synthetic_graph(per_class_scale: bool, seed: int = 0, num_nodes: int = 2000) -> CalibrationGraph:
    """Logits z [N, 3] whose labels are drawn from softmax(z / 2.5) (one temperature is right), or from
    softmax(z * (3.0, 0.4, 1.5) + b) (each class its own scale: vector scaling is right); 400 training and 400
    calibration nodes, a ring of edges."""
    g = torch.Generator().manual_seed(seed)
    z = 3.0 * torch.randn(num_nodes, 3, generator=g)
    true_logits = z * torch.tensor([3.0, 0.4, 1.5]) + torch.tensor([0.0, 1.0, -0.5]) if per_class_scale else z / 2.5
    y = torch.multinomial(torch.softmax(true_logits, 1), 1, generator=g).flatten()
    ring = torch.stack([torch.arange(num_nodes), (torch.arange(num_nodes) + 1) % num_nodes])
    edge_index = torch.cat([ring, ring.flip(0)], 1)
    order = torch.randperm(num_nodes, generator=g)
    return CalibrationGraph.from_run(z, torch.randn(num_nodes, 4, generator=g), edge_index, y, order[:400],
                                     order[400:800])


FAST = {"lr": 0.05}  # the synthetic temperatures are far from 1: a larger step reaches them in fewer epochs


@pytest.mark.parametrize("per_class_scale,candidates,right", [
    (False, ["UnCal", "TS"], "TS"),  # VS nests TS: with one right temperature their held-out NLLs are within noise
    (True, ["UnCal", "TS", "VS"], "VS"),
])
def test_it_picks_the_candidate_the_labels_were_drawn_from(per_class_scale, candidates, right):
    graph = synthetic_graph(per_class_scale)
    selection = select_calibrator(graph, candidates=candidates, parts=5, seed=0, **FAST)
    assert selection.winner_name == right and selection.selector.selected == right
    assert [r.name for r in selection.ranking][-1] == "UnCal"  # the uncalibrated logits are far off in both cases
    # the winner is the right candidate refitted on the whole fold: the protocol's fit of it on this graph
    torch.manual_seed(0)
    alone = build_calibrator(right, 3, **FAST).fit(graph)
    assert isinstance(selection.winner, type(alone))
    assert torch.allclose(selection.winner.predict_proba(graph), alone.predict_proba(graph), atol=1e-5)


def test_the_ece_score_chooses_by_held_out_ece():
    graph = synthetic_graph(per_class_scale=False)
    selection = select_calibrator(graph, candidates=["UnCal", "TS"], score="ece", parts=4, seed=0, **FAST)
    assert selection.winner_name == "TS" and selection.selector.score == "ece"
    assert all(0 <= r.score <= 1 for r in selection.ranking)  # a fraction, as simcalib.metrics.ece


class LabelSpy(TS):
    """TS that records, at every fit, which nodes' labels the graph it is given shows and its calibration fold."""

    name = "LabelSpy"
    seen: list[tuple[set, set]] = []

    def fit(self, graph, fit_idx=None, stop_idx=None):
        visible = set((graph.labels != HIDDEN_LABEL).nonzero().flatten().tolist())
        LabelSpy.seen.append((visible, set(graph.cal_idx.tolist())))
        return super().fit(graph, fit_idx, stop_idx)


@pytest.fixture
def spy(monkeypatch):
    monkeypatch.setattr(LabelSpy, "seen", [])
    monkeypatch.setitem(CALIBRATORS, "LabelSpy", CalibratorEntry("LabelSpy", LabelSpy))  # registered while it runs
    return LabelSpy


def test_each_candidate_fit_sees_the_training_folds_and_the_other_parts_only(spy):
    logits, hidden, edge_index, y, train_idx, cal_idx = tiny_problem()
    graph = CalibrationGraph.from_run(logits, hidden, edge_index, y, train_idx, cal_idx)
    model = build_calibrator("AutoCal", NUM_CLASSES, candidates=["LabelSpy"], parts=3, **QUICK)
    torch.manual_seed(0)
    model.fit(graph)
    train, cal = set(train_idx.tolist()), set(cal_idx.tolist())
    *part_fits, refit = spy.seen
    assert len(part_fits) == 3
    held_out = [cal - fold for _, fold in part_fits]
    assert set().union(*held_out) == cal and sum(map(len, held_out)) == len(cal)  # the parts cover the fold once
    for (visible, fold), part in zip(part_fits, held_out):
        assert part and visible == train | fold and not visible & part  # the held-out part's labels are hidden
    assert refit == (train | cal, cal)  # the refit: the protocol's view, test labels hidden


def test_fold_view_hides_every_label_but_the_training_folds_and_the_given_fold():
    graph = tiny_graph()
    fit_nodes = graph.cal_idx[:5]
    view = fold_view(graph, fit_nodes)
    visible = (view.labels != HIDDEN_LABEL).nonzero().flatten()
    assert set(visible.tolist()) == set(graph.train_idx.tolist()) | set(fit_nodes.tolist())
    assert torch.equal(view.labels[visible], graph.labels[visible]) and torch.equal(view.cal_idx, fit_nodes)


def test_stratified_parts_cover_the_nodes_once_with_balanced_classes():
    nodes = torch.arange(100, 203)
    labels = torch.arange(103) % 4
    parts = stratified_parts(nodes, labels, 5, seed=7)
    assert sorted(torch.cat(parts).tolist()) == nodes.tolist()
    assert max(map(len, parts)) - min(map(len, parts)) <= 1
    for k in range(4):
        counts = [int((labels[p - 100] == k).sum()) for p in parts]
        assert max(counts) - min(counts) <= 1
    assert [p.tolist() for p in parts] == [p.tolist() for p in stratified_parts(nodes, labels, 5, seed=7)]
    assert [p.tolist() for p in parts] != [p.tolist() for p in stratified_parts(nodes, labels, 5, seed=8)]


def test_the_same_seed_gives_the_same_choice_and_scores_and_another_seed_other_parts():
    graph = tiny_graph()
    first, second, other = (select_calibrator(graph, candidates=["TS", "GATS"], parts=3, seed=s, **QUICK)
                            for s in (1, 1, 2))
    assert first.ranking == second.ranking
    assert torch.equal(first.winner.predict_proba(graph), second.winner.predict_proba(graph))
    assert [r.per_part for r in first.ranking] != [r.per_part for r in other.ranking]
    # in the protocol AutoCal draws its seed from the global generator, which the run's seed sets
    torch.manual_seed(5)
    a = build_calibrator("AutoCal", NUM_CLASSES, candidates=["TS", "GATS"], parts=3, **QUICK).fit(graph)
    torch.manual_seed(5)
    b = build_calibrator("AutoCal", NUM_CLASSES, candidates=["TS", "GATS"], parts=3, **QUICK).fit(graph)
    assert a.fit_info == b.fit_info


def test_accuracy_preserving_exactly_when_every_candidate_is():
    graph = tiny_graph()
    preserving = build_calibrator("AutoCal", NUM_CLASSES, candidates=["TS", "GATS", "IRM"], parts=3, **QUICK)
    assert preserving.accuracy_preserving
    torch.manual_seed(0)
    preserving.fit(graph)
    assert torch.equal(preserving.predict_proba(graph).argmax(1), graph.logits.argmax(1))
    assert not build_calibrator("AutoCal", NUM_CLASSES, candidates=["TS", "VS"]).accuracy_preserving
    assert not build_calibrator("AutoCal", NUM_CLASSES).accuracy_preserving  # Dirichlet is a default candidate


@pytest.mark.parametrize("options,message", [
    ({"candidates": ["TS", "Nonexistent"]}, r"AutoCal's candidates: unknown calibrator 'Nonexistent'; valid"),
    ({"candidates": ["TS", "ts"]}, r"AutoCal's candidates name TS twice; list each once"),
    ({"candidates": ["TS", "AutoCal"]}, r"cannot choose among selecting calibrators \(AutoCal\)"),
    ({"candidates": []}, r"AutoCal needs at least one candidate"),
    ({"score": "brier"}, r"AutoCal's score must be one of nll, ece, got 'brier'"),
    ({"parts": 1}, r"AutoCal's parts must be an integer >= 2"),
    ({"weight_decay": 0.01}, r"AutoCal has no parameters of its own, so no weight decay"),
    ({"candidates": ["TS"], "candidate_options": {"GATS": {"heads": 2}}}, r"candidate_options name GATS, which is"),
    ({"candidates": ["GATS"], "candidate_options": {"GATS": {"heads": 0}}}, r"GATS needs at least one head"),
])
def test_bad_options_are_refused_in_one_line(options, message):
    with pytest.raises(ConfigError, match=message) as raised:
        build_calibrator("AutoCal", NUM_CLASSES, **options)
    assert "\n" not in str(raised.value)


def test_too_few_calibration_nodes_for_the_parts_are_refused():
    graph = tiny_graph()
    with pytest.raises(ConfigError, match=r"12 calibration nodes cannot be dealt into 20 parts; give fewer parts"):
        build_calibrator("AutoCal", NUM_CLASSES, candidates=["TS"], parts=20).fit(graph)


def test_the_row_records_the_choice_and_every_held_out_score(tmp_path):
    graph = tiny_graph()
    torch.manual_seed(0)
    model = build_calibrator("AutoCal", NUM_CLASSES, candidates=["TS", "ETS", "IRM"], parts=3, **QUICK).fit(graph)
    audit = model.audit(graph, graph.cal_idx)
    scores = json.loads(audit["selection_scores"])
    assert audit["selected"] == model.selected == min(scores["held_out"], key=scores["held_out"].get)
    assert scores["score"] == "nll" and scores["parts"] == 3 and set(scores["held_out"]) == {"TS", "ETS", "IRM"}
    path = tmp_path / "results.csv"  # beside another calibrator's row: the columns of AutoCal's rows only
    append_rows(path, [{"dataset": "Cora", "calibrator": "TS", "ece": 0.1},
                       {"dataset": "Cora", "calibrator": "AutoCal", "ece": 0.1, **audit}])
    rows = read_results(path)
    assert list(rows.columns[-2:]) == SELECTION_COLUMNS and pd.isna(rows.loc[0, "selected"])
    assert rows.loc[1, "selected"] == model.selected


@pytest.mark.parametrize("candidates", [["TS", "IRM"], ["Spline", "Dirichlet"], ["GATS"], ["SimCalib_decay_all"],
                                        ["GETS"]])
def test_the_saved_winner_predicts_as_the_fitted_one_and_keeps_the_ranking(tmp_path, candidates):
    graph = tiny_graph()
    selection = select_calibrator(graph, candidates=candidates, parts=3, seed=0, **QUICK)
    assert selection.winner.built_from["name"] == selection.winner_name  # built by build_calibrator: savable
    path = tmp_path / "winner.pt"
    selection.winner.save(path, metadata=selection.metadata())
    model = load_calibrator(path)
    assert type(model) is type(selection.winner) and model.built_from == selection.winner.built_from
    assert torch.equal(model.predict_proba(graph), selection.winner.predict_proba(graph))
    saved = saved_metadata(path)["selection"]
    assert saved["winner"] == selection.winner_name and saved["calibration_nodes"] == selection.num_nodes
    assert (saved["score"], saved["parts"]) == ("nll", 3)
    assert [RankedCandidate(**{**r, "per_part": tuple(r["per_part"])}) for r in saved["ranking"]] == selection.ranking


def test_autocal_saves_with_its_chosen_model_and_loads_to_the_same_probabilities(tmp_path):
    graph = tiny_graph()
    autocal = build_calibrator("AutoCal", NUM_CLASSES, candidates=["TS", "ETS"], parts=3, **QUICK).fit(graph)
    autocal.save(tmp_path / "autocal.pt")
    loaded = load_calibrator(tmp_path / "autocal.pt")
    assert loaded.selected == autocal.selected
    assert torch.equal(loaded.predict_proba(graph), autocal.predict_proba(graph))


def test_a_calibrator_whose_fitted_modules_a_rebuild_cannot_hold_is_refused_when_saved(tmp_path):
    from torch import nn

    graph = tiny_graph()
    ts = build_calibrator("TS", NUM_CLASSES, **QUICK).fit(graph)
    ts.grown = nn.Linear(2, 2)  # a module a fit built that the calibrator's restore_state does not rebuild
    with pytest.raises(ConfigError, match=r"TS builds modules from the graph when fitted \(grown\)") as exc:
        ts.save(tmp_path / "ts.pt")
    assert "\n" not in str(exc.value) and not (tmp_path / "ts.pt").exists()


def test_metadata_must_be_plain_values_and_a_file_without_them_reads_as_none(tmp_path):
    graph = tiny_graph()
    ts = build_calibrator("TS", NUM_CLASSES, **QUICK).fit(graph)
    with pytest.raises(ConfigError, match="the metadata to save is not a mapping of plain values"):
        ts.save(tmp_path / "ts.pt", metadata={"graph": graph})
    ts.save(tmp_path / "ts.pt")
    assert saved_metadata(tmp_path / "ts.pt") == {}


def test_the_library_call_is_simcalib_select_calibrator():
    assert simcalib.select_calibrator is select_calibrator
    with pytest.raises(ConfigError, match="select_calibrator takes a CalibrationGraph"):
        select_calibrator({"logits": None})


def write_outputs(path, **changes):
    logits, hidden, edge_index, y, train_idx, cal_idx = tiny_problem()
    train_mask = torch.zeros(len(y), dtype=torch.bool)
    train_mask[train_idx] = True
    record = {"logits": logits, "hidden": hidden, "edge_index": edge_index, "y": y, "train_mask": train_mask,
              "cal_idx": cal_idx, **changes}
    torch.save({k: v for k, v in record.items() if v is not None}, path)
    return path


def test_simcalib_select_on_a_file_of_model_outputs_prints_the_ranking_and_saves_the_winner(tmp_path, capsys):
    outputs = write_outputs(tmp_path / "outputs.pt")
    saved = tmp_path / "winner.pt"
    assert main(["select", "--outputs", str(outputs), "--candidates", "TS,ETS,IRM", "--parts", "3",
                 "--save", str(saved)]) == 0
    out = capsys.readouterr().out
    assert "12 calibration nodes in 3 stratified parts; held-out NLL" in out
    assert all(name in out for name in ("TS", "ETS", "IRM")) and f"saved to {saved}" in out
    chosen = saved_metadata(saved)["selection"]["winner"]
    assert f"chosen: {chosen} (refitted on all 12 calibration nodes)" in out
    assert load_calibrator(saved).built_from["name"] == chosen


@pytest.mark.parametrize("changes,message", [
    ({"hidden": None}, "missing hidden"),
    ({"y": torch.zeros(3, dtype=torch.long)}, "y must be integer labels [N] = [48]"),
    ({"edge_index": torch.tensor([[0, 99], [99, 0]])}, "edge_index must be integer [2, E] with node indices"),
    ({"cal_mask": torch.ones(48, dtype=torch.bool)}, "give exactly one of cal_idx and cal_mask"),
])
def test_simcalib_select_refuses_a_bad_outputs_file_in_one_line(tmp_path, capsys, changes, message):
    outputs = write_outputs(tmp_path / "outputs.pt", **changes)
    assert main(["select", "--outputs", str(outputs), "--candidates", "TS", "--save", "none"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_simcalib_select_refuses_a_bad_candidate_in_one_line(tmp_path, capsys):
    outputs = write_outputs(tmp_path / "outputs.pt")
    assert main(["select", "--outputs", str(outputs), "--candidates", "TS,Nonexistent", "--save", "none"]) == 2
    err = capsys.readouterr().err
    assert "AutoCal's candidates: unknown calibrator 'Nonexistent'" in err and err.count("\n") == 1


def test_simcalib_select_on_a_registered_run_chooses_on_the_protocols_view_of_it(tiny_protocol, tmp_path, capsys):
    from simcalib.experiment.protocol import Run, calibration_graph, train_run_backbone

    saved = tmp_path / "winner.pt"
    assert main(["select", "--dataset", "cora", "--backbone", "gcn", "--split", "1", "--fold", "2", "--candidates",
                 "TS,ETS", "--parts", "3", "--seed", "4", "--max-epochs", "20", "--cache-dir", tiny_protocol.cache_dir,
                 "--splits-dir", tiny_protocol.splits_dir, "--data-mirror", tiny_protocol.mirror, "--device", "cpu",
                 "--save", str(saved)]) == 0
    out = capsys.readouterr().out
    run = Run("Cora", "GCN", 1, 0, 2)
    graph, _ = calibration_graph(run, tiny_protocol, train_run_backbone(run, tiny_protocol))  # test labels hidden
    expected = select_calibrator(graph, candidates=["TS", "ETS"], parts=3, seed=4, dataset="Cora", backbone="GCN")
    assert out.startswith("AutoCal selection on Cora_GCN_s1_i0_f2: 2708 nodes, 7 classes\n")
    assert expected.table() in out
    model = load_calibrator(saved)
    assert model.built_from["dataset"] == "Cora" and model.built_from["name"] == expected.winner_name
    assert saved_metadata(saved) == expected.metadata()
    assert torch.allclose(model.predict_proba(graph), expected.winner.predict_proba(graph))
