"""What a study needs fetched: its datasets, and the published GATS split files when it runs the paper's
protocol (15% labelled, 3 folds, 85% test)."""

from __future__ import annotations

from pathlib import Path

from simcalib.experiment.needs import DataNeeds, study_data_needs
from simcalib.experiment.study import load_study, study_from_dict

STUDIES = Path(__file__).resolve().parents[2] / "study"


def _study(**runs):
    return study_from_dict({"name": "needs", "benchmarks": {"datasets": ["cora", "Actor", "pubmed"]},
                            "calibrators": ["TS"], "runs": {"splits": 1, "inits": 1, **runs}})


def test_the_quick_and_heterophily_studies():
    assert study_data_needs(load_study(STUDIES / "quick.yaml")) == DataNeeds(("Cora", "Citeseer"), ("Cora", "Citeseer"))
    heterophily = study_data_needs(load_study(STUDIES / "heterophily.yaml"))
    assert heterophily.fixed_splits == () and "minesweeper" in heterophily.datasets


def test_fixed_splits_only_for_the_paper_protocol_and_the_published_datasets():
    assert study_data_needs(_study()) == DataNeeds(("Cora", "Actor", "Pubmed"), ("Cora", "Pubmed"))
    assert study_data_needs(_study(label_rate=0.05)).fixed_splits == ()
    assert study_data_needs(_study(label_rate=[0.05, 0.15])).fixed_splits == ("Cora", "Pubmed")
    study = _study()
    study.spec.data.splits_dir = "none"  # fixed files switched off
    assert study_data_needs(study) == DataNeeds(("Cora", "Actor", "Pubmed"), ())
