"""TS: temperature scaling (Guo et al., 2017)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from simcalib.calibrators.base import CalibrationGraph, TemperatureCalibrator


class TS(TemperatureCalibrator):
    r"""One temperature for all nodes:

    .. math::
        \hat p_i = \mathrm{softmax}(z_i / T), \qquad T > 0,

    initialised at T = 1 and trained directly (as the GATS code does), clamped at 1e-3 to stay positive.
    """

    name = "TS"
    needs_graph = False

    def __init__(self, num_classes: int, **kwargs):
        super().__init__(num_classes, **kwargs)
        self.raw_temperature = nn.Parameter(torch.ones(1, 1))

    def temperature(self, graph: CalibrationGraph) -> Tensor:
        return self.raw_temperature.clamp(min=1e-3)  # [1, 1]


def fit_log_temperature(logits: Tensor, labels: Tensor, params: Tensor,
                        log_temperature: Callable[[Tensor], Tensor], max_iter: int = 100) -> Tensor:
    r"""The ``params`` minimising the NLL of :math:`\mathrm{softmax}(z_i / T_i)` on the given nodes, with
    :math:`\log T = ` ``log_temperature(params)`` ([1], or [n, 1] for one temperature per node); L-BFGS
    (strong Wolfe line search, lr 0.5) in float64 from the given start. Returns the fitted params (detached)."""
    # on the logits' device (a caller's start may be a CPU tensor); the caller's start stays as it was
    params = params.detach().to(logits.device, torch.float64).clone().requires_grad_(True)
    logits = logits.detach().double()  # [n, K]
    optimizer = torch.optim.LBFGS([params], lr=0.5, max_iter=max_iter, line_search_fn="strong_wolfe")

    def closure():
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(logits / log_temperature(params).exp(), labels)
        loss.backward()
        return loss

    optimizer.step(closure)
    return params.detach()


def nll_temperature(logits: Tensor, labels: Tensor) -> float:
    r"""The temperature minimising the NLL of :math:`\mathrm{softmax}(z / T)` on the given nodes (L-BFGS on
    :math:`\log T`, float64): temperature scaling's optimum itself, with no early stopping."""
    log_t = fit_log_temperature(logits, labels, torch.zeros(1, dtype=torch.float64), lambda p: p.clamp(-7, 7))
    return float(log_t.clamp(-7, 7).exp())
