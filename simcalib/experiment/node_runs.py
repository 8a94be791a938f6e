"""Runs of the protocol on other divisions of the nodes: a structural shift (:mod:`simcalib.experiment.shift`) and
the calibration fold divided for split-conformal sets (:mod:`simcalib.conformal`).

* :func:`evaluate_shift_run`: the run's backbone trained on the shift split's training folds (early-stopped on its
  calibration fold, both inside the ID part), every calibrator fitted on them, metrics on the ID and the OOD test
  nodes (:func:`~simcalib.experiment.shift.shift_metrics`).
* :func:`evaluate_conformal_run`: the run's backbone of the protocol (:func:`~simcalib.experiment.protocol.train_run_backbone`),
  every calibrator fitted on the training folds and the *fit part* of the calibration fold, the *quantile part*
  setting the conformal threshold (:func:`~simcalib.conformal.conformal_split`, seeded from the run's seed, the
  same division for every calibrator), sets on the test nodes (:func:`~simcalib.conformal.conformal_metrics`).

Each calibrator is seeded as the protocol seeds it (the run's seed and the calibrator's seed name). One row per
calibrator, with the run's identity.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from simcalib.backbones import BackboneOutput, resolve_device
from simcalib.calibrators import (
    CalibrationGraph,
    build_calibrator,
    calibrator_seed_name,
    canonical_calibrator,
)
from simcalib.conformal import (
    ALPHAS,
    DAPS_DIFFUSION,
    QUANTILE_FRACTION,
    RAPS_K_REG,
    RAPS_PENALTY,
    SCORES,
    conformal_metrics,
    conformal_scores_seed,
    conformal_split,
    conformal_split_seed,
)
from simcalib.errors import TrainingDivergedError
from simcalib.experiment.protocol import (
    ProtocolSettings,
    Run,
    cached_backbone,
    load_graph,
    run_split,
    train_run_backbone,
)
from simcalib.experiment.shift import ID_FRACTION, ShiftSplit, generate_shift_split, shift_metrics, shift_seed
from simcalib.experiment.splits import split_digest
from simcalib.metrics import compute_metrics
from simcalib.seeding import derive_seed, seed_everything


def fit_calibrator_on(run: Run, settings: ProtocolSettings, calibrator: str, options: dict | None,
                      output: BackboneOutput, train_idx: np.ndarray, cal_idx: np.ndarray):
    """``calibrator`` fitted on ``output`` with the labels of ``train_idx`` and ``cal_idx`` only; (model, graph)."""
    name = canonical_calibrator(calibrator)
    graph = load_graph(run.dataset, settings)
    cg = CalibrationGraph.from_run(output.logits, output.hidden, graph.edge_index, graph.y, torch.from_numpy(train_idx),
                                   torch.from_numpy(cal_idx), features=graph.x).to(resolve_device(settings.device))
    seed_everything(derive_seed(run.seed(settings), calibrator_seed_name(name)))
    model = build_calibrator(name, cg.num_classes, run.dataset, run.backbone, **(options or {}))
    try:
        model.fit(cg)
    except TrainingDivergedError as exc:
        raise TrainingDivergedError(f"{run.tag()}: {exc}") from None
    return model, cg


def shift_run_split(run: Run, settings: ProtocolSettings, property: str, id_fraction: float = ID_FRACTION) -> ShiftSplit:
    """The shift split of ``run``'s split index under ``property`` (seeded by :func:`shift_seed`)."""
    graph = load_graph(run.dataset, settings)
    seed = shift_seed(settings.study_seed, run.dataset, property, run.split, id_fraction, settings.fold_rate,
                      settings.n_folds)
    return generate_shift_split(graph.edge_index, graph.y.numpy(), property, seed, id_fraction, settings.fold_rate,
                                settings.n_folds, settings.test_rate)


def train_shift_backbone(run: Run, settings: ProtocolSettings, split: ShiftSplit) -> BackboneOutput:
    """The backbone of ``run`` on the shift split's folds (cached on disk under their node indices)."""
    graph = load_graph(run.dataset, settings)
    train_idx, cal_idx, _, _ = split.fold_indices(run.fold)
    seed = derive_seed(run.seed(settings), "shift", split.property, split.id_fraction)
    return cached_backbone(run, settings, graph, train_idx, cal_idx, seed)


def _identity(run: Run, settings: ProtocolSettings, name: str) -> dict:
    return {"dataset": run.dataset, "backbone": run.backbone, "calibrator": name, "split": run.split,
            "init": run.init, "fold": run.fold, "seed": run.seed(settings), "label_rate": settings.label_rate}


def evaluate_shift_run(run: Run, settings: ProtocolSettings, calibrators: Mapping[str, dict | None],
                       property: str, id_fraction: float = ID_FRACTION) -> list[dict]:
    """One row per calibrator: ``id_``/``ood_`` ECE, NLL, Brier and accuracy and their OOD - ID differences."""
    split = shift_run_split(run, settings, property, id_fraction)
    output = train_shift_backbone(run, settings, split)
    train_idx, cal_idx, id_test, ood_test = split.fold_indices(run.fold)
    y = load_graph(run.dataset, settings).y
    rows = []
    for name, options in calibrators.items():
        model, cg = fit_calibrator_on(run, settings, name, options, output, train_idx, cal_idx)
        probs = model.predict_proba(cg).detach().cpu()
        rows.append({**_identity(run, settings, canonical_calibrator(name)), "shift_property": split.property,
                     "id_fraction": split.id_fraction, "split_digest": split_digest(split.split),
                     "n_id_test": len(id_test), "n_ood_test": len(ood_test),
                     **shift_metrics(probs, y, id_test, ood_test)})
    return rows


def evaluate_conformal_run(run: Run, settings: ProtocolSettings, calibrators: Mapping[str, dict | None],
                           alphas: Sequence[float] = ALPHAS, scores: Sequence[str] = SCORES,
                           quantile_fraction: float = QUANTILE_FRACTION, randomised: bool = True,
                           raps_penalty: float = RAPS_PENALTY, raps_k_reg: int = RAPS_K_REG,
                           daps_diffusion: float = DAPS_DIFFUSION, output: BackboneOutput | None = None) -> list[dict]:
    """One row per calibrator: test-node ECE and accuracy (of the calibrator fitted on the fit part) and the
    conformal columns ``<score>_<metric>@<alpha>``."""
    graph = load_graph(run.dataset, settings)
    train_idx, cal_idx, test_idx = run_split(run, settings, graph).fold_indices(run.fold)
    output = output if output is not None else train_run_backbone(run, settings)
    fit_idx, quantile_idx = conformal_split(cal_idx, graph.y.numpy(), conformal_split_seed(run.seed(settings),
                                                                                            quantile_fraction),
                                            quantile_fraction)
    rows = []
    for name, options in calibrators.items():
        model, cg = fit_calibrator_on(run, settings, name, options, output, train_idx, fit_idx)
        probs = model.predict_proba(cg).detach().cpu()
        base = compute_metrics(probs[test_idx], graph.y[test_idx])
        rows.append({**_identity(run, settings, canonical_calibrator(name)), "n_fit": len(fit_idx),
                     "n_quantile": len(quantile_idx), "ece": base["ece"], "accuracy": base["accuracy"],
                     **conformal_metrics(probs, graph.y, quantile_idx, test_idx, graph.edge_index, alphas, scores,
                                         conformal_scores_seed(run.seed(settings)), randomised, raps_penalty,
                                         raps_k_reg, daps_diffusion)})
    return rows


__all__ = ["evaluate_conformal_run", "evaluate_shift_run", "fit_calibrator_on", "shift_run_split",
           "train_shift_backbone"]
