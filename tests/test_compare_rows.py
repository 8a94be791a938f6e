"""benchmarks/compare_rows.py: two results files compared on the runs both hold."""

import math

import pandas as pd
from benchmark_scripts import load_script
from shared_paths import PROJECT_ROOT

compare_rows = load_script(PROJECT_ROOT / "benchmarks" / "compare_rows.py")


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
