r"""Split-conformal prediction sets from a calibrator's probabilities.

A non-conformity score :math:`s(v, y)` rates how unusual label :math:`y` is for node :math:`v` under the
calibrated probabilities :math:`\pi_v`. Given the scores of :math:`n` labelled *quantile nodes* at their true
labels, the split-conformal threshold is the finite-sample quantile

.. math::
    \hat q = s_{(k)}, \qquad k = \left\lceil (n + 1)(1 - \alpha) \right\rceil

(the :math:`k`-th smallest score, i.e. the empirical quantile at level :math:`\lceil (n+1)(1-\alpha)\rceil / n`;
:math:`\hat q = +\infty` when :math:`k > n`), and the prediction set of a test node is

.. math::
    C(v) = \{\, y : s(v, y) \le \hat q \,\}.

When the quantile nodes and the test nodes are exchangeable, :math:`P(y_v \in C(v)) \ge 1 - \alpha`
(Vovk et al. 2005; Lei et al. 2018), with :math:`P \le 1 - \alpha + 1/(n+1)` for continuous scores.

Scores (``S`` below is the ``[N, C]`` matrix of every node's score for every label):

* **APS** (Romano et al., NeurIPS 2020). With :math:`\pi_{(1)} \ge \pi_{(2)} \ge \dots` the sorted
  probabilities of node :math:`v` and :math:`r(y)` the rank of label :math:`y`,

  .. math::
      s(v, y) = \sum_{j=1}^{r(y)} \pi_{(j)} - u_{v,y}\, \pi_y,

  with :math:`u_{v,y} \sim U(0, 1)` (randomised) or :math:`u = 0` (not randomised: the mass up to and
  including :math:`y`).
* **RAPS** (Angelopoulos et al., ICLR 2021): APS plus a rank penalty,
  :math:`s(v, y) = s_{\mathrm{APS}}(v, y) + \lambda \, (r(y) - k_{\mathrm{reg}})^{+}`.
* **DAPS** (Zargarbashi et al., ICML 2023, "Conformal prediction sets for graph neural networks"): the APS
  scores diffused once over the graph,

  .. math::
      \hat S = (1 - \lambda)\, S + \lambda\, D^{-1} A\, S,

  where :math:`A_{vu}` counts the edges :math:`u \to v` of ``edge_index`` (source to target, as
  torch_geometric's message passing reads it) and :math:`D` is the in-degree. A node without incoming
  edges keeps its own score (:math:`\hat S_v = S_v`). The diffusion reads no label, so a random split of
  quantile and test nodes stays exchangeable.

The random draws :math:`u` are made once per (node, label) for the whole graph from a seeded generator, so
every calibrator of a run meets the same draws and DAPS diffuses the very APS scores the APS sets use.

Shapes:
    - **probs:** :math:`(N, C)` probabilities (rows sum to 1), every node of the graph
    - **edge_index:** :math:`(2, E)` (DAPS only)
    - **scores:** :math:`(N, C)`
    - **sets:** :math:`(M, C)` boolean, one row per test node
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import torch
from torch import Tensor

from simcalib.errors import ConfigError, resolve_name
from simcalib.seeding import derive_seed

SCORES = ("APS", "RAPS", "DAPS")
ALPHAS = (0.1, 0.05)
RAPS_PENALTY = 0.01  # lambda of RAPS
RAPS_K_REG = 2  # k_reg of RAPS: sets up to this size are not penalised
DAPS_DIFFUSION = 0.5  # lambda of DAPS (torchcp's default neigh_coef)
QUANTILE_FRACTION = 0.5  # share of the calibration fold that sets the conformal quantile


def _probabilities(probs) -> Tensor:
    probs = torch.as_tensor(probs).detach().cpu()  # small [N, C] work: on the CPU, where the draws are made
    if probs.dim() != 2 or probs.shape[1] < 2:
        raise ConfigError(f"probabilities must be an [N, C] matrix with C >= 2, got shape {tuple(probs.shape)}")
    probs = probs.double()
    if not torch.isfinite(probs).all():
        raise ConfigError("probabilities contain NaN or infinite values; check the calibrator's output")
    return probs


def _uniform(shape: tuple[int, int], randomised: bool, seed: int | None) -> Tensor:
    if not randomised:
        return torch.zeros(shape, dtype=torch.float64)
    if seed is None:
        raise ConfigError("randomised scores need a seed (pass seed=..., or randomised=False)")
    generator = torch.Generator().manual_seed(int(seed))
    return torch.rand(shape, generator=generator, dtype=torch.float64)


def aps_scores(probs, randomised: bool = True, seed: int | None = None) -> Tensor:
    """APS scores of every label of every node: :math:`\\sum_{j \\le r(y)} \\pi_{(j)} - u \\pi_y`. ``[N, C]``."""
    probs = _probabilities(probs)
    ordered, order = torch.sort(probs, dim=1, descending=True, stable=True)
    inclusive = torch.cumsum(ordered, dim=1)
    scores = torch.empty_like(probs).scatter_(1, order, inclusive)  # back to label order
    return scores - _uniform(tuple(probs.shape), randomised, seed) * probs


def label_ranks(probs) -> Tensor:
    """The 1-based rank :math:`r(y)` of every label of every node (1: the most probable). ``[N, C]`` int64."""
    probs = _probabilities(probs)
    _, order = torch.sort(probs, dim=1, descending=True, stable=True)
    ranks = torch.arange(1, probs.shape[1] + 1).expand_as(order).contiguous()
    return torch.empty_like(order).scatter_(1, order, ranks)


def raps_scores(probs, penalty: float = RAPS_PENALTY, k_reg: int = RAPS_K_REG, randomised: bool = True,
                seed: int | None = None) -> Tensor:
    """RAPS scores: APS plus :math:`\\lambda (r(y) - k_{reg})^+`. ``[N, C]``."""
    if penalty < 0 or int(k_reg) != k_reg or k_reg < 0:
        raise ConfigError(f"RAPS needs penalty >= 0 and an integer k_reg >= 0, got penalty={penalty}, k_reg={k_reg}")
    return aps_scores(probs, randomised, seed) + penalty * (label_ranks(probs) - int(k_reg)).clamp(min=0).double()


def diffuse_scores(scores, edge_index, diffusion: float = DAPS_DIFFUSION) -> Tensor:
    """DAPS's diffusion :math:`(1 - \\lambda) S + \\lambda D^{-1} A S` (nodes without incoming edges keep
    :math:`S_v`). ``scores``: ``[N, C]``; ``edge_index``: ``[2, E]`` over the same ``N`` nodes."""
    if not 0.0 <= diffusion <= 1.0:
        raise ConfigError(f"DAPS's diffusion lambda must be in [0, 1], got {diffusion}")
    scores = torch.as_tensor(scores).detach().cpu().double()
    edge_index = torch.as_tensor(edge_index).long().cpu()
    n = scores.shape[0]
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ConfigError(f"edge_index must be [2, E], got shape {tuple(edge_index.shape)}")
    if edge_index.numel() and (edge_index.min() < 0 or edge_index.max() >= n):
        raise ConfigError(f"edge_index names nodes outside 0..{n - 1}: it belongs to another graph")
    source, target = edge_index
    total = torch.zeros_like(scores).index_add_(0, target, scores[source])
    degree = torch.zeros(n, dtype=torch.float64).index_add_(0, target, torch.ones(len(target), dtype=torch.float64))
    mean = torch.where(degree[:, None] > 0, total / degree.clamp(min=1)[:, None], scores)
    return (1.0 - diffusion) * scores + diffusion * mean


def conformal_scores(probs, score: str = "APS", edge_index=None, seed: int | None = None, randomised: bool = True,
                     penalty: float = RAPS_PENALTY, k_reg: int = RAPS_K_REG,
                     diffusion: float = DAPS_DIFFUSION) -> Tensor:
    """The ``[N, C]`` score matrix of ``score`` (APS, RAPS or DAPS; DAPS needs ``edge_index``)."""
    score = resolve_name(score, SCORES, "conformal score")
    if score == "APS":
        return aps_scores(probs, randomised, seed)
    if score == "RAPS":
        return raps_scores(probs, penalty, k_reg, randomised, seed)
    if edge_index is None:
        raise ConfigError("DAPS diffuses scores over the graph: pass edge_index")
    return diffuse_scores(aps_scores(probs, randomised, seed), edge_index, diffusion)


def quantile_rank(n: int, alpha: float) -> int:
    """:math:`k = \\lceil (n + 1)(1 - \\alpha) \\rceil`, computed exactly from ``alpha``'s decimal form (so that
    ``n = 99, alpha = 0.1`` gives 90, not the 91 of float rounding)."""
    if not 0.0 < alpha < 1.0:
        raise ConfigError(f"alpha must be in (0, 1), got {alpha}")
    if n < 1:
        raise ConfigError("the conformal quantile needs at least one quantile node")
    return math.ceil((n + 1) * (1 - Fraction(repr(float(alpha)))))


def conformal_quantile(cal_scores, alpha: float) -> float:
    """:math:`\\hat q`: the :math:`\\lceil (n+1)(1-\\alpha) \\rceil`-th smallest of the ``[n]`` scores of the
    quantile nodes at their true labels (``inf`` when that rank exceeds ``n``)."""
    values = torch.as_tensor(cal_scores).double().flatten()
    k = quantile_rank(len(values), alpha)
    if k > len(values):
        return math.inf
    return float(torch.sort(values).values[k - 1])


def prediction_sets(scores, threshold: float) -> Tensor:
    """:math:`C(v) = \\{y : s(v, y) \\le \\hat q\\}` for every row of ``scores`` (``[M, C]`` -> ``[M, C]`` bool)."""
    return torch.as_tensor(scores) <= threshold


def set_metrics(sets, labels) -> dict[str, float]:
    """Coverage :math:`P(y \\in C)`, mean set size, singleton-hit rate :math:`P(|C| = 1, y \\in C)` and the empty
    rate :math:`P(|C| = 0)` of ``sets`` ``[M, C]`` bool at true ``labels`` ``[M]``."""
    sets = torch.as_tensor(sets).detach().cpu().bool()
    labels = torch.as_tensor(labels).detach().cpu().long()
    if sets.dim() != 2 or labels.shape != (sets.shape[0],) or len(labels) == 0:
        raise ConfigError(f"sets [M, C] and labels [M] do not match: {tuple(sets.shape)} vs {tuple(labels.shape)}")
    covered = sets[torch.arange(len(labels)), labels]
    size = sets.sum(dim=1)
    return {"coverage": float(covered.double().mean()), "set_size": float(size.double().mean()),
            "singleton_hit": float((covered & (size == 1)).double().mean()),
            "empty": float((size == 0).double().mean())}


@dataclass(frozen=True)
class ConformalResult:
    """The threshold, the test nodes' sets and their metrics at one ``alpha``."""

    alpha: float
    threshold: float
    sets: Tensor  # [M, C] bool, rows in the order of test_idx
    metrics: dict[str, float]


def split_conformal(scores, labels, quantile_idx, test_idx, alpha: float) -> ConformalResult:
    """Split-conformal sets of ``test_idx`` with the threshold from ``quantile_idx``'s scores at their labels.

    ``scores``: ``[N, C]`` over every node; ``labels``: ``[N]`` (read at ``quantile_idx`` for the threshold and
    at ``test_idx`` for the metrics). Quantile nodes that are also test nodes are refused: the threshold
    would then read the test labels.
    """
    scores = torch.as_tensor(scores).detach().cpu()
    labels = torch.as_tensor(labels).detach().cpu().long()
    quantile_idx = torch.as_tensor(quantile_idx).detach().cpu().long()
    test_idx = torch.as_tensor(test_idx).detach().cpu().long()
    overlap = np.intersect1d(quantile_idx.numpy(), test_idx.numpy())
    if len(overlap):
        raise ConfigError(f"{len(overlap)} quantile node(s) are also test nodes (e.g. node {int(overlap[0])}): the "
                          "conformal quantile would read test labels; take the quantile nodes from the calibration fold")
    threshold = conformal_quantile(scores[quantile_idx, labels[quantile_idx]], alpha)
    sets = prediction_sets(scores[test_idx], threshold)
    return ConformalResult(alpha, threshold, sets, set_metrics(sets, labels[test_idx]))


def conformal_split(cal_idx, labels, seed: int, quantile_fraction: float = QUANTILE_FRACTION
                    ) -> tuple[np.ndarray, np.ndarray]:
    """(fit part, quantile part) of the calibration fold ``cal_idx``: ``round(quantile_fraction * n_c)`` of the
    calibration nodes of each class ``c`` (drawn from ``seed``) set the conformal quantile, the others fit
    the calibrator. Both sorted int64; a pure function of its arguments."""
    if not 0.0 < quantile_fraction < 1.0:
        raise ConfigError(f"quantile_fraction must be in (0, 1), got {quantile_fraction}")
    cal_idx = np.sort(np.asarray(cal_idx, dtype=np.int64))
    cal_labels = np.asarray(labels)[cal_idx]
    rng = np.random.default_rng(seed)
    quantile = []
    for c in np.unique(cal_labels):
        members = cal_idx[cal_labels == c]
        quantile.append(rng.choice(members, int(np.floor(quantile_fraction * len(members) + 0.5)), replace=False))
    quantile = np.sort(np.concatenate(quantile)).astype(np.int64)
    fit = np.setdiff1d(cal_idx, quantile).astype(np.int64)
    if len(fit) == 0 or len(quantile) == 0:
        raise ConfigError(f"a calibration fold of {len(cal_idx)} nodes leaves an empty part at quantile_fraction "
                          f"{quantile_fraction}; use a fraction nearer 0.5 or a larger label rate")
    return fit, quantile


def conformal_split_seed(run_seed: int, quantile_fraction: float = QUANTILE_FRACTION) -> int:
    """Seed of a run's calibration-fold division, from the run's seed (itself from the study seed and the run)."""
    return derive_seed("conformal-split", run_seed, quantile_fraction)


def conformal_scores_seed(run_seed: int) -> int:
    """Seed of a run's randomised-score draws (the same draws for every calibrator of the run)."""
    return derive_seed("conformal-scores", run_seed)


def conformal_metrics(probs, labels, quantile_idx, test_idx, edge_index=None, alphas: Sequence[float] = ALPHAS,
                      scores: Sequence[str] = SCORES, seed: int | None = None, randomised: bool = True,
                      penalty: float = RAPS_PENALTY, k_reg: int = RAPS_K_REG,
                      diffusion: float = DAPS_DIFFUSION) -> dict[str, float]:
    """Flat result columns ``<score>_<metric>@<alpha>`` (e.g. ``APS_coverage@0.1``, ``DAPS_set_size@0.05``) of
    every score and ``alpha``, from the probabilities ``[N, C]`` of every node of the graph."""
    columns: dict[str, float] = {}
    for name in scores:
        matrix = conformal_scores(probs, name, edge_index, seed, randomised, penalty, k_reg, diffusion)
        canonical = resolve_name(name, SCORES, "conformal score")
        for alpha in alphas:
            result = split_conformal(matrix, labels, quantile_idx, test_idx, alpha)
            columns.update({f"{canonical}_{key}@{alpha:g}": value for key, value in result.metrics.items()})
            columns[f"{canonical}_threshold@{alpha:g}"] = result.threshold
    return columns


__all__ = [
    "ALPHAS", "SCORES", "ConformalResult", "aps_scores", "conformal_metrics", "conformal_quantile", "conformal_scores",
    "conformal_scores_seed", "conformal_split", "conformal_split_seed", "diffuse_scores", "label_ranks",
    "prediction_sets", "quantile_rank", "raps_scores", "set_metrics", "split_conformal",
]
