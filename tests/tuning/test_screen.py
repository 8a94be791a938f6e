"""The screen of named option sets: validated candidates, the search's objective, rows resumed not recomputed."""

import pandas as pd
import pytest

from simcalib.errors import ConfigError
from simcalib.experiment.protocol import make_runs
from simcalib.tuning import CalibrationObjective, ObjectiveSettings
from simcalib.tuning.objective import CalibrationObjective as Objective
from simcalib.tuning.screen import Candidate, read_candidates, screen, summarise_screen

FAST = {"max_epochs": 40, "patience": 10}


@pytest.mark.parametrize("text,message", [
    ("[1, 2]", "must map names to"),
    ("a: {calibrator: Platt}", "candidate 'a': unknown calibrator 'Platt'"),
    ("a: {options: {lr: 1}}", "candidate 'a' must be {calibrator: NAME"),
    ("a: {calibrator: TS, option: {lr: 1}}", "candidate 'a' must be {calibrator: NAME"),
    ("a: {calibrator: TS, options: [1]}", "options of candidate 'a' must be a mapping"),
    ("a: {calibrator: TS", "is not valid YAML"),
])
def test_bad_candidates_files_name_the_candidate_and_the_fix(tmp_path, text, message):
    path = tmp_path / "candidates.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message.replace("{", r"\{").replace("[", r"\[")):
        read_candidates(path)
    with pytest.raises(ConfigError, match="does not exist"):
        read_candidates(tmp_path / "none.yaml")


def test_candidates_resolve_calibrator_names(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("slow: {calibrator: ts, options: {lr: 0.01}}\ngats: {calibrator: gats}\n")
    assert read_candidates(path) == [Candidate("slow", "TS", {"lr": 0.01}), Candidate("gats", "GATS", {})]


def test_screen_scores_with_the_search_objective_and_resumes_without_recomputing(tiny_protocol, tmp_path, monkeypatch):
    runs = make_runs("cora", "gcn", [0], [0], [0, 1])
    candidates = [Candidate("slow", "TS", {"lr": 0.005, **FAST}), Candidate("fast", "TS", {"lr": 0.05, **FAST}),
                  Candidate("vs", "VS", FAST)]
    out = tmp_path / "screen.csv"
    rows = screen(candidates[:2], runs, tiny_protocol, out)
    assert len(rows) == 4 and set(rows["candidate"]) == {"slow", "fast"}
    reference = CalibrationObjective("TS", runs, tiny_protocol, ObjectiveSettings("nll"))
    for run in runs:  # the same values a search would give these options
        value = rows[(rows["candidate"] == "fast") & (rows["run"] == run.tag())]["nll"].item()
        assert value == pytest.approx(reference.run_value(run, candidates[1].options), rel=1e-9)
    computed = []
    original = Objective.scored_predictions
    monkeypatch.setattr(Objective, "scored_predictions",
                        lambda self, run, options: computed.append(run.tag()) or original(self, run, options))
    rows = screen(candidates, runs, tiny_protocol, out)  # the first two candidates are in the file already
    assert computed == [run.tag() for run in runs] and len(rows) == 6
    summary = summarise_screen(rows)
    assert list(summary.columns) == ["candidate", "dataset", "backbone", "runs", "ece", "nll"]
    assert (summary["runs"] == 2).all() and summary["nll"].is_monotonic_increasing


def test_an_output_file_of_something_else_is_refused(tiny_protocol, tmp_path):
    out = tmp_path / "results.csv"
    pd.DataFrame({"calibrator": ["TS"], "ece": [1.0]}).to_csv(out, index=False)
    with pytest.raises(ConfigError, match="is not a screen's output"):
        screen([Candidate("a", "TS")], make_runs("cora", "gcn", [0], [0], [0]), tiny_protocol, out)
