"""benchmarks/flow_pass_cost.py: the flow pass's measured seconds against the projection, from the files alone."""

import json

import pandas as pd
import pytest
from benchmark_scripts import load_script
from shared_paths import PROJECT_ROOT

flow_pass_cost = load_script(PROJECT_ROOT / "benchmarks" / "flow_pass_cost.py")

PROJECTION = """\
benchmark       runs backbones  s/epoch  epochs backbone s  calib s   run s  per calibrator: mean fit s (~ projected)
Photo GCN         30         0    0.092     921       10.0     5.0    15.0  TS=1.0 GETS=4.0
Photo GAT         15         0    0.279     595      20.0     3.0    23.0  TS=1.0 GETS=2.0
"""


def write_rows(folder, runs, seconds):
    rows = [{"split": 0, "init": 0, "fold": fold, "calibrator": name, "fit_seconds": seconds[name], "ece": 1.0}
            for fold in range(runs) for name in ("TS", "GETS", "WATS")]  # WATS: not projected, left out
    folder.mkdir(parents=True)
    pd.DataFrame(rows).to_csv(folder / "results.csv", index=False)
    return rows


@pytest.fixture
def projection(tmp_path):
    path = tmp_path / "projection.txt"
    path.write_text(PROJECTION)
    return flow_pass_cost.read_projection(path)


def test_the_projection_table_is_read_per_benchmark(projection):
    assert set(projection) == {"Photo_GCN", "Photo_GAT"}
    assert (projection["Photo_GCN"].backbone_s, projection["Photo_GCN"].calib_s) == (10.0, 5.0)
    assert projection["Photo_GAT"].per_calibrator == {"TS": 1.0, "GETS": 2.0}


def test_a_complete_benchmark_is_measured_from_completion_json_and_its_rows(tmp_path, projection):
    folder = tmp_path / "Photo_GCN"
    write_rows(folder, 3, {"TS": 2.0, "GETS": 6.0, "WATS": 100.0})
    stats = [{"run": f"r{i}", "train_seconds": s} for i, s in enumerate([10.0, 20.0, 30.0])]
    (folder / "completion.json").write_text(json.dumps({"benchmark_key": "k", "backbone_stats": stats}))
    measured = flow_pass_cost.read_benchmark(folder, set(projection["Photo_GCN"].per_calibrator))
    assert measured.state == "complete" and measured.runs_complete == 3
    assert measured.backbone_seconds == [10.0, 20.0, 30.0]
    assert measured.fits_per_run() == pytest.approx(8.0)  # TS 2 + GETS 6; WATS is not projected
    assert flow_pass_cost.remaining_seconds(measured, projection["Photo_GCN"]) == 0.0


def test_a_benchmark_under_way_is_measured_from_its_records_and_its_rest_projected(tmp_path, projection):
    folder = tmp_path / "Photo_GAT"
    folder.mkdir()
    records = [{"key": "pretrain-Photo_GAT_s0_i0_f0-x", "result": {"train_seconds": 40.0}},
               {"key": "calibrate-a", "result": {"calibrator": "TS", "fit_seconds": 1.5}},
               {"key": "calibrate-b", "result": [{"calibrator": "GETS", "fit_seconds": 3.0}]}]
    text = "".join(json.dumps(r) + "\n" for r in records) + '{"key": "calibrate-c", "res'  # cut off by a kill
    (folder / "finished-tasks.jsonl").write_text(text)
    measured = flow_pass_cost.read_benchmark(folder, set(projection["Photo_GAT"].per_calibrator))
    assert measured.state == "under way" and measured.runs_complete == 1
    assert measured.backbone_seconds == [40.0]
    assert measured.fits_per_run() == pytest.approx(4.5)
    # 74 backbones x 20 s, 74 TS fits x 1 s, 74 GETS fits x 2 s; scaled by (backbone, fit) ratios
    assert flow_pass_cost.remaining_seconds(measured, projection["Photo_GAT"]) == pytest.approx(74 * 23.0)
    assert flow_pass_cost.remaining_seconds(measured, projection["Photo_GAT"], (2.0, 1.0)) == \
        pytest.approx(74 * 40.0 + 74 * 3.0)
    assert flow_pass_cost.remaining_seconds(None, projection["Photo_GAT"]) == pytest.approx(75 * 23.0)


def test_a_folder_with_neither_file_is_not_measured(tmp_path):
    (tmp_path / "Photo_GCN").mkdir()
    assert flow_pass_cost.read_benchmark(tmp_path / "Photo_GCN", {"TS"}) is None


def test_a_file_without_the_table_is_refused_by_name(tmp_path):
    path = tmp_path / "other.txt"
    path.write_text("nothing here\n")
    with pytest.raises(SystemExit, match="other.txt: no benchmark line"):
        flow_pass_cost.read_projection(path)


def test_fits_per_run_under_way_sums_each_calibrators_mean_whatever_its_row_count():
    measured = flow_pass_cost.Measured("under way", fit_seconds={"TS": [1.0, 3.0], "GETS": [10.0]})
    assert measured.fits_per_run() == pytest.approx(12.0)  # 2 + 10, not (1 + 3 + 10) / 2


PROVENANCE = """\
flow_pass:
  large_benchmarks:
    stops:
      - {benchmark: Photo_GCN, from: 2026-11-28T23:00:00Z, to: 2026-11-28T23:10:00Z, in_flight: [s0 i0 f1 GETS]}
"""


def test_a_stop_of_the_pass_is_taken_off_the_fits_in_flight(tmp_path, projection):
    folder = tmp_path / "results" / "Photo_GCN"
    write_rows(folder, 3, {"TS": 2.0, "GETS": 6.0, "WATS": 1.0})
    rows = pd.read_csv(folder / "results.csv")
    rows.loc[(rows.fold == 1) & (rows.calibrator == "GETS"), "fit_seconds"] += 600.0  # stopped 10 minutes
    rows.to_csv(folder / "results.csv", index=False)
    (folder / "completion.json").write_text(json.dumps({"backbone_stats": [{"train_seconds": 1.0}]}))
    (tmp_path / "provenance.yaml").write_text(PROVENANCE)
    stops = flow_pass_cost.read_stops(tmp_path / "provenance.yaml")
    assert stops == {"Photo_GCN": {(0, 0, 1, "GETS"): 600.0}}
    calibrators = set(projection["Photo_GCN"].per_calibrator)
    assert flow_pass_cost.read_benchmark(folder, calibrators, stops["Photo_GCN"]).fit_seconds["GETS"] == [6.0] * 3
    assert flow_pass_cost.read_benchmark(folder, calibrators).fit_seconds["GETS"] == [6.0, 606.0, 6.0]
    assert flow_pass_cost.read_stops(tmp_path / "absent.yaml") == {}


def test_a_stop_naming_a_task_it_cannot_read_is_refused(tmp_path):
    (tmp_path / "provenance.yaml").write_text(PROVENANCE.replace("s0 i0 f1 GETS", "GETS s0"))
    with pytest.raises(SystemExit, match="'GETS s0' is not"):
        flow_pass_cost.read_stops(tmp_path / "provenance.yaml")


def test_a_benchmark_with_no_complete_run_sets_only_its_backbones_against_the_projection(projection):
    begun = flow_pass_cost.Measured("under way", backbone_seconds=[20.0, 30.0], fit_seconds={"TS": [1.0]})
    line = flow_pass_cost.benchmark_line("Photo GCN", begun, projection["Photo_GCN"])
    assert "25.0 (20-30) vs   10.0 2.50x" in line  # backbones: measured against projected
    assert "fits not measured (2 backbones)" in line and "0.20x" not in line  # TS alone is not the run's fits
    begun.runs_complete = 1
    begun.fit_seconds["GETS"] = [4.0]
    line = flow_pass_cost.benchmark_line("Photo GCN", begun, projection["Photo_GCN"])
    assert "5.0 vs    5.0 1.00x" in line and "not measured" not in line
