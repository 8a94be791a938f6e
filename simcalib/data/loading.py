"""Loading a benchmark graph: data root, offline mirror, checksums, clear errors.

Order of sources: the processed or raw files already in the data root; else the raw files of a mirror
(``SIMCALIB_DATA_MIRROR`` or the ``mirror`` argument, in the raw layout of torch_geometric), copied into
the root and verified against the mirror's ``SHA256SUMS`` when it has one; else a download through
torch_geometric's own class (:func:`simcalib.data.download.download_raw_files`: checked against the pinned
digest, or recorded in ``<root>/SHA256SUMS``, before anything is parsed). Raw files listed in that record are
checked against it whenever they are processed. Features are row-normalised (``NormalizeFeatures``) and stored as a sparse CSR matrix by a
``pre_transform``, so the bag-of-words graphs (CoraFull, CS, Physics: 6.8k to 8.7k features) are never held
dense after their one-off processing.

The heterophilous graphs (``DatasetSpec.simple_graph``) are processed by another ``pre_transform`` into a
simple undirected graph: both directions of every edge, self-loops removed, duplicate edges merged (Actor's
raw edge list is directed and has self-loops); their features are row-normalised (the binary bag-of-words
graphs Actor, chameleon_filtered, squirrel_filtered) or kept as they are (``features = "raw"``: minesweeper's
one-hot rows, tolokers' values in [0, 1], the word embeddings of the others). Their own fixed splits
(``train_mask`` / ``val_mask`` / ``test_mask`` [N, S]) come with the graph in ``GraphData.fixed_masks``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import warnings
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from simcalib.data.download import download_raw_files, sha256, verify_raw_files
from simcalib.data.registry import DatasetSpec, get_spec
from simcalib.errors import DataCorruptError, DataMissingError

ROOT_ENV = "SIMCALIB_DATA_ROOT"
MIRROR_ENV = "SIMCALIB_DATA_MIRROR"
OFFLINE_ENV = "SIMCALIB_OFFLINE"
DEFAULT_ROOT = "data"


@dataclass
class GraphData:
    """A benchmark graph ready for training: sparse CSR features, edge_index, labels."""

    name: str
    x: torch.Tensor  # [N, F] float32, sparse CSR (row-normalised)
    edge_index: torch.Tensor  # [2, E] int64, both directions of every undirected edge
    y: torch.Tensor  # [N] int64
    num_classes: int
    source: str  # where the raw files came from: "root", "mirror <path>" or "download"
    # the dataset's own fixed splits, (train, val, test) boolean masks, each [N, S]; None: it ships none
    fixed_masks: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    @property
    def num_nodes(self) -> int:
        return int(self.y.numel())

    @property
    def num_features(self) -> int:
        return int(self.x.shape[1])

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.shape[1])


# The graphs from other packages, checked and processed once per process (simcalib.data.external): name -> graph.
EXTERNAL_GRAPHS: dict[str, GraphData] = {}


def graph_digest(graph: GraphData) -> str:
    """16 hex digits of SHA-256 over the processed graph (CSR features, edges, labels), bit-exact: the same
    dataset processed by another torch_geometric version or from other raw files shows as another digest."""
    digest = hashlib.sha256()
    x = graph.x if graph.x.layout == torch.sparse_csr else graph.x.to_sparse_csr()
    parts = (x.crow_indices().to(torch.int64), x.col_indices().to(torch.int64), x.values().to(torch.float32),
             graph.edge_index.to(torch.int64), graph.y.to(torch.int64))
    digest.update(str(tuple(x.shape)).encode())
    for part in parts:
        array = part.detach().cpu().contiguous().numpy()
        digest.update(len(array.reshape(-1)).to_bytes(8, "little"))
        digest.update(array.tobytes())
    return digest.hexdigest()[:16]


def data_root(root: str | os.PathLike | None = None) -> Path:
    return Path(root or os.environ.get(ROOT_ENV) or DEFAULT_ROOT)


def mirror_dir(mirror: str | os.PathLike | None = None) -> Path | None:
    value = mirror or os.environ.get(MIRROR_ENV)
    return Path(value) if value else None


def _row_normalise_to_csr(data):
    """``pre_transform``: NormalizeFeatures (rows sum to 1; all-zero rows stay zero), stored as sparse CSR."""
    x = data.x
    if x.layout != torch.strided:
        x = x.to_dense()
    x = x.to(torch.float32)
    x = x / x.sum(dim=1, keepdim=True).clamp(min=1e-12)
    data.x = x.to_sparse_csr()
    return data


_row_normalise_to_csr.__name__ = "simcalib_row_normalise_to_csr"


def _simple_undirected(data):
    """Both directions of every edge, no self-loops, no duplicate edges (sorted, as ``coalesce`` leaves them)."""
    from torch_geometric.utils import remove_self_loops, to_undirected

    edge_index, _ = remove_self_loops(data.edge_index)
    data.edge_index = to_undirected(edge_index, num_nodes=data.num_nodes)  # coalesced: duplicates merged
    return data


def _simple_graph_row_normalised(data):
    """``pre_transform`` of the heterophilous bag-of-words graphs: simple undirected graph, NormalizeFeatures."""
    return _row_normalise_to_csr(_simple_undirected(data))


def _simple_graph_raw_features(data):
    """``pre_transform`` of the heterophilous graphs with other features: simple undirected graph, the features
    as they are (float32, sparse CSR)."""
    data = _simple_undirected(data)
    x = data.x.to_dense() if data.x.layout != torch.strided else data.x
    data.x = x.to(torch.float32).to_sparse_csr()
    return data


_simple_graph_row_normalised.__name__ = "simcalib_simple_graph_row_normalised"
_simple_graph_raw_features.__name__ = "simcalib_simple_graph_raw_features"
_PRE_TRANSFORMS = {"row": _simple_graph_row_normalised, "raw": _simple_graph_raw_features}


def _read_checksums(mirror: Path) -> dict[str, str]:
    """``SHA256SUMS`` of the mirror or of its parent, keyed by path relative to the mirror."""
    for candidate in (mirror / "SHA256SUMS", mirror.parent / "SHA256SUMS"):
        if candidate.is_file():
            prefix = "" if candidate.parent == mirror else mirror.name + "/"
            sums = {}
            for line in candidate.read_text().splitlines():
                parts = line.split(None, 1)
                if len(parts) == 2:
                    path = parts[1].lstrip("*").strip()
                    if path.startswith(prefix):
                        sums[path[len(prefix):]] = parts[0]
            return sums
    return {}


def _stage_from_mirror(spec: DatasetSpec, raw_dir: Path, mirror: Path) -> bool:
    """Copy the raw files of ``spec`` from ``mirror`` into ``raw_dir``; True if the mirror has them all."""
    src_dir = mirror / spec.raw_subdir
    if not all((src_dir / f).is_file() for f in spec.raw_files):
        return False
    sums = _read_checksums(mirror)
    raw_dir.mkdir(parents=True, exist_ok=True)
    for fname in spec.raw_files:
        src = src_dir / fname
        expected = sums.get(f"{spec.raw_subdir}/{fname}")
        if expected is not None and sha256(src) != expected:
            raise DataCorruptError(
                f"mirror file {src} does not match its checksum in SHA256SUMS: it is truncated or altered. "
                f"Restore it, or point {MIRROR_ENV} at an intact copy."
            )
        tmp = raw_dir / (fname + ".part")
        shutil.copyfile(src, tmp)
        tmp.replace(raw_dir / fname)
    return True


def _check_raw_files(spec: DatasetSpec, raw_dir: Path) -> None:
    """Cheap structural checks of raw files, so corruption is reported by name and not deep in numpy."""
    for fname in spec.raw_files:
        path = raw_dir / fname
        if path.stat().st_size == 0:
            raise DataCorruptError(f"raw file {path} of {spec.name} is empty; delete it and load again")
        if fname.endswith(".npz"):
            try:
                with np.load(path, allow_pickle=False) as npz:
                    if spec.npz_keys:
                        missing = set(spec.npz_keys) - set(npz.files)
                    else:  # gnn-benchmark format (Amazon, Coauthor, CoraFull), in either key layout
                        missing = {"adj_data", "adj_indices", "adj_indptr", "labels"} - set(npz.files)
                        missing = set() if "adj_matrix.data" in npz.files else missing
                    if missing:
                        raise DataCorruptError(f"raw file {path} of {spec.name} lacks arrays {sorted(missing)}")
                    for key in npz.files:  # forces decompression: catches truncated members
                        _ = npz[key]
            except DataCorruptError:
                raise
            except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as exc:
                raise DataCorruptError(
                    f"raw file {path} of {spec.name} is corrupt or truncated ({type(exc).__name__}: {exc}). "
                    f"Delete {path.parent} and load again from the mirror ({MIRROR_ENV}) or the internet."
                ) from None


def _pyg_dataset(spec: DatasetSpec, root: Path):
    from torch_geometric import datasets as pyg_datasets

    if spec.pyg_class == "FilteredWikipediaNetwork":
        from simcalib.data.filtered import FilteredWikipediaNetwork as cls
    else:
        cls = getattr(pyg_datasets, spec.pyg_class)
    if spec.root_subdir is not None:
        root = root / spec.root_subdir
    kwargs = {"pre_transform": _PRE_TRANSFORMS[spec.features] if spec.simple_graph else _row_normalise_to_csr}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if spec.pyg_name is None:
            return cls(str(root), **kwargs)
        return cls(str(root), spec.pyg_name, **kwargs)


def _missing_message(spec: DatasetSpec, raw_dir: Path, mirror: Path | None, reason: str) -> str:
    files = ", ".join(spec.raw_files)
    where = f"the mirror {mirror} has no {mirror / spec.raw_subdir}" if mirror else f"no mirror is set ({MIRROR_ENV})"
    return (
        f"dataset {spec.name} is not available: its raw files ({files}) are not in {raw_dir}, {where}, "
        f"and {reason}. Provide them by copying the files into {raw_dir}, or set {MIRROR_ENV} (or --data-mirror) "
        f"to a folder laid out as <mirror>/{spec.raw_subdir}/, or run on a machine with internet access."
    )


def _staged_and_processed(spec: DatasetSpec, root: Path, raw_dir: Path, mirror: Path | None,
                          download: bool) -> tuple[str, object]:
    """The graph's torch_geometric dataset, its raw files staged (mirror or download) and checked first when no
    processed files exist; returns (where the raw files came from, the dataset)."""
    processed_dir = raw_dir.parent / "processed"
    have_processed = processed_dir.is_dir() and any(processed_dir.glob("data*.pt"))
    have_raw = all((raw_dir / f).is_file() for f in spec.raw_files)
    source = "root"
    if not have_processed and not have_raw:
        if mirror is not None and _stage_from_mirror(spec, raw_dir, mirror):
            have_raw, source = True, f"mirror {mirror}"
        elif not download:
            raise DataMissingError(_missing_message(spec, raw_dir, mirror, "downloads are disabled"))
        else:
            try:
                download_raw_files(spec, root)
            except DataMissingError as exc:
                raise DataMissingError(_missing_message(spec, raw_dir, mirror, f"the download failed: {exc}")) from None
            have_raw, source = True, "download"
    if have_raw and not have_processed:
        verify_raw_files(spec, root, use_pinned=False)  # downloaded files against the data root's record
        _check_raw_files(spec, raw_dir)
    try:
        dataset = _pyg_dataset(spec, root)
    except (DataCorruptError, TypeError, AttributeError, ImportError, NameError):
        raise  # our own errors and programming errors keep their traceback
    except Exception as exc:  # torch_geometric raises many types; translate into one clear message
        raise DataCorruptError(
            f"could not process {spec.name} from {raw_dir} ({type(exc).__name__}: {exc}); the raw or processed "
            f"files are corrupt. Delete {raw_dir.parent} and load again."
        ) from None
    return source, dataset


@contextmanager
def _dataset_lock(folder: Path):
    """Hold an exclusive lock on ``folder`` (a graph's data folder) while its raw files are staged and processed:
    two processes loading the same graph into one data root (two commands started at once) would otherwise read
    each other's half-written files. The second waits, then finds the processed files. Without ``fcntl``
    (Windows) or where the folder cannot be written (a read-only data root), no lock is taken."""
    try:
        import fcntl

        folder.mkdir(parents=True, exist_ok=True)
        handle = open(folder / ".simcalib-load.lock", "w")
    except (ImportError, OSError):
        yield
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def load_dataset(
    name: str,
    root: str | os.PathLike | None = None,
    mirror: str | os.PathLike | None = None,
    download: bool | None = None,
) -> GraphData:
    """Load one of the benchmark graphs (see module docstring for the order of sources), or a graph from another
    package (:mod:`simcalib.data.external`)."""
    spec = get_spec(name)
    if spec.external is not None:
        return EXTERNAL_GRAPHS[spec.name]
    root = data_root(root)
    mirror = mirror_dir(mirror)
    if download is None:
        download = os.environ.get(OFFLINE_ENV, "").lower() not in ("1", "true", "yes")
    raw_dir = root / spec.raw_subdir
    with _dataset_lock(raw_dir.parent):
        source, dataset = _staged_and_processed(spec, root, raw_dir, mirror, download)
    data = dataset[0]
    x = data.x if data.x.layout == torch.sparse_csr else data.x.to_sparse_csr()
    masks = None
    if spec.own_splits:
        masks = tuple(getattr(data, key).to(torch.bool) for key in ("train_mask", "val_mask", "test_mask"))  # [N, S]
    graph = GraphData(spec.name, x, data.edge_index, data.y.view(-1).long(), int(data.y.max()) + 1, source, masks)
    if graph.num_nodes != spec.num_nodes:
        raise DataCorruptError(
            f"{spec.name} loaded with {graph.num_nodes} nodes, expected {spec.num_nodes}: the files in "
            f"{raw_dir.parent} belong to another graph. Delete that folder and load again."
        )
    if spec.num_edges is not None and graph.num_edges != 2 * spec.num_edges:
        raise DataCorruptError(
            f"{spec.name} loaded with {graph.num_edges // 2} undirected edges, expected {spec.num_edges}: the "
            f"edge file in {raw_dir} is truncated or altered. Delete {raw_dir.parent} and load again."
        )
    return graph
