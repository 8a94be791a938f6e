"""A calibrator's resolved definition (what results rows record): every option as the model is built."""

import json

import pytest
import torch

from simcalib.calibrators import CALIBRATORS, build_calibrator, calibrator_definition
from simcalib.errors import ConfigError


def test_options_a_class_sets_in_its_constructor_are_recorded_as_built():
    options = json.loads(calibrator_definition("WATS", "Cora", "GCN").text)
    model = build_calibrator("WATS", 7, "Cora", "GCN")
    # WATS trains 1000 epochs with patience 50 (set in its constructor, not in its signature)
    assert (options["max_epochs"], options["patience"]) == (model.max_epochs, model.patience) == (1000, 50)
    assert (options["hidden"], options["dropout"]) == (8, 0.95)  # its per-dataset setting on Cora


@pytest.mark.parametrize("name", [n for n, e in CALIBRATORS.items() if e.tuned_from is None])
def test_every_registered_calibrator_records_the_training_options_it_is_built_with(name):
    definition = calibrator_definition(name, "Citeseer", "GAT")
    model = build_calibrator(name, 6, "Citeseer", "GAT")
    options = json.loads(definition.text)
    assert options["class"] == type(model).__name__
    assert {k: options[k] for k in ("lr", "weight_decay", "max_epochs", "patience")} == \
        {k: getattr(model, k) for k in ("lr", "weight_decay", "max_epochs", "patience")}
    assert calibrator_definition(name, "Citeseer", "GAT").digest == definition.digest  # a pure function


def test_resolving_a_definition_leaves_the_random_stream_where_it_was():
    torch.manual_seed(3)
    expected = torch.rand(4)
    torch.manual_seed(3)
    calibrator_definition("SimCalib", "Cora", "GCN")
    assert torch.equal(torch.rand(4), expected)


def test_an_unknown_option_is_refused_by_name():
    with pytest.raises(ConfigError, match=r"invalid options for calibrator TS: temprature \(its options: lr, "):
        calibrator_definition("TS", "Cora", "GCN", temprature=2.0)
