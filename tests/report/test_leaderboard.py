"""The leaderboard and the recommendation on synthetic rows whose ranks, tests and accuracy changes are known."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from simcalib.errors import ConfigError, DataMissingError
from simcalib.report.leaderboard import (
    ACCURACY_BOUND,
    Family,
    build_leaderboard,
    common_runs,
    family_leaderboard,
    read_families,
    recommend,
    select_classes,
    write_leaderboard,
)
from simcalib.store.results_store import RESULT_COLUMNS


def rows_for(dataset: str, means: dict[str, float], accuracy: dict[str, float] | None = None, splits: int = 5,
             folds: int = 3, noise: float = 0.01, seed: int = 0, backbone: str = "GCN", roc_auc: bool = False):
    """Results rows of one benchmark: every metric of a calibrator is its mean plus small noise, per run."""
    rng = np.random.default_rng(seed)
    records = []
    for split in range(splits):
        for fold in range(folds):
            shift = rng.normal(0, noise, size=len(means))
            for (name, mean), e in zip(means.items(), shift):
                acc = (accuracy or {}).get(name, 80.0)
                records.append({"dataset": dataset, "backbone": backbone, "calibrator": name, "split": split,
                                "init": 0, "fold": fold, "ece": mean + e, "nll": mean / 10 + e / 10,
                                "brier": mean / 100 + e / 100, "accuracy": acc, "fit_seconds": 0.1,
                                "label_rate": 0.15, "roc_auc": 70.0 if roc_auc else np.nan,
                                "backbone_digest": f"{dataset}{split}{fold}"})
    return pd.DataFrame(records)


def board_of(rows, n_resamples=200):
    board, detail, notes = family_leaderboard(rows, "f", n_resamples=n_resamples)
    return board.set_index("calibrator"), detail, notes


def test_mean_ranks_over_benchmarks():
    rows = pd.concat([rows_for("A", {"UnCal": 9.0, "TS": 5.0, "X": 2.0}),
                      rows_for("B", {"UnCal": 9.0, "TS": 2.0, "X": 5.0}, seed=1)])
    board, detail, _ = board_of(rows)
    assert board.loc["X", "ece_rank"] == 1.5  # 1st on A, 2nd on B
    assert board.loc["TS", "ece_rank"] == 1.5
    assert board.loc["UnCal", "ece_rank"] == 3.0
    # the gaps are far larger than the noise: no resample reorders them, the interval is the point
    assert board.loc["UnCal", "ece_rank_low"] == board.loc["UnCal", "ece_rank_high"] == 3.0
    assert (board.loc["X", ["ece_below_ts", "ece_above_ts"]] == [1, 1]).all()
    assert board.loc["UnCal", "ece_above_ts"] == 2
    picked = detail[(detail["dataset"] == "A") & (detail["calibrator"] == "X") & (detail["metric"] == "ece")]
    assert picked["rank"].item() == 1.0 and picked["diff_vs_ts"].item() == pytest.approx(-3.0, abs=0.05)


def test_interval_covers_a_close_contest():
    rows = rows_for("A", {"UnCal": 9.0, "TS": 5.0, "X": 5.0}, noise=0.5)
    board, _, _ = board_of(rows, n_resamples=500)
    assert board.loc["X", "ece_rank_low"] == 1.0 and board.loc["X", "ece_rank_high"] == 2.0


def test_recommendation_keeps_out_a_calibrator_worse_than_ts_on_one_benchmark():
    good = {"UnCal": 9.0, "TS": 5.0, "X": 1.0, "Y": 3.0}
    rows = pd.concat([rows_for("A", good), rows_for("B", {"UnCal": 9.0, "TS": 2.0, "X": 4.0, "Y": 1.5}, seed=1),
                      rows_for("C", good, seed=2), rows_for("D", good, seed=3)])
    board, _, _ = family_leaderboard(rows, "f", n_resamples=100)
    assert list(board["calibrator"].iloc[:2]) == ["X", "Y"]  # mean ECE ranks (1+3+1+1)/4 and (2+1+2+2)/4
    pick = recommend(board, Family("f", "F", ("x",)))
    assert pick["calibrator"] == "Y"  # X is significantly above TS on B
    assert pick["candidates"] == 2  # Y and TS


def test_recommendation_keeps_out_a_calibrator_that_moves_accuracy():
    accuracy = {"X": 80.0 + 2 * ACCURACY_BOUND}
    rows = pd.concat([rows_for("A", {"UnCal": 9.0, "TS": 5.0, "X": 1.0}, accuracy),
                      rows_for("B", {"UnCal": 9.0, "TS": 5.0, "X": 1.0}, seed=1)])
    board, _, _ = family_leaderboard(rows, "f", n_resamples=100)
    row = board.set_index("calibrator").loc["X"]
    assert row["accuracy_change"] == pytest.approx(ACCURACY_BOUND) and row["accuracy_change_max_abs"] == pytest.approx(
        2 * ACCURACY_BOUND)
    assert recommend(board, Family("f", "F", ("x",)))["calibrator"] == "TS"


def test_common_runs_drop_incomplete_runs_and_mixed_backbones():
    rows = rows_for("A", {"UnCal": 9.0, "TS": 5.0, "X": 2.0})
    rows = rows.drop(rows.index[(rows["split"] == 0) & (rows["fold"] == 0) & (rows["calibrator"] == "X")])
    rows.loc[(rows["split"] == 1) & (rows["fold"] == 0) & (rows["calibrator"] == "TS"), "backbone_digest"] = "other"
    kept = common_runs(rows, ["UnCal", "TS", "X"])
    assert len(kept) == 3 * (15 - 2)


def test_calibrators_on_some_benchmarks_are_not_ranked():
    rows = pd.concat([rows_for("A", {"UnCal": 9.0, "TS": 5.0, "X": 2.0}), rows_for("B", {"UnCal": 9.0, "TS": 5.0})])
    board, _, notes = board_of(rows)
    assert "X" not in board.index and "X" in notes[0]


def test_family_needs_ts_and_uncal():
    with pytest.raises(DataMissingError, match="TS and UnCal"):
        family_leaderboard(rows_for("A", {"TS": 5.0, "X": 2.0}), "f")


def test_select_classes_splits_binary_benchmarks():
    rows = pd.concat([rows_for("A", {"UnCal": 9.0, "TS": 5.0}), rows_for("B", {"UnCal": 9.0, "TS": 5.0}, roc_auc=True)])
    assert set(select_classes(rows, "binary")["dataset"]) == {"B"}
    assert set(select_classes(rows, "multi-class")["dataset"]) == {"A"}
    assert set(select_classes(rows, "any")["dataset"]) == {"A", "B"}


def write_rows(folder, frame):
    folder.mkdir(parents=True)
    frame.reindex(columns=RESULT_COLUMNS).to_csv(folder / "results.csv", index=False)


def test_build_and_write_from_a_manifest(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_rows(tmp_path / "res" / "A_GCN", rows_for("A", {"UnCal": 9.0, "TS": 5.0, "X": 2.0}))
    write_rows(tmp_path / "res" / "B_GCN", rows_for("B", {"UnCal": 9.0, "TS": 5.0, "X": 2.0}, roc_auc=True, seed=3))
    (tmp_path / "leaderboard.yaml").write_text(
        "- {name: multi, title: Multi, results: res, classes: multi-class, evidence: [res/A_GCN/results.csv]}\n"
        "- {name: two, title: Two, results: [res], classes: binary}\n")
    result = build_leaderboard(read_families("leaderboard.yaml"), n_resamples=50)
    paths = write_leaderboard(result, tmp_path)
    recommendation = pd.read_csv(paths[3])
    assert list(recommendation[["family", "calibrator"]].itertuples(index=False, name=None)) == [("multi", "X"),
                                                                                                ("two", "X")]
    text = paths[0].read_text()
    assert text.splitlines()[0].startswith("# ") and "| X | 1.0 [1.0, 1.0]" in text
    assert "[results.csv](../res/A_GCN/results.csv)" in text
    assert set(pd.read_csv(paths[1])["family"]) == {"multi", "two"}


def test_bad_manifest_is_refused(tmp_path):
    (tmp_path / "m.yaml").write_text(f"- {{name: a, title: A, results: {tmp_path}, classes: ternary}}\n")
    with pytest.raises(ConfigError, match="classes must be one of"):
        read_families(tmp_path / "m.yaml")
    (tmp_path / "m.yaml").write_text("- {name: a, results: x}\n")
    with pytest.raises(ConfigError, match="name, title, results"):
        read_families(tmp_path / "m.yaml")


def test_command_writes_the_leaderboard_and_the_readme_block(tmp_path, monkeypatch, capsys):
    from simcalib.cli import main
    from simcalib.report.summary import BEGIN, END

    monkeypatch.chdir(tmp_path)
    write_rows(tmp_path / "res" / "A_GCN", rows_for("A", {"UnCal": 9.0, "TS": 5.0, "X": 2.0}))
    (tmp_path / "board").mkdir()
    (tmp_path / "board" / "families.yaml").write_text("- {name: all, title: All graphs, results: res}\n")
    begin = BEGIN.format(out="board/leaderboard.md")
    (tmp_path / "README.md").write_text(f"# x\n\n{begin}\nold\n{END}\n\nrest\n")
    (tmp_path / "plain.md").write_text("# no markers\n")
    assert main(["report", "--summary-in", "README.md"]) == 2  # without --leaderboard
    assert main(["report", "--leaderboard", "board/families.yaml", "--summary-in", "plain.md"]) == 2
    assert "no leaderboard block" in capsys.readouterr().err
    assert main(["report", "--leaderboard", "board/families.yaml", "--summary-in", "README.md"]) == 0
    assert "recommended for all: X" in capsys.readouterr().out
    text = (tmp_path / "README.md").read_text()
    assert "old" not in text and "| All graphs | **X** |" in text and text.endswith("rest\n")
    assert (tmp_path / "board" / "recommendation.csv").is_file()


@pytest.mark.slow
def test_committed_leaderboard_is_what_the_committed_rows_give(tmp_path, monkeypatch):
    """Regenerates the three families from the committed rows (about 15 s) and compares with the committed CSVs."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(root)
    result = build_leaderboard(read_families("reports/leaderboard.yaml"))
    paths = write_leaderboard(result, tmp_path)
    for path in paths[1:]:
        committed = pd.read_csv(root / "reports" / path.name)
        pd.testing.assert_frame_equal(pd.read_csv(path), committed, check_exact=False, rtol=1e-5)
