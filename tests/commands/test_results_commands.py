"""``simcalib compare`` (two results files on the runs both hold, :mod:`simcalib.report.compare`) and
``simcalib paired-tests``."""

import math
import types

import pandas as pd
import pytest

from simcalib import cli
from simcalib.report import compare as compare_rows


def rows(**changes) -> pd.DataFrame:
    frame = pd.DataFrame({
        "split": [0, 0, 1, 1], "init": 0, "fold": [0, 0, 0, 0], "calibrator": ["TS", "ETS", "TS", "ETS"],
        "ece": [1.0, 2.0, 3.0, 4.0], "nll": [0.5, 0.6, 0.7, 0.8], "fit_seconds": [1.0, 2.0, 3.0, 4.0],
        "backbone_digest": ["a", "a", "b", "b"], "seed": [7, 7, 8, 8]})
    for column, values in changes.items():
        frame[column] = values
    return frame


def test_equal_rows_are_equal_and_fit_seconds_is_not_compared():
    result = compare_rows.compare(rows(), rows(fit_seconds=[9.0, 9.0, 9.0, 9.0]), {"fit_seconds"})
    assert result["runs"] == 2
    assert {name: entry["differing"] for name, entry in result["calibrators"].items()} == {"ETS": {}, "TS": {}}
    assert result["identity"] == {"backbone_digest": (0, 4), "seed": (0, 4)}


def test_a_changed_value_a_one_sided_nan_and_a_digest_mismatch_are_each_counted():
    new = rows(ece=[1.0, 2.5, 3.0, 4.0], nll=[0.5, 0.6, math.nan, 0.8], backbone_digest=["a", "a", "c", "c"])
    result = compare_rows.compare(new, rows(), {"fit_seconds"})
    assert result["calibrators"]["ETS"]["differing"] == {"ece": (0.5, 1)}
    assert result["calibrators"]["TS"]["differing"] == {"nll": (0.0, 1)}  # NaN against 0.7
    assert result["identity"]["backbone_digest"] == (2, 4)


def test_only_shared_runs_are_paired_and_one_sided_columns_are_listed():
    old = rows().iloc[:2].drop(columns=["nll"])
    result = compare_rows.compare(rows(), old, {"fit_seconds"})
    assert result["runs"] == 1 and result["only_new"] == ["nll"] and result["only_old"] == []


def test_means_give_each_calibrators_shift_in_units_of_the_old_rows_spread():
    new = rows(ece=[1.5, 2.0, 3.5, 4.0])  # TS half a point higher on both runs, ETS equal
    table = compare_rows.means(new, rows(), ["ece"]).set_index("calibrator")
    assert table.loc["TS", "diff"] == 0.5 and table.loc["ETS", "diff"] == 0.0
    assert table.loc["TS", "diff_over_std"] == 0.5 / pd.Series([1.0, 3.0]).std()
    assert table.loc["TS", "new"] == 2.5 and table.loc["TS", "old"] == 2.0


def test_compare_prints_the_differences_and_refuses_a_file_that_is_not_results(tmp_path, capsys):
    rows().to_csv(tmp_path / "old.csv", index=False)
    rows(ece=[1.0, 2.5, 3.0, 4.0]).to_csv(tmp_path / "new.csv", index=False)
    assert cli.main(["compare", str(tmp_path / "new.csv"), str(tmp_path / "old.csv"), "--means", "ece"]) == 0
    out = capsys.readouterr().out
    assert "runs in both: 2" in out and "ETS                   2 rows  differing: ece 0.5 (1 rows)" in out
    assert "TS                    2 rows  equal" in out and "diff_over_std" in out
    rows().drop(columns=["calibrator"]).to_csv(tmp_path / "bad.csv", index=False)
    assert cli.main(["compare", str(tmp_path / "bad.csv"), str(tmp_path / "old.csv")]) == 2
    assert "bad.csv: not a results file (no calibrator column)" in capsys.readouterr().err
    assert cli.main(["compare", str(tmp_path / "new.csv"), "git:no-such-rev:x.csv"]) == 2
    assert "git show no-such-rev:x.csv` failed" in capsys.readouterr().err


def _benchmark_rows(shift: float) -> pd.DataFrame:
    """Six runs of one benchmark with TS and A, A's ECE ``shift`` above TS's on every run."""
    runs = [{"dataset": "Cora", "backbone": "GCN", "split": split, "init": 0, "fold": fold}
            for split in range(3) for fold in range(2)]
    frame = pd.DataFrame([{**run, "calibrator": name, "ece": 1.0 + 0.1 * i + (shift if name == "A" else 0.0)}
                          for i, run in enumerate(runs) for name in ("TS", "A")])
    return frame


def test_paired_tests_pair_the_runs_and_name_a_pair_without_common_runs(capsys, monkeypatch):
    monkeypatch.setattr("simcalib.report.results.load_study_results",
                        lambda path: types.SimpleNamespace(rows=_benchmark_rows(0.5)))
    assert cli.main(["paired-tests", "any", "--pairs", "A:TS,A:Nope", "--splits", "0,1"]) == 0
    out = capsys.readouterr().out
    assert "A:Nope: no run with both calibrators" in out
    line = next(line for line in out.splitlines() if line.startswith("| Cora GCN"))
    assert "| A | TS | 4 |" in line and "+0.50" in line and "0/4" in line  # 4 runs of splits 0-1; A never lower
    with pytest.raises(SystemExit):
        cli.main(["paired-tests", "any", "--pairs", "A-TS"])
