"""The GATS fixed split files, downloaded and re-written as the plain arrays :mod:`simcalib.experiment.splits` reads.

The public GATS repository publishes each split as ``data/split/<Dataset>/5_3f_85/<dataset>_split_<k>.npz``:
``k_fold_indices`` (the 3 labelled folds, an object array of index arrays on most graphs) and ``test_indices``.
Reading those needs ``np.load(allow_pickle=True)``, i.e. unpickling, which runs code a tampered file contains; so
every file is first checked against the SHA-256 pinned in ``pinned_sha256.json`` (repository, commit and digest
of each of the 40 files), and nothing is unpickled unless all requested files match. Each split is then stored
as ``<splits dir>/gats_5_3f_85/<Dataset>/split_<k>.npz`` with int64 arrays ``fold0``, ``fold1``, ``fold2`` and
``test`` (no pickle), written through a temporary file and renamed into place.

Sources: the repository at the pinned commit (``raw.githubusercontent.com``), or any base URL serving the same
layout (``<base>/data/split/<Dataset>/5_3f_85/<dataset>_split_<k>.npz``), e.g. a mirror for machines without
internet access.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simcalib.data.download import checksum_refusal, http_get, pinned
from simcalib.errors import ConfigError, DataCorruptError

_UPSTREAM_PATH = re.compile(r"^data/split/(?P<dataset>[^/]+)/(?P<protocol>[^/]+)/[^/]+_split_(?P<split>\d+)\.npz$")


@dataclass(frozen=True)
class OriginalSplit:
    """One published split file: its path in the repository, dataset folder, split index and pinned digest."""

    path: str
    dataset: str
    split: int
    sha256: str


def splits_source() -> dict:
    """Repository, commit, protocol and default base URL of the published splits."""
    source = pinned()["gats_splits"]
    return {key: source[key] for key in ("repository", "commit", "protocol", "url")}


def original_splits(datasets: list[str] | None = None) -> list[OriginalSplit]:
    """The pinned split files, of ``datasets`` only when given (names matched case-insensitively to the
    repository's folders; a dataset without published splits is a ConfigError naming those that have them)."""
    files = []
    for path, digest in pinned()["gats_splits"]["sha256"].items():
        match = _UPSTREAM_PATH.match(path)
        files.append(OriginalSplit(path, match["dataset"], int(match["split"]), digest))
    if datasets is None:
        return files
    published = published_datasets()
    wanted = {d.lower() for d in datasets}
    unknown = sorted(wanted - {d.lower() for d in published})
    if unknown:
        raise ConfigError(f"no published GATS splits for {', '.join(unknown)}; the GATS repository has them for "
                          f"{', '.join(published)} (other datasets use splits generated from the study seed)")
    return [f for f in files if f.dataset.lower() in wanted]


def published_datasets() -> list[str]:
    """Dataset folders with published split files, in the repository's spelling (``Citeseer``, ``CoraFull``)."""
    return sorted({_UPSTREAM_PATH.match(path)["dataset"] for path in pinned()["gats_splits"]["sha256"]})


def plain_arrays(path: Path) -> dict[str, np.ndarray]:
    """``fold0``.. and ``test`` (int64) of an original split file. Unpickles: call only on a checked file."""
    try:
        with np.load(path, allow_pickle=True) as npz:
            folds = [np.asarray(fold, dtype=np.int64) for fold in npz["k_fold_indices"]]
            test = np.asarray(npz["test_indices"], dtype=np.int64)
    except (OSError, ValueError, KeyError, EOFError) as exc:
        raise DataCorruptError(f"split file {path} lacks k_fold_indices/test_indices or is unreadable ({exc})") from None
    return {**{f"fold{i}": fold for i, fold in enumerate(folds)}, "test": test}


def _write_npz(arrays: dict[str, np.ndarray], dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    with open(tmp, "wb") as fh:
        np.savez(fh, **arrays)
    os.replace(tmp, dest)


def fetch_gats_splits(splits_dir: str | os.PathLike, base_url: str | None = None,
                      datasets: list[str] | None = None) -> list[Path]:
    """Download the published split files (of ``datasets``; default all 40) from ``base_url`` (default the
    repository at the pinned commit), check every one against its pinned SHA-256, then write the plain arrays
    under ``<splits_dir>/gats_<protocol>/``. Any mismatch: a DataCorruptError naming the file and both digests,
    raised before anything is unpickled or written. Returns the written paths."""
    source = splits_source()
    base = (base_url or source["url"]).rstrip("/")
    files = original_splits(datasets)
    out_dir = Path(splits_dir) / f"gats_{source['protocol']}"
    with tempfile.TemporaryDirectory(prefix="simcalib-gats-splits-") as tmp:
        downloaded = []
        for number, original in enumerate(files):
            local = Path(tmp) / f"{number}.npz"
            url = f"{base}/{original.path}"
            actual = http_get(url, local)
            if actual != original.sha256:
                raise checksum_refusal(
                    f"split file {original.path} (from {url})", actual, original.sha256,
                    f"SHA-256 pinned for {source['repository']} at commit {source['commit']} "
                    "(simcalib/data/pinned_sha256.json):")
            downloaded.append((original, local))
        converted = [(original, plain_arrays(local)) for original, local in downloaded]  # all checked: unpickle
        written = []
        for original, arrays in converted:
            dest = out_dir / original.dataset / f"split_{original.split}.npz"
            _write_npz(arrays, dest)
            written.append(dest)
    return written
