"""The common training rule of post-hoc calibrators (PROTOCOL section 4, as in the GATS code).

Adam (lr 0.01 by default) minimises the NLL of the calibrated output on the calibration fold for up to
2000 epochs; after each step the NLL on the training folds is computed, the parameters with the lowest
such NLL so far (ties: the later) are kept, and training stops after ``patience`` (100) epochs without a
new best. The rule's state and the kept parameters live on the calibrator's device and the host reads the
stopping state every few epochs (:mod:`simcalib.early_stopping`; every epoch on CPU).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from simcalib.early_stopping import check_interval, is_check_epoch
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


def fit_nll(calibrator, graph, fit_idx: Tensor, stop_idx: Tensor, penalty: Callable[[], Tensor] | None = None,
            check_every: int | None = None) -> dict:
    """The common rule. ``penalty`` (Dirichlet's ODIR, GETS's load balance): a term added to the training loss,
    read after the forward pass (so it may depend on it); early stopping still uses the plain NLL, so the
    penalty shapes the fit, not the choice of epoch. ``check_every``: epochs between two host reads of the
    stopping state (default :func:`~simcalib.early_stopping.check_interval`: 1 on CPU); any value gives the
    same fit."""
    optimizer = torch.optim.Adam(calibrator.parameter_groups(), lr=calibrator.lr)
    labels = graph.labels
    # the state of the rule on the calibrator's device (simcalib.early_stopping), read every `interval` epochs;
    # the kept parameters live in tensors allocated once and overwritten where the stopping NLL improves
    device = labels.device
    interval = check_interval(device, check_every)
    best_state = {name: value.detach().clone() for name, value in calibrator.state_dict().items()}
    best_loss = None  # the stopping NLL's dtype, allocated at the first epoch
    best_epoch = torch.tensor(-1, device=device)
    waited = torch.tensor(0, device=device)
    stopped = torch.tensor(False, device=device)
    epochs_run = torch.tensor(0, device=device)
    diverged_at = torch.tensor(-1, device=device)
    diverged_loss = None
    for epoch in range(calibrator.max_epochs):
        calibrator.train()
        optimizer.zero_grad()
        loss = F.nll_loss(calibrator(graph)[fit_idx], labels[fit_idx])
        if penalty is not None:
            loss = loss + penalty()
        if diverged_loss is None:
            diverged_loss = torch.zeros_like(loss.detach())
        first_bad = ~stopped & ~torch.isfinite(loss.detach()) & (diverged_at < 0)
        diverged_at = torch.where(first_bad, epoch, diverged_at)
        diverged_loss = torch.where(first_bad, loss.detach(), diverged_loss)
        live = ~stopped & (diverged_at < 0)
        loss.backward()
        optimizer.step()
        calibrator.eval()
        with torch.no_grad():
            stop_loss = F.nll_loss(calibrator(graph)[stop_idx], labels[stop_idx])
            if best_loss is None:
                best_loss = torch.full_like(stop_loss, float("inf"))
            improved = live & (stop_loss <= best_loss)
            for name, value in calibrator.state_dict().items():
                kept = best_state[name]
                kept.copy_(torch.where(improved.to(kept.device), value, kept))
            best_loss = torch.where(improved, stop_loss, best_loss)
            best_epoch = torch.where(improved, epoch, best_epoch)
            waited = torch.where(improved, torch.zeros_like(waited), torch.where(live, waited + 1, waited))
            stopped = stopped | (live & (waited >= calibrator.patience))
            epochs_run = torch.where(live, epoch + 1, epochs_run)
        if is_check_epoch(epoch, interval, calibrator.max_epochs - 1) and bool(stopped | (diverged_at >= 0)):
            break
    if int(diverged_at) >= 0:
        raise TrainingDivergedError(
            f"{calibrator.name} diverged at epoch {int(diverged_at)} (calibration loss {diverged_loss.item()}); "
            f"lower its learning rate (now {calibrator.lr}) or raise its weight decay"
        )
    if int(best_epoch) < 0:
        raise TrainingDivergedError(
            f"{calibrator.name}: the early-stopping NLL was never finite; check the backbone logits for NaNs"
        )
    calibrator.load_state_dict(best_state)
    return {"epochs": int(epochs_run), "best_epoch": int(best_epoch), "stop_nll": best_loss.item()}


def fit_nll_grid(calibrator, graph, fit_idx: Tensor, stop_idx: Tensor, check_every: int | None = None) -> list[dict]:
    """The same rule for every *unit* of a grid model at once, each unit with its own early stopping.

    The calibrator has P units (``calibrator.unit_count()``: grid points, or runs); its parameters carry a
    leading unit dimension P (one slice per unit) or belong to one unit (``calibrator.parameter_units()``:
    name -> the unit, or None for a leading unit dimension). ``calibrator.unit_losses(graph, nodes, labels,
    units)`` gives the mean NLL of ``units`` (None: all), [p], and only units still training are computed.
    One Adam step on the sum of the live units' losses moves every unit as if it were trained alone (the loss
    terms share no parameter and Adam is element-wise); each unit keeps the parameters of its lowest
    early-stopping NLL (ties: the later) and stops after ``patience`` epochs without a new best (a tie counts
    as one, as in the GATS code, unless ``calibrator.tie_resets_patience`` is False). Training ends when every
    unit has stopped. Returns one dict per unit: epochs, best_epoch, stop_nll. ``check_every``: epochs between
    two host reads of the stopping state, as in :func:`fit_nll`.
    """
    units = calibrator.parameter_units()
    tie_resets = getattr(calibrator, "tie_resets_patience", True)
    named = {name: p for name, p in calibrator.named_parameters() if p.requires_grad}
    optimizer = torch.optim.Adam(calibrator.parameter_groups(), lr=calibrator.lr)
    labels = graph.labels
    device = graph.device
    interval = check_interval(device, check_every)
    kept = {name: p.detach().clone() for name, p in named.items()}
    shape = (calibrator.unit_count(),)  # (P,)
    # the rule's state on the device (simcalib.early_stopping); the host reads it every `interval` epochs, when
    # it also drops the stopped units from the computation (between two reads they are computed, never kept)
    best_loss = torch.full(shape, float("inf"), device=device)
    best_epoch = torch.full(shape, -1, dtype=torch.long, device=device)
    waited = torch.zeros(shape, dtype=torch.long, device=device)
    stopped_at = torch.zeros(shape, dtype=torch.long, device=device)
    diverged_at = torch.tensor(-1, device=device)
    diverged_losses = None
    chosen = points = None
    epoch = 0
    for epoch in range(calibrator.max_epochs):
        live = (waited < calibrator.patience) & (diverged_at < 0)  # [P]
        if points is None:  # the units still training: the others cost nothing
            points = live.nonzero().flatten()
            # every unit live: no selection (gathering all rows of every parameter is a copy with the same values)
            chosen = None if len(points) == shape[0] else points
        calibrator.train()
        optimizer.zero_grad()
        losses = calibrator.unit_losses(graph, fit_idx, labels, chosen)  # [p]
        selected_live = live if chosen is None else live[chosen]
        bad = (~torch.isfinite(losses.detach()) & selected_live).any() & (diverged_at < 0)
        diverged_at = torch.where(bad, epoch, diverged_at)
        if diverged_losses is None:
            diverged_losses = torch.zeros(shape, dtype=losses.dtype, device=device)
        current = torch.full(shape, float("nan"), dtype=losses.dtype, device=device)
        current[points] = losses.detach()
        diverged_losses = torch.where(bad, current, diverged_losses)
        live = live & ~bad
        losses.sum().backward()  # a stopped unit gets no gradient (its kept state is final anyway)
        optimizer.step()
        calibrator.eval()
        with torch.no_grad():
            stop = torch.full(shape, float("inf"), device=device)
            stop[points] = calibrator.unit_losses(graph, stop_idx, labels, chosen)
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
                    kept[name] = torch.where(improved[point].to(parameter.device), parameter, kept[name])
                    continue
                mask = improved.to(parameter.device)  # [P]
                kept[name] = torch.where(mask.view(-1, *[1] * (parameter.dim() - 1)), parameter, kept[name])
        if is_check_epoch(epoch, interval, calibrator.max_epochs - 1):
            if int(diverged_at) >= 0 or not bool((waited < calibrator.patience).any()):
                break
            points = None
    if int(diverged_at) >= 0:
        raise TrainingDivergedError(
            f"{calibrator.name} diverged at epoch {int(diverged_at)} (calibration NLL {diverged_losses.tolist()}); "
            f"lower its learning rate (now {calibrator.lr}) or raise its weight decay"
        )
    if not torch.isfinite(best_loss).all():
        raise TrainingDivergedError(
            f"{calibrator.name}: the early-stopping NLL was never finite; check the backbone logits for NaNs"
        )
    with torch.no_grad():
        for name, parameter in named.items():
            parameter.copy_(kept[name])
    epochs, best_epochs, nlls = stopped_at.tolist(), best_epoch.tolist(), best_loss.tolist()
    return [{"epochs": epochs[u], "best_epoch": best_epochs[u], "stop_nll": nlls[u]} for u in range(shape[0])]
