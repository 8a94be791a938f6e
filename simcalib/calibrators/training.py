"""The common training rule of post-hoc calibrators (PROTOCOL section 4, as in the GATS code).

Adam (lr 0.01 by default) minimises the NLL of the calibrated output on the calibration fold for up to
2000 epochs; after each step the NLL on the training folds is computed, the parameters with the lowest
such NLL so far (ties: the later) are kept, and training stops after ``patience`` (100) epochs without a
new best.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from simcalib.errors import TrainingDivergedError


def shuffled_by_class(nodes: Tensor, labels: Tensor, seed: int) -> list[Tensor]:
    """``nodes`` grouped by class (classes in increasing order), each group in the order of one random
    permutation drawn per class, in class order, from a CPU generator seeded with ``seed``. The per-class
    halves of a node set (the early-stopping halves of a holdout fit, the cross-fitting halves of the
    distance oracle) cut these groups."""
    generator = torch.Generator().manual_seed(seed)
    groups = []
    for k in labels.unique().tolist():
        members = nodes[labels == k]  # nodes and labels: one device
        groups.append(members[torch.randperm(len(members), generator=generator).to(members.device)])
    return groups


def fit_nll(calibrator, graph, fit_idx: Tensor, stop_idx: Tensor, penalty: Callable[[], Tensor] | None = None) -> dict:
    """The common rule. ``penalty`` (Dirichlet's ODIR, GETS's load balance): a term added to the training loss,
    read after the forward pass (so it may depend on it); early stopping still uses the plain NLL, so the
    penalty shapes the fit, not the choice of epoch."""
    optimizer = torch.optim.Adam(calibrator.parameter_groups(), lr=calibrator.lr)
    labels = graph.labels
    best_loss, best_state, best_epoch, waited = float("inf"), None, -1, 0
    epoch = 0
    for epoch in range(calibrator.max_epochs):
        calibrator.train()
        optimizer.zero_grad()
        loss = F.nll_loss(calibrator(graph)[fit_idx], labels[fit_idx])
        if penalty is not None:
            loss = loss + penalty()
        if not torch.isfinite(loss):
            raise TrainingDivergedError(
                f"{calibrator.name} diverged at epoch {epoch} (calibration loss {loss.item()}); "
                f"lower its learning rate (now {calibrator.lr}) or raise its weight decay"
            )
        loss.backward()
        optimizer.step()
        calibrator.eval()
        with torch.no_grad():
            stop_loss = F.nll_loss(calibrator(graph)[stop_idx], labels[stop_idx]).item()
        if stop_loss <= best_loss:
            best_loss, best_epoch, waited = stop_loss, epoch, 0
            best_state = copy.deepcopy(calibrator.state_dict())
        else:
            waited += 1
            if waited >= calibrator.patience:
                break
    if best_state is None:
        raise TrainingDivergedError(
            f"{calibrator.name}: the early-stopping NLL was never finite; check the backbone logits for NaNs"
        )
    calibrator.load_state_dict(best_state)
    return {"epochs": epoch + 1, "best_epoch": best_epoch, "stop_nll": best_loss}


def fit_nll_grid(calibrator, graph, fit_idx: Tensor, stop_idx: Tensor) -> list[dict]:
    """The same rule for every *unit* of a grid model at once, each unit with its own early stopping.

    The calibrator has P units (``calibrator.unit_count()``: grid points, or runs); its parameters carry a
    leading unit dimension P (one slice per unit) or belong to one unit (``calibrator.parameter_units()``:
    name -> the unit, or None for a leading unit dimension). ``calibrator.unit_losses(graph, nodes, labels,
    units)`` gives the mean NLL of ``units`` (None: all), [p], and only units still training are computed.
    One Adam step on the sum of the live units' losses moves every unit as if it were trained alone (the loss
    terms share no parameter and Adam is element-wise); each unit keeps the parameters of its lowest
    early-stopping NLL (ties: the later) and stops after ``patience`` epochs without a new best (a tie counts
    as one, as in the GATS code, unless ``calibrator.tie_resets_patience`` is False). Training ends when every
    unit has stopped. Returns one dict per unit: epochs, best_epoch, stop_nll.
    """
    units = calibrator.parameter_units()
    tie_resets = getattr(calibrator, "tie_resets_patience", True)
    named = {name: p for name, p in calibrator.named_parameters() if p.requires_grad}
    optimizer = torch.optim.Adam(calibrator.parameter_groups(), lr=calibrator.lr)
    labels = graph.labels
    kept = {name: p.detach().clone() for name, p in named.items()}
    shape = (calibrator.unit_count(),)  # (P,)
    best_loss = torch.full(shape, float("inf"))
    best_epoch = torch.full(shape, -1, dtype=torch.long)
    waited = torch.zeros(shape, dtype=torch.long)
    stopped_at = torch.zeros(shape, dtype=torch.long)
    epoch = 0
    for epoch in range(calibrator.max_epochs):
        live = waited < calibrator.patience  # [P]
        points = live.nonzero().flatten()  # units still training: the others cost nothing
        # every unit live: no selection (gathering all rows of every parameter is a copy with the same values)
        chosen = None if len(points) == shape[0] else points.to(graph.device)
        calibrator.train()
        optimizer.zero_grad()
        losses = calibrator.unit_losses(graph, fit_idx, labels, chosen)  # [p]
        if not torch.isfinite(losses).all():
            raise TrainingDivergedError(
                f"{calibrator.name} diverged at epoch {epoch} (calibration NLL {losses.detach().tolist()}); "
                f"lower its learning rate (now {calibrator.lr}) or raise its weight decay"
            )
        losses.sum().backward()  # a stopped unit gets no gradient (its kept state is final anyway)
        optimizer.step()
        calibrator.eval()
        with torch.no_grad():
            stop = torch.full(shape, float("inf"))
            stop[points] = calibrator.unit_losses(graph, stop_idx, labels, chosen).cpu()
        improved = live & (stop <= best_loss)  # NaN never improves
        # a tie keeps the later parameters; whether it also resets the patience counter is the calibrator's choice
        resets = improved if tie_resets else live & (stop < best_loss)
        best_loss = torch.where(improved, stop, best_loss)
        best_epoch = torch.where(improved, torch.full_like(best_epoch, epoch), best_epoch)
        waited = torch.where(resets, torch.zeros_like(waited), waited + live.long())
        stopped_at = torch.where(live, torch.full_like(stopped_at, epoch + 1), stopped_at)
        with torch.no_grad():
            for name, parameter in named.items():
                point = units[name]
                if point is not None:  # the whole parameter is one unit's
                    if improved[point]:
                        kept[name] = parameter.detach().clone()
                    continue
                mask = improved.to(parameter.device)  # [P]
                kept[name] = torch.where(mask.view(-1, *[1] * (parameter.dim() - 1)), parameter, kept[name])
        if not (waited < calibrator.patience).any():
            break
    if not torch.isfinite(best_loss).all():
        raise TrainingDivergedError(
            f"{calibrator.name}: the early-stopping NLL was never finite; check the backbone logits for NaNs"
        )
    with torch.no_grad():
        for name, parameter in named.items():
            parameter.copy_(kept[name])
    return [{"epochs": int(stopped_at[u]), "best_epoch": int(best_epoch[u]), "stop_nll": float(best_loss[u])}
            for u in range(shape[0])]
