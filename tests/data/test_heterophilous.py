"""The heterophilous graphs: loaded from the mirror as simple undirected graphs, with the clear errors of the
other datasets for missing, altered and truncated files."""

import shutil

import numpy as np
import pytest
import torch

from simcalib.data import get_spec, load_dataset
from simcalib.data.loading import sha256
from simcalib.errors import DataCorruptError, DataMissingError

# nodes, undirected edges, features, classes (shared/datasets/README.md), edge homophily as measured here (the
# README's two digits: 0.22, 0.24, 0.21, 0.68, and 0.60 for tolokers, whose 0.5945 rounds to 0.59)
MIRRORED = {
    "Actor": (7600, 26659, 932, 5, 0.2167),
    "chameleon_filtered": (890, 8854, 2325, 5, 0.2361),
    "squirrel_filtered": (2223, 46998, 2089, 5, 0.2072),
    "minesweeper": (10000, 39402, 7, 2, 0.6828),
    "tolokers": (11758, 519000, 10, 2, 0.5945),
}


def _edge_homophily(graph) -> float:
    src, dst = graph.edge_index
    return float((graph.y[src] == graph.y[dst]).double().mean())


@pytest.mark.parametrize("name", list(MIRRORED))
def test_each_mirrored_graph_loads_as_a_simple_undirected_graph_with_the_published_statistics(name, tmp_path, mirror_dir):
    graph = load_dataset(name, root=tmp_path, mirror=mirror_dir, download=False)
    nodes, edges, features, classes, homophily = MIRRORED[name]
    assert (graph.num_nodes, graph.num_edges, graph.num_features, graph.num_classes) == (nodes, 2 * edges, features, classes)
    assert _edge_homophily(graph) == pytest.approx(homophily, abs=5e-5)
    src, dst = graph.edge_index.tolist()
    pairs = set(zip(src, dst))
    assert len(pairs) == graph.num_edges  # no duplicate edges
    assert all((d, s) in pairs for s, d in pairs)  # both directions
    assert not any(s == d for s, d in pairs)  # no self-loops
    assert graph.source.startswith("mirror")
    train, val, test = graph.fixed_masks
    assert train.shape == val.shape == test.shape == (nodes, 10)
    assert not (train & test).any() and not (train & val).any()


def test_actor_raw_self_loops_and_directed_pairs_are_removed_and_merged(tmp_path, mirror_dir):
    raw = np.loadtxt(mirror_dir / "Actor" / "raw" / "out1_graph_edges.txt", skiprows=1, dtype=np.int64)
    directed = {tuple(e) for e in raw.tolist()}
    # 33,391 lines, 30,019 distinct directed pairs (torch_geometric's Actor keeps these), 122 self-loop lines
    assert (len(raw), len(directed), int((raw[:, 0] == raw[:, 1]).sum())) == (33391, 30019, 122)
    undirected = {tuple(sorted(e)) for e in directed if e[0] != e[1]}
    graph = load_dataset("Actor", root=tmp_path, mirror=mirror_dir)
    assert graph.num_edges == 2 * len(undirected) == 2 * 26659


def test_feature_normalisation_rows_for_bag_of_words_raw_for_tolokers_and_minesweeper(tmp_path, mirror_dir):
    for name in ("Actor", "chameleon_filtered"):
        x = load_dataset(name, root=tmp_path, mirror=mirror_dir).x.to_dense()
        sums = x.sum(1)
        assert torch.allclose(sums[sums > 0], torch.ones(int((sums > 0).sum())), atol=1e-5)
    raw = np.load(mirror_dir / "tolokers" / "raw" / "tolokers.npz")["node_features"]
    x = load_dataset("tolokers", root=tmp_path, mirror=mirror_dir).x.to_dense().numpy()
    assert np.array_equal(x, raw.astype(np.float32))  # continuous features in [0, 1], not divided by their sum
    assert get_spec("minesweeper").features == "raw" and get_spec("Actor").features == "row"


def _copy(mirror_dir, tmp_path, folder):
    mirror = tmp_path / "mirror"
    shutil.copytree(mirror_dir / folder, mirror / folder)
    return mirror


@pytest.mark.parametrize("name", ["minesweeper", "chameleon_filtered"])
def test_checksum_mismatch_of_a_heterophilous_npz_is_reported(name, tmp_path, mirror_dir):
    mirror = _copy(mirror_dir, tmp_path, name)
    path = mirror / name / "raw" / f"{name}.npz"
    (mirror / "SHA256SUMS").write_text(f"{sha256(path)}  {name}/raw/{name}.npz\n")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one byte altered, size unchanged
    path.write_bytes(bytes(data))
    with pytest.raises(DataCorruptError, match="checksum"):
        load_dataset(name, root=tmp_path / "root", mirror=mirror, download=False)


def test_the_shared_mirror_checksums_cover_the_new_graphs(mirror_dir):
    sums = (mirror_dir.parent / "SHA256SUMS").read_text()
    for name in MIRRORED:
        spec = get_spec(name)
        for fname in spec.raw_files:
            assert f"pyg/{spec.raw_subdir}/{fname}" in sums, fname


@pytest.mark.parametrize("name", ["tolokers", "squirrel_filtered"])
def test_truncated_heterophilous_npz_is_reported_as_corrupt(name, tmp_path, mirror_dir):
    mirror = _copy(mirror_dir, tmp_path, name)  # no SHA256SUMS beside the copy: the file's own structure is checked
    path = mirror / name / "raw" / f"{name}.npz"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(DataCorruptError, match="corrupt or truncated"):
        load_dataset(name, root=tmp_path / "root", mirror=mirror, download=False)


def test_npz_without_the_heterophilous_arrays_is_reported_by_name(tmp_path, mirror_dir):
    mirror = _copy(mirror_dir, tmp_path, "minesweeper")
    path = mirror / "minesweeper" / "raw" / "minesweeper.npz"
    arrays = dict(np.load(path))
    del arrays["edges"]
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)
    with pytest.raises(DataCorruptError, match="lacks arrays \\['edges'\\]"):
        load_dataset("minesweeper", root=tmp_path / "root", mirror=mirror, download=False)


def test_truncated_actor_edge_list_is_reported_as_corrupt(tmp_path, mirror_dir):
    mirror = _copy(mirror_dir, tmp_path, "Actor")
    path = mirror / "Actor" / "raw" / "out1_graph_edges.txt"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[: len(lines) // 2]))  # whole lines: it still parses
    with pytest.raises(DataCorruptError, match="undirected edges, expected 26659"):
        load_dataset("Actor", root=tmp_path / "root", mirror=mirror, download=False)


def test_actor_node_file_cut_mid_line_is_reported_as_corrupt(tmp_path, mirror_dir):
    mirror = _copy(mirror_dir, tmp_path, "Actor")
    path = mirror / "Actor" / "raw" / "out1_node_feature_label.txt"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(DataCorruptError, match="corrupt|expected 7600"):
        load_dataset("Actor", root=tmp_path / "root", mirror=mirror, download=False)


@pytest.mark.parametrize("name", ["squirrel_filtered", "roman_empire", "Actor"])
def test_missing_heterophilous_graph_names_its_files_and_the_mirror_setting(name, tmp_path):
    with pytest.raises(DataMissingError) as info:
        load_dataset(name, root=tmp_path, mirror=tmp_path / "empty-mirror", download=False)
    message = str(info.value)
    assert get_spec(name).name in message and get_spec(name).raw_files[0] in message and "SIMCALIB_DATA_MIRROR" in message


def test_names_of_the_heterophilous_graphs_resolve_in_their_published_spellings():
    assert get_spec("Roman-empire").name == "roman_empire" and get_spec("Amazon-ratings").name == "amazon_ratings"
    assert get_spec("film").name == "Actor" and get_spec("Tolokers").name == "tolokers"
    from torch_geometric import datasets

    for name in ("Actor", "minesweeper", "tolokers", "roman_empire", "amazon_ratings", "questions"):
        assert hasattr(datasets, get_spec(name).pyg_class)
