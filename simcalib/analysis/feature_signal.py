r"""How much a distance-aware temperature can gain: temperature-scaling oracles on the feature distance.

SimCalib's feature branch sets a node's temperature from its similarity to the class prototypes. Before asking
whether its GNN learns that, this module measures whether the signal is there at all, with no GNN: for
:math:`d_i = \min_k d(x_i, \hat\mu_k)` (squared Mahalanobis distance to the nearest prototype of the training
folds, :func:`simcalib.similarity.nearest_prototype_distance`), three temperature maps are fitted by the NLL of
:math:`\mathrm{softmax}(z_i / T_i)` on a set of labelled nodes:

* ``global``: one temperature, :math:`T_i = T` (temperature scaling);
* ``quintile``: one temperature per distance quintile, :math:`T_i = T_{q(i)}` (quintile edges from the
  distances of all nodes, which need no label);
* ``loglinear``: :math:`\log T_i = a + b\,(\log d_i - \overline{\log d})`, two parameters: the smooth,
  low-capacity form (five free temperatures on a fold of ~100-300 nodes can overfit).

Each map is scored (NLL and ECE) on nodes it was not fitted on: the training folds (the protocol's
early-stopping set) and the other half of the calibration fold (``crossfit``: fitted on one per-class half,
scored on the other, both ways). Test nodes are scored too, as hindsight only: nothing is chosen on them.
A map that beats ``global`` on held-out labelled nodes bounds from below what any distance-aware temperature,
SimCalib's G_feat included, can gain on that benchmark.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from simcalib.calibrators.training import shuffled_by_class
from simcalib.calibrators.ts import fit_log_temperature
from simcalib.metrics import ece

MAPS = ("global", "quintile", "loglinear")
QUINTILES = 5
# T_feat counts as node-wise in a run when its coefficient of variation over the test nodes reaches this: a
# tenth of the spread of the per-quintile oracle temperatures (ratio largest/smallest 1.5-4 on the benchmarks,
# docs/decisions.md); the constant branch measures 0.000-0.002 on the real benchmarks.
MIN_NODEWISE_CV = 0.05


def distance_groups(distance: Tensor, groups: int = QUINTILES) -> Tensor:
    """The quantile group (0 = nearest) of every node's distance, [N] int64; edges from all nodes' distances."""
    edges = torch.quantile(distance.double(), torch.linspace(0, 1, groups + 1, dtype=torch.float64)[1:-1])
    return torch.bucketize(distance.double(), edges)


def _log_temperature(kind: str, params: Tensor, group: Tensor, log_distance: Tensor) -> Tensor:
    if kind == "global":
        return params[0].expand_as(log_distance)
    if kind == "quintile":
        return params[group]
    return params[0] + params[1] * log_distance  # loglinear


def fit_temperature_map(kind: str, logits: Tensor, labels: Tensor, group: Tensor, log_distance: Tensor) -> Tensor:
    """Parameters of the ``kind`` map minimising the NLL of ``softmax(logits / T)`` on the given nodes (L-BFGS,
    :func:`simcalib.calibrators.ts.fit_log_temperature`)."""
    size = {"global": 1, "quintile": QUINTILES, "loglinear": 2}[kind]
    return fit_log_temperature(  # log T: [n] -> [n, 1]
        logits, labels, torch.zeros(size, dtype=torch.float64),
        lambda params: _log_temperature(kind, params, group, log_distance).clamp(-6, 6)[:, None], max_iter=200)


def temperatures(kind: str, params: Tensor, group: Tensor, log_distance: Tensor) -> Tensor:
    return _log_temperature(kind, params, group, log_distance).clamp(-6, 6).exp()


def _scores(logits: Tensor, labels: Tensor, t: Tensor) -> tuple[float, float]:
    log_probs = F.log_softmax(logits.double() / t[:, None], dim=1)
    nll = float(F.nll_loss(log_probs, labels))
    return nll, ece(log_probs.exp().numpy(), labels.numpy())


def per_class_halves(labels: Tensor, seed: int) -> tuple[Tensor, Tensor]:
    """Positions 0..n-1 split into two halves per class (the shuffle of
    :func:`simcalib.calibrators.training.shuffled_by_class`); of a class's shuffled members, the first half
    takes the first floor(n/2), the second half the rest."""
    groups = shuffled_by_class(torch.arange(len(labels)), labels, seed)
    return torch.cat([g[: len(g) // 2] for g in groups]), torch.cat([g[len(g) // 2:] for g in groups])


def oracle_scores(logits: Tensor, labels: Tensor, distance: Tensor, train_idx: Tensor, cal_idx: Tensor,
                  test_idx: Tensor, seed: int = 0) -> list[dict]:
    """Every map's held-out scores on one run. ``labels`` must be known on ``test_idx`` only for the hindsight
    scores. Returns one dict per map: ``kind``, NLL/ECE on the training folds (fitted on the calibration fold),
    on the calibration fold by cross-fitting, on the test nodes (hindsight), and the fitted temperatures'
    ratio of largest to smallest over the test nodes."""
    logits, labels = logits.detach().cpu().float(), labels.detach().cpu().long()
    distance = distance.detach().cpu().double()
    group = distance_groups(distance)
    log_d = distance.clamp(min=1e-12).log()
    log_d = log_d - log_d.mean()
    rows = []
    half_a, half_b = per_class_halves(labels[cal_idx], seed)
    for kind in MAPS:
        params = fit_temperature_map(kind, logits[cal_idx], labels[cal_idx], group[cal_idx], log_d[cal_idx])
        t_all = temperatures(kind, params, group, log_d)
        train_nll, train_ece = _scores(logits[train_idx], labels[train_idx], t_all[train_idx])
        test_nll, test_ece = _scores(logits[test_idx], labels[test_idx], t_all[test_idx])
        crossfit_nll, crossfit_ece = [], []
        for fit_part, score_part in ((half_a, half_b), (half_b, half_a)):
            fit_nodes, score_nodes = cal_idx[fit_part], cal_idx[score_part]
            p = fit_temperature_map(kind, logits[fit_nodes], labels[fit_nodes], group[fit_nodes], log_d[fit_nodes])
            nll_value, ece_value = _scores(logits[score_nodes], labels[score_nodes],
                                           temperatures(kind, p, group, log_d)[score_nodes])
            crossfit_nll.append(nll_value)
            crossfit_ece.append(ece_value)
        t_test = t_all[test_idx]
        rows.append({"map": kind, "train_nll": train_nll, "train_ece": train_ece,
                     "crossfit_nll": float(np.mean(crossfit_nll)), "crossfit_ece": float(np.mean(crossfit_ece)),
                     "test_nll": test_nll, "test_ece": test_ece,
                     "t_ratio": float(t_test.max() / t_test.min()),
                     "slope": float(params[1]) if kind == "loglinear" else None})
    return rows


__all__ = ["MAPS", "MIN_NODEWISE_CV", "distance_groups", "fit_temperature_map", "oracle_scores", "per_class_halves", "temperatures"]
