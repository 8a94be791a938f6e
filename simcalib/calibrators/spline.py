"""Spline: top-label recalibration by a spline fit of the cumulative accuracy (Gupta et al., "Calibration of
Neural Networks using Splines", ICLR 2021)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from scipy.interpolate import CubicSpline
from torch import Tensor

from simcalib.calibrators.base import CalibrationGraph, Calibrator
from simcalib.calibrators.irm import interpolate
from simcalib.errors import ConfigError

ORDER_MARGIN = 1e-5  # how far the recalibrated top label stays above the runner-up


def natural_spline_basis(knots: np.ndarray, x: np.ndarray, derivative: int = 0) -> np.ndarray:
    """[len(x), len(knots)]: column j is (the ``derivative``-th derivative of) the natural cubic spline through
    the unit vector e_j at ``knots``; a natural spline with knot values v is ``basis @ v``."""
    spline = CubicSpline(knots, np.eye(len(knots)), axis=0, bc_type="natural")
    return spline(x, derivative)


def keep_top_label(confidence: Tensor, runner_up_share: Tensor) -> Tensor:
    """The lowest confidence c' for which the top label still beats the runner-up once the other classes
    share 1 - c': c' > (1 - c') q_max, i.e. c' > q_max / (1 + q_max) (plus :data:`ORDER_MARGIN`)."""
    return torch.maximum(confidence, runner_up_share / (1.0 + runner_up_share) + ORDER_MARGIN)


class Spline(Calibrator):
    r"""Recalibrates the top-label confidence :math:`c_i = \max_k \mathrm{softmax}(z_i)_k`.

    On the calibration fold, with the n distinct confidences sorted ascending (nodes sharing a confidence
    merged, their correctness averaged), fractional ranks :math:`x_r = r/(n-1)` and

    .. math::
        e(x_r) = \frac{1}{n} \sum_{s \le r} \big([\hat y_s = y_s] - c_s\big)

    (cumulative accuracy minus cumulative confidence), a natural cubic spline :math:`\tilde e` with ``knots``
    (7, as the GATS code) equally spaced knots on [0, 1] is fitted to e by least squares. Since
    :math:`\frac{d}{dx} \frac{1}{n}\sum_{s \le r} c_s \approx c_r`, the accuracy at rank r is
    :math:`c_r + \tilde e'(x_r)`; the recalibration map :math:`\gamma` interpolates
    :math:`(c_r, c_r + \tilde e'(x_r))` linearly (constant beyond the fitted range) and is clipped to [0, 1].

    The predicted class keeps :math:`\gamma(c_i)`; the other classes share :math:`1 - \gamma(c_i)` in
    proportion to their probabilities (as in the GATS code; Gupta et al. recalibrate only the top label).
    Where :math:`\gamma(c_i)` would fall below the rescaled runner-up, it is raised to just above it, so
    the predicted class never changes: **accuracy-preserving** (top-label calibration keeps the prediction
    by definition). Confidences are kept within [.., 1 - 1e-6] so every class keeps some mass.

    Fitted in closed form on the calibration fold (no training loop). Options: ``knots``.
    """

    name = "Spline"
    needs_graph = False

    def __init__(self, num_classes: int, knots: int = 7, **kwargs):
        super().__init__(num_classes, **kwargs)
        if knots < 3:
            raise ConfigError(f"Spline needs at least 3 knots, got {knots}")
        self.knots = knots
        self.register_buffer("scores", torch.tensor([0.0, 1.0], dtype=torch.float64))  # identity until fitted
        self.register_buffer("recalibrated", torch.tensor([0.0, 1.0], dtype=torch.float64))

    @staticmethod
    def fit_map(confidence: np.ndarray, correct: np.ndarray, knots: int) -> tuple[np.ndarray, np.ndarray]:
        """(distinct sorted confidences c_r, c_r + e~'(x_r)): the points the recalibration map interpolates."""
        scores, inverse = np.unique(confidence, return_inverse=True)
        accuracy = np.bincount(inverse, weights=correct) / np.bincount(inverse)
        n = len(scores)
        if n < 2:  # nothing to fit a curve to: the mean accuracy everywhere
            return np.array([0.0, 1.0]), np.full(2, accuracy.mean())
        error = np.cumsum(accuracy - scores) / n
        rank = np.linspace(0.0, 1.0, n)
        knot_x = np.linspace(0.0, 1.0, knots)
        knot_values = np.linalg.lstsq(natural_spline_basis(knot_x, rank), error, rcond=None)[0]
        return scores, scores + natural_spline_basis(knot_x, rank, derivative=1) @ knot_values

    def fit(self, graph: CalibrationGraph, fit_idx: Tensor | None = None, stop_idx: Tensor | None = None) -> Spline:
        fit_idx, _ = self.check_fit_nodes(graph, fit_idx, stop_idx)
        confidence, prediction = F.softmax(graph.logits[fit_idx].double(), -1).max(1)
        correct = (prediction == graph.labels[fit_idx]).double()
        scores, recalibrated = self.fit_map(confidence.cpu().numpy(), correct.cpu().numpy(), self.knots)
        self.scores = torch.as_tensor(scores, dtype=torch.float64, device=graph.device)
        self.recalibrated = torch.as_tensor(recalibrated, dtype=torch.float64, device=graph.device)
        self.fit_info = {"distinct_scores": len(scores)}
        self.eval()
        return self

    def recalibrate(self, confidence: Tensor) -> Tensor:
        """gamma(c), clipped to [0, 1 - 1e-6]."""
        return interpolate(confidence, self.scores, self.recalibrated).clamp(0.0, 1.0 - 1e-6)

    def forward(self, graph: CalibrationGraph) -> Tensor:
        logits = graph.logits.double()
        confidence, top = F.softmax(logits, -1).max(1, keepdim=True)
        is_top = torch.zeros_like(logits, dtype=torch.bool).scatter(1, top, True)
        others = F.softmax(logits.masked_fill(is_top, float("-inf")), -1)  # q: the other classes' shares
        new_confidence = keep_top_label(self.recalibrate(confidence), others.max(1, keepdim=True).values)
        log_others = others.log() + torch.log1p(-new_confidence)
        return torch.where(is_top, new_confidence.log(), log_others).float()
