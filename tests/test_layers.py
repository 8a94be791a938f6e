"""The layers of ``simcalib`` (docs/architecture.md): a module imports only from its own layer or below.

Read from the source (:func:`test_import_graph.import_graph`), module-level and function-local imports alike.
"""

from __future__ import annotations

from test_import_graph import import_graph

# bottom to top; a module belongs to the longest prefix that names it
LAYERS = [
    ("foundation", ["simcalib.errors", "simcalib.seeding", "simcalib.metrics", "simcalib.graph", "simcalib.similarity", "simcalib.early_stopping",
                    "simcalib.entry_points"]),
    ("models", ["simcalib.data", "simcalib.backbones", "simcalib.calibrators", "simcalib.tuning.store"]),
    ("store", ["simcalib.store.results_store", "simcalib.store.integrity"]),
    ("analysis", ["simcalib.analysis.feature_signal", "simcalib.analysis.figure_bins", "simcalib.analysis.homophily", "simcalib.analysis.plots"]),
    ("protocol", ["simcalib.experiment.study", "simcalib.experiment.plan", "simcalib.experiment.protocol", "simcalib.experiment.splits", "simcalib.experiment.executor",
                  "simcalib.experiment.needs"]),
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
    upward = sorted(f"{module} ({LAYERS[layer_of(module)][0]}) -> {target} ({LAYERS[layer_of(target)][0]})"
                    for module in graph for target in graph[module] | local[module]
                    if module not in skip and target in graph and target not in skip
                    and layer_of(target) > layer_of(module))
    assert upward == []
