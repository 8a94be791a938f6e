r"""One calibrator fitted on several runs of one graph at once: the runs of a split share the
graph, and a small calibrator's epoch costs less than the Python and kernel-launch overhead of running it.

A *run stack* holds R copies of one calibrator, one per run, as parameters with a leading run dimension
(TS: T [R, 1, 1]; VS: w [R, K]; CaGCN: W_1 [R, K, 16], ...). Each epoch computes every live run's loss
in one set of batched kernels; :func:`~simcalib.calibrators.training.fit_nll_grid` then applies the
protocol's training rule to each run as a unit of its own (its own Adam state, early stopping and kept
parameters: the loss terms share no parameter and Adam is element-wise), so a run's fit is the fit it gets
alone, to float rounding:

.. math::
    \mathcal L = \sum_{r \in \text{live}} \frac{1}{|F_r|} \sum_{i \in F_r} -\log \hat p^{(r)}_{i, y_i},
    \qquad \hat p^{(r)} = \text{the calibrator with run } r\text{'s parameters on run } r\text{'s logits},

with F_r run r's calibration fold (early stopping on its training folds). Initial parameters are copied from
calibrators built per run (under each run's seed), and CaGCN's dropout masks are drawn, run by run, from a
generator that starts where the global generator stood after that run's calibrator was built, with the call
``F.dropout`` makes on CPU: the masks of a lone fit. The fitted parameters are written back into the per-run
calibrators, which then predict and audit as usual.

Stacked here: TS, VS, ETS (its TS part; the simplex weights stay a per-run SLSQP), CaGCN and GATS. Every other
calibrator keeps its per-run fit (:func:`stackable`). Measured in ``reports/performance/README.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from simcalib.calibrators.base import CalibrationGraph, Calibrator
from simcalib.calibrators.cagcn import CaGCN
from simcalib.calibrators.ets import ETS
from simcalib.calibrators.gats import GATS, MIN_SCALE
from simcalib.calibrators.layers import SortedEdges, TwoLayerGCN, positive_temperature
from simcalib.calibrators.training import fit_nll_grid
from simcalib.calibrators.ts import TS
from simcalib.calibrators.vs import VS
from simcalib.errors import ConfigError


@dataclass
class PaddedNodes:
    """Per-run node sets of unequal sizes: ``index`` [R, n] padded with node 0, ``mask`` [R, n] True where real."""

    index: Tensor
    mask: Tensor

    @classmethod
    def stack(cls, node_sets: Sequence[Tensor]) -> PaddedNodes:
        width = max(len(nodes) for nodes in node_sets)
        index = torch.zeros(len(node_sets), width, dtype=torch.long, device=node_sets[0].device)
        mask = torch.zeros(len(node_sets), width, dtype=torch.bool, device=node_sets[0].device)
        for r, nodes in enumerate(node_sets):
            index[r, :len(nodes)] = nodes
            mask[r, :len(nodes)] = True
        return cls(index, mask)


@dataclass
class RunStackGraph:
    """R runs of one graph as the stacked calibrators see them."""

    logits: Tensor  # [R, N, K]
    labels: Tensor  # [R, N], HIDDEN_LABEL outside each run's labelled nodes
    edge_index: Tensor  # [2, E], shared
    fit_nodes: PaddedNodes  # each run's calibration fold
    stop_nodes: PaddedNodes  # each run's training folds (early stopping)

    @classmethod
    def from_graphs(cls, graphs: Sequence[CalibrationGraph]) -> RunStackGraph:
        first = graphs[0]
        for graph in graphs[1:]:
            if graph.logits.shape != first.logits.shape or not torch.equal(graph.edge_index, first.edge_index):
                raise ConfigError("calibrators fitted together must be runs of one graph (same nodes, classes and edges)")
        return cls(torch.stack([g.logits for g in graphs]), torch.stack([g.labels for g in graphs]), first.edge_index,
                   PaddedNodes.stack([g.cal_idx for g in graphs]), PaddedNodes.stack([g.train_idx for g in graphs]))

    @property
    def device(self) -> torch.device:
        return self.logits.device

    @property
    def num_nodes(self) -> int:
        return int(self.logits.shape[1])


def _pick(tensor: Tensor, runs: Tensor | None) -> Tensor:
    """The rows of ``runs`` (None: all) of a tensor with a leading run dimension."""
    return tensor if runs is None else tensor[runs]


class RunStack(nn.Module):
    """Base: R calibrators of one class as one module with a leading run dimension.

    Subclasses list the calibrators' parameters they stack (``PARAMETERS``: this module's name -> the
    calibrator's dotted parameter path; each becomes [R, *shape]) and define ``transform`` (log-probabilities
    of some nodes of some runs). The interface is the one :func:`fit_nll_grid` trains: one unit per run.
    """

    PARAMETERS: dict[str, str] = {}

    def __init__(self, calibrators: Sequence[Calibrator], graph: RunStackGraph):
        super().__init__()
        first = calibrators[0]
        self.calibrators = list(calibrators)  # a plain list: their parameters are not this module's
        self.graph = graph
        self.name = f"{first.name} (fitted across {len(calibrators)} runs)"
        for attribute in ("lr", "weight_decay", "max_epochs", "patience"):
            values = {getattr(c, attribute) for c in calibrators}
            if len(values) > 1:
                raise ConfigError(f"{first.name}: calibrators fitted together need one {attribute}, got {sorted(values)}")
            setattr(self, attribute, values.pop())
        for name, path in self.PARAMETERS.items():  # each run's initial values, trainable as in its calibrator
            sources = [c.get_parameter(path) for c in calibrators]
            setattr(self, name, nn.Parameter(torch.stack([p.detach() for p in sources]), sources[0].requires_grad))

    def parameter_groups(self) -> list[dict]:
        return [{"params": [p for p in self.parameters() if p.requires_grad], "weight_decay": self.weight_decay}]

    def parameter_units(self) -> dict[str, None]:
        return {name: None for name, p in self.named_parameters() if p.requires_grad}

    def unit_count(self) -> int:
        return len(self.calibrators)

    def unit_losses(self, graph: RunStackGraph, nodes: PaddedNodes, labels: Tensor, runs: Tensor | None) -> Tensor:
        """Mean NLL of each run's ``nodes``, [p], for the runs ``runs`` (None: all). Only the rows of
        ``nodes`` are turned into probabilities (a run's calibration fold is ~5% of the graph)."""
        index, mask = _pick(nodes.index, runs), _pick(nodes.mask, runs)  # [p, n]
        logits = _pick(graph.logits, runs)
        logits = logits.gather(1, index.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))  # [p, n, K]
        targets = _pick(labels, runs).gather(1, index).clamp(min=0)  # padding reads a real node, masked out below
        nll = -self.transform(logits, runs, index).gather(2, targets.unsqueeze(-1)).squeeze(-1)  # [p, n]
        return (nll * mask).sum(1) / mask.sum(1)

    def transform(self, logits: Tensor, runs: Tensor | None, index: Tensor) -> Tensor:  # pragma: no cover
        """Log-probabilities [p, n, K] of the nodes ``index`` [p, n], whose logits are ``logits`` [p, n, K]."""
        raise NotImplementedError

    def write_back(self) -> None:
        """Copy each run's parameters into its calibrator."""
        for r, calibrator in enumerate(self.calibrators):
            for name, path in self.PARAMETERS.items():
                calibrator.get_parameter(path).copy_(getattr(self, name)[r])

    def fit(self) -> list[dict]:
        """Train every run under the protocol's rule; write the kept parameters back; each run's fit_info."""
        infos = fit_nll_grid(self, self.graph, self.graph.fit_nodes, self.graph.stop_nodes)
        with torch.no_grad():
            self.write_back()
        for calibrator, info in zip(self.calibrators, infos):
            calibrator.fit_info = info
            calibrator.eval()
        return infos


class TemperatureStack(RunStack):
    """A stack of node-wise temperature calibrators (softmax(z_i / T_i)): subclasses define ``temperature``."""

    def temperature(self, runs: Tensor | None) -> Tensor:  # pragma: no cover - each stack defines it
        """Every node's temperature, [p, N, 1], for the runs ``runs``."""
        raise NotImplementedError

    def transform(self, logits: Tensor, runs: Tensor | None, index: Tensor) -> Tensor:
        return F.log_softmax(logits / self.temperature(runs).gather(1, index.unsqueeze(-1)), -1)


class StackedTS(RunStack):
    """TS of R runs: T [R, 1, 1]."""

    PARAMETERS = {"raw_temperature": "raw_temperature"}

    def transform(self, logits: Tensor, runs: Tensor | None, index: Tensor) -> Tensor:
        return F.log_softmax(logits / positive_temperature(_pick(self.raw_temperature, runs)), -1)  # TS's clamp


class StackedVS(RunStack):
    """VS of R runs: scale and bias [R, K]."""

    PARAMETERS = {"scale": "scale", "bias": "bias"}

    def transform(self, logits: Tensor, runs: Tensor | None, index: Tensor) -> Tensor:
        return F.log_softmax(logits * _pick(self.scale, runs).unsqueeze(1) + _pick(self.bias, runs).unsqueeze(1), -1)


class StackedCaGCN(TemperatureStack):
    r"""CaGCN of R runs: :math:`\hat A z_r` for every run from one sparse product, the two GCN layers as
    batched matrix products ([R, K, 16], [R, 16, 1]) and the second propagation of all runs' outputs side by
    side (:math:`\hat A [o_1 \dots o_R]`, one sparse product)."""

    PARAMETERS = {"weight1": "gcn.weight1", "bias1": "gcn.bias1", "weight2": "gcn.weight2", "bias2": "gcn.bias2"}

    def __init__(self, calibrators: Sequence[CaGCN], graph: RunStackGraph, generators: Sequence[torch.Generator]):
        super().__init__(calibrators, graph)
        self.dropout = calibrators[0].gcn.dropout
        if {c.gcn.dropout for c in calibrators} != {self.dropout}:
            raise ConfigError("CaGCN: calibrators fitted together need one dropout")
        self.generators = list(generators)
        runs, nodes, classes = graph.logits.shape
        propagated, self.adj = TwoLayerGCN.propagate_inputs(graph.logits.permute(1, 0, 2).reshape(nodes, runs * classes),
                                                            graph.edge_index, nodes)
        self.propagated = propagated.reshape(nodes, runs, classes).permute(1, 0, 2)  # [R, N, K]: Â z_r

    def _dropout(self, hidden: Tensor, runs: Tensor | None) -> Tensor:
        """Each run's mask from its own generator, drawn as ``F.dropout`` draws it on CPU (bernoulli_(1 - p))."""
        if not self.training or self.dropout == 0.0:
            return hidden
        keep = 1.0 - self.dropout
        which = range(len(self.generators)) if runs is None else runs.tolist()
        masks = [torch.empty(hidden.shape[1:], device=hidden.device).bernoulli_(keep, generator=self.generators[r])
                 for r in which]
        return hidden * (torch.stack(masks) / keep)

    def temperature(self, runs: Tensor | None) -> Tensor:
        """Every node's temperature, [p, N, 1] (the whole graph: dropout draws a mask for every node, as a lone
        fit does, so the stream stays the lone fit's)."""
        hidden = torch.bmm(_pick(self.propagated, runs), _pick(self.weight1, runs))  # [p, N, H]
        hidden = self._dropout(F.relu(hidden + _pick(self.bias1, runs).unsqueeze(1)), runs)
        out = torch.bmm(hidden, _pick(self.weight2, runs)).squeeze(-1)  # [p, N]
        out = self.adj.matmul(out.t().contiguous()).t() + _pick(self.bias2, runs)  # [p, N]
        return positive_temperature(1.0 / F.softplus(out.unsqueeze(-1)).clamp(min=1e-6))


class StackedGATS(TemperatureStack):
    r"""GATS of R runs: per run its own inputs (the scalings a_j depend on the run's training folds) and
    parameters (w [R, K, H]; a, :math:`\gamma`, b [R, 1]); the runs' attention computed on R disjoint copies
    of the graph (:meth:`block_edges`), so one edge softmax and one sparse product serve all of them."""

    PARAMETERS = {name: name for name in ("head_weights", "train_scale", "near_scale", "confidence_coef", "bias")}

    def __init__(self, calibrators: Sequence[GATS], graphs: Sequence[CalibrationGraph], graph: RunStackGraph):
        super().__init__(calibrators, graph)
        if len({(c.heads, c.negative_slope) for c in calibrators}) > 1:
            raise ConfigError("GATS: calibrators fitted together need one number of heads and one negative slope")
        self.negative_slope = calibrators[0].negative_slope
        inputs = [c.graph_inputs(g) for c, g in zip(calibrators, graphs)]  # each run's constants, as a lone fit's
        self.edges = inputs[0].edges  # built from the shared edge_index: the same for every run
        self._block_edges: dict[int, SortedEdges] = {}
        self.sorted_scaled_logits = torch.stack([i.sorted_scaled_logits for i in inputs])  # [R, N, K]
        self.logit_products = torch.stack([i.logit_products for i in inputs])  # [R, E']
        self.at_train = torch.stack([i.at_train for i in inputs])  # [R, N]
        self.next_to_train = torch.stack([i.next_to_train for i in inputs])  # [R, N]
        self.confidence_gap = torch.stack([i.confidence_gap for i in inputs])  # [R, N, 1]

    def block_edges(self, runs: int) -> SortedEdges:
        """The edges of ``runs`` disjoint copies of the graph (copy b's nodes are b N .. b N + N - 1): one
        sparse product and one edge softmax serve every run. Sorted as each copy's own edges, copy after copy,
        so per-edge tensors of the runs, flattened, follow its order."""
        if runs not in self._block_edges:
            edges, nodes = self.edges, self.graph.num_nodes
            one = torch.stack([edges.source, edges.target])  # [2, E']
            blocks = torch.cat([one + b * nodes for b in range(runs)], dim=1)
            self._block_edges[runs] = SortedEdges(blocks, runs * nodes)
        return self._block_edges[runs]

    def temperature(self, runs: Tensor | None) -> Tensor:
        """Every node's temperature, [p, N, 1], for the runs ``runs``: GATS.temperature on p disjoint copies."""
        scale = torch.where(_pick(self.at_train, runs), _pick(self.train_scale, runs).clamp(min=MIN_SCALE),
                            torch.where(_pick(self.next_to_train, runs), _pick(self.near_scale, runs).clamp(min=MIN_SCALE),
                                        torch.ones_like(self.bias[:1])))  # [p, N]
        p, nodes = scale.shape
        edges = self.block_edges(p)
        scale = scale.reshape(-1)  # [p N]
        source_scale = scale.index_select(0, edges.source)  # [p E']
        score = _pick(self.logit_products, runs).reshape(-1) / (scale.index_select(0, edges.target) * source_scale)
        alpha = edges.softmax(F.leaky_relu(score, self.negative_slope))  # [p E'], sums to 1 per target
        head_messages = torch.bmm(_pick(self.sorted_scaled_logits, runs), _pick(self.head_weights, runs))  # [p, N, H]
        attended = edges.weighted_sum(alpha * source_scale, head_messages.reshape(p * nodes, -1)).view(p, nodes, -1)
        confidence = _pick(self.confidence_coef, runs).unsqueeze(-1) * _pick(self.confidence_gap, runs)  # [p, N, 1]
        per_head = F.softplus(attended + confidence)  # [p, N, H]
        return positive_temperature(per_head.mean(dim=2, keepdim=True) + _pick(self.bias, runs).unsqueeze(-1))


STACKABLE = (TS, VS, ETS, CaGCN, GATS)


def stackable(kind: type[Calibrator]) -> bool:
    """Whether calibrators of class ``kind`` have a fit across runs here (the exact class: a subclass may
    change the model)."""
    return kind in STACKABLE


def generator_after_build(device: torch.device) -> torch.Generator:
    """A generator in the state of the global one (of ``device``) now: call it right after a run's calibrator
    is built under the run's seed, and it gives the stream the run's lone fit would draw from (on CPU)."""
    generator = torch.Generator(device=device)
    generator.set_state(torch.cuda.get_rng_state(device) if device.type == "cuda" else torch.get_rng_state())
    return generator


def fit_across_runs(calibrators: Sequence[Calibrator], graphs: Sequence[CalibrationGraph],
                    generators: Sequence[torch.Generator] | None = None) -> list[Calibrator]:
    """Fit ``calibrators`` (one class, one per run, built as for a lone fit) on ``graphs`` (runs of one graph,
    on one device) together; each is left fitted as its own ``fit(graph)`` would leave it, to float rounding.

    ``generators``: each run's random stream (:func:`generator_after_build`), needed by CaGCN's dropout.
    A calibrator that is not :func:`stackable` raises ConfigError (fit it alone).
    """
    if not calibrators:
        return []
    if len(calibrators) != len(graphs):
        raise ConfigError(f"{len(calibrators)} calibrators for {len(graphs)} graphs")
    kind = type(calibrators[0])
    if not stackable(kind) or any(type(c) is not kind for c in calibrators):
        raise ConfigError(f"no fit across runs for {sorted({c.name for c in calibrators})}; "
                          f"those fitted together: {', '.join(k.name for k in STACKABLE)}")
    for calibrator, graph in zip(calibrators, graphs):
        calibrator.check_fit_nodes(graph)
        calibrator.to(graph.device)
    stacked_graph = RunStackGraph.from_graphs(graphs)
    if kind is ETS:
        StackedTS([c.ts for c in calibrators], stacked_graph).fit()
        for calibrator, graph in zip(calibrators, graphs):
            calibrator.fit_weights(graph, graph.cal_idx)
        return list(calibrators)
    if kind is CaGCN:
        if generators is None or len(generators) != len(calibrators):
            raise ConfigError("CaGCN fitted across runs needs one generator per run (its dropout stream)")
        stack = StackedCaGCN(calibrators, stacked_graph, generators)
    elif kind is GATS:
        stack = StackedGATS(calibrators, graphs, stacked_graph)
    else:
        stack = (StackedTS if kind is TS else StackedVS)(calibrators, stacked_graph)
    stack.to(stacked_graph.device).fit()
    return list(calibrators)


__all__ = ["PaddedNodes", "RunStackGraph", "StackedCaGCN", "StackedGATS", "StackedTS", "StackedVS", "fit_across_runs",
           "generator_after_build", "stackable"]
