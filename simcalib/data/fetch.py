"""Fetching a dataset ahead of time: download (verified), then process it once in the data root."""

from __future__ import annotations

import os
from dataclasses import dataclass

from simcalib.data.download import download_raw_files, verify_raw_files
from simcalib.data.loading import GraphData, data_root, load_dataset
from simcalib.data.registry import get_spec


@dataclass(frozen=True)
class FetchedDataset:
    graph: GraphData
    action: str  # "downloaded", "raw files present" or "processed files present"
    checks: dict[str, str]  # raw file -> "pinned" | "recorded" | "new" (recorded now) | "unchecked"


def fetch_dataset(name: str, root: str | os.PathLike | None = None, base_url: str | None = None) -> FetchedDataset:
    """Make dataset ``name`` loadable from the data root without network access: its raw files downloaded
    through its torch_geometric class (from ``base_url``, a mirror in torch_geometric's raw layout, when given)
    and checked (:func:`simcalib.data.download.download_raw_files`), or, when already there, checked against
    their pinned or recorded digests; then processed once by :func:`load_dataset`."""
    spec = get_spec(name)
    root = data_root(root)
    raw_dir = root / spec.raw_subdir
    processed = (raw_dir.parent / "processed").is_dir() and any((raw_dir.parent / "processed").glob("data*.pt"))
    have_raw = all((raw_dir / f).is_file() for f in spec.raw_files)
    if have_raw:
        unchecked = verify_raw_files(spec, root)
        checks = {f: "unchecked" if f in unchecked else "checked" for f in spec.raw_files}
        action = "processed files present" if processed else "raw files present"
    elif processed:
        checks, action = {}, "processed files present"
    else:
        checks, action = download_raw_files(spec, root, base_url), "downloaded"
    graph = load_dataset(spec.name, root=root, download=False)  # raw or processed files are in the root now
    return FetchedDataset(graph, action, checks)
