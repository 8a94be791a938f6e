"""The benchmark datasets, mapped onto torch_geometric's own dataset classes.

The eight homophilous graphs of the paper, and eight heterophilous graphs: Actor (``Actor``), minesweeper,
tolokers, roman_empire, amazon_ratings, questions (``HeterophilousGraphDataset``) and chameleon_filtered,
squirrel_filtered (:class:`simcalib.data.filtered.FilteredWikipediaNetwork`, the same npz format).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from simcalib.errors import UnknownNameError, resolve_name


@dataclass(frozen=True)
class DatasetSpec:
    """How one benchmark graph is obtained from torch_geometric.

    ``raw_subdir`` is the raw folder relative to the torch_geometric root (the same relative path is
    looked up in a mirror), ``raw_files`` the files torch_geometric expects there.
    """

    name: str  # canonical name, as the paper's tables and the GATS split folders spell it
    pyg_class: str  # a torch_geometric dataset class, or "FilteredWikipediaNetwork" (simcalib.data.filtered)
    pyg_name: str | None  # the class's ``name`` argument (None for CoraFull)
    raw_subdir: str
    raw_files: tuple[str, ...]
    backbone_weight_decay: float  # GATS protocol: 5e-4 on the Planetoid graphs, 0 elsewhere
    # Statistics as torch_geometric counts them (README of shared/), checked after loading.
    num_nodes: int
    num_classes: int
    # The heterophilous graphs: processed into a simple undirected graph (both directions of each edge, no
    # self-loops, no duplicates) with ``features`` "row" (NormalizeFeatures) or "raw" (as in the file);
    # ``num_edges``: undirected edges expected after processing (checked after loading), None: not checked.
    simple_graph: bool = False
    features: str = "row"
    num_edges: int | None = None
    root_subdir: str | None = None  # torch_geometric root below the data root (Actor reads <root>/raw)
    npz_keys: tuple[str, ...] = ()  # arrays a raw npz of this format must hold (empty: the gnn-benchmark keys)
    own_splits: bool = False  # the dataset ships fixed splits (train/val/test masks [N, S]) of its own
    external: str | None = None  # a graph from another package: its ``module:function`` (simcalib.data.external)

    @property
    def heterophilous(self) -> bool:
        return self.simple_graph


def _planetoid(name: str, pyg_name: str, nodes: int, classes: int) -> DatasetSpec:
    stem = pyg_name.lower()
    files = tuple(f"ind.{stem}.{ext}" for ext in ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index"))
    return DatasetSpec(name, "Planetoid", pyg_name, f"{pyg_name}/raw", files, 5e-4, nodes, classes)


HETEROPHILOUS_NPZ_KEYS = ("node_features", "node_labels", "edges", "train_masks", "val_masks", "test_masks")


def _heterophilous(name: str, pyg_class: str, nodes: int, classes: int, edges: int, features: str) -> DatasetSpec:
    """A graph in the npz format of Platonov et al. (``<name>/raw/<name>.npz``), weight decay 0 (GATS: not a
    Planetoid graph)."""
    return DatasetSpec(name, pyg_class, name, f"{name}/raw", (f"{name}.npz",), 0.0, nodes, classes, simple_graph=True,
                       features=features, num_edges=edges, npz_keys=HETEROPHILOUS_NPZ_KEYS, own_splits=True)


_ACTOR_FILES = ("out1_node_feature_label.txt", "out1_graph_edges.txt",
                *(f"film_split_0.6_0.2_{i}.npz" for i in range(10)))

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
        DatasetSpec("Actor", "Actor", None, "Actor/raw", _ACTOR_FILES, 0.0, 7600, 5, simple_graph=True, features="row",
                    num_edges=26659, root_subdir="Actor", npz_keys=("train_mask", "val_mask", "test_mask"),
                    own_splits=True),
        _heterophilous("chameleon_filtered", "FilteredWikipediaNetwork", 890, 5, 8854, "row"),
        _heterophilous("squirrel_filtered", "FilteredWikipediaNetwork", 2223, 5, 46998, "row"),
        _heterophilous("minesweeper", "HeterophilousGraphDataset", 10000, 2, 39402, "raw"),
        _heterophilous("tolokers", "HeterophilousGraphDataset", 11758, 2, 519000, "raw"),
        _heterophilous("roman_empire", "HeterophilousGraphDataset", 22662, 18, 32927, "raw"),
        _heterophilous("amazon_ratings", "HeterophilousGraphDataset", 24492, 5, 93050, "raw"),
        _heterophilous("questions", "HeterophilousGraphDataset", 48921, 2, 153540, "raw"),
    )
}


def dataset_names() -> list[str]:
    """The built-in datasets (graphs from other packages are named, not listed)."""
    return [name for name, spec in DATASETS.items() if spec.external is None]


def heterophilous_names() -> list[str]:
    return [name for name, spec in DATASETS.items() if spec.heterophilous]


# Where a name that is not built in is looked up next: other packages' graphs (simcalib.data sets it to
# simcalib.data.external.register_external_dataset; the registry does not import that module, which imports it).
_external_resolver: Callable[[str], DatasetSpec] | None = None


def set_external_resolver(resolver: Callable[[str], DatasetSpec]) -> None:
    """``resolver(name)``: the registered spec of a graph from another package, or an error naming the problem."""
    global _external_resolver
    _external_resolver = resolver


def get_spec(name: str) -> DatasetSpec:
    """The spec of ``name`` (case-insensitive; ``CiteSeer`` and ``PubMed`` are accepted too); a name not built in
    is looked up among other packages' graphs (entry points of group ``simcalib.datasets``,
    ``package.module:function``: :mod:`simcalib.data.external`), registered when found."""
    aliases = {"citeseer": "Citeseer", "pubmed": "Pubmed", "cora_full": "CoraFull", "corafull": "CoraFull",
               "film": "Actor", **{n.lower(): n for n in DATASETS},
               **{n.replace("_", "-"): n for n in DATASETS if "_" in n}}  # "roman-empire", "Amazon-ratings" ...
    key = aliases.get(str(name).strip().lower(), name)
    try:
        return DATASETS[resolve_name(key, DATASETS, "dataset")]
    except UnknownNameError:
        if _external_resolver is None:
            raise
        return _external_resolver(str(name))
