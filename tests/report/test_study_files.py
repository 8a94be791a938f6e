"""study/data_efficiency/*.yaml: valid study files that together sweep the label rate from 1% to 15%."""

from __future__ import annotations

from pathlib import Path

import pytest

from simcalib.report.figures import EFFICIENCY_METHODS

STUDY_DIR = Path(__file__).resolve().parents[2] / "study" / "data_efficiency"


def test_data_efficiency_studies_sweep_one_to_fifteen_percent_for_the_papers_calibrators():
    study_module = pytest.importorskip("simcalib.study")
    files = sorted(STUDY_DIR.glob("*.yaml"))
    assert files, f"no study files in {STUDY_DIR}"
    by_dataset: dict[str, set[float]] = {}
    outputs = set()
    for path in files:
        study = study_module.load_study(path)
        assert [c.name for c in study.calibrators] == list(EFFICIENCY_METHODS)
        assert study.backbones == ["GCN", "GAT"] and len(study.datasets) == 1
        assert study.output.parent == Path("results/data_efficiency")  # one folder the report reads as a sweep
        outputs.add(study.output)
        by_dataset.setdefault(study.datasets[0], set()).add(round(study.settings().label_rate, 6))
    assert len(outputs) == len(files)
    assert set(by_dataset) == {"CoraFull", "Cora"}
    for rates in by_dataset.values():
        assert min(rates) == 0.01 and max(rates) == 0.15 and len(rates) >= 5
