"""benchmarks/speed/stored_rows_equal.py: rows equal to every stored digit but fit_seconds, or not."""

import sys

import pandas as pd
from benchmark_scripts import load_script
from shared_paths import PROJECT_ROOT

script = load_script(PROJECT_ROOT / "benchmarks" / "speed" / "stored_rows_equal.py")


def write(folder, **changes):
    frame = pd.DataFrame({"calibrator": ["GETS", "TS"], "split": 0, "init": 0, "fold": 0,
                          "ece": ["4.763523562", "3.1"], "fit_seconds": [20.0, 1.0]})
    for column, values in changes.items():
        frame[column] = values
    (folder / "Cora_GCN").mkdir(parents=True)
    frame.to_csv(folder / "Cora_GCN" / "results.csv", index=False)


def run(monkeypatch, before, after) -> int:
    monkeypatch.setattr(sys, "argv", ["stored_rows_equal.py", str(before), str(after)])
    return script.main()


def test_other_fit_seconds_are_equal_rows_and_one_last_digit_is_not(tmp_path, monkeypatch, capsys):
    write(tmp_path / "before")
    write(tmp_path / "after", fit_seconds=[9.0, 9.0])
    assert run(monkeypatch, tmp_path / "before", tmp_path / "after") == 0
    assert "Cora_GCN: 2 rows, 5 columns compared, equal" in capsys.readouterr().out
    write(tmp_path / "changed", ece=["4.763523563", "3.1"])
    assert run(monkeypatch, tmp_path / "before", tmp_path / "changed") == 1
    assert "DIFFER {'ece': 1}" in capsys.readouterr().out
