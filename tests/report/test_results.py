"""Reading a study folder: nested results.csv files, duplicates, label rates, malformed input."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from simcalib.errors import DataCorruptError, DataMissingError, SimCalibError
from simcalib.report.results import dedupe_identical, load_predictions, load_study_results

from .synthetic import write_benchmark


def test_every_results_file_below_the_folder_is_read_with_its_label_rate(synthetic_study):
    study = load_study_results(synthetic_study)
    assert set(study.rows["source"]) == {"Cora_GCN", "Citeseer_GAT", "efficiency/Cora_GCN_lr0.03",
                                         "efficiency/Cora_GCN_lr0.06"}
    assert study.main_label_rate == pytest.approx(0.15)
    assert set(study.main_rows()["label_rate"]) == {0.15}
    assert len(study.main_rows()) == 6 * 8 + 6 * 3
    assert set(study.predictions["label_rate"]) == {0.15}
    assert set(study.predictions["calibrator"]) >= {"SimCalib_w0.5", "SimCalib_l"}  # names with underscores


def test_a_run_repeated_in_one_folder_is_refused_unless_identical_repeats_are_deduplicated(tmp_path):
    write_benchmark(tmp_path / "a", "Cora", "GCN", ["UnCal"], predictions=False)
    write_benchmark(tmp_path / "copy_of_a", "Cora", "GCN", ["UnCal"], predictions=False)
    with pytest.raises(DataCorruptError, match=r"6 result row\(s\) repeat a run in the results.csv of a, copy_of_a "
                                               r"\(Cora/GCN/UnCal s0 i0 f0") as info:
        load_study_results(tmp_path)
    assert "\n" not in str(info.value) and "--dedupe" in str(info.value)
    with dedupe_identical():
        study = load_study_results(tmp_path)
    assert len(study.rows) == 6 and any("counted once (--dedupe)" in n for n in study.notes)
    assert set(study.rows["source"]) == {"a"}  # the first of the repeats
    # repeats that differ (here in their ECE) are refused even with --dedupe: there is no right one to keep
    frame = pd.read_csv(tmp_path / "copy_of_a" / "results.csv")
    frame.loc[0, "ece"] += 1
    frame.to_csv(tmp_path / "copy_of_a" / "results.csv", index=False)
    with dedupe_identical(), pytest.raises(DataCorruptError, match="they differ"):
        load_study_results(tmp_path)


def test_a_run_appended_twice_to_one_file_is_refused_naming_the_file(tmp_path):
    write_benchmark(tmp_path / "a", "Cora", "GCN", ["UnCal", "TS"], predictions=False)
    path = tmp_path / "a" / "results.csv"
    frame = pd.read_csv(path)
    pd.concat([frame, frame.iloc[[3]]]).to_csv(path, index=False)  # as two writers appending the same run
    with pytest.raises(DataCorruptError, match=f"{path}: 1 result row"):
        load_study_results(tmp_path)


def test_one_split_under_two_digests_is_refused_and_rows_without_digests_load(tmp_path):
    write_benchmark(tmp_path / "a", "Cora", "GCN", ["UnCal", "TS"], predictions=False)
    path = tmp_path / "a" / "results.csv"
    assert len(load_study_results(tmp_path).rows) == 12  # written without digests (as before they existed)
    frame = pd.read_csv(path)
    frame["split_digest"] = ["aaaa" if s == 0 else "bbbb" for s in frame["split"]]
    frame["data_digest"] = "cccc"
    frame.to_csv(path, index=False)
    assert len(load_study_results(tmp_path).rows) == 12  # one digest per split: fine
    frame.loc[(frame["split"] == 1) & (frame["init"] == 0) & (frame["fold"] == 2), "split_digest"] = "dddd"
    frame.to_csv(path, index=False)
    with pytest.raises(DataCorruptError, match="rows of one split were computed on different split_digest values "
                                               r"\(Cora 1 0.15\)"):
        load_study_results(tmp_path)
    frame["split_digest"] = "aaaa"
    frame.loc[0, "data_digest"] = "eeee"
    frame.to_csv(path, index=False)
    with pytest.raises(DataCorruptError, match="different data_digest values"):
        load_study_results(tmp_path)


def test_committed_results_without_the_definition_columns_still_load():
    from pathlib import Path

    files = sorted((Path(__file__).resolve().parents[2] / "reports").rglob("results.csv"))
    old = [f for f in files if "split_digest" not in pd.read_csv(f, nrows=0).columns]
    if not old:
        pytest.skip("no committed results.csv without the definition columns")
    rows = load_study_results(old[0]).rows
    assert len(rows) and rows["split_digest"].isna().all()


def test_several_folders_are_read_as_one_study_with_their_predictions(tmp_path):
    write_benchmark(tmp_path / "small" / "Cora_GCN", "Cora", "GCN", ["UnCal", "TS"], predictions=False)
    write_benchmark(tmp_path / "large" / "Photo_GCN", "Photo", "GCN", ["UnCal", "SimCalib"])
    write_benchmark(tmp_path / "large" / "Cora_GCN", "Cora", "GCN", ["UnCal"], predictions=False)  # repeats small's
    study = load_study_results([tmp_path / "small", tmp_path / "large"])
    assert len(study.rows) == 6 * 2 + 6 * 2  # Cora's UnCal rows once
    assert set(study.rows["source"]) == {str(tmp_path / "small" / "Cora_GCN"), str(tmp_path / "large" / "Photo_GCN"),
                                         str(tmp_path / "large" / "Cora_GCN")}
    assert any("counted once" in n for n in study.notes)
    assert set(study.predictions["dataset"]) == {"Photo"} and set(study.predictions["label_rate"]) == {0.15}
    assert str(tmp_path / "small") in str(study.root) and str(tmp_path / "large") in str(study.root)
    assert len(load_study_results([tmp_path / "small"]).rows) == 12
    with pytest.raises(DataMissingError):
        load_study_results([tmp_path / "small", tmp_path / "nowhere"])


def test_rows_with_nan_ece_are_left_out_with_a_note(tmp_path):
    write_benchmark(tmp_path / "a", "Cora", "GCN", ["UnCal", "TS"], predictions=False)
    frame = pd.read_csv(tmp_path / "a" / "results.csv")
    frame.loc[0, "ece"] = np.nan
    frame.to_csv(tmp_path / "a" / "results.csv", index=False)
    study = load_study_results(tmp_path)
    assert len(study.rows) == 11 and any("non-finite ECE" in n for n in study.notes)


def test_malformed_and_missing_inputs_raise_user_errors(tmp_path):
    with pytest.raises(DataMissingError):
        load_study_results(tmp_path / "nowhere")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "results.csv").write_text("dataset,backbone\nCora,GCN\n")
    with pytest.raises(DataCorruptError, match="missing column"):
        load_study_results(tmp_path)
    (tmp_path / "x.npz").write_bytes(b"not a zip")
    with pytest.raises(SimCalibError):
        load_predictions(tmp_path / "x.npz")


def test_an_empty_folder_is_an_empty_study_with_a_note(tmp_path):
    study = load_study_results(tmp_path)
    assert study.rows.empty and study.predictions.empty and "No results.csv" in study.notes[0]


def test_selecting_splits_keeps_only_their_rows_and_predictions_and_says_so(synthetic_study):
    from simcalib.errors import ConfigError
    from simcalib.report.results import select_splits

    study = load_study_results(synthetic_study)
    held_out = select_splits(study, [1])
    assert set(held_out.rows["split"]) == {1} and len(held_out.rows) == (study.rows["split"] == 1).sum()
    assert set(held_out.predictions["split"]) == {1}
    assert any("split(s) 1" in note for note in held_out.notes)
    assert select_splits(study, None) is study
    with pytest.raises(ConfigError, match="no results rows for split"):
        select_splits(study, [7])
