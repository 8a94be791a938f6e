"""ETS: ensemble temperature scaling (Zhang et al., 2020, "Mix-n-Match")."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from scipy.optimize import minimize
from threadpoolctl import threadpool_limits
from torch import Tensor

from simcalib.calibrators.base import CalibrationGraph, Calibrator
from simcalib.calibrators.ts import TS


class ETS(Calibrator):
    r"""Ensemble of the TS-calibrated, the uncalibrated and the uniform distribution:

    .. math::
        \hat p_i = w_1\, \mathrm{softmax}(z_i / T) + w_2\, \mathrm{softmax}(z_i) + w_3 \tfrac{1}{K},
        \qquad w \ge 0,\ \textstyle\sum w = 1.

    T is fitted first by :class:`TS` (same training rule); w then minimises the NLL on the calibration
    fold under the simplex constraint (SLSQP, as in Mix-n-Match). w_3 is kept below 1 so the argmax of the
    logits always survives.
    """

    name = "ETS"
    needs_graph = False

    def __init__(self, num_classes: int, **kwargs):
        super().__init__(num_classes, **kwargs)
        self.ts = TS(num_classes, **kwargs)
        self.register_buffer("weights", torch.tensor([1.0, 0.0, 0.0]))

    def fit(self, graph: CalibrationGraph, fit_idx: Tensor | None = None, stop_idx: Tensor | None = None) -> ETS:
        fit_idx = graph.cal_idx if fit_idx is None else fit_idx
        self.ts.fit(graph, fit_idx, stop_idx)
        return self.fit_weights(graph, fit_idx)

    def fit_weights(self, graph: CalibrationGraph, fit_idx: Tensor) -> ETS:
        """The second step, ``self.ts`` fitted: the simplex weights w on ``fit_idx``."""
        self.fit_info = dict(self.ts.fit_info)
        with torch.no_grad():
            logits = graph.logits[fit_idx].double().cpu()
            p_ts = F.softmax(logits / self.ts.temperature(graph).double().cpu(), -1).numpy()
            p_uncal = F.softmax(logits, -1).numpy()
        labels = graph.labels[fit_idx].cpu().numpy()
        rows = np.arange(len(labels))
        components = np.stack([p_ts[rows, labels], p_uncal[rows, labels], np.full(len(labels), 1.0 / self.num_classes)], 1)

        def nll(w: np.ndarray) -> float:
            return float(-np.log(np.clip(components @ w, 1e-300, None)).mean())

        # One BLAS thread: the matrix-vector product's summation order follows the BLAS thread count, and the
        # flat optimum moves the weights with it (ECE by up to 4e-6 points on Cora GCN), so OMP_NUM_THREADS
        # would otherwise change the numbers.
        with threadpool_limits(limits=1, user_api="blas"):
            result = minimize(
                nll, np.array([1.0, 0.0, 0.0]), method="SLSQP",
                bounds=[(0.0, 1.0), (0.0, 1.0), (0.0, 1.0 - 1e-6)],
                constraints={"type": "eq", "fun": lambda w: w.sum() - 1.0},
                tol=1e-12,
            )
        w = np.clip(result.x, 0.0, None)
        self.weights = torch.tensor(w / w.sum(), dtype=torch.float32, device=graph.device)
        self.fit_info["weights"] = [float(v) for v in self.weights]
        self.eval()
        return self

    def forward(self, graph: CalibrationGraph) -> Tensor:
        w = self.weights
        probs = (
            w[0] * F.softmax(graph.logits / self.ts.temperature(graph), -1)
            + w[1] * F.softmax(graph.logits, -1)
            + w[2] / self.num_classes
        )
        return probs.clamp(min=1e-30).log()
