"""Graphs from other packages: a function returning a torch_geometric ``Data``, checked and registered by name.

A dataset named by an entry point of group ``simcalib.datasets`` or as ``package.module:function``
(:mod:`simcalib.entry_points`) is a function called with no arguments that returns a
``torch_geometric.data.Data`` with

* ``x``: node features [N, F], float, dense or sparse, every value finite;
* ``y``: class labels [N] (or [N, 1]), integers 0..K-1 with every class present and K >= 2;
* ``edge_index``: edges [2, E], integers in 0..N-1, at least one edge.

It is called once per process, the first time the name is used (at plan time), and checked; every problem is
a ConfigError naming the dataset and the fix. The graph is then made simple and undirected as the heterophilous
benchmarks are (both directions of every edge, self-loops removed, duplicates merged); its features are kept as
given (float32, sparse CSR: no row normalisation). Nodes left without an edge are allowed, as in the built-in
graphs (Citeseer has 48), and reported in a warning (docs/decisions.md). The graph runs under the GATS protocol
on splits drawn from the study seed and its name (it has no fixed split files); its backbone weight decay is 0,
as on every built-in graph but the Planetoid ones. The function must return the same graph on every call: the
rows record the processed graph's digest (``data_digest``), and the backbone cache is keyed by it.
"""

from __future__ import annotations

import warnings

import torch

from simcalib.data.loading import EXTERNAL_GRAPHS, GraphData
from simcalib.data.registry import DATASETS, DatasetSpec, dataset_names
from simcalib.entry_points import DATASET_GROUP, NOT_INSTALLED, resolve_external
from simcalib.errors import ConfigError, SimCalibError

EXTERNAL = "external"  # DatasetSpec.pyg_class of a graph from another package


def register_external_dataset(name: str) -> DatasetSpec:
    """Find ``name`` outside the package (entry point, then ``module:function``), call it, check and process
    the graph, and register it (:data:`~simcalib.data.registry.DATASETS`)."""
    found = resolve_external(name, DATASET_GROUP, "dataset", dataset_names())
    label = f"dataset {found.name!r}" + (f" ({found.reference})" if found.reference != found.name else "")
    if not callable(found.obj):
        raise ConfigError(f"{label} is a {type(found.obj).__name__}, not a function; point it at a function "
                          "returning a torch_geometric.data.Data")
    try:
        data = found.obj()
    except SimCalibError:
        raise
    except Exception as exc:  # a function from outside may fail in any way
        raise ConfigError(f"{label}: calling {found.reference}() raised {type(exc).__name__}: {exc}; fix the "
                          "function (it is called with no arguments)") from None
    source = (f"{found.reference} from package {found.package} {found.version}" if found.package != NOT_INSTALLED
              else f"{found.reference} (not from an installed package)")
    graph = graph_from_data(found.name, data, source, label)
    EXTERNAL_GRAPHS[found.name] = graph
    spec = DatasetSpec(found.name, EXTERNAL, None, "", (), 0.0, graph.num_nodes, graph.num_classes,
                       external=found.reference)
    DATASETS[found.name] = spec
    return spec


def graph_from_data(name: str, data, source: str, label: str | None = None) -> GraphData:
    """``data`` (a torch_geometric ``Data``) checked and processed into a :class:`GraphData`; ConfigError naming
    ``label`` and the problem."""
    from torch_geometric.data import Data
    from torch_geometric.utils import remove_self_loops, to_undirected

    label = label or f"dataset {name!r}"
    if not isinstance(data, Data):
        raise ConfigError(f"{label} returned a {type(data).__name__}, not a torch_geometric.data.Data; return "
                          "Data(x=features [N, F], y=labels [N], edge_index=edges [2, E])")
    x, y, edge_index = getattr(data, "x", None), getattr(data, "y", None), getattr(data, "edge_index", None)
    if y is None:
        raise ConfigError(f"{label} has no labels (Data.y is None); give one class index per node, y [N]")
    if x is None:
        raise ConfigError(f"{label} has no node features (Data.x is None); give x [N, F]")
    if edge_index is None:
        raise ConfigError(f"{label} has no edges (Data.edge_index is None); give edge_index [2, E]")
    if not isinstance(y, torch.Tensor) or y.dim() not in (1, 2) or (y.dim() == 2 and y.shape[1] != 1):
        raise ConfigError(f"{label}: labels y have shape {_shape(y)}; give one class index per node, y [N]")
    y = y.reshape(-1)
    n = int(y.numel())
    if y.is_floating_point() or y.dtype == torch.bool or y.is_complex():
        raise ConfigError(f"{label}: labels y are {y.dtype}; give integer class indices 0..K-1 (y.long())")
    y = y.long()
    if n == 0:
        raise ConfigError(f"{label} has no nodes (y is empty)")
    if int(y.min()) < 0:
        raise ConfigError(f"{label}: labels y include {int(y.min())}; every node needs a class index 0..K-1 "
                          "(drop unlabelled nodes or give them a class)")
    counts = torch.bincount(y)
    if int((counts > 0).sum()) < 2:
        raise ConfigError(f"{label} has one class only (every label is {int(y[0])}); calibration needs at least 2")
    absent = torch.nonzero(counts == 0).view(-1).tolist()
    if absent:
        raise ConfigError(f"{label}: labels run to {len(counts) - 1} but classes {_listed(absent)} have no node; "
                          "renumber the classes 0..K-1 (e.g. torch.unique(y, return_inverse=True)[1])")
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.shape[0] != n:
        raise ConfigError(f"{label}: features x have shape {_shape(x)} for {n} labelled nodes; give x [N, F] with "
                          "one row per node")
    x = x.to_dense() if x.layout != torch.strided else x
    if not (x.is_floating_point() or x.dtype in (torch.bool, torch.int8, torch.int16, torch.int32, torch.int64,
                                                 torch.uint8)):
        raise ConfigError(f"{label}: features x are {x.dtype}; give real numbers (x.float())")
    x = x.to(torch.float32)
    bad = ~torch.isfinite(x)
    if bad.any():
        rows = torch.nonzero(bad.any(dim=1)).view(-1).tolist()
        raise ConfigError(f"{label}: features x hold {int(bad.sum())} NaN or infinite values (nodes "
                          f"{_listed(rows)}); impute or drop them before returning the graph")
    if (not isinstance(edge_index, torch.Tensor) or edge_index.dim() != 2 or edge_index.shape[0] != 2
            or edge_index.is_floating_point()):
        raise ConfigError(f"{label}: edge_index has shape {_shape(edge_index)} and type "
                          f"{getattr(edge_index, 'dtype', type(edge_index).__name__)}; give integer edges [2, E]")
    edge_index = edge_index.long()
    if edge_index.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= n):
        raise ConfigError(f"{label}: edge_index names nodes {int(edge_index.min())}..{int(edge_index.max())}, "
                          f"outside 0..{n - 1} (the graph has {n} nodes, one per label)")
    edge_index, _ = remove_self_loops(edge_index)
    if edge_index.shape[1] == 0:
        raise ConfigError(f"{label} has no edges between distinct nodes; a graph calibrator needs edges")
    edge_index = to_undirected(edge_index, num_nodes=n)  # both directions, coalesced (duplicates merged)
    isolated = n - int(torch.unique(edge_index[0]).numel())
    if isolated:
        warnings.warn(f"{label}: {isolated} of {n} nodes have no edge; they are kept (the built-in Citeseer has "
                      "48) and calibrated from their own logits by graph calibrators", stacklevel=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch: "Sparse CSR tensor support is in beta state"
        x = x.to_sparse_csr()
    return GraphData(name, x, edge_index, y, int(len(counts)), source)


def _shape(value) -> str:
    return str(list(value.shape)) if isinstance(value, torch.Tensor) else type(value).__name__


def _listed(values: list[int], limit: int = 5) -> str:
    shown = ", ".join(map(str, values[:limit]))
    return shown + (f" and {len(values) - limit} more" if len(values) > limit else "")


__all__ = ["EXTERNAL", "graph_from_data", "register_external_dataset"]
