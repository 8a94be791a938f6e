"""The layers of ``simcalib`` (docs/architecture.md): a module imports only from its own layer or below.

Read from the source (:func:`test_import_graph.import_graph`), module-level and function-local imports alike. An
import counts with every package ``__init__`` it runs (:func:`test_import_graph.executed`): importing
``simcalib.a.b`` executes ``simcalib/a/__init__.py``, so what that package face imports is imported too.
"""

from __future__ import annotations

from test_import_graph import executed, import_graph

# bottom to top; a module belongs to the longest prefix that names it
LAYERS = [
    ("foundation", ["simcalib.errors", "simcalib.seeding", "simcalib.metrics", "simcalib.graph", "simcalib.similarity",
                    "simcalib.entry_points", "simcalib.conformal", "simcalib.early_stopping"]),
    ("models", ["simcalib.data", "simcalib.backbones", "simcalib.calibrators"]),
    ("store", ["simcalib.store.results_store", "simcalib.store.integrity", "simcalib.store.tuned"]),
    ("analysis", ["simcalib.analysis.feature_signal", "simcalib.analysis.figure_bins", "simcalib.analysis.homophily", "simcalib.analysis.palette",
                  "simcalib.analysis.plots"]),
    ("protocol", ["simcalib.experiment.study", "simcalib.experiment.plan", "simcalib.experiment.protocol", "simcalib.experiment.splits", "simcalib.experiment.executor",
                  "simcalib.experiment.needs", "simcalib.experiment.shift",
                  "simcalib.experiment.node_runs", "simcalib.experiment.ledger", "simcalib.experiment.schedule"]),
    ("tuning and report", ["simcalib.tuning", "simcalib.report"]),
    ("commands", ["simcalib.commands", "simcalib.cli"]),
]


def containers() -> set[str]:
    """``simcalib`` and the packages that only hold layered modules (their ``__init__`` imports nothing)."""
    held = {prefix.rsplit(".", 1)[0] for _, prefixes in LAYERS for prefix in prefixes if prefix.count(".") > 1}
    return {"simcalib"} | {package for package in held if layer_of(package) is None}


def layer_of(module: str) -> int | None:
    best: tuple[int, int] | None = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[1]):
                best = (index, len(prefix))
    return None if best is None else best[0]


def test_every_module_has_a_layer():
    graph, local = import_graph()
    assert sorted(m for m in graph if m not in containers() and layer_of(m) is None) == []
    assert all(not graph[m] and not local[m] for m in containers() - {"simcalib"} if layer_of(m) is None)


def test_no_module_imports_from_a_layer_above_its_own():
    graph, local = import_graph()
    skip = containers()
    upward = sorted(f"{module} ({LAYERS[layer_of(module)][0]}) -> {ran} ({LAYERS[layer_of(ran)][0]})"
                    + ("" if ran == target else f" through `import {target}`")
                    for module in graph if module not in skip
                    for target in graph[module] | local[module]
                    for ran in executed(module, target, graph)
                    if ran not in skip and layer_of(ran) > layer_of(module))
    assert upward == []


def test_an_import_runs_the_package_faces_above_it():
    """The check sees a package ``__init__``: importing a submodule runs its package's face first."""
    graph, _ = import_graph()
    assert "simcalib.calibrators" in executed("simcalib.store.results_store", "simcalib.calibrators.ts", graph)
    assert "simcalib.calibrators" not in executed("simcalib.calibrators.gets", "simcalib.calibrators.ts", graph)
