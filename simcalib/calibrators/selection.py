"""Choosing a calibrator for one graph from its labelled nodes: :func:`select_calibrator`.

Usage::

    graph = CalibrationGraph.from_run(logits, hidden, edge_index, y, train_idx, cal_idx)
    selection = select_calibrator(graph, candidates=["TS", "ETS", "GATS"], score="nll", parts=5, seed=0)
    print(selection.table())                     # candidates ranked by held-out score, t intervals over the parts
    probs = selection.winner.predict_proba(graph)  # [N, K], the winner refitted on the whole calibration fold

The procedure is :class:`~simcalib.calibrators.autocal.AutoCal`'s (its docstring has the equations); this module
adds the ranking with intervals and the saved file of the winner (:func:`_save_winner`, :func:`load_winner`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from simcalib.calibrators.autocal import DEFAULT_CANDIDATES, AutoCal, t_interval
from simcalib.calibrators.base import CalibrationGraph, Calibrator
from simcalib.errors import ConfigError, DataCorruptError
from simcalib.seeding import derive_seed

SAVED_FORMAT = "simcalib-selected-calibrator/1"
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


# ---------------------------------------------------------------------------------------------------------
# The saved winner

_PLAIN = (bool, int, float, str, type(None))


def _plain(value) -> bool:
    if isinstance(value, _PLAIN) or isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


def fitted_state(model: nn.Module) -> dict:
    """What a fitted calibrator holds besides its parameters and buffers: the public attributes of every
    submodule that are tensors or plain values (e.g. IRM's knots, SimCalib's chosen grid point), by module path.
    Underscored attributes are caches of the graph it was fitted on and are left out (they may hold labels)."""
    state = {}
    for path, module in model.named_modules():
        kept = {key: value for key, value in vars(module).items()
                if not key.startswith("_") and key != "training" and _plain(value)}
        state[path] = kept
    return state


def _save_winner(path: str | os.PathLike, selection: Selection) -> Path:
    """Save the fitted winner of ``selection`` to ``path`` with ``torch.save``: its registered name, the options it
    was built with and its resolved definition, its parameters (``state_dict``) and its other fitted values
    (:func:`fitted_state`), and the ranking. :func:`load_winner` reads it back."""
    from simcalib.calibrators import build_calibrator, calibrator_definition

    selector, winner = selection.selector, selection.winner
    options = selector.candidate_build_options(selection.winner_name)
    definition = calibrator_definition(selection.winner_name, selector.dataset, selector.backbone, **options)
    with torch.random.fork_rng(devices=[]):
        built = build_calibrator(selection.winner_name, winner.num_classes, selector.dataset, selector.backbone,
                                 **options)
    grown = sorted(set(dict(winner.named_modules())) - set(dict(built.named_modules())))
    if grown:  # layers sized by the graph at fit time (GETS's feature projections): a rebuild cannot hold them
        raise ConfigError(f"{selection.winner_name} builds layers from the graph when fitted ({', '.join(grown)}), "
                          "which this file format cannot rebuild; keep the fitted object in memory "
                          "(selection.winner), or select among other candidates to save one")
    record = {
        "format": SAVED_FORMAT, "calibrator": selection.winner_name, "num_classes": winner.num_classes,
        "dataset": selector.dataset, "backbone": selector.backbone, "options": options,
        "definition": definition.text, "definition_digest": definition.digest,
        "state_dict": {k: v.detach().cpu() for k, v in winner.state_dict().items()},
        "fitted": _to_cpu(fitted_state(winner)),
        "selection": {"score": selector.score, "parts": selector.parts,
                      "ranking": [dict(vars(r)) | {"per_part": list(r.per_part)} for r in selection.ranking]},
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(record, path)
    return path


def _to_cpu(value):
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(v) for v in value)
    return value


def load_winner(path: str | os.PathLike) -> tuple[Calibrator, dict]:
    """(the fitted calibrator, the saved record) of a file :func:`_save_winner` wrote; the calibrator is rebuilt
    from its name and options and refused (ConfigError) when its definition under this library differs from the
    saved one (another default or option meaning: its fitted values would mean something else)."""
    from simcalib.calibrators import build_calibrator, calibrator_definition

    try:
        record = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError) as exc:
        raise DataCorruptError(f"{path}: not a saved calibrator ({type(exc).__name__}: {exc}); give a file "
                               "`simcalib select --save` wrote") from None
    if not isinstance(record, dict) or record.get("format") != SAVED_FORMAT:
        raise DataCorruptError(f"{path}: not a saved calibrator of format {SAVED_FORMAT}; give a file "
                               "`simcalib select --save` wrote")
    name, dataset, backbone, options = record["calibrator"], record["dataset"], record["backbone"], record["options"]
    definition = calibrator_definition(name, dataset, backbone, **options)
    if definition.digest != record["definition_digest"]:
        raise ConfigError(f"{path}: {name} was saved under definition {record['definition_digest']} and this "
                          f"library defines it as {definition.digest}; select and save it again with this library")
    model = build_calibrator(name, record["num_classes"], dataset, backbone, **options)
    modules = dict(model.named_modules())
    for module_path, values in record["fitted"].items():
        for key, value in values.items():
            setattr(modules[module_path], key, value)
    for key, saved in record["state_dict"].items():  # buffers a fit resizes (e.g. IRM's knots): the saved shape
        module_path, _, leaf = key.rpartition(".")
        module = modules.get(module_path)
        if module is not None and leaf in module._buffers and module._buffers[leaf].shape != saved.shape:
            module._buffers[leaf] = torch.empty_like(saved)
    try:
        model.load_state_dict(record["state_dict"])
    except RuntimeError as exc:
        raise DataCorruptError(f"{path}: the saved parameters of {name} do not fit its model ({exc}); select and "
                               "save it again with this library") from None
    return model.eval(), record


__all__ = ["RankedCandidate", "Selection", "fitted_state", "load_winner", "select_calibrator"]
