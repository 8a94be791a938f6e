r"""Per-node values of a fitted calibrator that a results row reads twice: computed once per node set.

A row's audit columns (:meth:`simcalib.calibrators.base.Calibrator.audit`) and its feature-similarity figure
bins both read, on the test nodes:

* :math:`T_{feat,i}`, the feature-similarity temperature of a calibrator that has one (SimCalib's), from one
  forward pass of its feature GNN over all nodes;
* :math:`d_i = \min_k d(x_i, \hat\mu_k)`, the squared Mahalanobis distance of node i's hidden features to the
  nearest class prototype of the training folds (:func:`simcalib.similarity.nearest_prototype_distance`),
  for a given covariance ridge.

:class:`NodeSignals` computes each on first use and hands the same tensor to every later reader, so both
readers see the same numbers they would compute on their own.
"""

from __future__ import annotations

from functools import cached_property

import torch
from torch import Tensor

from simcalib.similarity import DEFAULT_RIDGE, nearest_prototype_distance


class NodeSignals:
    """T_feat and the nearest-prototype distance of a fitted ``calibrator`` on ``nodes`` ([n], on the
    graph's device), each computed at most once (the distance once per ridge)."""

    def __init__(self, calibrator, graph, nodes: Tensor):
        self.calibrator, self.graph, self.nodes = calibrator, graph, nodes
        self._distances: dict[float, Tensor] = {}

    @cached_property
    def feature_temperature(self) -> Tensor | None:
        """T_feat on the nodes, [n]; None for a calibrator without a feature-similarity temperature."""
        with torch.no_grad():
            t_feat = self.calibrator.nodewise_feature_temperature(self.graph)  # [N]
        return None if t_feat is None else t_feat[self.nodes.to(t_feat.device)]

    def prototype_distance(self, ridge: float = DEFAULT_RIDGE) -> Tensor:
        """:math:`\\min_k d(x_i, \\hat\\mu_k)` on the nodes, prototypes and covariance from the training folds,
        [n] float64."""
        if ridge not in self._distances:
            g = self.graph
            self._distances[ridge] = nearest_prototype_distance(g.hidden, g.labels, g.train_idx, g.num_classes,
                                                                self.nodes, ridge)
        return self._distances[ridge]


__all__ = ["NodeSignals"]
