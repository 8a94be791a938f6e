"""What data a study reads: its datasets, and which of them need the published GATS split files."""

from __future__ import annotations

from dataclasses import dataclass

from simcalib.data.gats_splits import published_datasets
from simcalib.experiment.splits import NO_SPLITS_DIR, PAPER_PROTOCOL, protocol_name


@dataclass(frozen=True)
class DataNeeds:
    datasets: tuple[str, ...]  # canonical dataset names, in the study's order
    fixed_splits: tuple[str, ...]  # those of ``datasets`` whose published GATS split files the study reads


def study_data_needs(study) -> DataNeeds:
    """The data a validated :class:`simcalib.experiment.study.Study` reads. Fixed splits are needed for the datasets with
    published GATS files when one of the study's label rates is the paper's protocol (``5_3f_85``: 15%, 3 folds,
    85% test) and the study does not switch fixed files off (``data.splits_dir: none``); every other split is
    generated from the study seed and needs no file."""
    datasets = tuple(study.datasets)
    splits_dir = study.spec.data.splits_dir
    if splits_dir is not None and str(splits_dir).lower() == NO_SPLITS_DIR:
        return DataNeeds(datasets, ())
    protocols = set()
    for rate in study.label_rates:
        settings = study.settings(rate)
        protocols.add(protocol_name(settings.fold_rate, settings.n_folds, settings.test_rate))
    if PAPER_PROTOCOL not in protocols:
        return DataNeeds(datasets, ())
    published = {name.lower() for name in published_datasets()}
    return DataNeeds(datasets, tuple(d for d in datasets if d.lower() in published))
