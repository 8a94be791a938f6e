"""The GATS split files fetched from a local HTTP server in the repository's layout: checked against the pinned
SHA-256 before unpickling, stored as plain arrays equal to the mirror's re-written files; altered files refused
with nothing written or unpickled."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pytest
from local_http import serve_folder
from shared_paths import SPLITS

from simcalib.data.gats_splits import fetch_gats_splits, original_splits, published_datasets, splits_source
from simcalib.errors import ConfigError, DataCorruptError
from simcalib.experiment.splits import find_split_file, load_split_file

ORIGINALS = SPLITS / "gats_original"
REWRITTEN = SPLITS / "gats_5_3f_85"


@pytest.fixture(scope="module")
def originals() -> Path:
    if not (ORIGINALS / "data" / "split").is_dir():
        pytest.skip(f"the original GATS split files are not in {ORIGINALS} (shared data folder absent)")
    return ORIGINALS


def test_the_pinned_digests_are_those_of_the_shared_source_listing():
    listing = REWRITTEN / "SOURCE.sha256"
    if not listing.is_file():
        pytest.skip(f"{listing} not present")
    text = listing.read_text()
    listed = dict(reversed(line.split()) for line in text.splitlines() if line.strip() and not line.startswith("#"))
    pinned = {f.path: f.sha256 for f in original_splits()}
    assert pinned == listed and len(pinned) == 40
    assert splits_source()["commit"] in text and splits_source()["repository"] in text
    assert published_datasets() == sorted(p.name for p in REWRITTEN.iterdir() if p.is_dir())


def test_all_forty_files_are_fetched_checked_and_equal_to_the_rewritten_ones(originals, tmp_path):
    with serve_folder(originals) as (url, requested):
        written = fetch_gats_splits(tmp_path / "splits", url)
    assert len(written) == 40 and len(requested) == 40
    for path in written:
        dataset, split = path.parent.name, int(path.stem.split("_")[1])
        assert path == tmp_path / "splits" / "gats_5_3f_85" / dataset / f"split_{split}.npz"
        with np.load(path, allow_pickle=False) as fetched, np.load(REWRITTEN / dataset / path.name) as reference:
            assert fetched.files == ["fold0", "fold1", "fold2", "test"] == reference.files
            for key in fetched.files:
                assert fetched[key].dtype == np.int64
                np.testing.assert_array_equal(fetched[key], reference[key])
    # the loader finds and reads them: 2708 Cora nodes
    split = load_split_file(find_split_file(tmp_path / "splits", "Cora", 3, "5_3f_85"), 2708)
    assert split.n_folds == 3 and len(split.test) == 1957 and split.source.startswith(str(tmp_path))


def _served_copy(originals: Path, tmp_path: Path) -> Path:
    served = tmp_path / "served"
    shutil.copytree(originals, served)
    return served


def test_an_altered_file_is_refused_naming_it_and_both_digests_with_nothing_written(originals, tmp_path):
    served = _served_copy(originals, tmp_path)
    altered = served / "data/split/Photo/5_3f_85/photo_split_2.npz"
    content = bytearray(altered.read_bytes())
    content[-30] ^= 1  # one bit of the zip's central directory
    altered.write_bytes(bytes(content))
    pinned = {f.path: f.sha256 for f in original_splits()}["data/split/Photo/5_3f_85/photo_split_2.npz"]
    with serve_folder(served) as (url, _), pytest.raises(DataCorruptError) as info:
        fetch_gats_splits(tmp_path / "splits", url)
    message = str(info.value)
    assert "data/split/Photo/5_3f_85/photo_split_2.npz" in message and "checksum" in message
    assert hashlib.sha256(bytes(content)).hexdigest() in message and pinned in message
    assert not (tmp_path / "splits").exists()  # not even the other 39


class _Marker:
    """Unpickling this touches the file ``path``: what a malicious split file could do instead."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (Path.touch, (self.path,))


def test_a_file_carrying_a_pickle_payload_is_refused_before_it_is_unpickled(originals, tmp_path):
    served = _served_copy(originals, tmp_path)
    marker = tmp_path / "unpickled"
    payload = np.empty(3, dtype=object)
    payload[:] = [_Marker(marker), np.arange(3), np.arange(3)]
    with open(served / "data/split/Cora/5_3f_85/cora_split_0.npz", "wb") as fh:
        np.savez(fh, k_fold_indices=payload, test_indices=np.arange(10))
    with np.load(served / "data/split/Cora/5_3f_85/cora_split_0.npz", allow_pickle=True) as npz:
        npz["k_fold_indices"]  # the payload works: unpickling it touches the marker ...
    assert marker.exists()
    marker.unlink()
    with serve_folder(served) as (url, _), pytest.raises(DataCorruptError, match="checksum"):
        fetch_gats_splits(tmp_path / "splits", url, ["Cora"])
    assert not marker.exists() and not (tmp_path / "splits").exists()  # ... never unpickled


def test_a_dataset_subset_is_fetched_alone_and_unknown_ones_are_named(originals, tmp_path):
    with serve_folder(originals) as (url, requested):
        written = fetch_gats_splits(tmp_path / "splits", url, ["citeseer", "PUBMED"])
    assert sorted({p.parent.name for p in written}) == ["Citeseer", "Pubmed"] and len(requested) == 10
    with pytest.raises(ConfigError, match="no published GATS splits for actor.*Cora, CoraFull"):
        original_splits(["Cora", "Actor"])


def test_a_missing_file_on_the_server_names_the_url(tmp_path):
    (tmp_path / "empty").mkdir()
    with serve_folder(tmp_path / "empty") as (url, _), pytest.raises(Exception, match="cora_split_0.npz") as info:
        fetch_gats_splits(tmp_path / "splits", url, ["Cora"])
    assert type(info.value).__name__ == "DataMissingError" and "404" in str(info.value)
