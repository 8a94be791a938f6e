"""Calibrators and graphs from other packages: found by entry point or module:Name, checked before any work."""

from __future__ import annotations

import textwrap
import warnings

import pandas as pd
import pytest
import torch
from torch_geometric.data import Data

from simcalib.calibrators import (
    CALIBRATORS,
    calibrator_definition,
    calibrator_entry,
    calibrator_seed_name,
    canonical_calibrator,
)
from simcalib.calibrators.probe import probe_calibrator
from simcalib.cli import main
from simcalib.data import DATASETS, get_spec, load_dataset
from simcalib.data.external import graph_from_data
from simcalib.errors import ConfigError, UnknownNameError
from simcalib.experiment.plan import plan_benchmark
from simcalib.experiment.protocol import ProtocolSettings

MODULE = '''
import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.data import Data
from simcalib.calibrators import Calibrator


class HalfTS(Calibrator):
    """softmax(z / T) with one trained temperature."""

    def __init__(self, num_classes, scale=1.0, **kwargs):
        super().__init__(num_classes, **kwargs)
        self.scale = scale
        self.t = nn.Parameter(torch.zeros(()))

    def forward(self, graph):
        return F.log_softmax(graph.logits * torch.exp(self.t) * self.scale, dim=-1)


class Reversed(Calibrator):
    """Claims to keep the argmax, but reverses the class order."""

    def __init__(self, num_classes, **kwargs):
        super().__init__(num_classes, **kwargs)
        self.t = nn.Parameter(torch.zeros(()))

    def forward(self, graph):
        return F.log_softmax(-graph.logits * torch.exp(self.t), dim=-1)


class ReversedHonest(Reversed):
    accuracy_preserving = False


class NoForward(Calibrator):
    pass


class NotACalibrator(nn.Module):
    def fit(self, graph):
        return self

    def forward(self, graph):
        return graph.logits


def ring_graph():
    g = torch.Generator().manual_seed(0)
    n = 60
    y = torch.arange(n) % 3
    x = torch.randn(n, 4, generator=g) + y[:, None].float()
    ring = torch.stack([torch.arange(n), (torch.arange(n) + 1) % n])
    return Data(x=x, y=y, edge_index=ring)
'''


@pytest.fixture
def plugin_module(tmp_path, monkeypatch):
    """A module ``plugin_mod`` on sys.path; the registries are restored afterwards."""
    (tmp_path / "plugin_mod.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    calibrators, datasets = dict(CALIBRATORS), dict(DATASETS)
    yield "plugin_mod"
    CALIBRATORS.clear()
    CALIBRATORS.update(calibrators)
    DATASETS.clear()
    DATASETS.update(datasets)


@pytest.fixture
def fake_distribution(plugin_module, tmp_path, monkeypatch):
    """An installed distribution ``plugin-dist`` 1.2.3 whose entry points name plugin_mod's objects."""
    info = tmp_path / "plugin_dist-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: plugin-dist\nVersion: 1.2.3\n")
    (info / "entry_points.txt").write_text(textwrap.dedent("""\
        [simcalib.calibrators]
        HalfTS = plugin_mod:HalfTS
        Broken = plugin_mod:DoesNotExist

        [simcalib.datasets]
        RingGraph = plugin_mod:ring_graph
        """))
    return info


def test_an_entry_point_calibrator_is_found_with_its_package_and_version_and_registered_nowhere(fake_distribution):
    before = dict(CALIBRATORS)
    entry = calibrator_entry("halfts")  # entry-point names match case-insensitively
    assert entry.name == canonical_calibrator("halfts") == "HalfTS" and entry.cls.__module__ == "plugin_mod"
    assert CALIBRATORS == before, "looking a name up registers nothing"
    options = calibrator_definition("HalfTS", "Cora", "GCN", scale=2.0).options
    assert options["package"] == "plugin-dist" and options["version"] == "1.2.3"
    assert options["entry"] == "plugin_mod:HalfTS" and options["scale"] == 2.0
    assert options["weight_decay"] == 0.0  # its constructor's own default, not the protocol's 5e-4 guess
    assert calibrator_seed_name("HalfTS") == "HalfTS"  # the run's calibrator seed derives from the name, as built-ins'
    assert CALIBRATORS == before


def test_another_version_of_the_package_is_another_definition(fake_distribution):
    before = calibrator_definition("HalfTS").digest
    metadata = fake_distribution / "METADATA"
    metadata.write_text(metadata.read_text().replace("1.2.3", "1.2.4"))
    assert calibrator_definition("HalfTS").digest != before  # nothing kept of the first look-up


def test_a_module_reference_is_found_under_the_name_as_written(plugin_module):
    name = canonical_calibrator("plugin_mod:HalfTS")
    assert name == "plugin_mod:HalfTS" and name not in CALIBRATORS
    options = calibrator_definition(name).options
    assert (options["package"], options["version"], options["class"]) == ("none", "none", "HalfTS")


def test_the_plan_resolves_an_external_calibrator_once_and_its_entry_is_all_a_fit_needs(fake_distribution, tmp_path,
                                                                                        monkeypatch):
    from simcalib.experiment import protocol
    from simcalib.experiment.plan import BenchmarkPlan

    before = dict(CALIBRATORS)
    plan = plan_benchmark("Cora", "GCN", [0], [0], [0], [("halfts", {"scale": 2.0}, None), ("ts", None, None)],
                          ProtocolSettings(generated_splits=True), tmp_path, data=False)
    assert CALIBRATORS == before, "planning registers nothing"
    half, ts = plan.calibrators
    assert (half.name, half.seed_name, half.options_dict, ts.name) == ("HalfTS", "HalfTS", {"scale": 2.0}, "TS")
    assert half.digest == calibrator_definition("HalfTS", "Cora", "GCN", scale=2.0).digest
    assert '"package":"plugin-dist"' in half.definition and '"entry":"plugin_mod:HalfTS"' in half.definition
    assert BenchmarkPlan.from_json(plan.to_json()).calibrators == plan.calibrators  # as a worker receives it
    # the entry is taken as it is: no definition is resolved again downstream
    monkeypatch.setattr(protocol, "row_definition", lambda *a, **k: pytest.fail("a planned name resolved again"))
    assert protocol.resolve_calibrator(half, "Cora", "GCN") is half
    with pytest.raises(ValueError, match="planned with options"):
        protocol.resolve_calibrator(half, "Cora", "GCN", {"scale": 3.0})


@pytest.mark.parametrize("name, message", [
    ("NoSuchCalibrator", "unknown calibrator 'NoSuchCalibrator'; valid calibrators are: UnCal, TS"),
    ("no_such_module:Cls", "module no_such_module cannot be imported"),
    ("plugin_mod:Missing", "module plugin_mod has no Missing"),
    ("plugin_mod:NotACalibrator", "does not derive from simcalib.calibrators.Calibrator"),
    ("plugin_mod:NoForward", "does not implement forward"),
    ("plugin_mod:ring_graph", "is a function, not a class"),
])
def test_a_calibrator_that_is_missing_or_lacks_the_interface_is_refused(plugin_module, name, message):
    with pytest.raises((ConfigError, UnknownNameError)) as error:
        canonical_calibrator(name)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_an_entry_point_that_cannot_load_names_its_package(fake_distribution):
    with pytest.raises(ConfigError, match="entry point plugin_mod:DoesNotExist of group simcalib.calibrators "
                                          r"\(package plugin-dist 1.2.3\) cannot be loaded"):
        canonical_calibrator("Broken")


def test_the_probe_refuses_a_calibrator_that_changes_the_argmax_it_claims_to_keep(plugin_module):
    with pytest.raises(ConfigError, match="claims to be accuracy-preserving .* changes the argmax of"):
        probe_calibrator(canonical_calibrator("plugin_mod:Reversed"), 4)
    probe_calibrator(canonical_calibrator("plugin_mod:ReversedHonest"), 4)  # says it does not: accepted
    probe_calibrator(canonical_calibrator("plugin_mod:HalfTS"), 4)


def test_the_probe_leaves_the_random_streams_where_they_were(plugin_module):
    torch.manual_seed(3)
    expected = torch.rand(3)
    torch.manual_seed(3)
    probe_calibrator(canonical_calibrator("plugin_mod:HalfTS"), 3)
    assert torch.equal(torch.rand(3), expected)


STUDY = """\
name: plug
benchmarks: {datasets: [DATASET], backbones: [GCN]}
calibrators: [UnCal, CALIBRATOR]
runs: {splits: 1, inits: 1, folds: 1, generated_splits: true}
output: OUT
"""


@pytest.mark.parametrize("dataset, calibrator, expected", [
    ("Cora", "plugin_mod:Reversed", ":3: calibrators.1: calibrator plugin_mod:Reversed claims to be "
                                    "accuracy-preserving"),
    ("Cora", "plugin_mod:NoForward", ":3: calibrators.1: calibrator 'plugin_mod:NoForward': class NoForward does "
                                     "not implement forward"),
    ("Cora", "UniformMixTZ", ":3: calibrators.1: unknown calibrator 'UniformMixTZ'"),
    ("plugin_mod:no_graph", "TS", ":2: benchmarks.datasets.0: dataset 'plugin_mod:no_graph': module plugin_mod "
                                  "has no no_graph"),
])
def test_a_study_naming_a_bad_entry_fails_before_any_work_with_one_line(plugin_module, tmp_path, capsys, dataset,
                                                                        calibrator, expected):
    out = tmp_path / "out"
    path = tmp_path / "study.yaml"
    path.write_text(STUDY.replace("DATASET", dataset).replace("CALIBRATOR", calibrator).replace("OUT", str(out)))
    assert main(["study", "run", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}{expected}") and err.count("\n") == 1
    assert not out.exists()


def test_an_entry_point_graph_loads_checked_and_made_undirected(fake_distribution):
    spec = get_spec("RingGraph")
    graph = load_dataset("ringgraph")
    assert (spec.name, spec.num_nodes, spec.num_classes, spec.backbone_weight_decay) == ("RingGraph", 60, 3, 0.0)
    assert graph.num_edges == 120  # the directed ring, both directions
    assert "plugin-dist 1.2.3" in graph.source


def run_split_sources(dataset, splits, settings):
    return plan_benchmark(dataset, "GCN", splits, [0], [0], [], settings, "out", data=False).split_sources


def test_an_external_graph_runs_on_generated_splits_only(fake_distribution, tmp_path):
    get_spec("RingGraph")
    with pytest.raises(ConfigError, match="RingGraph is a graph from another package .* runs.generated_splits: true"):
        run_split_sources("RingGraph", [0], ProtocolSettings(splits_dir=str(tmp_path)))
    assert run_split_sources("RingGraph", [0, 1], ProtocolSettings(generated_splits=True)) == \
        {0: "generated", 1: "generated"}
    # another label rate has no fixed files for any graph: drawn from the seed without asking
    assert run_split_sources("RingGraph", [0], ProtocolSettings(fold_rate=0.1)) == {0: "generated"}


def _graph(**changes) -> Data:
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    data = Data(x=torch.rand(6, 3), y=y, edge_index=torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]]))
    for key, value in changes.items():
        setattr(data, key, value)
    return data


@pytest.mark.parametrize("data, message", [
    (_graph(y=None), "has no labels (Data.y is None)"),
    (_graph(x=torch.tensor([[float("nan")] * 3] + [[0.0] * 3] * 5)), "hold 3 NaN or infinite values (nodes 0)"),
    (_graph(y=torch.zeros(6, dtype=torch.long)), "has one class only"),
    (_graph(y=torch.tensor([0, 2, 2, 0, 2, 0])), "classes 1 have no node"),
    (_graph(y=torch.tensor([0.0, 1, 2, 0, 1, 2])), "labels y are torch.float32"),
    (_graph(x=torch.rand(5, 3)), "features x have shape [5, 3] for 6 labelled nodes"),
    (_graph(edge_index=torch.tensor([[0, 1, 2], [1, 2, 3], [3, 4, 5]])), "edge_index has shape [3, 3]"),
    (_graph(edge_index=torch.tensor([[0, 1], [1, 9]])), "edge_index names nodes 0..9, outside 0..5"),
    (_graph(edge_index=torch.tensor([[0, 1], [0, 1]])), "has no edges between distinct nodes"),
    ({"x": 1}, "returned a dict, not a torch_geometric.data.Data"),
])
def test_a_bad_graph_is_refused_naming_the_problem(data, message):
    with pytest.raises(ConfigError) as error:
        graph_from_data("G", data, "test")
    assert message in str(error.value)


def test_isolated_nodes_are_kept_with_a_warning():
    data = _graph(edge_index=torch.tensor([[0, 1, 2], [1, 2, 3]]))  # nodes 4 and 5 have no edge
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        graph = graph_from_data("G", data, "test")
    assert graph.num_nodes == 6 and graph.num_edges == 6
    assert any("2 of 6 nodes have no edge" in str(w.message) for w in caught)


def test_the_report_shows_a_calibrator_no_table_names_beside_the_paper_ones():
    from simcalib.report.tables import build_result_table, other_table_specs

    rows = pd.DataFrame({"dataset": "G", "backbone": "GCN", "calibrator": ["UnCal", "TS", "plugin_mod:HalfTS"],
                         "split": 0, "ece": [5.0, 4.0, 3.0], "nll": 1.0, "accuracy": 80.0})
    specs = other_table_specs(rows)
    assert [s.key for s in specs] == ["other_ece", "other_nll", "other_accuracy"]
    table = build_result_table(rows, specs[0])
    assert table.methods == ["UnCal", "TS", "plugin_mod:HalfTS"]  # paper calibrators that did not run: left out
    assert float(table.mean.loc[("G", "GCN"), "plugin_mod:HalfTS"]) == 3.0
    assert other_table_specs(rows[rows["calibrator"] != "plugin_mod:HalfTS"]) == ()
