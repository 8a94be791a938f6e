"""IRM: accuracy-preserving multi-class isotonic regression (Zhang et al., "Mix-n-Match: Ensemble and
Compositional Methods for Uncertainty Calibration in Deep Learning", ICML 2020)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from sklearn.isotonic import IsotonicRegression
from torch import Tensor

from simcalib.calibrators.base import CalibrationGraph, Calibrator

TIE_BREAK = 1e-9  # Mix-n-Match's epsilon: makes the map strictly increasing
ROUNDING_MARGIN = 1e-6  # log-space lead given back to the predicted class where float32 rounding tied it


def interpolate(x: Tensor, knots_x: Tensor, knots_y: Tensor) -> Tensor:
    """Piecewise-linear interpolation through (knots_x ascending, knots_y), constant beyond the ends."""
    if knots_x.numel() == 1:
        return knots_y.expand_as(x).clone()
    right = torch.searchsorted(knots_x, x.contiguous()).clamp(1, knots_x.numel() - 1)
    x0, x1, y0, y1 = knots_x[right - 1], knots_x[right], knots_y[right - 1], knots_y[right]
    slope_part = ((x - x0) / (x1 - x0)).clamp(0.0, 1.0)
    return y0 + slope_part * (y1 - y0)


def keep_argmax_after_rounding(log_probs: Tensor, logits: Tensor) -> Tensor:
    """Float32 ``log_probs`` whose argmax is the logits' argmax.

    For a strictly order-preserving map computed in float64 the argmax can only change by rounding to
    float32 (two classes closer than an ulp become equal and the lower index wins). There the predicted
    class is set :data:`ROUNDING_MARGIN` above the row's maximum: enough to survive ``exp`` in float32,
    far below any metric's resolution.
    """
    top = logits.argmax(1, keepdim=True)
    rounded = log_probs.float()
    lost = rounded.argmax(1, keepdim=True) != top
    if lost.any():
        raised = rounded.max(1, keepdim=True).values + ROUNDING_MARGIN
        rounded = rounded.scatter(1, top, torch.where(lost, raised, rounded.gather(1, top)))
    return rounded


class IRM(Calibrator):
    r"""One isotonic map shared by all classes, fitted on every (probability, indicator) pair:

    .. math::
        g = \arg\min_{g \uparrow} \sum_{i \in \text{cal}} \sum_{k=1}^{K} \big(g(p_{ik}) - [y_i = k]\big)^2,
        \qquad p_i = \mathrm{softmax}(z_i),

    .. math::
        \hat p_{ik} = \frac{g(p_{ik}) + \epsilon\, p_{ik}}{\sum_l g(p_{il}) + \epsilon\, p_{il}},
        \qquad \epsilon = 10^{-9},

    g by pool-adjacent-violators (``sklearn.isotonic.IsotonicRegression``), linear between its knots and
    constant beyond them. g is non-decreasing, so g + εp is strictly increasing and the class order of every
    node, hence the argmax, is kept (Mix-n-Match's accuracy-preserving variant): **accuracy-preserving**.
    Computed in float64; a float32 tie created by rounding is broken towards the predicted class.

    Fitted in closed form on the calibration fold (no training loop, no early stopping, no options).
    """

    name = "IRM"
    needs_graph = False

    def __init__(self, num_classes: int, **kwargs):
        super().__init__(num_classes, **kwargs)
        self.register_buffer("knots_x", torch.tensor([0.0, 1.0], dtype=torch.float64))  # identity until fitted
        self.register_buffer("knots_y", torch.tensor([0.0, 1.0], dtype=torch.float64))

    def fit(self, graph: CalibrationGraph, fit_idx: Tensor | None = None, stop_idx: Tensor | None = None) -> IRM:
        fit_idx, _ = self.check_fit_nodes(graph, fit_idx, stop_idx)
        probs = F.softmax(graph.logits[fit_idx].double(), -1).cpu()
        indicators = F.one_hot(graph.labels[fit_idx].cpu(), self.num_classes).double()
        isotonic = IsotonicRegression(out_of_bounds="clip", increasing=True)
        isotonic.fit(probs.flatten().numpy(), indicators.flatten().numpy())
        self.knots_x = torch.as_tensor(isotonic.X_thresholds_, dtype=torch.float64, device=graph.device)
        self.knots_y = torch.as_tensor(isotonic.y_thresholds_, dtype=torch.float64, device=graph.device)
        self.fit_info = {"knots": int(self.knots_x.numel())}
        self.eval()
        return self

    def forward(self, graph: CalibrationGraph) -> Tensor:
        probs = F.softmax(graph.logits.double(), -1)
        mapped = interpolate(probs, self.knots_x, self.knots_y) + TIE_BREAK * probs
        log_probs = mapped.log() - mapped.sum(1, keepdim=True).log()
        return keep_argmax_after_rounding(log_probs, graph.logits)
