r"""The common training rule with a penalty added to the training loss (Dirichlet's ODIR, GETS's load balance).

Same rule as :func:`simcalib.calibrators.training.fit_nll` (Adam, up to ``max_epochs``, keep the parameters
with the lowest NLL on the early-stopping nodes, stop after ``patience`` epochs without a new best), but the
step minimises

.. math::
    \mathrm{NLL}(\text{fit nodes}) + \Omega,

where :math:`\Omega` = ``penalty()`` is read after the forward pass (so it may depend on that pass, as GETS's
gate statistics do). Early stopping still uses the plain NLL: the penalty shapes the fit, not the choice
of epoch.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from simcalib.errors import TrainingDivergedError


def fit_penalised_nll(calibrator, graph, fit_idx: Tensor, stop_idx: Tensor, penalty: Callable[[], Tensor]) -> dict:
    params = [p for p in calibrator.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=calibrator.lr, weight_decay=calibrator.weight_decay)
    labels = graph.labels
    best_loss, best_state, best_epoch, waited, epoch = float("inf"), None, -1, 0, 0
    for epoch in range(calibrator.max_epochs):
        calibrator.train()
        optimizer.zero_grad()
        nll = F.nll_loss(calibrator(graph)[fit_idx], labels[fit_idx])
        loss = nll + penalty()
        if not torch.isfinite(loss):
            raise TrainingDivergedError(
                f"{calibrator.name} diverged at epoch {epoch} (calibration loss {loss.item()}); "
                f"lower its learning rate (now {calibrator.lr})"
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
