import shutil

import numpy as np
import pytest

from simcalib.data import get_spec, load_dataset
from simcalib.data.loading import sha256
from simcalib.errors import DataCorruptError, DataMissingError, UnknownNameError


def test_names_are_case_insensitive_and_unknown_names_list_the_valid_ones():
    assert get_spec("citeseer").name == get_spec("CiteSeer").name == "Citeseer"
    assert get_spec("PUBMED").pyg_name == "PubMed"
    with pytest.raises(UnknownNameError, match="valid datasets are: Cora, Citeseer, Pubmed, CoraFull"):
        get_spec("reddit")


def test_all_eight_datasets_map_onto_torch_geometric_classes():
    from torch_geometric import datasets

    for name in ["Cora", "Citeseer", "Pubmed", "CoraFull", "Computers", "Photo", "CS", "Physics"]:
        spec = get_spec(name)
        assert hasattr(datasets, spec.pyg_class)


def test_mirror_files_are_copied_verified_and_loaded(tmp_path, mirror_dir):
    g = load_dataset("cora", root=tmp_path / "root", mirror=mirror_dir)
    assert (g.num_nodes, g.num_edges, g.num_features, g.num_classes) == (2708, 10556, 1433, 7)
    assert g.source.startswith("mirror")
    assert g.x.layout.__repr__().endswith("sparse_csr")
    row_sums = np.asarray(g.x.to_dense().sum(1))
    assert np.allclose(row_sums[row_sums > 0], 1.0, atol=1e-5)  # NormalizeFeatures
    again = load_dataset("cora", root=tmp_path / "root")  # processed files in the root: no mirror needed
    assert again.source == "root" and again.num_edges == g.num_edges


def test_missing_dataset_names_files_and_mirror_setting(tmp_path, mirror_dir):
    with pytest.raises(DataMissingError) as info:
        load_dataset("CoraFull", root=tmp_path, mirror=mirror_dir, download=False)  # a graph the mirror lacks
    message = str(info.value)
    assert "CoraFull" in message and "cora.npz" in message and "SIMCALIB_DATA_MIRROR" in message


def _copy_mirror(mirror_dir, tmp_path, folder):
    mirror = tmp_path / "mirror"
    shutil.copytree(mirror_dir / folder, mirror / folder)
    return mirror


def test_truncated_npz_is_reported_as_corrupt(tmp_path, mirror_dir):
    mirror = _copy_mirror(mirror_dir, tmp_path, "Photo")
    path = mirror / "Photo" / "raw" / "amazon_electronics_photo.npz"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(DataCorruptError, match="corrupt or truncated"):
        load_dataset("Photo", root=tmp_path / "root", mirror=mirror, download=False)


def test_truncated_planetoid_file_is_reported_as_corrupt(tmp_path, mirror_dir):
    mirror = _copy_mirror(mirror_dir, tmp_path, "Cora")
    path = mirror / "Cora" / "raw" / "ind.cora.allx"
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(DataCorruptError, match="corrupt"):
        load_dataset("Cora", root=tmp_path / "root", mirror=mirror, download=False)


def test_checksum_mismatch_in_the_mirror_is_reported(tmp_path, mirror_dir):
    mirror = _copy_mirror(mirror_dir, tmp_path, "Cora")
    raw = mirror / "Cora" / "raw"
    (mirror / "SHA256SUMS").write_text("".join(f"{sha256(p)}  Cora/raw/{p.name}\n" for p in raw.iterdir()))
    (raw / "ind.cora.y").write_bytes((raw / "ind.cora.y").read_bytes()[:-10])
    with pytest.raises(DataCorruptError, match="checksum"):
        load_dataset("Cora", root=tmp_path / "root", mirror=mirror, download=False)


def test_the_graph_digest_is_stable_and_names_any_change_of_the_processed_graph(tmp_path, mirror_dir):
    import dataclasses

    import torch

    from simcalib.data import graph_digest

    graph = load_dataset("cora", root=tmp_path / "a", mirror=mirror_dir)
    again = load_dataset("cora", root=tmp_path / "b", mirror=mirror_dir)  # processed anew elsewhere
    assert graph_digest(graph) == graph_digest(again) and len(graph_digest(graph)) == 16
    values = graph.x.values().clone()
    values[0] += 1e-7  # one feature, one float step
    x = torch.sparse_csr_tensor(graph.x.crow_indices(), graph.x.col_indices(), values, graph.x.shape)
    assert graph_digest(dataclasses.replace(graph, x=x)) != graph_digest(graph)
    y = graph.y.clone()
    y[5] = (y[5] + 1) % graph.num_classes
    assert graph_digest(dataclasses.replace(graph, y=y)) != graph_digest(graph)
