"""Calibrators without a graph part: node i's output depends on z_i alone, so they are fitted on the
labelled nodes only.

Restricting the graph to the fit and early-stopping nodes changes nothing in the fit (every loss term is a
function of those nodes' logits) and makes each epoch's forward pass cost |labelled| rows instead of N
(Cora: 402 of 2708 nodes).
"""

from __future__ import annotations

import torch
from torch import Tensor

from simcalib.calibrators.base import CalibrationGraph, Calibrator


def labelled_subgraph(graph: CalibrationGraph, fit_idx: Tensor, stop_idx: Tensor) -> tuple[CalibrationGraph, Tensor, Tensor]:
    """(the graph restricted to ``fit_idx`` then ``stop_idx``, without edges; their new indices)."""
    nodes = torch.cat([fit_idx, stop_idx])
    new_fit = torch.arange(len(fit_idx), device=nodes.device)
    new_stop = torch.arange(len(fit_idx), len(nodes), device=nodes.device)
    no_edges = graph.edge_index.new_zeros(2, 0)
    sub = CalibrationGraph(graph.logits[nodes], None if graph.hidden is None else graph.hidden[nodes], no_edges, graph.labels[nodes],
                           new_stop, new_fit)
    return sub, new_fit, new_stop


class NodewiseCalibrator(Calibrator):
    """A :class:`Calibrator` whose ``forward`` is row by row in the logits; ``fit`` sees the labelled rows only."""

    needs_graph = False

    def fit(self, graph: CalibrationGraph, fit_idx: Tensor | None = None, stop_idx: Tensor | None = None):
        fit_idx, stop_idx = self.check_fit_nodes(graph, fit_idx, stop_idx)
        sub, sub_fit, sub_stop = labelled_subgraph(graph, fit_idx, stop_idx)
        return self.fit_labelled(sub, sub_fit, sub_stop)

    def fit_labelled(self, graph: CalibrationGraph, fit_idx: Tensor, stop_idx: Tensor):
        """Fit on a graph of labelled nodes (default: the common training rule)."""
        return super().fit(graph, fit_idx, stop_idx)
