"""Verified downloads: raw dataset files through torch_geometric's own classes, checked by SHA-256.

A file is checked against the digest the project pins for it (``pinned_sha256.json`` beside this module:
repository, commit and SHA-256 of each file) or, where none is pinned, against the checksum record of the data
root (``<root>/SHA256SUMS``, ``sha256sum`` format, paths relative to the root), which a first download writes.
Files are downloaded into a temporary folder inside the data root, checked, and only then moved into place
(``os.replace``), so a file whose digest differs is refused with nothing written: the refusal names the file and
both digests. Nothing downloaded is parsed before its check: torch_geometric's ``download()`` runs in a subclass
whose ``process()`` stops the dataset's construction as soon as the raw files are there.

``base_url`` points the classes at a mirror in torch_geometric's raw layout (``<base>/<raw_subdir>/<file>``, as
``SIMCALIB_DATA_MIRROR`` is on disk) instead of the upstream sources: the class's ``url`` attribute is set so
that its own ``download()`` builds those addresses (Actor, whose ``download()`` reads two folders upstream,
fetches each raw file from the mirror with torch_geometric's ``download_url``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import urllib.error
import urllib.request
import warnings
from functools import lru_cache
from pathlib import Path

from simcalib.data.registry import DatasetSpec
from simcalib.errors import DataCorruptError, DataMissingError

PINNED_FILE = Path(__file__).with_name("pinned_sha256.json")
RECORD_NAME = "SHA256SUMS"  # the data root's checksum record of downloaded files without a pinned digest
HTTP_TIMEOUT_S = 60


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


@lru_cache(maxsize=1)
def pinned() -> dict:
    """The pinned digests: ``gats_splits`` (repository, commit, protocol, url, ``sha256`` by upstream path) and
    ``datasets`` (per dataset: repository, commit, ``sha256`` by raw file name)."""
    return json.loads(PINNED_FILE.read_text())


def pinned_dataset_digests(spec: DatasetSpec) -> dict[str, str]:
    """``{raw file name: SHA-256}`` pinned for ``spec`` (empty when the project pins none for it)."""
    return dict(pinned()["datasets"].get(spec.name, {}).get("sha256", {}))


def checksum_refusal(what: str, actual: str, expected: str, source: str) -> DataCorruptError:
    return DataCorruptError(
        f"{what}: its SHA-256 checksum {actual} differs from the {source} {expected}; the file is refused "
        "(altered, truncated or another version) and nothing was written. Download it again from the original "
        "source (drop --from), or point --from at an intact mirror.")


# ---------------------------------------------------------------------------------------------------------
# The data root's checksum record


def read_record(root: Path) -> dict[str, str]:
    """``{path relative to root: SHA-256}`` of ``<root>/SHA256SUMS`` (empty when absent)."""
    path = Path(root) / RECORD_NAME
    if not path.is_file():
        return {}
    record = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        parts = line.split(None, 1)
        if not parts:
            continue
        if len(parts) != 2 or len(parts[0]) != 64:
            raise DataCorruptError(f"{path}:{number} is not a '<sha256>  <path>' line; restore the file or delete "
                                   "it (the next download records the digests again)")
        record[parts[1].lstrip("*").strip()] = parts[0]
    return record


def write_record(root: Path, entries: dict[str, str]) -> None:
    """Add ``entries`` to ``<root>/SHA256SUMS`` (rewritten whole, through a temporary file)."""
    root = Path(root)
    record = {**read_record(root), **entries}
    tmp = root / (RECORD_NAME + ".tmp")
    tmp.write_text("".join(f"{digest}  {path}\n" for path, digest in sorted(record.items())))
    tmp.replace(root / RECORD_NAME)


def expected_digests(spec: DatasetSpec, root: Path, use_pinned: bool = True) -> dict[str, tuple[str, str]]:
    """``{raw file name: (SHA-256, "pinned" | "recorded")}`` for the files of ``spec`` that have one (a pinned
    digest wins over a recorded one; ``use_pinned=False``: the record alone)."""
    record = read_record(root)
    expected = {f: (record[f"{spec.raw_subdir}/{f}"], "recorded") for f in spec.raw_files
                if f"{spec.raw_subdir}/{f}" in record}
    if use_pinned:
        expected.update({f: (d, "pinned") for f, d in pinned_dataset_digests(spec).items()})
    return expected


def verify_raw_files(spec: DatasetSpec, root: Path, raw_dir: Path | None = None, use_pinned: bool = True) -> list[str]:
    """Check the raw files of ``spec`` in ``raw_dir`` (default ``<root>/<raw_subdir>``) against their pinned or
    recorded digests; the names of the files without either. A mismatch is a :class:`DataCorruptError`."""
    root = Path(root)
    raw_dir = Path(raw_dir) if raw_dir is not None else root / spec.raw_subdir
    expected = expected_digests(spec, root, use_pinned)
    unchecked = []
    for fname in spec.raw_files:
        if fname not in expected:
            unchecked.append(fname)
            continue
        digest, how = expected[fname]
        actual = sha256(raw_dir / fname)
        if actual != digest:
            source = ("SHA-256 pinned in simcalib/data/pinned_sha256.json:" if how == "pinned" else
                      f"SHA-256 recorded in {root / RECORD_NAME} when it was first downloaded:")
            raise checksum_refusal(f"{spec.name} raw file {fname} ({spec.raw_subdir}/{fname})", actual, digest, source)
    return unchecked


# ---------------------------------------------------------------------------------------------------------
# Downloads through torch_geometric's classes


class _RawFilesReady(Exception):
    """Raised by :func:`_download_only`'s ``download()`` (and ``process()``): the raw files are downloaded,
    nothing parsed yet."""


def _stop_before_processing(self) -> None:
    raise _RawFilesReady


def _pyg_class(spec: DatasetSpec):
    if spec.pyg_class == "FilteredWikipediaNetwork":
        from simcalib.data.filtered import FilteredWikipediaNetwork

        return FilteredWikipediaNetwork
    from torch_geometric import datasets as pyg_datasets

    return getattr(pyg_datasets, spec.pyg_class)


def mirror_class_url(spec: DatasetSpec, base_url: str) -> str | None:
    """The ``url`` attribute that makes the class of ``spec`` download ``<base>/<raw_subdir>/<file>``; None for
    a class whose ``download()`` cannot be pointed at that layout through its ``url`` (Actor)."""
    folder = f"{base_url.rstrip('/')}/{spec.raw_subdir}"
    if spec.pyg_class in ("Planetoid", "HeterophilousGraphDataset", "FilteredWikipediaNetwork"):
        return folder  # download(): f"{url}/{file}"
    if spec.pyg_class in ("CitationFull", "CoraFull"):
        return folder + "/{}.npz"  # download(): url.format(name)
    if spec.pyg_class in ("Amazon", "Coauthor"):
        return folder + "/"  # download(): url + file
    return None


def _download_only(spec: DatasetSpec, base_url: str | None):
    """A subclass of the dataset's torch_geometric class that downloads (from ``base_url`` when given) and
    stops as soon as its ``download()`` returns."""
    cls = _pyg_class(spec)
    attrs = {"process": _stop_before_processing}
    fetch_files = cls.download
    if base_url is not None:
        url = mirror_class_url(spec, base_url)
        if url is not None:
            attrs["url"] = url
        else:
            from torch_geometric.data import download_url

            folder = f"{base_url.rstrip('/')}/{spec.raw_subdir}"

            def fetch_files(self) -> None:
                for fname in self.raw_file_names:
                    download_url(f"{folder}/{fname}", self.raw_dir)

    def download(self) -> None:
        fetch_files(self)
        raise _RawFilesReady

    attrs["download"] = download
    return type(f"{cls.__name__}Download", (cls,), attrs)


def _run_class_download(spec: DatasetSpec, tmp_root: Path, base_url: str | None) -> None:
    cls = _download_only(spec, base_url)
    root = tmp_root / spec.root_subdir if spec.root_subdir is not None else tmp_root
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if spec.pyg_name is None:
                cls(str(root))
            else:
                cls(str(root), spec.pyg_name)
    except _RawFilesReady:
        return
    except (TypeError, AttributeError, NameError):
        raise  # programming errors keep their traceback
    except Exception as exc:  # urllib, fsspec and aiohttp raise many types: one message naming the source
        where = f"the mirror {base_url}" if base_url is not None else "its upstream source"
        raise DataMissingError(
            f"downloading {spec.name} ({', '.join(spec.raw_files)}) from {where} through torch_geometric's "
            f"{spec.pyg_class} failed ({type(exc).__name__}: {exc}). Check the network or the mirror URL (it must "
            f"serve <base>/{spec.raw_subdir}/<file>), or copy the files into <data root>/{spec.raw_subdir}/."
        ) from None
    raise RuntimeError(f"{spec.pyg_class} found processed files in a fresh folder {root}")


def download_raw_files(spec: DatasetSpec, root: str | os.PathLike, base_url: str | None = None) -> dict[str, str]:
    """Download the raw files of ``spec`` into ``<root>/<raw_subdir>`` through its torch_geometric class, checked
    against the pinned or recorded digests before they are moved there; digests of files with neither are
    added to the record. Returns ``{file: "pinned" | "recorded" | "new"}`` (how each file was checked)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    expected = expected_digests(spec, root)
    tmp_root = Path(tempfile.mkdtemp(prefix=".download-", dir=root))
    try:
        _run_class_download(spec, tmp_root, base_url)
        tmp_raw = tmp_root / spec.raw_subdir
        missing = [f for f in spec.raw_files if not (tmp_raw / f).is_file()]
        if missing:
            raise DataMissingError(f"downloading {spec.name} left no {', '.join(missing)} in {tmp_raw}")
        verify_raw_files(spec, root, tmp_raw)
        raw_dir = root / spec.raw_subdir
        raw_dir.mkdir(parents=True, exist_ok=True)
        new = {f"{spec.raw_subdir}/{f}": sha256(tmp_raw / f) for f in spec.raw_files if f not in expected}
        for fname in spec.raw_files:
            os.replace(tmp_raw / fname, raw_dir / fname)
        if new:
            write_record(root, new)
        return {f: expected[f][1] if f in expected else "new" for f in spec.raw_files}
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)


# ---------------------------------------------------------------------------------------------------------
# Plain files over HTTP(S)


def http_get(url: str, dest: Path) -> str:
    """Download ``url`` to ``dest`` (streamed); its SHA-256. A failure is a :class:`DataMissingError` naming the
    URL."""
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as response, open(dest, "wb") as out:
            for chunk in iter(lambda: response.read(1 << 20), b""):
                digest.update(chunk)
                out.write(chunk)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        if isinstance(exc, urllib.error.HTTPError):
            reason = f"HTTP {exc.code} {exc.reason}"
        else:
            reason = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
        dest.unlink(missing_ok=True)
        raise DataMissingError(f"downloading {url} failed ({reason}); check the network or the --from URL") from None
    return digest.hexdigest()
