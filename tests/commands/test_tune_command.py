"""`simcalib tune`: a search, its tuned file and the before/after report, through the command line."""

import pandas as pd

from simcalib.cli import main

SPACES = """
TS:
  default:
    params:
      lr: {low: 0.01, high: 0.1, log: true}
    fixed: {max_epochs: 40, patience: 10}
"""


def tune_args(tiny_protocol, tmp_path, *extra: str) -> list[str]:
    spaces = tmp_path / "spaces.yaml"
    spaces.write_text(SPACES)
    return ["tune", "--dataset", "cora", "--backbone", "gcn", "--calibrator", "ts", "--trials", "2",
            "--splits", "1", "--folds", "=0", "--spaces", str(spaces), "--storage", f"sqlite:///{tmp_path / 'o.db'}",
            "--no-mlflow", "--tuned-dir", str(tmp_path / "tuned"), "--cache-dir", tiny_protocol.cache_dir,
            "--splits-dir", tiny_protocol.splits_dir, "--data-mirror", tiny_protocol.mirror, "--max-epochs", "20",
            "--threads", "1", *extra]


def test_tune_then_evaluate_writes_tuned_options_and_a_report(tiny_protocol, tmp_path, capsys):
    report = tmp_path / "report.md"
    code = main(tune_args(tiny_protocol, tmp_path, "--evaluate", "--eval-splits", "1", "--eval-inits", "1",
                          "--eval-folds", "2", "--eval-out", str(tmp_path / "eval"), "--report", str(report)))
    out = capsys.readouterr().out
    assert code == 0
    assert "study Cora_GCN_TS" in out and "2 finished trials" in out
    assert (tmp_path / "tuned" / "Cora_GCN.yaml").is_file()
    text = report.read_text()
    assert "| all runs | 2 | ece |" in text and "| held-out runs | 1 | ece |" in text
    pairs = pd.read_csv(report.with_suffix(".csv"))
    assert pairs[["fold", "tuning_run"]].values.tolist() == [[0, True], [1, False]]
    assert (pairs["accuracy_default"] == pairs["accuracy_tuned"]).all()  # TS keeps the argmax
    assert (tmp_path / "eval" / "default" / "results.csv").is_file() and (tmp_path / "eval" / "tuned" / "results.csv").is_file()

    assert main(tune_args(tiny_protocol, tmp_path)) == 0  # the same command again: nothing left to do
    assert "0 new" in capsys.readouterr().out


def test_user_errors_are_one_line_with_exit_2(tiny_protocol, tmp_path, capsys):
    assert main(tune_args(tiny_protocol, tmp_path, "--space", "wide")) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: TS has no search space 'wide'") and "\n" not in err
    assert main(tune_args(tiny_protocol, tmp_path, "--sampler", "grid")) == 2
    assert "cannot run as a grid: lr (line 5)" in capsys.readouterr().err
