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

:func:`evaluate_run` is the entry point of a benchmark plan of kind ``shift`` or ``conformal``
(:attr:`simcalib.experiment.plan.BenchmarkPlan.kind`): one run's rows for the listed calibrators, each carrying the
columns the ledger keys a row by (:mod:`simcalib.experiment.ledger`: the run, its seed and label rate, the
calibrator digest of the plan, the backbone digest), so ``read_ledger(plan)`` counts the run done and a study
resumes from them. The calibrator digest of such a row is :func:`kind_definition` of the protocol's: the kind's
settings (the shift property and ID share, or the conformal scores, alphas and quantile share) are part of what
the row's numbers are a function of, so changing one recomputes the rows and only those.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from simcalib.backbones import BackboneOutput, resolve_device
from simcalib.calibrators import CalibrationGraph, CalibratorDefinition, build_calibrator
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
from simcalib.errors import ConfigError, TrainingDivergedError
from simcalib.experiment.protocol import (
    PlannedCalibrator,
    ProtocolSettings,
    Run,
    backbone_digest,
    backbone_options,
    cached_backbone,
    load_graph,
    resolve_calibrator,
    row_definition,
    run_definition,
    run_split,
    save_predictions,
    train_run_backbone,
)
from simcalib.experiment.shift import ID_FRACTION, ShiftSplit, generate_shift_split, shift_metrics, shift_seed
from simcalib.experiment.splits import split_digest, split_source_label
from simcalib.metrics import compute_metrics
from simcalib.seeding import derive_seed, seed_everything
from simcalib.store.integrity import (
    BACKBONE_OPTIONS_COLUMN,
    CALIBRATOR_DIGEST_COLUMN,
    CALIBRATOR_OPTIONS_COLUMN,
)

KINDS = ("protocol", "shift", "conformal")  # BenchmarkPlan.kind: the protocol's rows, or the rows of this module


def kind_definition(definition: CalibratorDefinition, kind: str, options: Mapping) -> CalibratorDefinition:
    """``definition`` (:func:`~simcalib.experiment.protocol.row_definition`) of a row of ``kind`` computed under the
    kind's ``options``: the protocol's unchanged, another kind's with ``{kind: options}`` beside its options, so its
    digest differs from the protocol's and from that of other settings of the kind."""
    if kind == "protocol":
        return definition
    if kind not in KINDS:
        raise ConfigError(f"unknown benchmark kind {kind!r}; one of {', '.join(KINDS)}")
    return CalibratorDefinition(definition.name, {**definition.options, kind: dict(sorted(dict(options).items()))})


def fit_calibrator_on(run: Run, settings: ProtocolSettings, calibrator: PlannedCalibrator, output: BackboneOutput,
                      train_idx: np.ndarray, cal_idx: np.ndarray):
    """``calibrator`` (a plan's entry: name, options and seed name resolved) fitted on ``output`` with the labels
    of ``train_idx`` and ``cal_idx`` only; (model, graph)."""
    graph = load_graph(run.dataset, settings)
    cg = CalibrationGraph.from_run(output.logits, output.hidden, graph.edge_index, graph.y, torch.from_numpy(train_idx),
                                   torch.from_numpy(cal_idx), features=graph.x).to(resolve_device(settings.device))
    seed_everything(derive_seed(run.seed(settings), calibrator.seed_name))
    model = build_calibrator(calibrator.name, cg.num_classes, run.dataset, run.backbone, **calibrator.options_dict)
    start = time.perf_counter()
    try:
        model.fit(cg)
    except TrainingDivergedError as exc:
        raise TrainingDivergedError(f"{run.tag()}: {exc}") from None
    model._simcalib_fit_seconds = time.perf_counter() - start  # the rows' fit_seconds (the fit alone, as the protocol's)
    return model, cg


def _planned(run: Run, calibrators: Sequence[str | PlannedCalibrator]) -> list[PlannedCalibrator]:
    """``calibrators`` as planned entries: a plan's entry as it is, a name resolved with the registry's options
    (:func:`~simcalib.experiment.protocol.resolve_calibrator`)."""
    return [resolve_calibrator(c, run.dataset, run.backbone) for c in calibrators]


def shift_run_split(run: Run, settings: ProtocolSettings, property: str, id_fraction: float = ID_FRACTION) -> ShiftSplit:
    """The shift split of ``run``'s split index under ``property`` (seeded by :func:`shift_seed`; computed once
    per split index, the folds of a split share it)."""
    return _shift_split(run.dataset, settings, property, run.split, float(id_fraction))


@functools.lru_cache(maxsize=32)
def _shift_split(dataset: str, settings: ProtocolSettings, property: str, split: int, id_fraction: float) -> ShiftSplit:
    graph = load_graph(dataset, settings)
    seed = shift_seed(settings.study_seed, dataset, property, split, id_fraction, settings.fold_rate, settings.n_folds)
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


def evaluate_shift_run(run: Run, settings: ProtocolSettings, calibrators: Sequence[str | PlannedCalibrator],
                       property: str, id_fraction: float = ID_FRACTION, predictions_dir=None) -> list[dict]:
    """One row per calibrator (a plan's entry, or a name: :func:`_planned`): ``id_``/``ood_`` ECE, NLL, Brier and
    accuracy and their OOD - ID differences, the run's definition columns (the shift split's digest) and its
    backbone's digest. ``predictions_dir``: each calibrator's probabilities of the ID and OOD test nodes saved
    there (``test_idx``: ID nodes first)."""
    split = shift_run_split(run, settings, property, id_fraction)
    output = train_shift_backbone(run, settings, split)
    train_idx, cal_idx, id_test, ood_test = split.fold_indices(run.fold)
    graph = load_graph(run.dataset, settings)
    y = graph.y
    definition = {"split_digest": split_digest(split.split), "data_digest": run_definition(run, settings)["data_digest"],
                  "split_source": split_source_label(split.split), BACKBONE_OPTIONS_COLUMN: backbone_options(run, settings),
                  "backbone_digest": backbone_digest(output)}
    rows = []
    for calibrator in _planned(run, calibrators):
        model, cg = fit_calibrator_on(run, settings, calibrator, output, train_idx, cal_idx)
        probs = model.predict_proba(cg).detach().cpu()
        if predictions_dir is not None:
            nodes = np.concatenate([id_test, ood_test])
            save_predictions(predictions_dir, run, calibrator.name, probs[nodes].numpy(), y[nodes].numpy(), nodes)
        rows.append({**_identity(run, settings, calibrator.name), "shift_property": split.property,
                     "id_fraction": split.id_fraction, "n_id_test": len(id_test), "n_ood_test": len(ood_test),
                     **shift_metrics(probs, y, id_test, ood_test), "fit_seconds": _fit_seconds(model), **definition})
    return rows


def _fit_seconds(model) -> float:
    return float(getattr(model, "_simcalib_fit_seconds", float("nan")))


def evaluate_conformal_run(run: Run, settings: ProtocolSettings, calibrators: Sequence[str | PlannedCalibrator],
                           alphas: Sequence[float] = ALPHAS, scores: Sequence[str] = SCORES,
                           quantile_fraction: float = QUANTILE_FRACTION, randomised: bool = True,
                           raps_penalty: float = RAPS_PENALTY, raps_k_reg: int = RAPS_K_REG,
                           daps_diffusion: float = DAPS_DIFFUSION, output: BackboneOutput | None = None,
                           predictions_dir=None) -> list[dict]:
    """One row per calibrator (a plan's entry, or a name: :func:`_planned`): test-node ECE, NLL and accuracy (of the calibrator fitted on the fit part), the
    conformal columns ``<score>_<metric>@<alpha>``, the run's definition columns and its backbone's digest.
    ``predictions_dir``: each calibrator's test-node probabilities saved there."""
    graph = load_graph(run.dataset, settings)
    train_idx, cal_idx, test_idx = run_split(run, settings, graph).fold_indices(run.fold)
    output = output if output is not None else train_run_backbone(run, settings)
    definition = {**run_definition(run, settings), "backbone_digest": backbone_digest(output)}
    fit_idx, quantile_idx = conformal_split(cal_idx, graph.y.numpy(), conformal_split_seed(run.seed(settings),
                                                                                            quantile_fraction),
                                            quantile_fraction)
    rows = []
    for calibrator in _planned(run, calibrators):
        model, cg = fit_calibrator_on(run, settings, calibrator, output, train_idx, fit_idx)
        probs = model.predict_proba(cg).detach().cpu()
        base = compute_metrics(probs[test_idx], graph.y[test_idx])
        if predictions_dir is not None:
            save_predictions(predictions_dir, run, calibrator.name, probs[test_idx].numpy(), graph.y[test_idx].numpy(),
                             test_idx)
        rows.append({**_identity(run, settings, calibrator.name), "n_fit": len(fit_idx),
                     "n_quantile": len(quantile_idx), "quantile_fraction": float(quantile_fraction),
                     "ece": base["ece"], "nll": base["nll"], "accuracy": base["accuracy"],
                     **conformal_metrics(probs, graph.y, quantile_idx, test_idx, graph.edge_index, alphas, scores,
                                         conformal_scores_seed(run.seed(settings)), randomised, raps_penalty,
                                         raps_k_reg, daps_diffusion),
                     "fit_seconds": _fit_seconds(model), **definition})
    return rows


def evaluate_run(plan, run: Run, calibrators: Sequence[str] | None = None,
                 predictions_dir=None) -> list[dict]:
    """The rows of ``run`` (one of ``plan.runs``, ``plan`` a :class:`~simcalib.experiment.plan.BenchmarkPlan`) for
    ``calibrators`` (names as the plan names them, :attr:`~simcalib.experiment.plan.BenchmarkPlan.calibrator_names`;
    None: all of the plan's), for a plan of kind ``shift`` or ``conformal``: the columns of
    :func:`evaluate_shift_run` or :func:`evaluate_conformal_run` under the plan's settings and the kind's options,
    each calibrator the plan's entry (:meth:`~simcalib.experiment.plan.BenchmarkPlan.calibrator`: its name, options
    and seed name resolved once, in the plan) with its definition (``calibrator_options``, ``calibrator_digest``).
    Appended with :func:`~simcalib.store.results_store.append_rows` to ``plan.out_dir / "results.csv"``, they make
    :func:`~simcalib.experiment.ledger.read_ledger` count those calibrations done. ``predictions_dir``: the
    calibrators' test probabilities saved there (one npz per calibrator)."""
    kind = plan.kind
    if kind not in ("shift", "conformal"):
        raise ConfigError(f"{plan.name}: evaluate_run computes the rows of a shift or conformal plan, this one is of "
                          f"kind {kind!r}; the protocol's runs go through simcalib.experiment.protocol.evaluate_calibrator")
    if run not in plan.runs:
        raise ConfigError(f"{plan.name}: run {run.tag()} is not one of the plan's runs; take it from plan.runs")
    names = plan.calibrator_names if calibrators is None else list(calibrators)
    unknown = [n for n in names if n not in plan.calibrator_names]
    if unknown:
        raise ConfigError(f"{plan.name}: calibrator(s) {', '.join(unknown)} are not in the plan "
                          f"({', '.join(plan.calibrator_names)}); name calibrators as the plan names them")
    chosen = [plan.calibrator(n) for n in names]
    options = plan.kind_options_dict
    if predictions_dir is not None:
        from pathlib import Path

        predictions_dir = Path(predictions_dir)
    if kind == "shift":
        rows = evaluate_shift_run(run, plan.settings, chosen, options["property"],
                                  options.get("id_fraction", ID_FRACTION), predictions_dir)
    else:
        rows = evaluate_conformal_run(run, plan.settings, chosen, options.get("alphas", ALPHAS),
                                      options.get("scores", SCORES), options.get("quantile_fraction", QUANTILE_FRACTION),
                                      options.get("randomised", True), options.get("raps_penalty", RAPS_PENALTY),
                                      options.get("raps_k_reg", RAPS_K_REG),
                                      options.get("daps_diffusion", DAPS_DIFFUSION), predictions_dir=predictions_dir)
    for row, entry in zip(rows, chosen):  # one row per calibrator, in order
        row[CALIBRATOR_OPTIONS_COLUMN] = entry.definition
        row[CALIBRATOR_DIGEST_COLUMN] = entry.digest
    return rows


def row_kind_definition(name: str, dataset: str, backbone: str, options: dict | None, kind: str,
                        kind_options: Mapping) -> CalibratorDefinition:
    """The definition a row of ``kind`` records: :func:`kind_definition` of the protocol's
    :func:`~simcalib.experiment.protocol.row_definition`."""
    return kind_definition(row_definition(name, dataset, backbone, options), kind, kind_options)


__all__ = ["KINDS", "evaluate_conformal_run", "evaluate_run", "evaluate_shift_run", "fit_calibrator_on",
           "kind_definition", "row_kind_definition", "shift_run_split", "train_shift_backbone"]
