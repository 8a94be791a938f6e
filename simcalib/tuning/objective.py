"""The search objective: how well a calibrator configuration calibrates, measured on labelled nodes only.

Test nodes never enter: the objective sees each run through :func:`simcalib.experiment.protocol.calibration_graph`,
whose labels are hidden outside the training folds and the calibration fold, and scores calibration-fold
nodes only. Re-using test nodes to pick hyperparameters would make the reported test ECE optimistic.

Which labelled nodes score a configuration (``evaluation``):

* ``crossfit`` (default): the calibration fold C is split, per class, into ``inner_folds`` parts. For each
  part P the calibrator is fitted on C \\ P (early-stopped on the training folds, as in the protocol) with
  P's labels hidden, and predicts P. The metric is computed on the pooled out-of-part predictions of all
  of C. So every score is **held out**: a configuration that overfits the calibration nodes (many heads,
  no weight decay) is not rewarded. C's nodes, like test nodes, were never used for the backbone's
  gradient steps, so their confidence behaves like the test nodes'. The training-fold nodes are not scored:
  the backbone fitted them, so its confidence there is not representative.
* ``insample``: fit on all of C and score C itself, the paper's "grid search on the validation set". It is
  cheaper (one fit per run) but optimistic, and it favours flexible configurations.

For run r with out-of-part probabilities p_i over calibration nodes i in C_r, the per-run value is

    NLL_r = -1/|C_r| sum_{i in C_r} log p_i[y_i]      (or ECE_r, 15 bins, in percent)

and the search minimises the mean over the selected runs. Values are produced run by run
(:meth:`CalibrationObjective.run_values`), so a pruner can stop a poor configuration early; the search
visits the runs in :func:`tuning_order`, alternating splits.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from simcalib.calibrators import HIDDEN_LABEL, CalibrationGraph, build_calibrator, canonical_calibrator
from simcalib.errors import ConfigError
from simcalib.experiment import protocol
from simcalib.experiment.protocol import ProtocolSettings, Run
from simcalib.metrics import ece, nll
from simcalib.seeding import derive_seed, seed_everything

METRICS = {"nll": nll, "ece": lambda probs, labels: 100.0 * ece(probs, labels)}
EVALUATIONS = ("crossfit", "insample")


@dataclass(frozen=True)
class ObjectiveSettings:
    """What a search minimises: ``metric`` on calibration-fold nodes, scored ``evaluation``-style."""

    metric: str = "nll"
    evaluation: str = "crossfit"
    inner_folds: int = 2

    def __post_init__(self):
        if self.metric not in METRICS:
            raise ConfigError(f"unknown objective metric {self.metric!r}; choose one of: {', '.join(METRICS)}")
        if self.evaluation not in EVALUATIONS:
            raise ConfigError(f"unknown objective evaluation {self.evaluation!r}; choose one of: {', '.join(EVALUATIONS)}")
        if self.inner_folds < 2:
            raise ConfigError(f"crossfit needs at least 2 inner folds, got {self.inner_folds}")

    def describe(self) -> dict:
        return {"metric": self.metric, "evaluation": self.evaluation,
                **({"inner_folds": self.inner_folds} if self.evaluation == "crossfit" else {})}


def tuning_order(runs: Sequence[Run]) -> list[Run]:
    """The runs ordered so that consecutive runs come from different splits (then folds, then inits):
    a pruner judging the running mean after a few runs then already sees several labelled sets, instead
    of one split's folds, which move together."""
    return sorted(runs, key=lambda r: (r.init, r.fold, r.split))


def inner_parts(labels: np.ndarray, nodes: np.ndarray, n_parts: int, seed: int) -> list[np.ndarray]:
    """Split ``nodes`` into ``n_parts`` class-stratified parts (each class dealt round-robin after a
    seeded shuffle), so every part keeps the fold's class balance."""
    rng = np.random.default_rng(seed)
    parts: list[list[int]] = [[] for _ in range(n_parts)]
    offset = 0
    for c in np.unique(labels[nodes]):
        members = rng.permutation(nodes[labels[nodes] == c])
        for k, node in enumerate(members):
            parts[(offset + k) % n_parts].append(int(node))
        offset += len(members)  # continue the deal so small classes do not all land in part 0
    return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]


def hide_labels(graph: CalibrationGraph, fit_idx: torch.Tensor) -> CalibrationGraph:
    """The graph a calibrator sees when only ``fit_idx`` of the calibration fold may be used:
    ``cal_idx = fit_idx`` and the rest of the fold hidden like test nodes (so nothing, prototypes
    included, can read the labels being scored)."""
    labels = graph.labels.clone()
    scored = graph.cal_idx[~torch.isin(graph.cal_idx, fit_idx)]
    labels[scored] = HIDDEN_LABEL
    return CalibrationGraph(graph.logits, graph.hidden, graph.edge_index, labels, graph.train_idx, fit_idx,
                            graph.features)


class CalibrationObjective:
    """Scores calibrator options over a fixed list of runs (labelled nodes only).

    Usage::

        objective = CalibrationObjective("TS", runs, ProtocolSettings(), ObjectiveSettings("nll"))
        for value in objective.run_values({"lr": 0.01}):   # one value per run, in run order
            ...
        objective.mean({"lr": 0.01})

    Backbones come from the protocol's disk cache (trained on first use); calibration graphs are kept in
    memory, so trials after the first only fit calibrators. The same options give the same values:
    every fit is seeded from the run's seed, the calibrator and the inner part.
    """

    def __init__(self, calibrator: str, runs: Sequence[Run], settings: ProtocolSettings,
                 objective: ObjectiveSettings | None = None, device: str | None = None,
                 graphs: dict[Run, CalibrationGraph] | None = None):
        if not runs:
            raise ConfigError("the objective needs at least one run")
        self.calibrator = canonical_calibrator(calibrator)
        self.runs = list(runs)
        self.settings = settings
        self.objective = objective or ObjectiveSettings()
        self.device = torch.device(device or ("cuda" if settings.device == "auto" and torch.cuda.is_available()
                                              else "cpu" if settings.device == "auto" else settings.device))
        # calibration graphs by run; objectives of several calibrators on the same runs may share one dict
        self._graphs: dict[Run, CalibrationGraph] = {} if graphs is None else graphs

    def graph(self, run: Run) -> CalibrationGraph:
        if run not in self._graphs:
            output = protocol.train_run_backbone(run, self.settings)
            graph, _test_idx = protocol.calibration_graph(run, self.settings, output)  # test labels hidden
            self._graphs[run] = graph.to(self.device)
        return self._graphs[run]

    def _fit_predict(self, graph: CalibrationGraph, options: dict, seed: int, run: Run) -> torch.Tensor:
        seed_everything(seed)
        model = build_calibrator(self.calibrator, graph.num_classes, run.dataset, run.backbone, **options)
        return model.fit(graph).predict_proba(graph)  # [N, K]

    def scored_predictions(self, run: Run, options: dict) -> tuple[np.ndarray, np.ndarray]:
        """(probabilities [n, K] float64, labels [n]) of the calibration-fold nodes that score ``options`` on
        ``run``: out-of-part predictions (``crossfit``) or the fold fitted on itself (``insample``)."""
        graph = self.graph(run)
        base_seed = derive_seed(run.seed(self.settings), self.calibrator, "tuning")
        cal = graph.cal_idx.cpu().numpy()
        labels = graph.labels.cpu().numpy()
        if self.objective.evaluation == "insample":
            probs = self._fit_predict(graph, options, base_seed, run)[graph.cal_idx]
            scored = cal
        else:
            parts = inner_parts(labels, cal, self.objective.inner_folds, derive_seed(base_seed, "parts"))
            scored = np.concatenate(parts)
            pieces = []
            for k, part in enumerate(parts):
                fit_idx = torch.from_numpy(np.setdiff1d(cal, part)).to(graph.device)
                view = hide_labels(graph, fit_idx)
                pieces.append(self._fit_predict(view, options, derive_seed(base_seed, "part", k), run)[torch.from_numpy(part).to(graph.device)])
            probs = torch.cat(pieces)
        return probs.double().cpu().numpy(), labels[scored]

    def run_value(self, run: Run, options: dict) -> float:
        """The objective of ``options`` on one run (lower is better)."""
        value = METRICS[self.objective.metric](*self.scored_predictions(run, options))
        if not np.isfinite(value):
            raise ConfigError(f"{run.tag()}: the {self.objective.metric} of {self.calibrator} with {options} is not finite")
        return float(value)

    def run_values(self, options: dict) -> Iterator[float]:
        """Per-run values in run order, computed lazily (so a caller may stop early)."""
        for run in self.runs:
            yield self.run_value(run, options)

    def mean(self, options: dict) -> float:
        return float(np.mean(list(self.run_values(options))))


__all__ = [
    "EVALUATIONS", "METRICS", "CalibrationObjective", "ObjectiveSettings", "hide_labels", "inner_parts", "tuning_order",
]
