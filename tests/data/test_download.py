"""Dataset downloads through torch_geometric's own classes (their ``download()``), pointed at a local HTTP server
that serves small files the test writes in the upstream formats: Planetoid's ``ind.pubmed.*`` pickles,
CitationFull's ``cora.npz``, the heterophilous graphs' npz. Checked against pinned digests, or recorded on the
first download and checked on later downloads and loads; a mismatch writes nothing."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from local_http import serve_folder
from shared_paths import MIRROR

from simcalib.data import get_spec, load_dataset
from simcalib.data.download import (
    RECORD_NAME,
    _download_only,
    _pyg_class,
    download_raw_files,
    read_record,
    sha256,
)
from simcalib.data.loading import _pyg_dataset
from simcalib.errors import DataCorruptError, DataMissingError

N, F, C = 600, 6, 3  # Planetoid's public split needs N >= len(y) + 500 (500 validation nodes after the train ones)


def _graph(seed: int):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, C, N)
    features = (rng.random((N, F)) < 0.4).astype(np.float32)
    features[np.arange(N), rng.integers(0, F, N)] = 1.0  # no all-zero rows
    edges = np.stack([np.arange(N), (np.arange(N) + 1 + rng.integers(0, 5, N)) % N], axis=1)  # [E, 2], no loops
    return labels, features, edges


def write_planetoid(folder: Path, stem: str, seed: int = 0) -> None:
    """``ind.<stem>.{x,tx,allx,y,ty,ally,graph,test.index}``: pickled scipy CSR features, one-hot labels, an
    adjacency dict, and the test nodes' indices (the last 60 nodes, listed unsorted)."""
    labels, features, edges = _graph(seed)
    one_hot = np.eye(C, dtype=np.int64)[labels]
    n_test, n_train = 60, 20
    test_index = np.arange(N - n_test, N)[::-1]
    graph = {i: [] for i in range(N)}
    for a, b in edges:
        graph[int(a)].append(int(b))
    parts = {"x": sp.csr_matrix(features[:n_train]), "allx": sp.csr_matrix(features[: N - n_test]),
             "tx": sp.csr_matrix(features[test_index]), "y": one_hot[:n_train], "ally": one_hot[: N - n_test],
             "ty": one_hot[test_index], "graph": graph}
    folder.mkdir(parents=True, exist_ok=True)
    for name, value in parts.items():
        with open(folder / f"ind.{stem}.{name}", "wb") as fh:
            pickle.dump(value, fh, protocol=2)
    (folder / f"ind.{stem}.test.index").write_text("".join(f"{i}\n" for i in test_index))


def write_citation_full(path: Path, seed: int = 1) -> None:
    """gnn-benchmark's npz as CitationFull reads it: CSR ``attr_*`` and ``adj_*`` arrays and ``labels``."""
    labels, features, edges = _graph(seed)
    attr = sp.csr_matrix(features)
    adj = sp.csr_matrix((np.ones(len(edges), dtype=np.float32), (edges[:, 0], edges[:, 1])), shape=(N, N))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        np.savez(fh, attr_data=attr.data, attr_indices=attr.indices, attr_indptr=attr.indptr, attr_shape=attr.shape,
                 adj_data=adj.data, adj_indices=adj.indices, adj_indptr=adj.indptr, adj_shape=adj.shape, labels=labels)


def write_heterophilous(path: Path, seed: int = 2) -> None:
    """Platonov et al.'s npz: ``node_features``, ``node_labels``, ``edges`` [E, 2] and 10 masks per set."""
    labels, features, edges = _graph(seed)
    rng = np.random.default_rng(seed)
    which = np.stack([rng.permutation(N) % 4 for _ in range(10)])  # [10, N]: 2/4 train, 1/4 val, 1/4 test
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        np.savez(fh, node_features=features, node_labels=labels, edges=edges, train_masks=which < 2,
                 val_masks=which == 2, test_masks=which == 3)


@pytest.fixture
def served(tmp_path) -> Path:
    """Pubmed, CoraFull, roman_empire and a made-up minesweeper in torch_geometric's raw layout."""
    folder = tmp_path / "served"
    write_planetoid(folder / "PubMed" / "raw", "pubmed")
    write_citation_full(folder / "cora" / "raw" / "cora.npz")
    write_heterophilous(folder / "roman_empire" / "raw" / "roman_empire.npz")
    write_heterophilous(folder / "minesweeper" / "raw" / "minesweeper.npz", seed=3)
    return folder


@pytest.mark.parametrize("name", ["Pubmed", "CoraFull", "roman_empire"])
def test_the_class_downloads_from_the_server_and_the_digests_are_recorded(name, served, tmp_path):
    spec = get_spec(name)
    root = tmp_path / "root"
    with serve_folder(served) as (url, requested):
        checks = download_raw_files(spec, root, url)
    assert set(requested) == {f"/{spec.raw_subdir}/{f}" for f in spec.raw_files}  # the class's own requests
    assert checks == {f: "new" for f in spec.raw_files}
    assert read_record(root) == {f"{spec.raw_subdir}/{f}": sha256(served / spec.raw_subdir / f) for f in spec.raw_files}
    for fname in spec.raw_files:
        assert (root / spec.raw_subdir / fname).read_bytes() == (served / spec.raw_subdir / fname).read_bytes()
    assert sorted(p.name for p in root.iterdir()) == sorted([RECORD_NAME, spec.raw_subdir.split("/")[0]])  # no temp folder
    graph = _pyg_dataset(spec, root)[0]  # the files are in the format torch_geometric's class processes
    assert graph.num_nodes == N and int(graph.y.max()) == C - 1


@pytest.mark.parametrize("name", ["Pubmed", "CoraFull", "roman_empire"])
def test_a_changed_file_on_a_later_download_is_refused_with_nothing_written(name, served, tmp_path):
    spec = get_spec(name)
    root = tmp_path / "root"
    with serve_folder(served) as (url, _):
        download_raw_files(spec, root, url)
        record = (root / RECORD_NAME).read_text()
        shutil.rmtree(root / spec.raw_subdir.split("/")[0])
        changed = served / spec.raw_subdir / spec.raw_files[-1]
        old = sha256(changed)
        changed.write_bytes(changed.read_bytes() + b"\0")
        with pytest.raises(DataCorruptError) as info:
            download_raw_files(spec, root, url)
    message = str(info.value)
    assert spec.raw_files[-1] in message and "checksum" in message and "recorded" in message
    assert sha256(changed) in message and old in message
    assert not (root / spec.raw_subdir).exists() and (root / RECORD_NAME).read_text() == record
    assert [p.name for p in root.iterdir()] == [RECORD_NAME]


def test_a_recorded_raw_file_changed_in_the_root_is_refused_when_loaded(served, tmp_path):
    spec = get_spec("roman_empire")
    root = tmp_path / "root"
    with serve_folder(served) as (url, _):
        download_raw_files(spec, root, url)
    path = root / spec.raw_subdir / "roman_empire.npz"
    write_heterophilous(path, seed=9)  # a valid npz of the format, other numbers
    with pytest.raises(DataCorruptError, match=r"roman_empire.npz.*checksum.*recorded"):
        load_dataset("roman_empire", root=root, download=False)


def test_a_pinned_digest_refuses_another_file_and_accepts_the_original(served, tmp_path):
    spec = get_spec("minesweeper")
    with serve_folder(served) as (url, _), pytest.raises(DataCorruptError, match="minesweeper.npz.*checksum.*pinned"):
        download_raw_files(spec, tmp_path / "root", url)
    assert not (tmp_path / "root" / "minesweeper").exists()
    if not (MIRROR / "minesweeper").is_dir():
        pytest.skip(f"dataset mirror {MIRROR} not present")
    with serve_folder(MIRROR) as (url, _):
        assert download_raw_files(spec, tmp_path / "root", url) == {"minesweeper.npz": "pinned"}
    assert not (tmp_path / "root" / RECORD_NAME).exists()  # pinned files are not recorded


def test_a_missing_file_on_the_server_is_a_missing_data_error_naming_the_mirror(tmp_path):
    (tmp_path / "empty").mkdir()
    with serve_folder(tmp_path / "empty") as (url, _), pytest.raises(DataMissingError) as info:
        download_raw_files(get_spec("CoraFull"), tmp_path / "root", url)
    assert "CoraFull" in str(info.value) and url in str(info.value) and "cora/raw" in str(info.value)
    assert [p.name for p in (tmp_path / "root").iterdir()] == []


def test_without_a_mirror_the_classes_keep_their_upstream_addresses():
    for name in ["Pubmed", "CoraFull", "roman_empire", "Actor", "chameleon_filtered", "Physics"]:
        spec = get_spec(name)
        assert _download_only(spec, None).url == _pyg_class(spec).url and "url" not in vars(_download_only(spec, None))


def test_actor_is_downloaded_file_by_file_from_the_mirror_layout(tmp_path):
    if not (MIRROR / "Actor").is_dir():
        pytest.skip(f"dataset mirror {MIRROR} not present")
    spec = get_spec("Actor")
    with serve_folder(MIRROR) as (url, requested):
        assert download_raw_files(spec, tmp_path, url) == {f: "new" for f in spec.raw_files}
    assert set(requested) == {f"/Actor/raw/{f}" for f in spec.raw_files}
    assert read_record(tmp_path) == {f"Actor/raw/{f}": sha256(MIRROR / "Actor" / "raw" / f) for f in spec.raw_files}
