r"""Node splits under a structural distribution shift (Bazhenov et al. 2023, "Evaluating robustness and
uncertainty of graph models under structural distributional shifts").

:class:`torch_geometric.transforms.NodePropertySplit` orders the nodes by a structural property and cuts the
order: the ``id_fraction`` of nodes at one end are in-distribution (ID), the rest out-of-distribution (OOD).

* **popularity**: PageRank; ID are the most popular nodes, OOD the least.
* **locality**: personalised PageRank from the node of largest PageRank; OOD nodes are far from it.
* **density**: local clustering coefficient; OOD nodes sit in the sparsest neighbourhoods.

(With ``ascending=True``, the transform's default, the nodes with the *largest* property value come first
and so are ID; the OOD part holds the smallest values.) The transform is called with ratios
``[id_fraction, 0, 0, 0, 1 - id_fraction]`` (ID train, ID validation, ID test, OOD validation, OOD test):
its ID parts are pooled here, since the labelled folds are drawn inside the ID part by the GATS rule
(:func:`simcalib.experiment.splits.generate_split`: ``int(fold_rate * n_folds * n_c)`` ID nodes of each class,
dealt round-robin into ``n_folds`` folds; ``int(test_rate * r_c)`` of the remaining ID nodes of each class
are the ID test nodes). Every OOD node is an OOD test node; none is ever labelled, so the calibrator (fitted on
the calibration fold, the training folds' labels beside it) never sees an OOD label.

The transform draws from torch's global generator; it runs here under a forked generator seeded from
:func:`shift_seed`, so the split is a pure function of (study seed, dataset, property, split, id_fraction,
label rate) and leaves the caller's random state untouched.

Shapes:
    - **edge_index:** :math:`(2, E)`
    - **labels:** :math:`(N,)`
    - **folds, id_test, ood_test:** node indices, int64
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from simcalib.errors import ConfigError, resolve_name
from simcalib.experiment.splits import Split, generate_split
from simcalib.metrics import compute_metrics
from simcalib.seeding import derive_seed

SHIFT_PROPERTIES = ("popularity", "locality", "density")
ID_FRACTION = 0.5  # share of the nodes in distribution
SHIFT_METRICS = ("ece", "nll", "brier", "accuracy")


@dataclass(frozen=True)
class ShiftSplit:
    """The labelled folds and ID test nodes (all inside the ID part) and the OOD test nodes."""

    property: str
    id_fraction: float
    id_nodes: np.ndarray
    ood_nodes: np.ndarray
    split: Split  # folds and ID test nodes, node indices of the whole graph

    @property
    def folds(self) -> tuple[np.ndarray, ...]:
        return self.split.folds

    @property
    def id_test(self) -> np.ndarray:
        return np.sort(self.split.test)

    @property
    def ood_test(self) -> np.ndarray:
        return self.ood_nodes

    def fold_indices(self, fold: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(train, calibration, ID test, OOD test) indices when ``fold`` is the calibration fold."""
        train, cal, id_test = self.split.fold_indices(fold)
        return train, cal, id_test, self.ood_nodes


def shift_seed(study_seed: int, dataset: str, property: str, split: int, id_fraction: float, fold_rate: float,
               n_folds: int) -> int:
    """Seed of one shift split (the property order's tie-breaking and the ID folds' draw)."""
    return derive_seed("shift", study_seed, dataset, property, split, id_fraction, fold_rate, n_folds)


def property_masks(edge_index, num_nodes: int, property: str, id_fraction: float = ID_FRACTION,
                   seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(ID nodes, OOD nodes), sorted int64, from :class:`~torch_geometric.transforms.NodePropertySplit`."""
    from torch_geometric.data import Data
    from torch_geometric.transforms import NodePropertySplit

    property = resolve_name(property, SHIFT_PROPERTIES, "shift property")
    if not 0.0 < id_fraction < 1.0:
        raise ConfigError(f"id_fraction must be in (0, 1), got {id_fraction}")
    ratios = [float(id_fraction), 0.0, 0.0, 0.0, 1.0 - float(id_fraction)]
    if sum(ratios) != 1.0:  # NodePropertySplit compares the sum with 1.0 exactly
        raise ConfigError(f"id_fraction {id_fraction} and its complement do not sum to 1.0 in floating point; "
                          "give a shorter decimal such as 0.5")
    data = Data(edge_index=torch.as_tensor(edge_index).long().cpu(), num_nodes=int(num_nodes))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        data = NodePropertySplit(property, ratios)(data)
    id_mask = (data.id_train_mask | data.id_val_mask | data.id_test_mask).numpy()
    ood_mask = (data.ood_val_mask | data.ood_test_mask).numpy()
    return np.flatnonzero(id_mask).astype(np.int64), np.flatnonzero(ood_mask).astype(np.int64)


def generate_shift_split(edge_index, labels, property: str, seed: int, id_fraction: float = ID_FRACTION,
                         fold_rate: float = 0.05, n_folds: int = 3, test_rate: float = 0.85) -> ShiftSplit:
    """The ID/OOD division of ``property`` and, inside the ID part, the GATS protocol's folds and ID test nodes."""
    labels = np.asarray(labels)
    id_nodes, ood_nodes = property_masks(edge_index, len(labels), property, id_fraction, seed)
    inner = generate_split(labels[id_nodes], derive_seed("shift-folds", seed), fold_rate, n_folds, test_rate)
    split = Split(folds=tuple(id_nodes[f] for f in inner.folds), test=id_nodes[inner.test],
                  source=f"generated(shift={property},id_fraction={id_fraction:g},seed={seed})")
    return ShiftSplit(resolve_name(property, SHIFT_PROPERTIES, "shift property"), float(id_fraction), id_nodes,
                      ood_nodes, split)


def shift_metrics(probs, labels, id_test, ood_test, metrics=SHIFT_METRICS) -> dict[str, float]:
    """``id_<metric>`` and ``ood_<metric>`` (ECE and accuracy in percent, as the results table) of ``probs``
    ``[N, C]`` over every node, on the ID and the OOD test nodes, and ``ood_minus_id_<metric>``."""
    probs = torch.as_tensor(probs).detach().cpu()
    labels = torch.as_tensor(labels).detach().cpu().long()
    columns: dict[str, float] = {}
    for part, nodes in (("id", id_test), ("ood", ood_test)):
        nodes = torch.as_tensor(nodes).detach().cpu().long()
        if len(nodes) == 0:
            raise ConfigError(f"no {part.upper()} test nodes: check the shift split's id_fraction")
        values = compute_metrics(probs[nodes], labels[nodes])
        columns.update({f"{part}_{m}": values[m] for m in metrics})
    columns.update({f"ood_minus_id_{m}": columns[f"ood_{m}"] - columns[f"id_{m}"] for m in metrics})
    return columns


__all__ = ["ID_FRACTION", "SHIFT_PROPERTIES", "ShiftSplit", "generate_shift_split", "property_masks", "shift_metrics",
           "shift_seed"]
