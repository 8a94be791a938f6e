"""The common training rule of post-hoc calibrators (PROTOCOL section 4, as in the GATS code).

Adam (lr 0.01 by default) minimises the NLL of the calibrated output on the calibration fold for up to
2000 epochs; after each step the NLL on the training folds is computed, the parameters with the lowest
such NLL so far (ties: the later) are kept, and training stops after ``patience`` (100) epochs without a
new best.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import Tensor

from simcalib.errors import TrainingDivergedError


def fit_nll(calibrator, graph, fit_idx: Tensor, stop_idx: Tensor) -> dict:
    params = [p for p in calibrator.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=calibrator.lr, weight_decay=calibrator.weight_decay)
    labels = graph.labels
    best_loss, best_state, best_epoch, waited = float("inf"), None, -1, 0
    epoch = 0
    for epoch in range(calibrator.max_epochs):
        calibrator.train()
        optimizer.zero_grad()
        loss = F.nll_loss(calibrator(graph)[fit_idx], labels[fit_idx])
        if not torch.isfinite(loss):
            raise TrainingDivergedError(
                f"{calibrator.name} diverged at epoch {epoch} (calibration NLL {loss.item()}); "
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
