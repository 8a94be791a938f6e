"""Node splits of the GATS protocol (PROTOCOL section 2).

The labelled set L is drawn per class: ``int(fold_rate * n_folds * n_c)`` nodes of class ``c`` are sampled,
the per-class samples are concatenated in class order and dealt round-robin into ``n_folds`` folds
(``fold k = samples[k::n_folds]``). The test set takes ``int(test_rate * r_c)`` of the ``r_c`` remaining nodes
of each class, so a few nodes belong to no set. For split ``s`` and fold ``f``, the calibration
(= backbone validation) set is fold ``f`` and the training set is the other folds.

The paper reuses GATS's fixed split files (``gats_5_3f_85``: 5% per fold, 3 folds, 85% test); those are
loaded when available so runs use the exact published splits, otherwise splits are generated from a seed.
Where fixed files exist for a dataset and protocol, a split index without a file (e.g. split 7 of 5 files) is
refused unless generated splits are allowed explicitly: silently drawing it would mix the published splits
with others in one table. :func:`split_sources` says which splits of a selection are fixed and which drawn.

Where the fixed files are looked for (:func:`resolve_splits_dir`): an explicit folder (``--splits-dir``, a
study's ``data.splits_dir``); else ``$SIMCALIB_SPLITS_DIR``; else ``../shared/datasets/splits`` beside the
checkout; else ``<data root>/splits``. For the paper's protocol (``5_3f_85``) a benchmark without fixed files is
refused unless generated splits are allowed explicitly (``--generated-splits``, ``runs.generated_splits``);
other label rates have no published files and are always generated. ``none`` as the folder means "no fixed
files". Every results row records which split it ran on (:func:`split_digest`, :func:`split_source_label`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simcalib.data.loading import data_root as default_data_root
from simcalib.errors import ConfigError, DataCorruptError
from simcalib.seeding import derive_seed

SPLITS_ENV = "SIMCALIB_SPLITS_DIR"
PAPER_PROTOCOL = "5_3f_85"  # the protocol of the GATS fixed split files (5% per fold, 3 folds, 85% test)
NO_SPLITS_DIR = "none"  # as a splits folder: use no fixed files
# the fixed splits as they sit beside a checkout of this repository (../shared/datasets/splits)
CHECKOUT_SPLITS = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "splits"


@dataclass(frozen=True)
class Split:
    """One draw of the labelled folds and the test set (int64 node indices)."""

    folds: tuple[np.ndarray, ...]
    test: np.ndarray
    source: str = "generated"

    @property
    def n_folds(self) -> int:
        return len(self.folds)

    def labelled(self) -> np.ndarray:
        return np.concatenate(self.folds)

    def fold_indices(self, fold: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(train, calibration, test) indices when ``fold`` is the calibration fold."""
        if not 0 <= fold < self.n_folds:
            raise ConfigError(f"fold {fold} out of range: this split has {self.n_folds} folds (0..{self.n_folds - 1})")
        train = np.concatenate([f for i, f in enumerate(self.folds) if i != fold])
        return np.sort(train), np.sort(self.folds[fold]), np.sort(self.test)


def split_digest(split: Split) -> str:
    """16 hex digits of SHA-256 over the split's node indices: each fold, then the test set, in file order."""
    digest = hashlib.sha256()
    for part in (*split.folds, split.test):
        array = np.ascontiguousarray(part, dtype="<i8")
        digest.update(len(array).to_bytes(8, "little"))
        digest.update(array.tobytes())
    return digest.hexdigest()[:16]


def split_source_label(split: Split) -> str:
    """``fixed:<file>`` for a split read from a fixed file, ``generated`` for one drawn from the seed."""
    return "generated" if split.source.startswith("generated") else f"fixed:{split.source}"


def generate_split(
    labels: np.ndarray,
    seed: int,
    fold_rate: float = 0.05,
    n_folds: int = 3,
    test_rate: float = 0.85,
) -> Split:
    """Draw one split by the GATS rule, deterministically from ``seed``."""
    labels = np.asarray(labels)
    if not 0 < fold_rate * n_folds < 1 or not 0 < test_rate <= 1:
        raise ConfigError(
            f"invalid label rates: fold_rate * n_folds = {fold_rate * n_folds:.3f} must be in (0, 1) "
            f"and test_rate = {test_rate} in (0, 1]"
        )
    rng = np.random.default_rng(seed)
    classes = np.unique(labels)
    per_fold_total = fold_rate * n_folds  # same float product as the reference generator
    labelled = []
    for c in classes:
        members = np.flatnonzero(labels == c)
        labelled.append(rng.choice(members, int(per_fold_total * len(members)), replace=False))
    labelled = np.concatenate(labelled)
    folds = tuple(np.asarray(labelled[k::n_folds], dtype=np.int64) for k in range(n_folds))
    taken = np.zeros(len(labels), dtype=bool)
    taken[labelled] = True
    test = []
    for c in classes:
        remaining = np.flatnonzero((labels == c) & ~taken)
        test.append(rng.choice(remaining, int(test_rate * len(remaining)), replace=False))
    return Split(folds=folds, test=np.concatenate(test).astype(np.int64), source=f"generated(seed={seed})")


def split_seed(study_seed: int, dataset: str, split: int, fold_rate: float, n_folds: int) -> int:
    return derive_seed("split", study_seed, dataset, split, fold_rate, n_folds)


def canonical_fold_rate(fold_rate: float) -> float:
    """``fold_rate`` without the float noise of a division: the nearest number of at most 10 decimals when it lies
    within 4 ulps, else ``fold_rate`` itself.

    A label rate of 15% over 3 folds is 0.15 / 3 = 0.049999999999999996 in floats, and a seed derived from that text
    differs from the seed of 0.05: a study file (``runs.label_rate: 0.15``) and the benchmark command (5% per fold)
    would draw different splits for the same runs. Both draw the split of 0.05. A rate such as 0.01 / 3 has no
    short form and is kept, digit for digit."""
    snapped = round(fold_rate, 10)
    return snapped if math.isclose(snapped, fold_rate, rel_tol=4 * sys.float_info.epsilon, abs_tol=0.0) else fold_rate


def protocol_name(fold_rate: float, n_folds: int, test_rate: float) -> str:
    """Folder name of a split protocol, as the GATS files use: ``5_3f_85``.

    Rates are written exactly (up to float noise), so e.g. a 16% label rate (5.333% per fold) never maps
    onto the 15% files.
    """
    return f"{round(fold_rate * 100, 6):g}_{n_folds}f_{round(test_rate * 100, 6):g}"


def resolve_splits_dir(explicit: str | os.PathLike | None = None,
                       data_root: str | os.PathLike | None = None) -> tuple[Path | None, str]:
    """(fixed-splits folder or None, where it came from): ``explicit``; else ``$SIMCALIB_SPLITS_DIR``; else
    ``../shared/datasets/splits`` beside the checkout; else ``<data root>/splits`` when it exists."""
    if explicit:
        if str(explicit).lower() == NO_SPLITS_DIR:
            return None, "no fixed splits (--splits-dir none)"
        return Path(explicit), "given"
    value = os.environ.get(SPLITS_ENV)
    if value:
        if value.lower() == NO_SPLITS_DIR:
            return None, f"no fixed splits (${SPLITS_ENV}=none)"
        return Path(value), f"${SPLITS_ENV}"
    if CHECKOUT_SPLITS.is_dir():
        return CHECKOUT_SPLITS, "beside the checkout"
    cached = default_data_root(data_root) / "splits"
    if cached.is_dir():
        return cached, "cached under the data root"
    return None, "no splits folder found"


def default_splits_dir(data_root: str | os.PathLike | None = None) -> Path | None:
    """The fixed-splits folder when none is given explicitly (:func:`resolve_splits_dir`)."""
    return resolve_splits_dir(None, data_root)[0]


def find_split_file(splits_dir: Path | None, dataset: str, split: int, protocol: str) -> Path | None:
    """The fixed split file for (dataset, split, protocol), if ``splits_dir`` holds one.

    ``splits_dir`` is either a protocol folder (``.../gats_5_3f_85`` with ``<Dataset>/split_<s>.npz``
    inside) or its parent. A folder whose name does not say its protocol is taken to hold the paper's
    ``5_3f_85`` splits. Dataset folders are matched case-insensitively (``Citeseer`` vs ``CiteSeer``).
    """
    if splits_dir is None:
        return None
    splits_dir = Path(splits_dir)
    if (splits_dir / f"gats_{protocol}").is_dir():
        splits_dir = splits_dir / f"gats_{protocol}"
    elif splits_dir.name.startswith("gats_"):
        if splits_dir.name != f"gats_{protocol}":
            return None
    elif protocol != "5_3f_85":
        return None
    if not splits_dir.is_dir():
        return None
    for folder in splits_dir.iterdir():
        if folder.is_dir() and folder.name.lower() == dataset.lower():
            path = folder / f"split_{split}.npz"
            return path if path.is_file() else None
    return None


def fixed_split_indices(splits_dir: Path | None, dataset: str, protocol: str) -> list[int]:
    """The split indices that have a fixed file for (dataset, protocol)."""
    indices = []
    for index in range(1000):  # files are numbered 0..n-1 (GATS writes 5)
        if find_split_file(splits_dir, dataset, index, protocol) is None:
            break
        indices.append(index)
    return indices


def split_sources(dataset: str, splits: list[int], splits_dir: Path | None, fold_rate: float = 0.05,
                  n_folds: int = 3, test_rate: float = 0.85, generated_splits: bool = False) -> dict[int, str]:
    """``{split: "fixed" | "generated"}`` for the selected splits; a ConfigError (before any work) when that
    would mix fixed files with generated splits and ``generated_splits`` does not allow it."""
    protocol = protocol_name(fold_rate, n_folds, test_rate)
    fixed = fixed_split_indices(splits_dir, dataset, protocol)
    missing = [s for s in splits if s not in fixed]
    if not fixed and protocol == PAPER_PROTOCOL and not generated_splits:
        where = (f"{splits_dir} has no gats_{protocol}/{dataset}/split_<s>.npz" if splits_dir is not None else
                 f"no splits folder is set or found (${SPLITS_ENV}, ../shared/datasets/splits beside the checkout, "
                 "<data root>/splits)")
        raise ConfigError(
            f"{dataset}: the paper's fixed GATS splits (gats_{protocol}) are not available: {where}; point "
            f"--splits-dir (or ${SPLITS_ENV}, study file: data.splits_dir) at the GATS split files, or use splits "
            "drawn from the seed instead with --generated-splits (study file: runs.generated_splits: true)")
    if fixed and missing and not generated_splits:
        raise ConfigError(
            f"{dataset}: split(s) {', '.join(map(str, missing))} have no fixed split file (there are {len(fixed)}: "
            f"split_0..{len(fixed) - 1} of gats_{protocol} in {splits_dir}); select splits 0..{len(fixed) - 1}, or "
            "allow generated splits for the others (--generated-splits; study file: runs.generated_splits: true)")
    return {s: "fixed" if s in fixed else "generated" for s in splits}


def record_split_sources(out: Path, sources: dict[int, str]) -> None:
    """``OUT/splits.json``: which splits came from fixed files and which were generated (merged over runs of
    the same folder, so a resumed or extended benchmark keeps the record of every split it used). A split
    recorded with another source is refused (ConfigError), and the file is left as it is."""
    out = Path(out)
    path = out / "splits.json"
    recorded = check_split_sources(out, sources)
    merged = {**recorded, **{str(split): source for split, source in sources.items()}}
    if merged == recorded and path.is_file():
        return
    out.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(dict(sorted(merged.items(), key=lambda kv: int(kv[0]))), indent=1) + "\n")
    tmp.replace(path)


def check_split_sources(out: Path, sources: dict[int, str]) -> dict[str, str]:
    """The record of ``OUT/splits.json`` (empty when absent); ConfigError when it names another source for one
    of ``sources``' splits."""
    out = Path(out)
    path = out / "splits.json"
    try:
        recorded = json.loads(path.read_text()) if path.is_file() else {}
    except ValueError:
        raise ConfigError(f"{path} is not valid JSON; restore it (it records each split's source) or delete it") from None
    changed = {str(s): (recorded[str(s)], source) for s, source in sources.items()
               if str(s) in recorded and recorded[str(s)] != source}
    if changed:
        what = ", ".join(f"split {s}: {old} there, {new} now" for s, (old, new) in sorted(changed.items()))
        raise ConfigError(f"{path}: the results in {out} were computed on other splits ({what}); use the split "
                          "source of those results (--splits-dir, $SIMCALIB_SPLITS_DIR, --generated-splits) or "
                          "another output folder")
    return recorded


def load_split_file(path: Path, num_nodes: int) -> Split:
    """Load a fixed split (keys ``fold0``.. ``foldK`` and ``test``), validating it against the graph."""
    try:
        with np.load(path) as npz:
            keys = sorted(k for k in npz.files if k.startswith("fold"))
            folds = tuple(np.asarray(npz[k], dtype=np.int64) for k in keys)
            test = np.asarray(npz["test"], dtype=np.int64)
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError) as exc:
        raise DataCorruptError(
            f"split file {path} is unreadable or lacks keys fold0..foldK/test ({exc}); "
            f"restore it or unset {SPLITS_ENV} to generate splits instead"
        ) from None
    if not folds:
        raise DataCorruptError(f"split file {path} has no fold arrays")
    everything = np.concatenate([*folds, test])
    if everything.min(initial=0) < 0 or everything.max(initial=0) >= num_nodes:
        raise DataCorruptError(
            f"split file {path} indexes nodes outside 0..{num_nodes - 1}: it belongs to another graph"
        )
    if len(np.unique(everything)) != len(everything):
        raise DataCorruptError(f"split file {path} has overlapping folds/test indices")
    return Split(folds=folds, test=test, source=str(path))


def get_split(
    dataset: str,
    labels: np.ndarray,
    split: int,
    study_seed: int,
    splits_dir: Path | None = None,
    fold_rate: float = 0.05,
    n_folds: int = 3,
    test_rate: float = 0.85,
    generated_splits: bool = False,
) -> Split:
    """The fixed split file when one exists for this protocol, else a generated one (refused, unless
    ``generated_splits``, when other splits of this dataset and protocol have fixed files)."""
    protocol = protocol_name(fold_rate, n_folds, test_rate)
    path = find_split_file(splits_dir, dataset, split, protocol)
    if path is not None:
        return load_split_file(path, len(labels))
    split_sources(dataset, [split], splits_dir, fold_rate, n_folds, test_rate, generated_splits)
    fold_rate = canonical_fold_rate(fold_rate)
    seed = split_seed(study_seed, dataset, split, fold_rate, n_folds)
    return generate_split(labels, seed, fold_rate, n_folds, test_rate)
