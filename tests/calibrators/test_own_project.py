"""A calibrator in a user's project: torch_geometric's inputs checked at the door, plain logits for the graph-free
calibrators, a fitted calibrator saved and loaded, the per-benchmark defaults stated, near-miss names answered."""

from __future__ import annotations

import warnings

import pytest
import torch
from graph_fixtures import NUM_CLASSES, single_thread, tiny_features, tiny_problem
from torch_geometric.data import Data

import simcalib
from simcalib.calibrators import (
    CALIBRATORS,
    CalibrationGraph,
    build_calibrator,
    calibrator_definition,
    calibrator_names,
    defaults_taken,
)
from simcalib.calibrators import base as base_module
from simcalib.errors import ConfigError, DataCorruptError, DefaultsTakenWarning, UnknownNameError

pytestmark = pytest.mark.usefixtures(single_thread.__name__)

GRAPH_FREE = {"UnCal", "TS", "VS", "ETS", "Dirichlet", "IRM", "Spline", "OrderInvariant"}
QUICK = {"max_epochs": 25}  # a few epochs: these tests compare two routes to one fit, not fit quality


def quick_options(name: str) -> dict:
    entry = CALIBRATORS[name]
    return {} if entry.cls.__name__ in ("UnCal", "IRM", "Spline") else dict(QUICK)


def pyg_data(seed: int = 0) -> tuple[Data, torch.Tensor, torch.Tensor]:
    """(Data with boolean train/val masks, logits, hidden) of the tiny problem."""
    logits, hidden, edge_index, y, train_idx, cal_idx = tiny_problem(seed)
    n = len(y)
    train_mask, val_mask = torch.zeros(n, dtype=torch.bool), torch.zeros(n, dtype=torch.bool)
    train_mask[train_idx], val_mask[cal_idx] = True, True
    return Data(x=tiny_features(seed), edge_index=edge_index, y=y, train_mask=train_mask, val_mask=val_mask), logits, hidden


def one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


# ------------------------------------------------------------------------------------------- the door
@pytest.mark.parametrize("name", ["TS", "GATS", "SimCalib"])
def test_boolean_masks_give_the_fit_of_the_equivalent_indices(name):
    data, logits, hidden = pyg_data()
    by_mask = CalibrationGraph.from_data(data, logits, hidden)
    by_index = CalibrationGraph.from_run(logits, hidden, data.edge_index, data.y, data.train_mask.nonzero().flatten(),
                                         data.val_mask.nonzero().flatten())
    assert torch.equal(by_mask.cal_idx, by_index.cal_idx) and by_mask.cal_idx.numel() == int(data.val_mask.sum())
    assert torch.equal(by_mask.labels, by_index.labels)
    probs = []
    for graph in (by_mask, by_index):
        torch.manual_seed(0)
        probs.append(build_calibrator(name, NUM_CLASSES, **QUICK).fit(graph).predict_proba(graph))
    assert torch.equal(*probs)


def test_a_boolean_mask_is_not_read_as_node_indices():
    """The mask's nodes, not nodes 0 and 1."""
    data, logits, hidden = pyg_data()
    graph = CalibrationGraph.from_run(logits, hidden, data.edge_index, data.y, data.train_mask, data.val_mask)
    assert sorted(graph.cal_idx.tolist()) == data.val_mask.nonzero().flatten().tolist()
    assert sorted(graph.train_idx.tolist()) == data.train_mask.nonzero().flatten().tolist()


def refusals():
    data, logits, hidden = pyg_data()
    n = data.num_nodes
    train, cal = data.train_mask, data.val_mask
    overlap = cal.clone()
    overlap[train.nonzero()[0]] = True
    return [
        ("float mask", dict(cal_mask=cal.float()), "float32 tensor; give a boolean mask"),
        ("out of range", dict(cal_mask=torch.tensor([0, 1, n + 4])), f"outside 0..{n - 1} (e.g. {n + 4})"),
        ("negative index", dict(cal_mask=torch.tensor([-1, 2])), "outside 0"),
        ("wrong length", dict(train_mask=train[:-1]), f"boolean mask of shape [{n - 1}] for {n} nodes"),
        ("several splits", dict(train_mask=torch.stack([train, train], 1)), "pick one column, mask[:, s]"),
        ("overlap", dict(cal_mask=overlap), "both training and calibration nodes"),
        ("repeated node", dict(cal_mask=torch.tensor([3, 3, 4])), "names node 3 more than once"),
        ("empty calibration", dict(cal_mask=torch.zeros(n, dtype=torch.bool)), "calibration nodes are empty"),
    ]


@pytest.mark.parametrize("what, masks, message", refusals(), ids=[r[0] for r in refusals()])
def test_bad_masks_are_refused_in_one_line(what, masks, message):
    data, logits, hidden = pyg_data()
    with pytest.raises(ConfigError) as exc:
        CalibrationGraph.from_data(data, logits, hidden, **masks)
    assert message in one_line(exc)


def test_bad_tensors_are_refused_in_one_line():
    data, logits, hidden = pyg_data()
    cases = [
        (dict(logits=logits[:, 0]), "logits must be a float tensor [N, K]"),
        (dict(hidden=hidden[:-2]), "hidden must be the first-layer representation"),
        (dict(y=data.y.float()), "labels y must be integer class indices"),
        (dict(edge_index=data.edge_index + data.num_nodes), "edge_index holds node indices outside"),
        (dict(y=data.y + NUM_CLASSES), "outside the logits' classes"),
    ]
    for change, message in cases:
        given = dict(logits=logits, hidden=hidden, edge_index=data.edge_index, y=data.y)
        given.update(change)
        with pytest.raises(ConfigError) as exc:
            CalibrationGraph.from_run(given["logits"], given["hidden"], given["edge_index"], given["y"],
                                      data.train_mask, data.val_mask)
        assert message in one_line(exc)
    with pytest.raises(ConfigError) as exc:
        CalibrationGraph.from_data(Data(edge_index=data.edge_index, y=data.y), logits)
    assert "no train_mask; pass train_mask=" in one_line(exc)


def test_hidden_is_optional_and_a_calibrator_that_reads_it_says_how_to_get_it():
    data, logits, _ = pyg_data()
    graph = CalibrationGraph.from_data(data, logits)  # no hidden
    assert graph.hidden is None
    for name in ("TS", "GATS", "CaGCN", "Dirichlet"):
        build_calibrator(name, NUM_CLASSES, **QUICK).fit(graph)
    for name in ("SimCalib", "GETS_ap"):
        with pytest.raises(ConfigError) as exc:
            build_calibrator(name, NUM_CLASSES, **QUICK).fit(graph)
        assert f"{CALIBRATORS[name].cls.name} reads the backbone's first-layer representation" in one_line(exc)
        assert "node_outputs(model, data)" in str(exc.value)


# -------------------------------------------------------------------------------------- plain logits
def test_graph_free_calibrators_are_the_expected_ones():
    assert {name for name in calibrator_names() if not CALIBRATORS[name].cls.needs_graph} == GRAPH_FREE


@pytest.mark.parametrize("name", sorted(GRAPH_FREE))
def test_plain_logits_give_the_numbers_of_the_graph(name):
    logits, hidden, edge_index, y, train_idx, cal_idx = tiny_problem()
    graph = CalibrationGraph.from_run(logits, hidden, edge_index, y, train_idx, cal_idx)
    test = torch.ones(len(y), dtype=torch.bool)
    test[train_idx], test[cal_idx] = False, False
    torch.manual_seed(3)
    through_graph = build_calibrator(name, NUM_CLASSES, **quick_options(name)).fit(graph)
    torch.manual_seed(3)
    plain = build_calibrator(name, NUM_CLASSES, **quick_options(name)).fit(
        logits[cal_idx], y[cal_idx], early_stopping=(logits[train_idx], y[train_idx]))
    expected = through_graph.predict_proba(graph)[test]
    assert torch.allclose(plain.predict_proba(logits[test]), expected, atol=1e-6, rtol=0)
    # without early-stopping rows: fitted and early-stopped on the calibration rows themselves
    torch.manual_seed(3)
    alone = build_calibrator(name, NUM_CLASSES, **quick_options(name)).fit(logits[cal_idx].numpy(), y[cal_idx].numpy())
    assert alone.predict_proba(logits[test]).shape == (int(test.sum()), NUM_CLASSES)


@pytest.mark.parametrize("name", ["GATS", "CaGCN", "SimCalib", "WATS"])
def test_graph_calibrators_given_plain_logits_say_what_they_need(name):
    logits, _, _, y, _, cal_idx = tiny_problem()
    calibrator = build_calibrator(name, NUM_CLASSES)
    with pytest.raises(ConfigError) as exc:
        calibrator.fit(logits[cal_idx], y[cal_idx])
    assert f"{name} reads the graph" in one_line(exc) and "CalibrationGraph.from_data(data, logits, hidden)" in str(exc.value)
    with pytest.raises(ConfigError) as exc:
        calibrator.predict_proba(logits)
    assert "takes a CalibrationGraph, not plain logits" in one_line(exc)


def test_plain_logits_input_is_checked():
    logits, _, _, y, _, cal_idx = tiny_problem()
    with pytest.raises(ConfigError) as exc:
        build_calibrator("TS", NUM_CLASSES).fit(logits[cal_idx], y[cal_idx][:-1])
    assert "labels y must be integer class indices" in one_line(exc)
    with pytest.raises(ConfigError) as exc:
        build_calibrator("TS", NUM_CLASSES).fit(logits, y, early_stopping=(logits,))
    assert "early_stopping takes a pair" in one_line(exc)
    with pytest.raises(ConfigError) as exc:
        build_calibrator("TS", NUM_CLASSES).fit("logits", y)
    assert "takes a CalibrationGraph or a logits tensor" in one_line(exc)


# ----------------------------------------------------------------------------------------- save, load
SAVED = calibrator_names()


@pytest.mark.parametrize("name", SAVED)
def test_a_loaded_calibrator_gives_the_same_probabilities(name, tmp_path):
    graph = CalibrationGraph.from_run(*tiny_problem(), features=tiny_features())
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DefaultsTakenWarning)
        fitted = build_calibrator(name, NUM_CLASSES, **quick_options(name)).fit(graph)
    fitted.save(tmp_path / "calibrator.pt")
    state = torch.random.get_rng_state()
    loaded = simcalib.load_calibrator(tmp_path / "calibrator.pt")
    assert torch.equal(torch.random.get_rng_state(), state)  # loading draws nothing from the global stream
    assert type(loaded) is type(fitted) and loaded.fit_info.keys() == fitted.fit_info.keys()
    fresh = CalibrationGraph.from_run(*tiny_problem(), features=tiny_features())  # the same graph, built again
    assert torch.equal(loaded.predict_proba(fresh), fitted.predict_proba(graph))
    if not fitted.needs_graph:  # new logits
        new_logits = 3 * torch.randn(7, NUM_CLASSES, generator=torch.Generator().manual_seed(5))
        assert torch.equal(loaded.predict_proba(new_logits), fitted.predict_proba(new_logits))


def test_saving_needs_a_built_and_fitted_calibrator(tmp_path):
    from simcalib.calibrators import TS

    with pytest.raises(ConfigError) as exc:
        TS(NUM_CLASSES).save(tmp_path / "ts.pt")
    assert "build it with build_calibrator" in one_line(exc)
    with pytest.raises(ConfigError) as exc:
        build_calibrator("TS", NUM_CLASSES).save(tmp_path / "ts.pt")
    assert "not fitted" in one_line(exc)
    (tmp_path / "other.pt").write_bytes(b"not a calibrator")
    with pytest.raises(ConfigError) as exc:
        simcalib.load_calibrator(tmp_path / "other.pt")
    assert "is not a saved calibrator" in one_line(exc)


def test_a_file_whose_definition_this_code_resolves_otherwise_is_refused(tmp_path, monkeypatch):
    logits, _, _, y, _, cal_idx = tiny_problem()
    build_calibrator("VS", NUM_CLASSES, **QUICK).fit(logits[cal_idx], y[cal_idx]).save(tmp_path / "vs.pt")
    import simcalib.calibrators.vs as vs

    original = vs.VS.__init__

    def changed_default(self, num_classes, train_bias=True, **kwargs):  # a constructor default moved
        original(self, num_classes, train_bias=train_bias, **kwargs)

    monkeypatch.setattr(vs.VS, "__init__", changed_default)
    with pytest.raises(ConfigError) as exc:
        simcalib.load_calibrator(tmp_path / "vs.pt")
    assert "resolves to another definition here" in one_line(exc)


def test_a_file_whose_state_does_not_fit_its_model_is_refused_in_one_line(tmp_path):
    logits, _, _, y, _, cal_idx = tiny_problem()
    build_calibrator("VS", NUM_CLASSES, **QUICK).fit(logits[cal_idx], y[cal_idx]).save(tmp_path / "vs.pt")
    saved = torch.load(tmp_path / "vs.pt", weights_only=True)
    saved["state"] = {key: value[:1] for key, value in saved["state"].items()}  # a state of another shape
    torch.save(saved, tmp_path / "vs.pt")
    with pytest.raises(DataCorruptError) as exc:
        simcalib.load_calibrator(tmp_path / "vs.pt")
    assert "the saved state of VS does not fit its model" in one_line(exc)


# ------------------------------------------------------------------------------------ defaults stated
def test_off_a_benchmark_graph_each_per_benchmark_default_says_what_it_took(monkeypatch):
    assert defaults_taken("GATS", "Cora", "GCN") == {}
    assert defaults_taken("GATS", None) == {"bias": 1.0, "weight_decay": 5e-4}
    assert defaults_taken("GATS", "MyGraph", "GCN", weight_decay=0.01) == {"bias": 1.0}  # a given option is no default
    assert defaults_taken("TS", "MyGraph") == {}  # no per-benchmark default
    assert defaults_taken("Dirichlet", "MyGraph") == {"odir": 5e-4}
    definition = calibrator_definition("GATS", "MyGraph", "GCN")
    assert definition.defaults_taken == {"bias": 1.0, "weight_decay": 5e-4}
    # stated beside the options, not in them: the digest is that of the options alone
    assert "defaults_taken" not in definition.text
    assert calibrator_definition("GATS", "Cora", "GCN").defaults_taken == {}
    monkeypatch.setattr("simcalib.calibrators._WARNED", set())
    with pytest.warns(DefaultsTakenWarning) as caught:
        build_calibrator("GATS", NUM_CLASSES, "MyGraph", "GCN")
        build_calibrator("GATS", NUM_CLASSES, "MyGraph", "GCN")  # once
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "not a benchmark graph" in message and "bias=1.0, weight_decay=0.0005" in message and "\n" not in message
    with warnings.catch_warnings():
        warnings.simplefilter("error", DefaultsTakenWarning)
        build_calibrator("GATS", NUM_CLASSES, "Cora", "GCN")  # a benchmark graph: its table's value, no warning
    with pytest.warns(DefaultsTakenWarning, match=r"graph 'cora', not a benchmark graph \(did you mean 'Cora'\?\)"):
        build_calibrator("GATS", NUM_CLASSES, "cora", "GCN")


# ------------------------------------------------------------------------------------------- names
def test_a_near_miss_is_answered_with_did_you_mean():
    from simcalib.backbones.training import backbone_name
    from simcalib.data import get_spec

    with pytest.raises(UnknownNameError) as exc:
        build_calibrator("SimCalb", NUM_CLASSES)
    assert "unknown calibrator 'SimCalb' (did you mean 'SimCalib'?)" in one_line(exc)
    with pytest.raises(UnknownNameError) as exc:
        get_spec("Citeser")
    assert "unknown dataset 'Citeser' (did you mean 'Citeseer'?)" in one_line(exc)
    with pytest.raises(UnknownNameError) as exc:
        backbone_name("GATT")
    assert "(did you mean 'GAT'?)" in one_line(exc)
    with pytest.raises(UnknownNameError) as exc:
        build_calibrator("Platt", NUM_CLASSES)  # nothing close: no guess
    assert "did you mean" not in one_line(exc)


def test_node_indices_keeps_integer_indices_as_given():
    assert base_module.node_indices(torch.tensor([4, 1, 2]), 5, "x").tolist() == [4, 1, 2]
    assert base_module.node_indices([0, 3], 5, "x").tolist() == [0, 3]
