"""The shared calibrator interface.

A calibrator is fitted on the labelled nodes of one trained backbone and then maps the backbone's logits
to probabilities for every node. All calibrators here are post-hoc (the backbone is frozen) and, except
VS, Dirichlet and GETS (``accuracy_preserving = False``; an instance's flag, which a preset can set),
accuracy-preserving: the argmax of their output is the argmax of the logits.

Usage::

    graph = CalibrationGraph(logits, hidden, edge_index, labels, train_idx, cal_idx)
    calibrator = TS(num_classes).fit(graph)          # fit on graph.cal_idx, early-stop on graph.train_idx
    probs = calibrator.predict_proba(graph)          # [N, K]
"""

from __future__ import annotations

import functools
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from importlib import metadata as package_metadata
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import simcalib.calibrators.graph_cache as graph_cache
from simcalib.errors import ConfigError
from simcalib.graph import hop_distance, in_degree

if TYPE_CHECKING:
    from simcalib.calibrators.signals import NodeSignals

HIDDEN_LABEL = -1
SAVED_FORMAT = "simcalib.calibrator"  # what Calibrator.save writes (simcalib.calibrators.load_calibrator reads)
SAVED_FORMAT_VERSION = 1


def _version() -> str:
    try:
        return package_metadata.version("simcalib")
    except package_metadata.PackageNotFoundError:
        return "unknown"


def node_indices(nodes, num_nodes: int, what: str) -> Tensor:
    """``nodes`` as int64 node indices [n]: a boolean mask [N] (torch_geometric's ``train_mask``) or integer
    indices in 0..N-1, each node once; anything else is a :class:`~simcalib.errors.ConfigError` of one line."""
    try:
        nodes = torch.as_tensor(nodes)
    except (TypeError, ValueError, RuntimeError):
        raise ConfigError(f"{what}: give a boolean mask of {num_nodes} entries or a tensor of integer node "
                          f"indices, not a {type(nodes).__name__}") from None
    if nodes.dtype == torch.bool:
        if nodes.dim() != 1 or nodes.numel() != num_nodes:
            split = "; a mask of several splits [N, S]: pick one column, mask[:, s]" if nodes.dim() == 2 else ""
            raise ConfigError(f"{what} is a boolean mask of shape {list(nodes.shape)} for {num_nodes} nodes; give "
                              f"one entry per node, shape [{num_nodes}]{split}")
        return nodes.nonzero().flatten()
    if nodes.is_floating_point() or nodes.is_complex():
        raise ConfigError(f"{what} is a {str(nodes.dtype).removeprefix('torch.')} tensor; give a boolean mask "
                          "(mask.bool()) or integer node indices (mask.nonzero().flatten())")
    nodes = nodes.long().flatten() if nodes.dim() == 0 else nodes.long()
    if nodes.dim() != 1:
        raise ConfigError(f"{what}: integer node indices of shape {list(nodes.shape)}; give one dimension, [n]")
    outside = nodes[(nodes < 0) | (nodes >= num_nodes)]
    if outside.numel():
        raise ConfigError(f"{what} holds node indices outside 0..{num_nodes - 1} (e.g. {int(outside[0])}); index "
                          f"the graph's {num_nodes} nodes")
    if nodes.unique().numel() != nodes.numel():
        values, counts = nodes.unique(return_counts=True)
        raise ConfigError(f"{what} names node {int(values[counts > 1][0])} more than once; give each node once")
    return nodes


@dataclass
class CalibrationGraph:
    """What a post-hoc calibrator sees of one frozen backbone.

    ``labels`` holds the labels of the labelled nodes only (training folds and calibration fold); every
    other node, the test nodes included, carries :data:`HIDDEN_LABEL`, so a calibrator cannot read test
    labels even by mistake. Build it with :meth:`from_data` (a torch_geometric ``Data`` and its boolean
    masks) or :meth:`from_run` (tensors); both check their inputs.

    Shapes:
        logits [N, K], hidden [N, h] or None, edge_index [2, E], labels [N], train_idx [n_train],
        cal_idx [n_cal], features [N, F] or None.
    """

    logits: Tensor  # [N, K] backbone logits z
    # [N, h] first-layer representation X^(1) (simcalib.calibrators.capture.node_outputs); None: not given, for
    # the calibrators that do not read it
    hidden: Tensor | None
    edge_index: Tensor  # [2, E] both directions of each undirected edge
    labels: Tensor  # [N] int64, HIDDEN_LABEL outside train_idx and cal_idx
    train_idx: Tensor  # [n_train] backbone training nodes (the other folds)
    cal_idx: Tensor  # [n_cal] calibration fold (= backbone validation fold)
    features: Tensor | None = None  # [N, F] the graph's node features X (dense or sparse CSR); None: not given
    _cache: dict = field(default_factory=dict, repr=False)

    @classmethod
    def from_run(cls, logits, hidden, edge_index, y, train_idx, cal_idx, features=None) -> CalibrationGraph:
        """Build from full labels ``y``, hiding every label outside ``train_idx`` and ``cal_idx``.

        ``train_idx``, ``cal_idx``: the backbone's training nodes and the calibration nodes, each a boolean mask
        [N] or integer node indices, disjoint; ``hidden``: the backbone's first-layer representation [N, h]
        (:func:`~simcalib.calibrators.capture.node_outputs`), or None for the calibrators that do not read it;
        ``features``: the node features X the backbone was trained on, for calibrators that read them (optional).
        Each problem with the inputs is a :class:`~simcalib.errors.ConfigError` of one line.
        """
        logits = torch.as_tensor(logits)
        if logits.dim() != 2 or not logits.is_floating_point() or logits.shape[1] < 2:
            raise ConfigError(f"logits must be a float tensor [N, K] with K >= 2 classes, got "
                              f"{str(logits.dtype).removeprefix('torch.')} of shape {list(logits.shape)}")
        n, k = logits.shape
        y = torch.as_tensor(y)
        y = y.view(-1) if y.dim() == 2 and y.shape[1] == 1 else y
        if y.dim() != 1 or y.numel() != n or y.is_floating_point() or y.dtype == torch.bool:
            raise ConfigError(f"labels y must be integer class indices [N] = [{n}] (one per row of the logits), got "
                              f"{str(y.dtype).removeprefix('torch.')} of shape {list(y.shape)}")
        train_idx = node_indices(train_idx, n, "the training nodes (train_idx / train_mask)").to(y.device)
        cal_idx = node_indices(cal_idx, n, "the calibration nodes (cal_idx / cal_mask)").to(y.device)
        if cal_idx.numel() == 0:
            raise ConfigError("the calibration nodes are empty; give the nodes to fit the calibrator on "
                              "(torch_geometric: data.val_mask)")
        both = train_idx[torch.isin(train_idx, cal_idx)]
        if both.numel():
            raise ConfigError(f"{both.numel()} nodes are both training and calibration nodes (e.g. node "
                              f"{int(both[0])}); the calibrator is fitted on nodes the backbone did not train on: "
                              "give disjoint sets (torch_geometric: data.train_mask and data.val_mask)")
        y = y.long()
        labelled = torch.cat([train_idx, cal_idx])
        bad = labelled[(y[labelled] < 0) | (y[labelled] >= k)]
        if bad.numel():
            raise ConfigError(f"node {int(bad[0])} is labelled {int(y[bad[0]])}, outside the logits' classes "
                              f"0..{k - 1}")
        edge_index = torch.as_tensor(edge_index)
        if edge_index.dim() != 2 or edge_index.shape[0] != 2 or edge_index.is_floating_point():
            raise ConfigError(f"edge_index must be integer node pairs [2, E], got "
                              f"{str(edge_index.dtype).removeprefix('torch.')} of shape {list(edge_index.shape)}")
        if edge_index.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= n):
            raise ConfigError(f"edge_index holds node indices outside 0..{n - 1}; index the graph's {n} nodes")
        if hidden is not None:
            hidden = torch.as_tensor(hidden)
            if hidden.dim() != 2 or hidden.shape[0] != n:
                raise ConfigError(f"hidden must be the first-layer representation [N, h] = [{n}, h], got shape "
                                  f"{list(hidden.shape)}")
            hidden = hidden.float()
        labels = torch.full_like(y, HIDDEN_LABEL)
        labels[labelled] = y[labelled]
        features = None if features is None else features.float()
        device = logits.device  # one device for every tensor: the logits'
        hidden = None if hidden is None else hidden.to(device)
        return cls(logits.float(), hidden, edge_index.long().to(device), labels.to(device), train_idx.to(device),
                   cal_idx.to(device), None if features is None else features.to(device))

    @classmethod
    def from_data(cls, data, logits, hidden=None, train_mask=None, cal_mask=None) -> CalibrationGraph:
        """Build from a torch_geometric ``Data`` (its ``edge_index``, ``y`` and, as the node features, ``x``)
        and the frozen model's ``logits`` [N, K] and ``hidden`` [N, h] (both from
        :func:`~simcalib.calibrators.capture.node_outputs`; ``hidden`` may be None for the calibrators that do
        not read it).

        ``train_mask``: the nodes the model was trained on (default ``data.train_mask``); ``cal_mask``: the
        nodes to fit the calibrator on (default ``data.val_mask``); each a boolean mask [N] or node indices.
        Every label outside them is hidden. Checked as :meth:`from_run`.
        """
        for name in ("edge_index", "y"):
            if getattr(data, name, None) is None:
                raise ConfigError(f"the Data has no {name}; CalibrationGraph.from_data reads data.edge_index and "
                                  "data.y (or use CalibrationGraph.from_run with tensors)")
        masks = {}
        for given, attribute, option in ((train_mask, "train_mask", "train_mask"), (cal_mask, "val_mask", "cal_mask")):
            mask = given if given is not None else getattr(data, attribute, None)
            if mask is None:
                raise ConfigError(f"the Data has no {attribute}; pass {option}=... (a boolean mask [N] or node indices)")
            masks[option] = mask
        features = getattr(data, "x", None)
        features = features if isinstance(features, Tensor) and features.dim() == 2 else None
        return cls.from_run(logits, hidden, data.edge_index, data.y, masks["train_mask"], masks["cal_mask"],
                            features=features)

    @classmethod
    def from_logits(cls, logits, labels=None, stop_logits=None, stop_labels=None) -> CalibrationGraph:
        """The graph-free view of plain logits: no edges, no hidden features; ``labels`` [n] (optional) label
        every row and make them the calibration nodes; ``stop_logits``, ``stop_labels`` (optional) add the
        early-stopping rows as the training nodes (without them, the calibration rows are also the
        early-stopping rows). What ``fit(logits, labels)`` and ``predict_proba(logits)`` of a graph-free
        calibrator build."""
        logits = torch.as_tensor(logits)
        if labels is None:
            if logits.dim() != 2 or not logits.is_floating_point():
                raise ConfigError(f"logits must be a float tensor [n, K], got shape {list(logits.shape)}")
            none = torch.zeros(0, dtype=torch.long, device=logits.device)
            return cls(logits.float(), None, none.view(2, 0), torch.full((len(logits),), HIDDEN_LABEL,
                       dtype=torch.long, device=logits.device), none, none)
        if (stop_logits is None) != (stop_labels is None):
            raise ConfigError("early_stopping takes both the early-stopping logits and their labels: "
                              "early_stopping=(logits, labels)")
        n = len(logits)
        if stop_logits is None:
            all_logits, y = logits, torch.as_tensor(labels)
            cal = torch.arange(n)
            graph = cls.from_run(all_logits, None, torch.zeros(2, 0, dtype=torch.long), y,
                                 torch.zeros(0, dtype=torch.long), cal)
            graph.train_idx = graph.cal_idx  # early-stopping on the fit rows themselves
            return graph
        stop_logits = torch.as_tensor(stop_logits)
        if stop_logits.dim() != 2 or logits.dim() != 2 or stop_logits.shape[1] != logits.shape[1]:
            raise ConfigError(f"the early-stopping logits {list(stop_logits.shape)} and the logits "
                              f"{list(logits.shape)} must both be [n, K] with the same K")
        y = torch.cat([torch.as_tensor(labels).view(-1), torch.as_tensor(stop_labels).view(-1)])
        return cls.from_run(torch.cat([logits, stop_logits]), None, torch.zeros(2, 0, dtype=torch.long), y,
                            torch.arange(n, n + len(stop_logits)), torch.arange(n))

    @property
    def num_nodes(self) -> int:
        return int(self.logits.shape[0])

    @property
    def num_classes(self) -> int:
        return int(self.logits.shape[1])

    @property
    def device(self) -> torch.device:
        return self.logits.device

    def to(self, device) -> CalibrationGraph:
        return CalibrationGraph(
            self.logits.to(device), None if self.hidden is None else self.hidden.to(device),
            self.edge_index.to(device), self.labels.to(device),
            self.train_idx.to(device), self.cal_idx.to(device),
            None if self.features is None else self.features.to(device),
        )

    def require_features(self, calibrator: str) -> Tensor:
        """The node features X [N, F]; ConfigError naming ``calibrator`` when the graph carries none."""
        if self.features is None:
            raise ConfigError(f"{calibrator} reads the graph's node features X, and this CalibrationGraph has none: "
                              "build it with features=... (CalibrationGraph.from_run(..., features=graph.x), as "
                              "simcalib.experiment.protocol.calibration_graph does)")
        if self.features.shape[0] != self.num_nodes:
            raise ConfigError(f"{calibrator}: the graph's features have {self.features.shape[0]} rows for "
                              f"{self.num_nodes} nodes; give one row per node")
        return self.features

    def require_hidden(self, calibrator: str) -> Tensor:
        """The first-layer representation [N, h]; ConfigError naming ``calibrator`` when the graph carries none."""
        if self.hidden is None:
            raise ConfigError(f"{calibrator} reads the backbone's first-layer representation, and this "
                              "CalibrationGraph has none: capture it with simcalib.calibrators.node_outputs(model, "
                              "data) and pass hidden=... (docs/own-graph.md)")
        return self.hidden

    def labelled_idx(self) -> Tensor:
        return torch.cat([self.train_idx, self.cal_idx])

    # Derived graph quantities, computed once per graph and shared by every calibrator fitted on it.
    def degree(self) -> Tensor:
        """In-degree per node, float [N] (without self-loops)."""
        if "degree" not in self._cache:
            self._cache["degree"] = in_degree(self.edge_index, self.num_nodes).to(self.device)
        return self._cache["degree"]

    def hops_to_train(self) -> Tensor:
        """Hop distance from every node to the nearest backbone training node, int64 [N] (-1: unreachable)."""
        if "hops" not in self._cache:  # a BFS: shared by every graph over the same edge tensor and training nodes
            key = ("hops_to_train", self.num_nodes, graph_cache.content_key(self.train_idx), str(self.device))
            self._cache["hops"] = graph_cache.shared(self.edge_index, key, lambda: hop_distance(
                self.edge_index, self.num_nodes, self.train_idx).to(self.device))
        return self._cache["hops"]


class Calibrator(nn.Module, ABC):
    """Base class: ``fit`` on labelled nodes, ``forward`` gives log-probabilities [N, K] for all nodes.

    The default ``fit`` is the common training rule of the protocol (PROTOCOL section 4): minimise NLL on
    the calibration fold with Adam, early-stop on NLL over the training folds.
    """

    name: ClassVar[str] = "calibrator"
    accuracy_preserving: ClassVar[bool] = True
    # The version of the numbers this class computes: bump it when an edit moves a fitted model's probabilities
    # (tests/calibrators/test_pinned_numbers.py names the class whose numbers moved); its rows are then computed
    # again, and only its rows. Version 1 is the class's first definition and stays out of the digest.
    numbers_version: ClassVar[int] = 1
    # False: node i's output depends on its logits z_i alone, so ``fit(logits, labels)`` and
    # ``predict_proba(logits)`` take plain tensors (scikit-learn's and netcal's habit) as well as a graph
    needs_graph: ClassVar[bool] = True
    # attributes set by ``fit`` outside the state dict (e.g. SimCalib's chosen grid point), kept by ``save``
    fitted_attributes: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "fit" in cls.__dict__:  # every fit takes plain logits where the calibrator needs no graph
            cls.fit = _plain_logits_door(cls.fit)

    def __init__(self, num_classes: int, lr: float = 0.01, weight_decay: float = 0.0,
                 max_epochs: int = 2000, patience: int = 100):
        super().__init__()
        if num_classes < 2:
            raise ConfigError(f"a calibrator needs at least 2 classes, got {num_classes}")
        self.num_classes = num_classes
        self.lr = lr
        self.weight_decay = weight_decay
        self.max_epochs = max_epochs
        self.patience = patience
        self.fit_info: dict = {}

    def parameter_groups(self) -> list[dict]:
        """Adam parameter groups: every trainable parameter with ``weight_decay`` (the GATS code's rule)."""
        return [{"params": [p for p in self.parameters() if p.requires_grad], "weight_decay": self.weight_decay}]

    def audit(self, graph: CalibrationGraph, nodes: Tensor, signals: NodeSignals | None = None) -> dict:
        """Values of the fitted calibrator worth a results column (e.g. SimCalib's chosen w, t and the
        temperatures on ``nodes``); see :data:`simcalib.store.results_store.AUDIT_COLUMNS`. ``signals``: per-node
        values on ``nodes`` already computed for the row (:class:`~simcalib.calibrators.signals.NodeSignals`).
        Default: none."""
        return {}

    def nodewise_feature_temperature(self, graph: CalibrationGraph) -> Tensor | None:
        """Each node's feature-similarity temperature [N] for a calibrator that has one (SimCalib's T_feat);
        None otherwise. The feature-similarity figure averages it per distance group."""
        return None

    def prepare(self, graph: CalibrationGraph) -> None:
        """Hook: build graph-dependent buffers (distances, prototypes...) before training. Default: nothing."""

    @abstractmethod
    def forward(self, graph: CalibrationGraph) -> Tensor:
        """Calibrated log-probabilities [N, K] for every node."""

    def fit(self, graph: CalibrationGraph, fit_idx: Tensor | None = None, stop_idx: Tensor | None = None) -> Calibrator:
        """Fit on ``fit_idx`` (default: the calibration fold), early-stopping on ``stop_idx`` (default:
        the training folds).

        A graph-free calibrator (``needs_graph = False``) also takes ``fit(logits, labels)``: logits [n, K] and
        labels [n] of the calibration nodes, with ``early_stopping=(logits, labels)`` of other labelled nodes
        (default: the calibration rows themselves); the same numbers as the graph's fit on those nodes."""
        fit_idx, stop_idx = self.check_fit_nodes(graph, fit_idx, stop_idx)
        self.to(graph.device)
        self.prepare(graph)
        if any(p.requires_grad for p in self.parameters()):
            self.fit_info = self.train_parameters(graph, fit_idx, stop_idx)
        self.eval()
        return self

    def check_fit_nodes(self, graph: CalibrationGraph, fit_idx: Tensor | None = None,
                        stop_idx: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """(fit nodes, early-stopping nodes) with their defaults, refusing nodes whose labels are hidden
        (for calibrators that override ``fit``)."""
        if graph.num_classes != self.num_classes:
            raise ConfigError(f"{self.name} was built for {self.num_classes} classes, the graph has {graph.num_classes}")
        fit_idx = graph.cal_idx if fit_idx is None else fit_idx
        stop_idx = graph.train_idx if stop_idx is None else stop_idx
        for idx, what in ((fit_idx, "fit"), (stop_idx, "early-stopping")):
            if (graph.labels[idx] == HIDDEN_LABEL).any():
                raise ConfigError(f"{self.name}: the {what} nodes include nodes whose labels are hidden")
        return fit_idx, stop_idx

    def train_parameters(self, graph: CalibrationGraph, fit_idx: Tensor, stop_idx: Tensor) -> dict:
        """Train the parameters under the common rule; returns what ``fit_info`` records."""
        from simcalib.calibrators.training import fit_nll

        return fit_nll(self, graph, fit_idx, stop_idx)

    @torch.no_grad()
    def predict_proba(self, graph: CalibrationGraph) -> Tensor:
        """Calibrated probabilities [N, K]; a graph-free calibrator also takes plain logits [n, K]."""
        if not isinstance(graph, CalibrationGraph):
            graph = CalibrationGraph.from_logits(self.plain_logits(graph, "predict_proba"))
        self.eval()
        return self(graph).exp()

    def plain_logits(self, logits, method: str) -> Tensor:
        """``logits`` as a tensor, for a calibrator that needs no graph; one-line ConfigError otherwise."""
        if self.needs_graph:
            raise ConfigError(f"{self.name} reads the graph (edges, training nodes), so {method} takes a "
                              "CalibrationGraph, not plain logits: CalibrationGraph.from_data(data, logits, hidden) "
                              "(docs/own-graph.md); graph-free calibrators such as TS or ETS take plain logits")
        if isinstance(logits, Tensor) or hasattr(logits, "__array__"):
            return torch.as_tensor(logits)
        raise ConfigError(f"{self.name}.{method} takes a CalibrationGraph or a logits tensor [n, K], not a "
                          f"{type(logits).__name__}")

    def save(self, path, metadata: dict | None = None) -> None:
        """Write the fitted calibrator to ``path``: what :func:`~simcalib.calibrators.build_calibrator` built it
        from (name, classes, dataset, backbone, options, the definition's digest), its state dict, its
        ``fitted_attributes`` and ``fit_info``; :func:`simcalib.load_calibrator` reads it back.

        ``metadata``: plain values (JSON: numbers, strings, lists, dicts) kept beside the calibrator, e.g. the
        ranking ``simcalib select`` saves with its winner; :func:`simcalib.calibrators.saved_metadata` reads them.
        The file is checked by rebuilding the calibrator from it: one whose fit builds modules from the graph
        that its ``restore_state`` cannot size from the saved state (GETS's sizes them; AutoCal's chosen model
        is not rebuilt) is refused with a ConfigError, and nothing is written."""
        built = getattr(self, "built_from", None)
        if built is None or getattr(self, "_build_unfitted", None) is None:
            raise ConfigError(f"{self.name} was not built by simcalib.calibrators.build_calibrator, so its "
                              "definition is unknown: build it with build_calibrator(name, num_classes, ...) to save it")
        if not self.fit_info and any(p.requires_grad for p in self.parameters()):
            raise ConfigError(f"{self.name} is not fitted; fit it before saving")
        try:
            built_text = json.dumps(built, sort_keys=True)
            attribute_values = {name: getattr(self, name) for name in self.fitted_attributes}
            attributes = json.dumps(attribute_values)
        except TypeError as exc:
            raise ConfigError(f"{self.name}: its options or fitted attributes are not plain values ({exc}), "
                              "so it cannot be saved") from None
        try:
            metadata_text = json.dumps({} if metadata is None else dict(metadata), sort_keys=True)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{self.name}: the metadata to save is not a mapping of plain values ({exc}); give "
                              "numbers, strings, lists and dicts") from None
        state = {key: value.detach().cpu() for key, value in self.state_dict().items()}
        grown = self._modules_a_rebuild_lacks(state, attribute_values)
        if grown:
            raise ConfigError(f"{self.name} builds modules from the graph when fitted ({', '.join(grown)}) that its "
                              "restore_state cannot rebuild from a saved state, so it cannot be saved; keep the "
                              "fitted object in memory")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({
            "format": SAVED_FORMAT, "format_version": SAVED_FORMAT_VERSION, "simcalib_version": _version(),
            "built_from": built_text, "attributes": attributes, "state": state,
            "fit_info": json.dumps(self.fit_info, default=float), "metadata": metadata_text,
        }, path)

    def _modules_a_rebuild_lacks(self, state: dict, attributes: dict) -> list[str]:
        """The outermost modules of this fitted calibrator that the unfitted one ``build_calibrator`` makes does
        not hold after ``restore_state(state, attributes)`` (modules its fit built from the graph and its
        ``restore_state`` does not size); [] when the rebuild takes every saved tensor. Draws nothing from the
        global stream."""
        with torch.random.fork_rng(devices=[]):
            rebuilt = self._build_unfitted()
            fresh = set(dict(rebuilt.named_modules()))
            try:
                rebuilt.restore_state(state, attributes)
            except (RuntimeError, KeyError):
                grown = set(dict(self.named_modules())) - fresh
                return sorted(name for name in grown if name.rpartition(".")[0] not in grown) or ["its state dict"]
        return []

    def restore_state(self, state: dict, attributes: dict) -> None:
        """Take a saved state dict and ``fitted_attributes``; buffers a fit resizes (e.g. IRM's knots) take the
        saved shape first. Calibrators that build modules on their first graph size them from ``state``."""
        buffers = dict(self.named_buffers())
        for key, value in state.items():
            if key in buffers and buffers[key].shape != value.shape:
                owner_name, _, leaf = key.rpartition(".")
                owner = self.get_submodule(owner_name) if owner_name else self
                owner.register_buffer(leaf, torch.empty_like(value))
        self.load_state_dict(state)
        for name, value in attributes.items():
            setattr(self, name, value)
        self.eval()


def _plain_logits_door(fit):
    """``fit`` taking, besides ``(graph, fit_idx, stop_idx)``, plain ``(logits, labels, early_stopping=...)``."""

    @functools.wraps(fit)
    def door(self, graph, *args, early_stopping=None, **kwargs):
        if isinstance(graph, CalibrationGraph):
            if early_stopping is not None:
                raise ConfigError("early_stopping=(logits, labels) goes with fit(logits, labels); on a "
                                  "CalibrationGraph the early-stopping nodes are its train_idx (or stop_idx=...)")
            return fit(self, graph, *args, **kwargs)
        logits = self.plain_logits(graph, "fit")
        labels = args[0] if args else kwargs.pop("labels", None)
        if labels is None or len(args) > 1 or kwargs:
            raise ConfigError(f"{self.name}.fit on plain logits takes fit(logits, labels) and optionally "
                              "early_stopping=(logits, labels)")
        stop = (None, None) if early_stopping is None else tuple(early_stopping)
        if len(stop) != 2:
            raise ConfigError("early_stopping takes a pair: early_stopping=(logits, labels)")
        return fit(self, CalibrationGraph.from_logits(logits, labels, *stop))

    return door


Calibrator.fit = _plain_logits_door(Calibrator.fit)


class TemperatureCalibrator(Calibrator):
    """A calibrator of the form softmax(z_i / T_i) with positive (node-wise or global) temperatures."""

    @abstractmethod
    def temperature(self, graph: CalibrationGraph) -> Tensor:
        """Positive temperatures, [N, 1] or [1, 1]."""

    def forward(self, graph: CalibrationGraph) -> Tensor:
        return F.log_softmax(graph.logits / self.temperature(graph), dim=-1)
