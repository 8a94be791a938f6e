"""AutoCal: a calibrator chosen among candidates by cross-fitting on the calibration fold."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from simcalib.calibrators.base import HIDDEN_LABEL, CalibrationGraph, Calibrator
from simcalib.calibrators.training import shuffled_by_class
from simcalib.errors import ConfigError, SimCalibError, TrainingDivergedError
from simcalib.seeding import derive_seed

# The default candidates (docs/decisions.md, "AutoCal"): the lowest mean ranks and most wins of the committed rows
# on the homophilous (SimCalib_decay_all, GATS, ETS) and heterophilous (Dirichlet, IRM) benchmarks, TS as the
# reference; Spline left out (its held-out NLL on the calibration fold misleads: the decision's evidence).
DEFAULT_CANDIDATES = ("TS", "ETS", "Dirichlet", "IRM", "GATS", "SimCalib_decay_all")
SCORES = ("nll", "ece")
NLL_FLOOR = 1e-12  # probabilities below it count as it in the held-out NLL (simcalib.metrics.nll's eps)


def held_out_score(log_probs: Tensor, labels: Tensor, score: str) -> float:
    """``score`` of the predictions ``log_probs`` [n, K] on the nodes with ``labels`` [n]: the mean NLL, or the
    15-bin top-label ECE (a fraction), as :mod:`simcalib.metrics` computes them on test nodes."""
    from simcalib.metrics import ece, nll

    probs, labels = log_probs.detach().double().exp().cpu().numpy(), labels.cpu().numpy()
    return nll(probs, labels, eps=NLL_FLOOR) if score == "nll" else ece(probs, labels)


def stratified_parts(nodes: Tensor, labels: Tensor, parts: int, seed: int) -> list[Tensor]:
    """``nodes`` dealt into ``parts`` parts class by class: each class's members in the order of one shuffle from
    ``seed`` (:func:`~simcalib.calibrators.training.shuffled_by_class`), member j to part j mod ``parts``, the
    deal of each class starting where the previous class's ended (so part sizes differ by at most one)."""
    buckets: list[list[Tensor]] = [[] for _ in range(parts)]
    start = 0
    for group in shuffled_by_class(nodes, labels, seed):
        for offset in range(parts):
            buckets[(start + offset) % parts].append(group[offset::parts])
        start = (start + len(group)) % parts
    return [torch.cat(bucket).sort().values for bucket in buckets]


def fold_view(graph: CalibrationGraph, fit_nodes: Tensor) -> CalibrationGraph:
    """``graph`` as a calibrator sees it when ``fit_nodes`` are its calibration fold: the labels of the training
    folds and of ``fit_nodes`` only (every other label hidden, the held-out part's included), the same training
    folds, logits, features and edges. The structural quantities the graph has computed (degree, hop distances
    to the training folds) are shared: they read no label."""
    labels = torch.full_like(graph.labels, HIDDEN_LABEL)
    labels[graph.train_idx] = graph.labels[graph.train_idx]
    labels[fit_nodes] = graph.labels[fit_nodes]
    view = CalibrationGraph(graph.logits, graph.hidden, graph.edge_index, labels, graph.train_idx, fit_nodes,
                            graph.features)
    view._cache.update({key: graph._cache[key] for key in ("degree", "hops") if key in graph._cache})
    return view


@dataclass(frozen=True)
class CandidateScores:
    """One candidate's held-out scores: ``pooled`` over every calibration node (each scored by the fit that did
    not see it), and one per part (``per_part``); inf where a fit diverged."""

    name: str
    pooled: float
    per_part: tuple[float, ...]


@dataclass(frozen=True)
class CandidateRegistry:
    """The calibrators AutoCal chooses among: the look-up from a name to its entry (canonical ``name`` and
    ``cls``) and the builder (``simcalib.calibrators.calibrator_entry`` and ``build_calibrator``)."""

    entry: Callable[[str], Any]
    build: Callable[..., Calibrator]


class AutoCal(Calibrator):
    r"""The candidate with the best cross-fitted score on the calibration fold, refitted on the whole fold.

    With the calibration fold :math:`C` dealt into ``parts`` stratified parts :math:`C_1, \dots, C_P`
    (:func:`stratified_parts`) and candidates :math:`c \in \mathcal{C}` (registered names):

    .. math::
        \hat f_c^{(-p)} = \mathrm{fit}_c\big(C \setminus C_p\big), \qquad
        S(c) = \mathrm{score}\Big(\big\{\hat f_c^{(-p)}(z_i) : i \in C_p,\ p = 1..P\big\},\ \{y_i : i \in C\}\Big),

    .. math::
        c^\star = \arg\min_{c \in \mathcal{C}} S(c), \qquad \hat p_i = \hat f_{c^\star}(z_i), \quad
        \hat f_{c^\star} = \mathrm{fit}_{c^\star}(C),

    where :math:`\mathrm{fit}_c(F)` is candidate c's own fit with F as its calibration fold: built with its
    protocol options for the benchmark, fitted by its own rule (early stopping on the training folds' NLL for the
    trained ones) on a view of the graph whose only labels are the training folds' and F's (:func:`fold_view`),
    so the held-out part's labels reach only the score. ``score`` is the mean NLL (``"nll"``, the default) or
    the 15-bin ECE (``"ece"``) of the pooled held-out predictions, each calibration node predicted by the
    fit that did not see it; ties go to the candidate listed first.

    Random draws: one number from the global generator at the start of ``fit`` (the protocol seeds it from the
    run's seed and this calibrator's name), from which the parts' shuffle and each candidate fit's seed are
    derived (:func:`~simcalib.seeding.derive_seed` of the draw, the candidate's name and the part, or ``"all"``
    for the refit); each fit runs under a forked generator, so the candidates' order does not move their
    draws. A candidate whose fit diverges on a part scores inf (it cannot be chosen).

    Accuracy-preserving exactly when every candidate is (``accuracy_preserving``, an instance's flag; the
    default candidates include Dirichlet, which is not). The row records the choice (``selected``) and every
    candidate's pooled score (``selection_scores``, JSON), see :meth:`audit`.

    Options: ``candidates`` (registered names), ``score``, ``parts`` (>= 2), ``candidate_options`` (a mapping
    from a candidate's name to options of its own, e.g. ``{"GATS": {"heads": 4}}``), ``max_epochs``,
    ``patience`` and ``lr`` (None: each candidate's own; a value is given to every candidate), ``dataset`` and
    ``backbone`` (whose protocol defaults the candidates are built with; set by the registry per benchmark).
    AutoCal has no parameter of its own, hence no weight decay (0).

    Shapes:
        - **input:** logits :math:`[N, K]`, the candidates' other inputs (hidden :math:`[N, h]`, edges
          :math:`[2, E]`, features), labels :math:`[N]`
        - **output:** log-probabilities :math:`[N, K]`, those of the chosen candidate
    """

    selects_among_others = True  # its candidates are calibrators of their own: `calibrators: all` leaves it out
    # The registry it resolves and builds its candidates from, handed to the class where the registry registers it
    # (simcalib.calibrators), so that this module imports nothing above its own layer.
    registry: ClassVar[CandidateRegistry | None] = None


    name = "AutoCal"

    def __init__(self, num_classes: int, candidates: Sequence[str] = DEFAULT_CANDIDATES, score: str = "nll",
                 parts: int = 5, candidate_options: dict | None = None, dataset: str | None = None,
                 backbone: str | None = None, max_epochs: int | None = None, patience: int | None = None,
                 lr: float | None = None, weight_decay: float = 0.0):
        super().__init__(num_classes)
        registry = self._registry()
        if isinstance(candidates, str):
            candidates = [c for c in candidates.split(",") if c.strip()]
        try:
            found = [registry.entry(c) for c in candidates]
        except SimCalibError as exc:
            raise ConfigError(f"AutoCal's candidates: {exc}") from None
        names = [entry.name for entry in found]
        if not names:
            raise ConfigError("AutoCal needs at least one candidate; give candidates=[...] of registered names")
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ConfigError(f"AutoCal's candidates name {', '.join(repeated)} twice; list each once")
        nested = [entry.name for entry in found if issubclass(entry.cls, AutoCal)]
        if nested:
            raise ConfigError(f"AutoCal cannot choose among selecting calibrators ({', '.join(nested)}); list the "
                              "calibrators it should choose from instead")
        if score not in SCORES:
            raise ConfigError(f"AutoCal's score must be one of {', '.join(SCORES)}, got {score!r}")
        if not isinstance(parts, int) or parts < 2:
            raise ConfigError(f"AutoCal's parts must be an integer >= 2 (cross-fitting needs a held-out part), "
                              f"got {parts!r}")
        if weight_decay:
            raise ConfigError(f"AutoCal has no parameters of its own, so no weight decay (got {weight_decay}); "
                              "give a candidate's own in candidate_options, e.g. {'GATS': {'weight_decay': 0.01}}")
        options = {registry.entry(k).name: dict(v or {}) for k, v in (candidate_options or {}).items()}
        unused = sorted(set(options) - set(names))
        if unused:
            raise ConfigError(f"AutoCal's candidate_options name {', '.join(unused)}, which is not a candidate; "
                              f"the candidates are: {', '.join(names)}")
        self.candidates = tuple(names)
        self.score = score
        self.parts = parts
        self.candidate_options = options
        self.dataset, self.backbone = dataset, backbone
        self.max_epochs, self.patience, self.lr = max_epochs, patience, lr
        # each candidate built once (options checked now, not at fit time), under a forked generator
        with torch.random.fork_rng(devices=[]):
            self.accuracy_preserving = all(self._build(n).accuracy_preserving for n in self.candidates)
        self.selected: str | None = None
        self.scores: list[CandidateScores] = []
        self.model: Calibrator | None = None

    @classmethod
    def benchmark_defaults(cls, dataset: str | None, backbone: str | None) -> dict:
        return {"dataset": dataset, "backbone": backbone}

    def candidate_build_options(self, name: str) -> dict:
        """The options candidate ``name`` is built with besides its protocol defaults on this benchmark: the caps
        given to AutoCal (``max_epochs``, ``patience``, ``lr``), then its own ``candidate_options``."""
        caps = {k: v for k, v in (("max_epochs", self.max_epochs), ("patience", self.patience), ("lr", self.lr))
                if v is not None}
        return {**caps, **self.candidate_options.get(name, {})}

    @classmethod
    def _registry(cls) -> CandidateRegistry:
        if cls.registry is None:
            raise ConfigError("AutoCal has no calibrator registry; build it with "
                              "simcalib.calibrators.build_calibrator('AutoCal', num_classes)")
        return cls.registry

    def _build(self, name: str) -> Calibrator:
        return self._registry().build(name, self.num_classes, self.dataset, self.backbone,
                                      **self.candidate_build_options(name))

    def _fit_candidate(self, name: str, graph: CalibrationGraph, stop_idx: Tensor, seed: int) -> Calibrator:
        """Candidate ``name`` built and fitted on ``graph`` (its calibration fold: ``graph.cal_idx``) under a
        generator seeded with ``seed``; the global generator is left as it was."""
        devices = [graph.device] if graph.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            return self._build(name).fit(graph, graph.cal_idx, stop_idx)

    def fit(self, graph: CalibrationGraph, fit_idx: Tensor | None = None, stop_idx: Tensor | None = None) -> AutoCal:
        """Cross-fit every candidate on ``fit_idx`` (default: the calibration fold), choose, refit the choice on
        all of ``fit_idx``; ``stop_idx`` (default: the training folds) is every candidate's early-stopping set."""
        fit_idx, stop_idx = self.check_fit_nodes(graph, fit_idx, stop_idx)
        if len(fit_idx) < self.parts:
            raise ConfigError(f"AutoCal: {len(fit_idx)} calibration nodes cannot be dealt into {self.parts} parts; "
                              "give fewer parts")
        seed = int(torch.randint(0, 2**31 - 1, ()).item())  # one draw: same global seed, same choice
        held_out = stratified_parts(fit_idx, graph.labels[fit_idx], self.parts, derive_seed(seed, "parts"))
        order = torch.cat(held_out)
        labels = graph.labels[order]
        self.scores = []
        for name in self.candidates:
            predictions, per_part = [], []
            for p, part in enumerate(held_out):
                rest = torch.cat([q for k, q in enumerate(held_out) if k != p]).sort().values
                view = fold_view(graph, rest)
                try:
                    model = self._fit_candidate(name, view, stop_idx, derive_seed(seed, name, p))
                    with torch.no_grad():
                        log_probs = model.eval()(view)[part]
                except TrainingDivergedError:
                    log_probs = None
                if log_probs is None or torch.isnan(log_probs).any():  # a probability of 0 (-inf) scores the floor
                    predictions = None
                    per_part = [math.inf] * self.parts
                    break
                predictions.append(log_probs)
                per_part.append(held_out_score(log_probs, graph.labels[part], self.score))
            pooled = math.inf if predictions is None else held_out_score(torch.cat(predictions), labels, self.score)
            self.scores.append(CandidateScores(name, pooled, tuple(per_part)))
        best = min(self.scores, key=lambda s: s.pooled)  # min keeps the first of equals: the candidates' order
        if not math.isfinite(best.pooled):
            raise TrainingDivergedError(f"AutoCal: every candidate ({', '.join(self.candidates)}) diverged on a "
                                        "held-out part; give other candidates")
        self.selected = best.name
        view = fold_view(graph, fit_idx)
        self.model = self._fit_candidate(best.name, view, stop_idx, derive_seed(seed, best.name, "all"))
        self.fit_info = {"selected": best.name, "score": self.score, "parts": self.parts,
                         "held_out": {s.name: s.pooled for s in self.scores},
                         "per_part": {s.name: list(s.per_part) for s in self.scores},
                         "selected_fit": self.model.fit_info}
        self.eval()
        return self

    def _fitted(self) -> Calibrator:
        if self.model is None:
            raise ConfigError("AutoCal is not fitted: call fit(graph) first")
        return self.model

    fitted_attributes = ("selected", "selected_attributes")

    @property
    def selected_attributes(self) -> dict:
        """The chosen candidate's own fitted attributes (its ``fitted_attributes``), saved with AutoCal."""
        return {} if self.model is None else {n: getattr(self.model, n) for n in self.model.fitted_attributes}

    def restore_state(self, state: dict, attributes: dict) -> None:
        """The chosen candidate rebuilt by name and given its saved state (the ``model.`` entries)."""
        self.selected = attributes["selected"]
        self.model = self._build(self.selected)
        inner = {key[len("model."):]: value for key, value in state.items() if key.startswith("model.")}
        self.model.restore_state(inner, attributes.get("selected_attributes", {}))
        self.eval()

    def forward(self, graph: CalibrationGraph) -> Tensor:
        return self._fitted()(graph)

    def nodewise_feature_temperature(self, graph: CalibrationGraph) -> Tensor | None:
        return self._fitted().nodewise_feature_temperature(graph)

    def audit(self, graph: CalibrationGraph, nodes: Tensor, signals=None) -> dict:
        """The chosen candidate's own audit values (e.g. SimCalib's w and t), the choice (``selected``) and
        every candidate's pooled held-out score with the score's name and the number of parts
        (``selection_scores``: JSON ``{"score", "parts", "held_out": {candidate: score}}``, inf as null)."""
        model = self._fitted()
        scores = {s.name: (s.pooled if math.isfinite(s.pooled) else None) for s in self.scores}
        text = json.dumps({"score": self.score, "parts": self.parts, "held_out": scores}, sort_keys=True,
                          separators=(",", ":"))
        return {**model.audit(graph, nodes, signals), "selected": self.selected, "selection_scores": text}


def t_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high) of ``values`` (the per-part scores): the mean ± Student's t quantile times the standard
    error over the parts (n - 1 degrees of freedom); (inf, inf, inf) when a value is not finite."""
    from scipy import stats

    values = np.asarray(values, dtype=float)
    if not np.isfinite(values).all():
        return math.inf, math.inf, math.inf
    mean = float(values.mean())
    half = float(stats.t.ppf(0.5 + level / 2, len(values) - 1) * values.std(ddof=1) / math.sqrt(len(values)))
    return mean, mean - half, mean + half


__all__ = ["DEFAULT_CANDIDATES", "SCORES", "AutoCal", "CandidateScores", "fold_view", "held_out_score",
           "stratified_parts", "t_interval"]
