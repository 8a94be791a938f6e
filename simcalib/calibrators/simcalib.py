r"""SimCalib: similarity-aware GNN calibration (paper Methods; PROTOCOL section 5).

.. math::
    \hat p_i = w\, \mathrm{softmax}(z_i / T_{feat,i}) + (1 - w)\, \mathrm{softmax}(z_i / T_{move,i}),

* feature similarity: :math:`T_{feat} = \mathrm{softplus}(G_{feat}(s, A))`, with :math:`s_i` the
  L2-normalised squared Mahalanobis distances of node i's first-layer features to the class prototypes
  (:mod:`simcalib.similarity`) and :math:`G_{feat}` a two-layer GCN or GAT;
* representation-movement similarity: :math:`T_{move}` from homophily attention, relative degree and the
  sorted logits (:mod:`simcalib.calibrators.movement`), averaged over ``heads`` heads;
* w and t: the paper's grid, w in {0.6, 0.8, 0.9} x t in {0.3, 0.5, 1.0}, each point fitted with the common
  training rule and the best chosen on labelled nodes only (never test nodes); fixed ``w``/``t`` skip it.

Both terms keep the order of z (T > 0), so their mixture keeps the argmax: accuracy-preserving.

Where the paper is silent (PROTOCOL **choice**), a named option with this default:

=====================  ==============  =====================================================================
option                 default         meaning
=====================  ==============  =====================================================================
``prototype_nodes``    ``"train"``     nodes forming prototypes and covariance: the backbone's training folds,
                                       so the calibration fold is as unseen as the test nodes
                                       (``"labelled"``: + the calibration fold)
``covariance_ridge``   ``0.0``         0: pseudo-inverse of the shared covariance (Lee et al. 2018);
                                       > 0: ridge relative to the mean variance
``eta``                ``"hops"``      eta_i = hop distance + ``eta_offset`` (the paper's text); ``"learned"``:
                                       GATS's learnable scalings for hops 0 and 1, 1 beyond
``eta_offset``         ``1.0``         training nodes (hops 0) get eta = 1, never a division by 0
``unreachable_hops``   ``None``        hops of nodes with no path to a training node (None: max + 1)
``homophily_logits``   ``"raw"``       z in the homophily term: ``raw``, ``unit`` (L2) or ``minmax``
``message_logits``     ``"raw"``       z sorted in the messages (the paper's z~): ``raw``, ``unit``, ``minmax``
``self_loops``         ``True``        j = i is in N(i) (isolated nodes then still get a message)
``training``           ``"separate"``  each branch fitted alone on its own NLL (the feature branch once, the
                                       movement branch once per t), then mixed by w; ``"joint"`` fits the
                                       mixture's NLL, which drives one branch to near one-hot outputs and the
                                       other flat (measured: T_feat ~ 0.001-0.2 with T_move ~ 1 on Cora GCN)
``grid_criterion``     ``"stop_nll"``  grid selection: NLL on the early-stopping nodes (training folds); or
                                       ``fit_nll``, ``stop_ece``, ``fit_ece`` (fit = calibration fold)
=====================  ==============  =====================================================================

Two additions to the paper's equations, both needed under the protocol's training rule (early stopping on
the training folds, whose nodes favour sharp outputs: a branch that starts sharper than the calibration
fold wants never leaves its initialisation):

* ``init_temperature`` (1.0): G_feat's output bias starts at softplus^-1(1), so T_feat starts near 1 (the
  uncalibrated model) like TS does; with a zero bias it starts at softplus(0) = 0.69 and stays there.
* ``movement_bias`` (1.0): a learnable bias added to T_move after the head mean, initialised to 1, as in
  GATS (whose layer the movement branch generalises); ``None`` gives the paper's equation exactly.

Further options: ``w``, ``t`` (fixed values instead of the grid), ``w_grid``, ``t_grid``, ``heads``
(movement heads, 2), ``feat_gnn`` (``"gcn"``/``"gat"``), ``feat_hidden`` (16), ``feat_dropout`` (0.5),
``feat_heads`` (GAT heads, 1), ``feature_input`` (``"mahalanobis"``; ``"logits"`` is ablation l),
``homophily`` / ``relative_degree`` (ablations r, h, n), ``confidence_term`` (False: GATS's
neighbour-confidence term in T_move), ``sort_similarity`` (False: sort s_i, nearest prototype first),
``negative_slope`` (0.2), and the common ``lr`` (0.01), ``weight_decay`` (0.05, see
:mod:`simcalib.calibrators.defaults`), ``max_epochs``, ``patience``.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from simcalib.backbones.models import glorot_
from simcalib.calibrators.base import CalibrationGraph, Calibrator
from simcalib.calibrators.defaults import default_weight_decay
from simcalib.calibrators.layers import (
    GraphInputsCache,
    NodeGNN,
    SortedEdges,
    edges_with_self_loops,
    positive_temperature,
)
from simcalib.calibrators.movement import (
    LOGIT_TRANSFORMS,
    confidence_gap,
    eta_from_hops,
    homophily_attention,
    logit_products,
    movement_messages,
    transform_logits,
)
from simcalib.errors import ConfigError
from simcalib.metrics import ece as expected_calibration_error
from simcalib.similarity import DEFAULT_RIDGE, mahalanobis_to_prototypes, normalized_similarity

PAPER_W_GRID = (0.6, 0.8, 0.9)
PAPER_T_GRID = (0.3, 0.5, 1.0)
GRID_CRITERIA = ("stop_nll", "fit_nll", "stop_ece", "fit_ece")
MIN_ETA = 0.05  # floor of a learned eta


@dataclass
class SimCalibInputs:
    feature: tuple | None  # prepared inputs of G_feat (None without the feature branch)
    messages: dict[float, Tensor]  # t -> aggregated movement messages m [N, K]
    confidence_gap: Tensor | None  # [N, 1] (option confidence_term)
    movement_graph: MovementGraph | None  # what eta = "learned" recomputes the messages from


@dataclass
class MovementGraph:
    edges: SortedEdges  # j -> i
    logit_products: Tensor  # [E] z_i . z_j of the homophily term
    sorted_logits: Tensor  # [N, K]
    degree: Tensor  # [N]
    hops: Tensor  # [N] int64, -1: unreachable


class SimCalib(GraphInputsCache, Calibrator):
    """SimCalib (Wang et al., AAAI 2024): feature-similarity and movement-similarity temperatures, mixed by w.

    See the module docstring for the equations and the table of options.
    """

    name = "SimCalib"

    def __init__(
        self,
        num_classes: int,
        w: float | None = None,
        t: float | None = None,
        w_grid: Sequence[float] = PAPER_W_GRID,
        t_grid: Sequence[float] = PAPER_T_GRID,
        grid_criterion: str = "stop_nll",
        training: str = "separate",
        feature_input: str = "mahalanobis",
        prototype_nodes: str = "train",
        covariance_ridge: float = DEFAULT_RIDGE,
        sort_similarity: bool = False,
        feat_gnn: str = "gcn",
        feat_hidden: int = 16,
        feat_dropout: float = 0.5,
        feat_heads: int = 1,
        init_temperature: float = 1.0,
        heads: int = 2,
        movement_bias: float | None = 1.0,
        confidence_term: bool = False,
        homophily: bool = True,
        relative_degree: bool = True,
        homophily_logits: str = "raw",
        message_logits: str = "raw",
        eta: str = "hops",
        eta_offset: float = 1.0,
        unreachable_hops: int | None = None,
        self_loops: bool = True,
        negative_slope: float = 0.2,
        **kwargs,
    ):
        kwargs.setdefault("weight_decay", default_weight_decay(self.name))
        super().__init__(num_classes, **kwargs)
        self.w_grid = self._check_grid("w", (w,) if w is not None else tuple(w_grid), 0.0, 1.0)
        t_values = (t,) if t is not None else tuple(t_grid)
        self.t_grid = self._check_grid("t", t_values, 0.0, math.inf) if relative_degree else (0.0,)
        choices = {"grid_criterion": (grid_criterion, GRID_CRITERIA), "training": (training, ("joint", "separate")),
                   "feature_input": (feature_input, ("mahalanobis", "logits")),
                   "prototype_nodes": (prototype_nodes, ("train", "labelled")), "feat_gnn": (feat_gnn, ("gcn", "gat")),
                   "homophily_logits": (homophily_logits, LOGIT_TRANSFORMS),
                   "message_logits": (message_logits, LOGIT_TRANSFORMS), "eta": (eta, ("hops", "learned"))}
        for option, (value, valid) in choices.items():
            if value not in valid:
                raise ConfigError(f"SimCalib option {option}={value!r} is not one of: {', '.join(valid)}")
        if heads < 1:
            raise ConfigError(f"SimCalib needs at least one movement head, got heads={heads}")
        self.grid_criterion, self.training = grid_criterion, training
        self.feature_input, self.prototype_nodes, self.covariance_ridge = feature_input, prototype_nodes, covariance_ridge
        self.sort_similarity = sort_similarity
        self.homophily, self.relative_degree = homophily, relative_degree
        self.homophily_logits, self.message_logits = homophily_logits, message_logits
        self.eta_mode, self.eta_offset, self.unreachable_hops = eta, eta_offset, unreachable_hops
        self.self_loops = self_loops
        self.negative_slope = negative_slope
        if init_temperature <= 0:
            raise ConfigError(f"SimCalib init_temperature must be > 0, got {init_temperature}")
        self.init_temperature = init_temperature
        self.w, self.t = self.w_grid[0], self.t_grid[0]  # the point in use; fit() picks it from the grids

        # Branches that can never contribute (w fixed at 0 or 1) are not built, so none of the parameters is dead.
        self.feature_gnn = (NodeGNN(feat_gnn, num_classes, feat_hidden, feat_dropout, feat_heads)
                            if max(self.w_grid) > 0 else None)
        self.movement_weight = nn.Parameter(glorot_(torch.empty(num_classes, heads))) if min(self.w_grid) < 1 else None
        self.movement_bias_init = movement_bias
        # eta = "learned": GATS's learnable scalings for hop distances 0 and 1 (1 beyond)
        self.eta_near = (nn.Parameter(torch.ones(2)) if eta == "learned" and self.movement_weight is not None else None)
        self.confidence_term = confidence_term
        self.confidence_coef = (nn.Parameter(torch.zeros(1))
                                if confidence_term and self.movement_weight is not None else None)
        self.movement_bias = (nn.Parameter(torch.full((1,), float(movement_bias)))
                              if movement_bias is not None and self.movement_weight is not None else None)
        self.reset_parameters()

    @staticmethod
    def _check_grid(name: str, values: tuple, low: float, high: float) -> tuple[float, ...]:
        if not values or any(not (low <= float(v) <= high) for v in values):
            raise ConfigError(f"SimCalib {name} values must lie in [{low}, {high}], got {list(values)}")
        return tuple(float(v) for v in values)

    # ---------------------------------------------------------------------------------------------- inputs
    def compute_inputs(self, graph: CalibrationGraph) -> SimCalibInputs:
        feature = None
        if self.feature_gnn is not None:
            if self.feature_input == "logits":  # ablation l
                s = graph.logits
            else:
                nodes = graph.train_idx if self.prototype_nodes == "train" else graph.labelled_idx()
                distances = mahalanobis_to_prototypes(graph.hidden, graph.labels, nodes, self.num_classes,
                                                      self.covariance_ridge)
                s = normalized_similarity(distances).to(graph.device)  # [N, K]
            if self.sort_similarity:  # class-agnostic: nearest prototype first
                s = s.sort(dim=1).values
            feature = self.feature_gnn.prepare(s, graph.edge_index, graph.num_nodes)
        messages, gap, movement_graph = {}, None, None
        if self.movement_weight is not None:
            edge_index = edges_with_self_loops(graph.edge_index, graph.num_nodes, self.self_loops).to(graph.device)
            edges = SortedEdges(edge_index, graph.num_nodes)
            homophily_logits = transform_logits(graph.logits, self.homophily_logits)  # [N, K]
            movement_graph = MovementGraph(edges, logit_products(homophily_logits, edges),
                                           transform_logits(graph.logits, self.message_logits).sort(dim=1).values,
                                           graph.degree(), graph.hops_to_train())
            if self.eta_near is None:  # no trainable part: the messages are constants, one set per t
                eta = eta_from_hops(movement_graph.hops, self.eta_offset, self.unreachable_hops)  # [N]
                messages = {t: self._messages(movement_graph, eta, t) for t in self.t_grid}
            if self.confidence_coef is not None:
                gap = confidence_gap(graph.logits, edges)
        return SimCalibInputs(feature, messages, gap, movement_graph)

    def _messages(self, g: MovementGraph, eta: Tensor, t: float) -> Tensor:
        """m_i = sum_j alpha_ij eta_j ((d_i+1)/(d_j+1))^t sort(z_j), [N, K]."""
        alpha = homophily_attention(g.logit_products, eta, g.edges, self.negative_slope, self.homophily)  # [E]
        return movement_messages(g.sorted_logits, alpha, eta, g.degree, g.edges, t)

    # --------------------------------------------------------------------------------------------- forward
    def feature_temperature(self, graph: CalibrationGraph) -> Tensor:
        """T_feat = softplus(G_feat(s, A)), [N, 1]."""
        return positive_temperature(F.softplus(self.feature_gnn(self.graph_inputs(graph).feature)))

    def movement_temperature(self, graph: CalibrationGraph) -> Tensor:
        """T_move = mean over heads of softplus(m_i^T W_h), [N, 1]."""
        inputs = self.graph_inputs(graph)
        if self.eta_near is None:
            messages = inputs.messages[self.t]  # [N, K]
        else:
            hops = inputs.movement_graph.hops
            ones = torch.ones_like(hops, dtype=self.eta_near.dtype)
            near = self.eta_near.clamp(min=MIN_ETA)  # stays a positive divisor
            eta = torch.where(hops == 0, near[0], torch.where(hops == 1, near[1], ones))  # [N]
            messages = self._messages(inputs.movement_graph, eta, self.t)
        logit = messages @ self.movement_weight  # [N, H]
        if self.confidence_coef is not None:
            logit = logit + self.confidence_coef * inputs.confidence_gap
        temperature = F.softplus(logit).mean(dim=1, keepdim=True)  # [N, 1]
        if self.movement_bias is not None:
            temperature = temperature + self.movement_bias
        return positive_temperature(temperature)

    def forward(self, graph: CalibrationGraph) -> Tensor:
        z = graph.logits
        terms = []  # log of each weighted mixture component, [N, K]
        if self.w > 0:
            terms.append(math.log(self.w) + F.log_softmax(z / self.feature_temperature(graph), dim=1))
        if self.w < 1:
            terms.append(math.log1p(-self.w) + F.log_softmax(z / self.movement_temperature(graph), dim=1))
        return torch.logsumexp(torch.stack(terms), dim=0)

    # ------------------------------------------------------------------------------------------------- fit
    def reset_parameters(self) -> None:
        if self.feature_gnn is not None:
            self.feature_gnn.net.reset_parameters()
            with torch.no_grad():  # softplus(bias) = init_temperature: T_feat starts near it
                self.feature_gnn.net.output_bias().fill_(math.log(math.expm1(self.init_temperature)))
        if self.movement_weight is not None:
            glorot_(self.movement_weight)
        if self.movement_bias is not None:
            self.movement_bias.data.fill_(self.movement_bias_init)
        if self.confidence_coef is not None:
            self.confidence_coef.data.zero_()
        if self.eta_near is not None:
            self.eta_near.data.fill_(1.0)

    def _train_only(self, feature: bool, movement: bool) -> None:
        if self.feature_gnn is not None:
            self.feature_gnn.requires_grad_(feature)
        for parameter in (self.movement_weight, self.movement_bias, self.confidence_coef, self.eta_near):
            if parameter is not None:
                parameter.requires_grad_(movement)

    @torch.no_grad()
    def grid_score(self, graph: CalibrationGraph, fit_idx: Tensor, stop_idx: Tensor) -> float:
        """The grid-selection criterion of the current (w, t) on labelled nodes (lower is better)."""
        self.eval()
        nodes = stop_idx if self.grid_criterion.startswith("stop") else fit_idx
        log_probs = self(graph)[nodes]
        if self.grid_criterion.endswith("nll"):
            return F.nll_loss(log_probs, graph.labels[nodes]).item()
        return expected_calibration_error(log_probs.exp().cpu().numpy(), graph.labels[nodes].cpu().numpy())

    def fit(self, graph: CalibrationGraph, fit_idx: Tensor | None = None, stop_idx: Tensor | None = None) -> SimCalib:
        """Fit every grid point (w, t) from the same initialisation, keep the best by ``grid_criterion``."""
        fit_idx = graph.cal_idx if fit_idx is None else fit_idx
        stop_idx = graph.train_idx if stop_idx is None else stop_idx
        seed = int(torch.randint(0, 2**31 - 1, ()).item())  # one draw: same global seed, same fit
        if self.training == "joint":
            trials = self._fit_joint(graph, fit_idx, stop_idx, seed)
        else:
            trials = self._fit_separate(graph, fit_idx, stop_idx, seed)
        best = min(trials, key=lambda trial: trial["score"])  # first of equals: grid order
        self.w, self.t = best["w"], best["t"]
        self.load_state_dict(best.pop("state"))
        for trial in trials:
            trial.pop("state", None)
        self._train_only(True, True)
        self.eval()
        self.fit_info = {
            "w": self.w, "t": self.t if self.relative_degree else None, "grid_criterion": self.grid_criterion,
            "score": best["score"], "epochs": best.get("epochs"), "best_epoch": best.get("best_epoch"),
            "grid": trials,
        }
        return self

    @staticmethod
    @contextlib.contextmanager
    def _seeded(seed: int, device: torch.device):
        """Same random initialisation and dropout stream for every grid point; the global RNG is restored."""
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(seed)
            yield

    def _fit_point(self, graph, fit_idx, stop_idx, seed: int, w: float, t: float) -> dict:
        with self._seeded(seed, graph.device):
            self.reset_parameters()
            self.w, self.t = w, t
            super().fit(graph, fit_idx, stop_idx)
        return dict(self.fit_info)

    def _fit_joint(self, graph, fit_idx, stop_idx, seed) -> list[dict]:
        trials = []
        for w in self.w_grid:
            for t in self.t_grid if w < 1 else self.t_grid[:1]:  # t is unused when w = 1
                info = self._fit_point(graph, fit_idx, stop_idx, seed, w, t)
                trials.append({"w": w, "t": t, "score": self.grid_score(graph, fit_idx, stop_idx),
                               "epochs": info.get("epochs"), "best_epoch": info.get("best_epoch"),
                               "state": copy.deepcopy(self.state_dict())})
        return trials

    def _fit_separate(self, graph, fit_idx, stop_idx, seed) -> list[dict]:
        """Each branch trained alone on its own NLL (feature once, movement once per t), then mixed by w."""
        feature_state, movement_states, infos = None, {}, {}
        if self.feature_gnn is not None:
            self._train_only(feature=True, movement=False)
            infos["feature"] = self._fit_point(graph, fit_idx, stop_idx, seed, 1.0, self.t_grid[0])
            feature_state = copy.deepcopy(self.feature_gnn.state_dict())
        if self.movement_weight is not None:
            self._train_only(feature=False, movement=True)
            for t in self.t_grid:
                infos[t] = self._fit_point(graph, fit_idx, stop_idx, seed, 0.0, t)
                movement_states[t] = {k: v.clone() for k, v in self.state_dict().items() if k.startswith(("movement_", "confidence_", "eta_"))}
        trials = []
        for w in self.w_grid:
            for t in self.t_grid if w < 1 else self.t_grid[:1]:
                if feature_state is not None:
                    self.feature_gnn.load_state_dict(feature_state)
                if self.movement_weight is not None:
                    self.load_state_dict(movement_states[t], strict=False)
                self.w, self.t = w, t
                info = infos.get(t if w < 1 else "feature", {})
                trials.append({"w": w, "t": t, "score": self.grid_score(graph, fit_idx, stop_idx),
                               "epochs": info.get("epochs"), "best_epoch": info.get("best_epoch"),
                               "state": copy.deepcopy(self.state_dict())})
        return trials
