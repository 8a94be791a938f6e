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

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from simcalib.calibrators import graph_cache
from simcalib.errors import ConfigError
from simcalib.graph import hop_distance, in_degree

if TYPE_CHECKING:
    from simcalib.calibrators.signals import NodeSignals

HIDDEN_LABEL = -1


@dataclass
class CalibrationGraph:
    """What a post-hoc calibrator sees of one frozen backbone.

    ``labels`` holds the labels of the labelled nodes only (training folds and calibration fold); every
    other node, the test nodes included, carries :data:`HIDDEN_LABEL`, so a calibrator cannot read test
    labels even by mistake.
    """

    logits: Tensor  # [N, K] backbone logits z
    hidden: Tensor  # [N, h] first-layer representation X^(1)
    edge_index: Tensor  # [2, E] both directions of each undirected edge
    labels: Tensor  # [N] int64, HIDDEN_LABEL outside train_idx and cal_idx
    train_idx: Tensor  # [n_train] backbone training nodes (the other folds)
    cal_idx: Tensor  # [n_cal] calibration fold (= backbone validation fold)
    features: Tensor | None = None  # [N, F] the graph's node features X (dense or sparse CSR); None: not given
    _cache: dict = field(default_factory=dict, repr=False)

    @classmethod
    def from_run(cls, logits, hidden, edge_index, y, train_idx, cal_idx, features=None) -> CalibrationGraph:
        """Build from full labels ``y``, hiding every label outside ``train_idx`` and ``cal_idx``; ``features``:
        the node features X the backbone was trained on, for calibrators that read them (optional)."""
        train_idx, cal_idx = torch.as_tensor(train_idx).long(), torch.as_tensor(cal_idx).long()
        labels = torch.full_like(torch.as_tensor(y).long(), HIDDEN_LABEL)
        labels[train_idx] = torch.as_tensor(y).long()[train_idx]
        labels[cal_idx] = torch.as_tensor(y).long()[cal_idx]
        features = None if features is None else features.float()
        return cls(logits.float(), hidden.float(), edge_index.long(), labels, train_idx, cal_idx, features)

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
            self.logits.to(device), self.hidden.to(device), self.edge_index.to(device), self.labels.to(device),
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
        the training folds)."""
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
        """Calibrated probabilities [N, K]."""
        self.eval()
        return self(graph).exp()


class TemperatureCalibrator(Calibrator):
    """A calibrator of the form softmax(z_i / T_i) with positive (node-wise or global) temperatures."""

    @abstractmethod
    def temperature(self, graph: CalibrationGraph) -> Tensor:
        """Positive temperatures, [N, 1] or [1, 1]."""

    def forward(self, graph: CalibrationGraph) -> Tensor:
        return F.log_softmax(graph.logits / self.temperature(graph), dim=-1)
