"""benchmarks/cost_table.py: measured_study_cost.py's table read once for every script that compares with it."""

from __future__ import annotations

import pytest
from benchmark_scripts import load_script
from shared_paths import PROJECT_ROOT

TABLE = """\
# python benchmarks/measured_study_cost.py ...
benchmark       runs backbones  s/epoch  epochs backbone s  calib s   run s calib s after run s after scaled  per calibrator: mean fit s
Cora GCN          75        76    0.014     785       10.8     20.6    31.4          17.6        28.4   5/12  UnCal=0.0 TS=0.2
Computers GAT     15       15*    1.897     882     1672.5     87.9  1760.4  UnCal=0.0
Photo GCN         30         0    0.092     921       84.6    112.1   196.7  TS=0.5 GETS_holdout=34.3~
CS GAT             0         0  not measured (no cached backbone or earlier line)

the whole of study/offline.yaml (75 runs per benchmark) on the 12 benchmarks measured: 80.4 CPU-hours, 40.2 h wall
the whole of study/offline.yaml after the scaling: 70.0 CPU-hours
"""


@pytest.fixture(scope="module")
def cost_table():
    return load_script(PROJECT_ROOT / "benchmarks" / "cost_table.py")


def test_each_layout_of_the_benchmark_line_is_read(cost_table, tmp_path):
    path = tmp_path / "cost.txt"
    path.write_text(TABLE)
    table = cost_table.read_cost_table(path)
    assert set(table) == {("Cora", "GCN"), ("Computers", "GAT"), ("Photo", "GCN")}  # "not measured" skipped
    cora = table["Cora", "GCN"]
    assert (cora.runs, cora.backbones, cora.s_per_epoch, cora.epochs) == (75, 76, 0.014, 785.0)
    assert (cora.backbone_s, cora.calib_s, cora.calib_s_after) == (10.8, 20.6, 17.6)
    assert cora.per_calibrator == {"UnCal": 0.0, "TS": 0.2} and cora.run_s == pytest.approx(31.4)
    computers = table["Computers", "GAT"]  # cached backbones of another machine (*), no across-runs columns
    assert (computers.backbones, computers.backbone_s, computers.calib_s_after) == (15, 1672.5, None)
    assert table["Photo", "GCN"].per_calibrator == {"TS": 0.5, "GETS_holdout": 34.3}  # "~": projected, a number
    assert cost_table.read_total_hours(path) == 80.4  # the first total


def test_a_file_without_a_benchmark_line_is_named(cost_table, tmp_path):
    path = tmp_path / "other.txt"
    path.write_text("benchmark runs\nnothing here\n")
    with pytest.raises(SystemExit, match="other.txt: no benchmark line"):
        cost_table.read_cost_table(path)
    assert cost_table.read_total_hours(path) is None


@pytest.mark.parametrize("name", ["measured_study_cost.txt", "measured_study_cost_today_scaled.txt",
                                  "measured_study_cost_newer_measured_scaled.txt"])
def test_the_committed_projections_read_in_full(cost_table, name):
    table = cost_table.read_cost_table(PROJECT_ROOT / "reports" / "performance" / name)
    assert len(table) == 12 and all(cost.backbone_s > 0 and cost.per_calibrator for cost in table.values())
