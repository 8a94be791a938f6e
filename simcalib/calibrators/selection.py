"""Choosing a calibrator for one graph from its labelled nodes: :func:`select_calibrator`.

Usage::

    graph = CalibrationGraph.from_run(logits, hidden, edge_index, y, train_idx, cal_idx)
    selection = select_calibrator(graph, candidates=["TS", "ETS", "GATS"], score="nll", parts=5, seed=0)
    print(selection.table())                     # candidates ranked by held-out score, t intervals over the parts
    probs = selection.winner.predict_proba(graph)  # [N, K], the winner refitted on the whole calibration fold
    selection.winner.save(path, metadata=selection.metadata())  # simcalib.load_calibrator(path) reads it back

The procedure is :class:`~simcalib.calibrators.autocal.AutoCal`'s (its docstring has the equations); this module
adds the ranking with intervals. The winner is saved as any calibrator is (:meth:`Calibrator.save`), with the
ranking as its metadata (:meth:`Selection.metadata`, read back by :func:`simcalib.calibrators.saved_metadata`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from simcalib.calibrators.autocal import DEFAULT_CANDIDATES, AutoCal, t_interval
from simcalib.calibrators.base import CalibrationGraph, Calibrator
from simcalib.errors import ConfigError
from simcalib.seeding import derive_seed

INTERVAL_LEVEL = 0.95


@dataclass(frozen=True)
class RankedCandidate:
    """One candidate's held-out scores: ``score`` pooled over every calibration node (what the choice compares),
    and the mean with its Student-t interval (``low``, ``high``) over the per-part scores ``per_part``."""

    rank: int
    name: str
    score: float
    mean: float
    low: float
    high: float
    per_part: tuple[float, ...]


@dataclass
class Selection:
    """What :func:`select_calibrator` found: the candidates best first, and the fitted selector (whose ``model``
    is the winner refitted on the whole calibration fold)."""

    ranking: list[RankedCandidate]
    selector: AutoCal
    num_nodes: int  # calibration nodes the choice was made on

    @property
    def winner_name(self) -> str:
        return self.ranking[0].name

    @property
    def winner(self) -> Calibrator:
        return self.selector.model

    def metadata(self) -> dict:
        """The choice as plain values, what ``simcalib select`` saves beside the winner (``winner.save(path,
        metadata=selection.metadata())``): ``{"selection": {"winner", "score", "parts", "calibration_nodes",
        "ranking": [each RankedCandidate's fields, best first]}}``."""
        ranking = [{**vars(r), "per_part": list(r.per_part)} for r in self.ranking]
        return {"selection": {"winner": self.winner_name, "score": self.selector.score, "parts": self.selector.parts,
                              "calibration_nodes": self.num_nodes, "ranking": ranking}}

    def table(self) -> str:
        """The ranking as text: rank, candidate, pooled score, mean over the parts [95% t interval]."""
        score = self.selector.score.upper()
        lines = [f"{self.num_nodes} calibration nodes in {self.selector.parts} stratified parts; held-out {score} "
                 f"(lower is better); interval: {INTERVAL_LEVEL:.0%} Student t over the parts",
                 f"{'rank':>4}  {'calibrator':<22}{'pooled':>10}  {'mean over parts [interval]':<28}"]
        for r in self.ranking:
            if math.isfinite(r.score):
                lines.append(f"{r.rank:>4}  {r.name:<22}{r.score:>10.4f}  {r.mean:.4f} [{r.low:.4f}, {r.high:.4f}]")
            else:
                lines.append(f"{r.rank:>4}  {r.name:<22}{'diverged':>10}")
        return "\n".join(lines)


def select_calibrator(graph: CalibrationGraph, candidates: Sequence[str] = DEFAULT_CANDIDATES, score: str = "nll",
                      parts: int = 5, seed: int = 0, dataset: str | None = None, backbone: str | None = None,
                      candidate_options: dict | None = None, **caps) -> Selection:
    """Rank ``candidates`` (registered names) by their cross-fitted ``score`` ("nll" or "ece") on ``graph``'s
    calibration fold in ``parts`` stratified parts, and refit the best on the whole fold (:class:`AutoCal`).
    ``seed``: every draw (the parts, the candidates' fits) derives from it. ``dataset``, ``backbone``: whose
    protocol defaults the candidates are built with (None: the library's). ``caps``: ``max_epochs``,
    ``patience``, ``lr`` given to every candidate."""
    if not isinstance(graph, CalibrationGraph):
        raise ConfigError(f"select_calibrator takes a CalibrationGraph, got {type(graph).__name__}; build one with "
                          "CalibrationGraph.from_run(logits, hidden, edge_index, y, train_idx, cal_idx)")
    selector = AutoCal(graph.num_classes, candidates=candidates, score=score, parts=parts,
                       candidate_options=candidate_options, dataset=dataset, backbone=backbone, **caps)
    devices = [graph.device] if graph.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(derive_seed("select", seed))
        selector.fit(graph)
    ordered = sorted(selector.scores, key=lambda s: s.pooled)  # stable: ties keep the candidates' order
    ranking = [RankedCandidate(rank, s.name, s.pooled, *t_interval(s.per_part, INTERVAL_LEVEL), s.per_part)
               for rank, s in enumerate(ordered, start=1)]
    return Selection(ranking, selector, int(len(graph.cal_idx)))


__all__ = ["RankedCandidate", "Selection", "select_calibrator"]
