r"""SimCalib: similarity-aware GNN calibration (paper Methods; PROTOCOL section 5).

.. math::
    \hat p_i = w\, \mathrm{softmax}(z_i / T_{feat,i}) + (1 - w)\, \mathrm{softmax}(z_i / T_{move,i}),

* feature similarity: :math:`T_{feat,i} = T_0 \exp\big(c \tanh(G_{feat}(\tilde s, A)_i / c)\big)`, with
  :math:`s_i` the L2-normalised squared Mahalanobis distances of node i's first-layer features to the class
  prototypes (:mod:`simcalib.similarity`), :math:`\tilde s` each coordinate of s standardised over all nodes,
  :math:`G_{feat}` a two-layer GCN (or GAT) whose output layer starts at zero, :math:`T_0` temperature
  scaling's optimum on the nodes the fit uses and c = ``feature_bound`` (|log T_feat,i - log T_0| < c);
* representation-movement similarity: :math:`T_{move}` from homophily attention, relative degree and the
  sorted logits (:mod:`simcalib.calibrators.movement`), averaged over ``heads`` heads;
* w and t: the paper's grid, w in {0.6, 0.8, 0.9} x t in {0.3, 0.5, 1.0}, each point fitted with the common
  training rule and the best chosen on labelled nodes only (never test nodes); fixed ``w``/``t`` skip it.

Training (the paper's objective): the mixture :math:`\hat p_i` itself minimises the NLL of the calibration nodes.
By default (``stopping="holdout"``) the calibration fold is split per class in two halves: the fit uses one,
and each grid point keeps the parameters of its lowest NLL on the other. The protocol's common rule stops on
the backbone's training folds (``stopping="train"``), but those nodes define the prototypes, so their s is
atypically small and the backbone fits them: stopping there rewards sharpening every near-prototype node
without end. Only a strictly lower early-stopping NLL resets a point's patience (a tie still keeps the later
parameters). The 9 grid points are one model with a leading grid dimension P (every parameter is [P, ...]):
one forward pass per epoch computes all of them, each point keeps its own early stopping and checkpoint
(:func:`simcalib.calibrators.training.fit_nll_grid`), and a point's numbers are those it would have if it
were fitted alone from the same seed. The chosen point is the one with the lowest NLL on the nodes the
points were fitted on.

The movement branch uses the raw logits in the homophily term and each node's sorted logits scaled to
[0, 1] in the messages (the paper's z~); prototypes and the shared covariance come from the backbone's
training folds.

Both terms keep the order of z (T > 0), so their mixture keeps the argmax: accuracy-preserving.

Options where the paper is silent (PROTOCOL **choice**; the evidence for each default is in
docs/decisions.md):

==========================  ==============  ================================================================
option                      default         meaning
==========================  ==============  ================================================================
``feature_temperature``     ``"anchored"``  T_feat as above; ``"softplus"``: softplus(G_feat(s, A)) + 1e-3
``feature_bound``           ``1.0``         c: T_feat,i within a factor e^c of T_0
``standardize_similarity``  ``True``        each coordinate of s to mean 0, std 1 over all nodes (no label read)
``stopping``                ``"holdout"``   early-stopping nodes: a per-class half of the calibration fold;
                                            ``"train"``: the training folds
``decay``                   ``"weights"``   weight decay on weight matrices only; ``"all"``: every parameter
``covariance_ridge``        ``0.0``         0: pseudo-inverse of the shared covariance (Lee et al. 2018)
``eta_offset``              ``1.0``         eta_i = hop distance + eta_offset (> 0: never a division by 0)
``unreachable_hops``        ``None``        hops of nodes with no path to a training node (None: max + 1)
``self_loops``              ``True``        j = i is in N(i)
``movement_bias``           ``1.0``         a learnable positive offset softplus(b) on T_move, starting at 1, as
                                            GATS's bias; ``None`` gives the paper's equation exactly
==========================  ==============  ================================================================

Further options: ``w``, ``t`` (fixed values instead of the grid), ``w_grid``, ``t_grid``, ``heads``
(movement heads, 2), ``feat_gnn`` (``"gcn"``/``"gat"``), ``feat_hidden`` (16), ``feat_dropout`` (0.5),
``feat_heads`` (GAT heads, 1), ``feature_input`` (``"mahalanobis"``; ``"logits"`` is ablation l),
``homophily`` / ``relative_degree`` (ablations r, h, n), ``init_temperature`` (softplus form: T_feat's start),
``negative_slope`` (0.2), and the common ``lr`` (0.01),
``weight_decay`` (GATS's per-benchmark values, :mod:`simcalib.calibrators.defaults`), ``max_epochs``,
``patience``.
"""


from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import simcalib.calibrators.graph_cache as graph_cache
from simcalib.backbones.models import glorot_
from simcalib.calibrators.base import CalibrationGraph, Calibrator
from simcalib.calibrators.defaults import default_weight_decay
from simcalib.calibrators.layers import (
    MIN_TEMPERATURE,
    GraphInputsCache,
    SortedEdges,
    edges_with_self_loops,
    grid_gnn,
    inverse_softplus_temperature,
    log_softmax_classes,
    softplus_temperature,
)
from simcalib.calibrators.movement import (
    eta_from_hops,
    homophily_attention,
    logit_products,
    minmax_rows,
    movement_messages,
)
from simcalib.calibrators.signals import NodeSignals
from simcalib.calibrators.training import fit_nll_grid, shuffled_by_class
from simcalib.calibrators.ts import nll_temperature
from simcalib.errors import ConfigError
from simcalib.similarity import (
    DEFAULT_RIDGE,
    mahalanobis_to_prototypes,
    normalized_similarity,
    spearman,
)

PAPER_W_GRID = (0.6, 0.8, 0.9)
PAPER_T_GRID = (0.3, 0.5, 1.0)


@dataclass
class SimCalibInputs:
    feature: tuple | None  # prepared inputs of G_feat (None without the feature branch)
    messages: Tensor | None  # [P, N, K] aggregated movement messages of each grid point's t (constants)


@dataclass
class _NodeInputs:
    """SimCalibInputs gathered on one node set (the calibration or the early-stopping nodes of a fit)."""
    logits: Tensor  # [n, K]
    labels: Tensor  # [n]
    feature: tuple | None  # G_feat's inputs restricted to what the n outputs need (GCN), else None
    messages: Tensor | None  # [P, n, K]


@dataclass
class MovementGraph:
    edges: SortedEdges  # j -> i
    logit_products: Tensor  # [E] z_i . z_j of the homophily term
    sorted_logits: Tensor  # [N, K]
    degree: Tensor  # [N]
    hops: Tensor  # [N] int64, -1: unreachable


class SimCalib(GraphInputsCache, Calibrator):
    """SimCalib (Wang et al., AAAI 2024): feature-similarity and movement-similarity temperatures, mixed by w.

    See the module docstring for the equations and the table of options. Every parameter has a leading
    grid dimension P = number of (w, t) points; after ``fit`` the chosen point (``self.point``) is used.
    """

    name = "SimCalib"
    fitted_attributes = ("point",)
    # Only a strictly lower early-stopping NLL resets a point's patience (a tie still keeps the later
    # parameters): with the GATS code's `<=`, a point whose early-stopping NLL stops changing trains to the cap.
    tie_resets_patience = False

    def __init__(
        self,
        num_classes: int,
        w: float | None = None,
        t: float | None = None,
        w_grid: Sequence[float] = PAPER_W_GRID,
        t_grid: Sequence[float] = PAPER_T_GRID,
        decay: str = "weights",
        feature_input: str = "mahalanobis",
        covariance_ridge: float = DEFAULT_RIDGE,
        feat_gnn: str = "gcn",
        feat_hidden: int = 16,
        feat_dropout: float = 0.5,
        feat_heads: int = 1,
        init_temperature: float = 1.0,
        feature_temperature: str = "anchored",
        feature_bound: float = 1.0,
        standardize_similarity: bool = True,
        stopping: str = "holdout",
        heads: int = 2,
        movement_bias: float | None = 1.0,
        homophily: bool = True,
        relative_degree: bool = True,
        eta_offset: float = 1.0,
        unreachable_hops: int | None = None,
        self_loops: bool = True,
        negative_slope: float = 0.2,
        **kwargs,
    ):
        kwargs.setdefault("weight_decay", default_weight_decay(self.name))
        super().__init__(num_classes, **kwargs)
        w_grid = self._check_grid("w", (w,) if w is not None else tuple(w_grid), 0.0, 1.0)
        t_values = (t,) if t is not None else tuple(t_grid)
        t_grid = self._check_grid("t", t_values, 0.0, math.inf) if relative_degree else (0.0,)
        choices = {"decay": (decay, ("weights", "all")),
                   "feature_temperature": (feature_temperature, ("anchored", "softplus")),
                   "stopping": (stopping, ("train", "holdout")),
                   "feature_input": (feature_input, ("mahalanobis", "logits")), "feat_gnn": (feat_gnn, ("gcn", "gat"))}
        for option, (value, valid) in choices.items():
            if value not in valid:
                raise ConfigError(f"SimCalib option {option}={value!r} is not one of: {', '.join(valid)}")
        if heads < 1:
            raise ConfigError(f"SimCalib needs at least one movement head, got heads={heads}")
        if feature_bound <= 0:
            raise ConfigError(f"SimCalib feature_bound must be > 0 (the largest |log T_feat,i - log T_0|), got {feature_bound}")
        if init_temperature <= 0:
            raise ConfigError(f"SimCalib init_temperature must be > 0, got {init_temperature}")
        if movement_bias is not None and movement_bias <= 0:
            raise ConfigError(f"SimCalib movement_bias must be > 0 (a positive offset) or None, got {movement_bias}")
        self.w_grid, self.t_grid = w_grid, t_grid
        # The grid points; t is unused when w = 1 (no movement branch in the mixture).
        self.points: list[tuple[float, float]] = [(wv, tv) for wv in w_grid for tv in (t_grid if wv < 1 else t_grid[:1])]
        points = len(self.points)
        self.decay = decay
        self.feature_input, self.covariance_ridge = feature_input, covariance_ridge
        self.homophily, self.relative_degree = homophily, relative_degree
        self.eta_offset, self.unreachable_hops = eta_offset, unreachable_hops
        self.self_loops = self_loops
        self.negative_slope = negative_slope
        self.init_temperature = init_temperature
        self.feature_temperature_form, self.feature_bound = feature_temperature, feature_bound
        self.standardize_similarity = standardize_similarity
        self.stopping = stopping
        # log T_0 of the anchored form: temperature scaling's optimum on the fit nodes, set by fit()
        self.register_buffer("log_anchor", torch.zeros(()))
        self.point = 0  # the grid point in use; fit() chooses it
        self.register_buffer("log_w", torch.tensor([math.log(wv) if wv > 0 else -math.inf for wv, _ in self.points]))
        self.register_buffer("log_1mw", torch.tensor([math.log1p(-wv) if wv < 1 else -math.inf for wv, _ in self.points]))

        # Branches that can never contribute (w fixed at 0 or 1) are not built, so none of the parameters is dead.
        self.feature_gnn = (grid_gnn(feat_gnn, num_classes, feat_hidden, points, feat_dropout, feat_heads)
                            if max(w_grid) > 0 else None)
        has_movement = min(w_grid) < 1
        self.movement_weight = nn.Parameter(torch.empty(points, num_classes, heads)) if has_movement else None  # [P, K, H]
        self.movement_bias_init = movement_bias
        self.movement_bias = (nn.Parameter(torch.zeros(points, 1))  # raw: the offset is softplus(raw)
                              if movement_bias is not None and has_movement else None)
        self.reset_parameters()

    @staticmethod
    def _check_grid(name: str, values: tuple, low: float, high: float) -> tuple[float, ...]:
        if not values or any(not (low <= float(v) <= high) for v in values):
            raise ConfigError(f"SimCalib {name} values must lie in [{low}, {high}], got {list(values)}")
        return tuple(float(v) for v in values)

    @property
    def w(self) -> float:
        return self.points[self.point][0]

    @property
    def t(self) -> float:
        return self.points[self.point][1]

    # ---------------------------------------------------------------------------------------------- inputs
    def compute_inputs(self, graph: CalibrationGraph) -> SimCalibInputs:
        """The constant inputs. Each part is a deterministic function of the run's tensors and the options it
        names, built once per run and shared by every SimCalib variant fitted on it
        (:mod:`~simcalib.calibrators.graph_cache`: keyed on the tensor objects a benchmark passes to every
        fit, the training nodes and their labels by value)."""
        device = str(graph.device)
        labelled = (graph_cache.content_key(graph.train_idx), graph_cache.content_key(graph.labels[graph.train_idx]))
        feature = None
        if self.feature_gnn is not None:
            def similarity() -> Tensor:
                if self.feature_input == "logits":  # ablation l
                    s = graph.logits
                else:
                    distances = mahalanobis_to_prototypes(graph.require_hidden(self.name), graph.labels, graph.train_idx,
                                                          self.num_classes, self.covariance_ridge)
                    s = normalized_similarity(distances).to(graph.device)  # [N, K]
                if self.standardize_similarity:  # each coordinate to mean 0, std 1 over all nodes (no label read)
                    s = (s - s.mean(dim=0)) / s.std(dim=0).clamp(min=1e-6)
                return s

            source = graph.logits if self.feature_input == "logits" else graph.require_hidden(self.name)
            s = graph_cache.shared(source, ("simcalib_similarity", self.feature_input, self.covariance_ridge,
                                            self.standardize_similarity, labelled, device), similarity)
            kind = type(self.feature_gnn).__name__
            feature = graph_cache.shared(s, ("simcalib_feature_inputs", kind, graph.num_nodes,
                                             graph_cache.token(graph.edge_index)), lambda: self.feature_gnn.prepare(
                                                 s, graph.edge_index, graph.num_nodes))
        messages = None
        if self.movement_weight is not None:  # no trainable part: the messages are constants, one set per t
            def sorted_edges() -> SortedEdges:
                edge_index = edges_with_self_loops(graph.edge_index, graph.num_nodes, self.self_loops).to(graph.device)
                return SortedEdges(edge_index, graph.num_nodes)

            edges = graph_cache.shared(graph.edge_index, ("sorted_edges", graph.num_nodes, self.self_loops, device),
                                       sorted_edges)
            run = ("simcalib_movement", graph_cache.token(graph.edge_index), graph.num_nodes, self.self_loops, labelled, device)
            movement_graph = graph_cache.shared(graph.logits, run, lambda: MovementGraph(
                edges, logit_products(graph.logits, edges),  # raw z in the homophily term
                minmax_rows(graph.logits).sort(dim=1).values,  # the paper's z~
                graph.degree(), graph.hops_to_train()))
            eta = eta_from_hops(movement_graph.hops, self.eta_offset, self.unreachable_hops)  # [N]
            options = (self.eta_offset, self.unreachable_hops, self.negative_slope, self.homophily)
            per_t = {t: graph_cache.shared(graph.logits, ("simcalib_messages", *run[1:], *options, t),
                                           lambda t=t: self._messages(movement_graph, eta, t)) for t in self.t_grid}
            messages = torch.stack([per_t[t] for _, t in self.points])  # [P, N, K]
        return SimCalibInputs(feature, messages)

    def _messages(self, g: MovementGraph, eta: Tensor, t: float) -> Tensor:
        """m_i = sum_j alpha_ij eta_j ((d_i+1)/(d_j+1))^t sort(z_j), [N, K]."""
        alpha = homophily_attention(g.logit_products, eta, g.edges, self.negative_slope, self.homophily)  # [E]
        return movement_messages(g.sorted_logits, alpha, eta, g.degree, g.edges, t)

    # --------------------------------------------------------------------------------------------- forward
    def _on_nodes(self, graph: CalibrationGraph, nodes: Tensor) -> _NodeInputs:
        """The constant inputs restricted to ``nodes``, computed once per (graph, node set).

        A fit evaluates the same two node sets (calibration and early-stopping nodes) every epoch; gathering
        the [P, N, K] messages, the logits and G_feat's inputs anew each time cost more than the model itself
        on small graphs. These are pure gathers, so the numbers are those of gathering every time.
        """
        if self._restricted_graph is not graph:  # nn.Module's __setattr__ is slow: set only on a new graph
            self._restricted_graph, self._restricted_cache = graph, {}
        cache = self._restricted_cache
        key = (nodes.data_ptr(), nodes.numel())
        if key not in cache or not torch.equal(cache[key][0], nodes):
            inputs = self.graph_inputs(graph)
            feature = None
            if inputs.feature is not None and hasattr(self.feature_gnn, "restrict"):
                feature = self.feature_gnn.restrict(inputs.feature, nodes)
            cache[key] = (nodes.clone(), _NodeInputs(
                logits=graph.logits[nodes], labels=graph.labels[nodes], feature=feature,
                messages=None if inputs.messages is None else inputs.messages[:, nodes]))  # [P, n, K]
        return cache[key][1]

    def _feature_inputs(self, graph: CalibrationGraph, nodes: Tensor | None):
        """G_feat's prepared inputs, restricted to what ``nodes``' outputs need (GCN; cached per node set)."""
        prepared = self.graph_inputs(graph).feature
        if nodes is None or not hasattr(self.feature_gnn, "restrict"):
            return prepared, False
        return self._on_nodes(graph, nodes).feature, True

    _restricted_graph = None
    _restricted_cache: dict = {}

    def grid_feature_temperature(self, graph: CalibrationGraph, nodes: Tensor | None = None,
                                 points: Tensor | None = None) -> Tensor:
        """T_feat of every grid point (or of ``points``), [P, N, 1] (or on ``nodes``: [P, n, 1]): anchored,
        T_0 exp(c tanh(G_feat(s, A) / c)); softplus, softplus(G_feat(s, A)) + 1e-3."""
        inputs, restricted = self._feature_inputs(graph, nodes)
        raw = self.feature_gnn(inputs, points)  # [P, n or N, 1]
        raw = raw if nodes is None or restricted else raw[:, nodes]
        if self.feature_temperature_form == "softplus":
            return softplus_temperature(raw)
        bound = self.feature_bound
        return torch.exp(self.log_anchor + bound * torch.tanh(raw / bound))

    def grid_movement_temperature(self, graph: CalibrationGraph, nodes: Tensor | None = None,
                                  points: Tensor | None = None) -> Tensor:
        """T_move = mean over heads of softplus(m_i^T W_h) (+ softplus(b)) + 1e-3 of every grid point (or of
        ``points``), [P, N, 1] (or on ``nodes``: [P, n, 1], computed on those nodes only)."""
        messages = self.graph_inputs(graph).messages if nodes is None else self._on_nodes(graph, nodes).messages
        messages = messages if points is None else messages[points]  # [p, N or n, K]
        weight = self.movement_weight if points is None else self.movement_weight[points]
        logit = torch.bmm(messages, weight)  # [p, n, H]
        temperature = F.softplus(logit).mean(dim=2, keepdim=True)  # [p, n, 1]
        if self.movement_bias is not None:
            bias = self.movement_bias if points is None else self.movement_bias[points]
            temperature = temperature + F.softplus(bias)[:, :, None]
        return temperature + MIN_TEMPERATURE  # softplus terms only: positive, gradient everywhere

    def grid_components(self, graph: CalibrationGraph, nodes: Tensor | None = None,
                        points: Tensor | None = None) -> list[Tensor]:
        """log(weight) + log softmax(z / T) of each mixture component present, each [P, N, K] (or restricted to
        ``nodes`` and ``points``)."""
        z = graph.logits if nodes is None else self._on_nodes(graph, nodes).logits
        log_w, log_1mw = (self.log_w, self.log_1mw) if points is None else (self.log_w[points], self.log_1mw[points])
        components = []
        if self.feature_gnn is not None:
            t_feat = self.grid_feature_temperature(graph, nodes, points)
            components.append(log_w[:, None, None] + log_softmax_classes(z / t_feat))
        if self.movement_weight is not None:
            t_move = self.grid_movement_temperature(graph, nodes, points)
            components.append(log_1mw[:, None, None] + log_softmax_classes(z / t_move))
        return components

    def grid_log_probs(self, graph: CalibrationGraph, nodes: Tensor | None = None,
                       points: Tensor | None = None) -> Tensor:
        """The mixture's log-probabilities of every grid point, [P, N, K] (or restricted to ``nodes``/``points``)."""
        components = self.grid_components(graph, nodes, points)
        # log(e^a + e^b) elementwise: logsumexp over a stacked pair costs ~4x more on CPU, same value to rounding
        return components[0] if len(components) == 1 else torch.logaddexp(*components)

    def forward(self, graph: CalibrationGraph) -> Tensor:
        return self.grid_log_probs(graph)[self.point]  # [N, K]

    def feature_temperature(self, graph: CalibrationGraph) -> Tensor:
        """T_feat of the chosen point, [N, 1]."""
        return self.grid_feature_temperature(graph)[self.point]

    def nodewise_feature_temperature(self, graph: CalibrationGraph) -> Tensor | None:
        """T_feat of the chosen point, [N]; None without the feature branch."""
        if self.feature_gnn is None:
            return None
        self.eval()
        return self.feature_temperature(graph).flatten()

    def movement_temperature(self, graph: CalibrationGraph) -> Tensor:
        """T_move of the chosen point, [N, 1]."""
        return self.grid_movement_temperature(graph)[self.point]

    # ------------------------------------------------------------------------------------------- training
    def reset_parameters(self) -> None:
        """The same start for every grid point (one draw, copied), whatever the grid's size."""
        if self.feature_gnn is not None:
            self.feature_gnn.reset_parameters()
            if self.feature_temperature_form == "anchored":  # T_feat starts at T_0 on every node
                self.feature_gnn.zero_output_()
            bias = (0.0 if self.feature_temperature_form == "anchored" else
                    inverse_softplus_temperature(self.init_temperature))  # softplus: T_feat starts at init_temperature
            if hasattr(self.feature_gnn, "set_output_bias"):
                self.feature_gnn.set_output_bias(bias)
            else:
                with torch.no_grad():
                    self.feature_gnn.output_bias().fill_(bias)
        if self.movement_weight is not None:
            with torch.no_grad():
                one = glorot_(torch.empty(self.movement_weight.shape[1:]))
                self.movement_weight.copy_(one.expand_as(self.movement_weight))
        if self.movement_bias is not None:
            self.movement_bias.data.fill_(math.log(math.expm1(self.movement_bias_init)))

    def parameter_units(self) -> dict[str, int | None]:
        """Parameter name -> the grid point (training unit) it belongs to; None when the parameter's leading
        dimension is the grid (GridGAT's nets are one per point)."""
        return {name: int(name.split(".")[2]) if name.startswith("feature_gnn.nets.") else None
                for name, _ in self.named_parameters()}

    def parameter_groups(self) -> list[dict]:
        """Weight decay on the weight matrices only (``decay="weights"``), or on every parameter (``"all"``)."""
        decayed, free = [], []
        for name, parameter in self.named_parameters():
            if not parameter.requires_grad:
                continue
            leaf = name.rsplit(".", 1)[-1]
            is_weight = "weight" in leaf or leaf.startswith("att_")  # G_feat's W, GAT attention vectors, movement W
            (decayed if is_weight or self.decay == "all" else free).append(parameter)
        return [{"params": decayed, "weight_decay": self.weight_decay}, {"params": free, "weight_decay": 0.0}]

    def unit_count(self) -> int:
        """Training units: one per grid point (the mixture's NLL, as the paper's objective)."""
        return len(self.points)

    def unit_losses(self, graph: CalibrationGraph, nodes: Tensor, labels: Tensor, points: Tensor | None = None) -> Tensor:
        """The mixture's mean NLL on ``nodes`` of every grid point of ``points`` (default all), [p]."""
        target = self._on_nodes(graph, nodes).labels if labels is graph.labels else labels[nodes]
        return self._nll(self.grid_log_probs(graph, nodes, points), target)  # [p, n, K] -> [p]

    @staticmethod
    def _nll(log_probs: Tensor, target: Tensor) -> Tensor:
        """Mean NLL per grid point: log_probs [P, n, K], target [n] -> [P]."""
        return -log_probs.gather(2, target.expand(log_probs.shape[0], -1)[:, :, None]).squeeze(2).mean(dim=1)

    @torch.no_grad()
    def grid_scores(self, graph: CalibrationGraph, fit_idx: Tensor) -> list[float]:
        """Every point's NLL on the nodes the points were fitted on (lower is better; never a test node)."""
        self.eval()
        return self._nll(self.grid_log_probs(graph, fit_idx), graph.labels[fit_idx]).tolist()

    @staticmethod
    @contextlib.contextmanager
    def _seeded(seed: int, device: torch.device):
        """Same random initialisation and dropout stream for every grid point; the global RNG is restored."""
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(seed)
            yield

    def fit(self, graph: CalibrationGraph, fit_idx: Tensor | None = None, stop_idx: Tensor | None = None) -> SimCalib:
        """Fit every grid point (w, t) at once from one initialisation, keep the one of lowest NLL on the fit
        nodes."""
        fit_idx = graph.cal_idx if fit_idx is None else fit_idx
        stop_idx = graph.train_idx if stop_idx is None else stop_idx
        seed = int(torch.randint(0, 2**31 - 1, ()).item())  # one draw: same global seed, same fit
        if self.stopping == "holdout":
            fit_idx, stop_idx = class_halves(fit_idx, graph.labels[fit_idx], seed)
        self._restricted_cache, self._restricted_graph = {}, None  # gather anew: the graph's tensors may have changed
        if self.feature_gnn is not None and self.feature_temperature_form == "anchored":
            self.log_anchor.fill_(math.log(nll_temperature(graph.logits[fit_idx], graph.labels[fit_idx])))
        with self._seeded(seed, graph.device):
            self.reset_parameters()
            super().fit(graph, fit_idx, stop_idx)  # checks, prepare(), then train_parameters below
        units = self.fit_info.pop("units")
        scores = self.grid_scores(graph, fit_idx)
        self.point = min(range(len(self.points)), key=lambda p: scores[p])  # first of equals: grid order
        grid = [{"w": wv, "t": tv, "score": scores[p], "epochs": units[p]["epochs"], "best_epoch": units[p]["best_epoch"]}
                for p, (wv, tv) in enumerate(self.points)]
        chosen = grid[self.point]
        self.eval()
        self.fit_info = {
            "w": self.w, "t": self.t if self.relative_degree else None, "score": chosen["score"],
            "epochs": chosen["epochs"], "best_epoch": chosen["best_epoch"], "grid": grid,
        }
        return self

    def train_parameters(self, graph: CalibrationGraph, fit_idx: Tensor, stop_idx: Tensor) -> dict:
        """Called by :meth:`Calibrator.fit`: every grid point's units under the common rule, at once."""
        return {"units": fit_nll_grid(self, graph, fit_idx, stop_idx)}

    # ---------------------------------------------------------------------------------------------- audit
    @torch.no_grad()
    def audit(self, graph: CalibrationGraph, nodes: Tensor, signals: NodeSignals | None = None) -> dict:
        """The chosen w and t, and mean and std of T_feat and T_move over ``nodes`` (results columns); T_feat
        and the prototype distance from ``signals`` when the row has computed them."""
        self.eval()
        signals = signals if signals is not None else NodeSignals(self, graph, nodes)
        row = {"w": self.w, "t": self.t if self.relative_degree else None}
        t_feat = signals.feature_temperature
        t_move = self.movement_temperature(graph)[nodes].flatten() if self.movement_weight is not None else None
        for key, values in (("t_feat", t_feat), ("t_move", t_move)):
            row[f"{key}_mean"] = None if values is None else float(values.mean())
            row[f"{key}_std"] = None if values is None else float(values.std(unbiased=False))
        row["t_feat_spearman"] = None
        if t_feat is not None:  # does T_feat follow the distance to the nearest prototype?
            row["t_feat_spearman"] = spearman(t_feat, signals.prototype_distance(self.covariance_ridge))
        return row


def class_halves(nodes: Tensor, labels: Tensor, seed: int) -> tuple[Tensor, Tensor]:
    """``nodes`` split into two halves per class by a shuffle from ``seed``: (first halves, second halves); of a
    class's shuffled members, the second half takes the first ceil(n/2), the first half the rest."""
    groups = shuffled_by_class(nodes, labels, seed)
    return (torch.cat([g[(len(g) + 1) // 2:] for g in groups]),
            torch.cat([g[: (len(g) + 1) // 2] for g in groups]))
