"""study/data_efficiency*.yaml: valid study files, each sweeping the label rate from 1% to 15% for the paper's
data-efficiency calibrators in one file."""

from __future__ import annotations

from pathlib import Path

import pytest

from simcalib.report.figures import EFFICIENCY_METHODS

STUDY_DIR = Path(__file__).resolve().parents[2] / "study"


@pytest.mark.parametrize("name, datasets", [("data_efficiency", ["Cora", "CS"]),
                                            ("data_efficiency_corafull", ["CoraFull"])])
def test_data_efficiency_studies_sweep_one_to_fifteen_percent_for_the_papers_calibrators(name, datasets):
    study_module = pytest.importorskip("simcalib.experiment.study")
    study = study_module.load_study(STUDY_DIR / f"{name}.yaml")
    assert [c.name for c in study.calibrators] == list(EFFICIENCY_METHODS)
    assert study.backbones == ["GCN", "GAT"] and study.datasets == datasets
    rates = [round(study.settings(rate).label_rate, 6) for rate in study.label_rates]
    assert min(rates) == 0.01 and max(rates) == 0.15 and len(rates) >= 5
    assert len({study.benchmark_dir(d, b, r) for d, b in study.benchmarks() for r in study.label_rates}) == \
        len(study.benchmarks()) * len(rates)  # one folder per benchmark and rate, below one output the report reads
