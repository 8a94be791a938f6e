"""The eight benchmark datasets, mapped onto torch_geometric's own dataset classes."""

from __future__ import annotations

from dataclasses import dataclass

from simcalib.errors import resolve_name


@dataclass(frozen=True)
class DatasetSpec:
    """How one benchmark graph is obtained from torch_geometric.

    ``raw_subdir`` is the raw folder relative to the torch_geometric root (the same relative path is
    looked up in a mirror), ``raw_files`` the files torch_geometric expects there.
    """

    name: str  # canonical name, as the paper's tables and the GATS split folders spell it
    pyg_class: str  # "Planetoid", "CoraFull", "Amazon" or "Coauthor"
    pyg_name: str | None  # the class's ``name`` argument (None for CoraFull)
    raw_subdir: str
    raw_files: tuple[str, ...]
    backbone_weight_decay: float  # GATS protocol: 5e-4 on the Planetoid graphs, 0 elsewhere
    # Statistics as torch_geometric counts them (README of shared/), checked after loading.
    num_nodes: int
    num_classes: int


def _planetoid(name: str, pyg_name: str, nodes: int, classes: int) -> DatasetSpec:
    stem = pyg_name.lower()
    files = tuple(f"ind.{stem}.{ext}" for ext in ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index"))
    return DatasetSpec(name, "Planetoid", pyg_name, f"{pyg_name}/raw", files, 5e-4, nodes, classes)


DATASETS: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in (
        _planetoid("Cora", "Cora", 2708, 7),
        _planetoid("Citeseer", "CiteSeer", 3327, 6),
        _planetoid("Pubmed", "PubMed", 19717, 3),
        DatasetSpec("CoraFull", "CoraFull", None, "cora/raw", ("cora.npz",), 0.0, 19793, 70),
        DatasetSpec("Computers", "Amazon", "Computers", "Computers/raw", ("amazon_electronics_computers.npz",), 0.0, 13752, 10),
        DatasetSpec("Photo", "Amazon", "Photo", "Photo/raw", ("amazon_electronics_photo.npz",), 0.0, 7650, 8),
        DatasetSpec("CS", "Coauthor", "CS", "CS/raw", ("ms_academic_cs.npz",), 0.0, 18333, 15),
        DatasetSpec("Physics", "Coauthor", "Physics", "Physics/raw", ("ms_academic_phy.npz",), 0.0, 34493, 5),
    )
}


def dataset_names() -> list[str]:
    return list(DATASETS)


def get_spec(name: str) -> DatasetSpec:
    """The spec of ``name`` (case-insensitive; ``CiteSeer`` and ``PubMed`` are accepted too)."""
    aliases = {"citeseer": "Citeseer", "pubmed": "Pubmed", "cora_full": "CoraFull", "corafull": "CoraFull"}
    key = aliases.get(str(name).strip().lower(), name)
    return DATASETS[resolve_name(key, DATASETS, "dataset")]
