"""simcalib.report.cost and ``simcalib cost``: the makespan of a job order, the projection of calibrators without
rows, and a study's cost read back from its rows and a backbone cache."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from simcalib import cli
from simcalib.errors import ConfigError
from simcalib.report.cost import check_projection, fill_unmeasured, makespan


@pytest.mark.parametrize("durations,workers,expected", [
    ([1, 1, 1, 1, 4], 2, 6),  # the long job last: one worker idles while the other runs it
    ([4, 1, 1, 1, 1], 2, 4),  # longest first: the short jobs fill the other worker
    ([3, 3, 2, 2, 2], 2, 7),
    ([3, 3, 2, 2, 2], 3, 5),
    ([5, 2], 1, 7),
    ([], 2, 0),
])
def test_makespan_puts_each_job_on_the_worker_free_first(durations, workers, expected):
    assert makespan(durations, workers) == expected


def test_makespan_refuses_no_workers():
    with pytest.raises(ConfigError, match="at least one worker"):
        makespan([1.0], 0)


NODES = {"Small": 1000, "Mid": 2000, "Big": 10000}


def _fits(values: dict[tuple[str, str], dict[str, float]]) -> pd.DataFrame:
    return pd.DataFrame.from_dict(values, orient="index").astype(float)


def test_a_missing_fit_is_scaled_by_node_count_from_the_nearest_benchmark_of_the_same_backbone():
    fits = _fits({
        ("Small", "GCN"): {"A": 1.0, "B": 2.0},
        ("Mid", "GCN"): {"A": 3.0, "B": 4.0},
        ("Big", "GAT"): {"A": 50.0, "B": 6.0},
        ("Big", "GCN"): {"A": np.nan, "B": 8.0},
    })
    filled, sources = fill_unmeasured(fits, NODES)
    # Mid GCN: same backbone and nearer in node count than Small GCN; Big GAT (same graph) is passed over for its
    # backbone
    assert sources == {("Big", "GCN", "A"): ("Mid", "GCN")}
    assert filled.loc[("Big", "GCN"), "A"] == pytest.approx(3.0 * 10000 / 2000)
    assert filled.drop(columns="A").equals(fits.drop(columns="A"))  # measured cells untouched
    assert math.isnan(fits.loc[("Big", "GCN"), "A"])  # the input is not changed


def test_another_backbone_is_the_source_only_when_its_own_has_no_row():
    fits = _fits({("Small", "GAT"): {"A": 2.0}, ("Big", "GCN"): {"A": np.nan}})
    filled, sources = fill_unmeasured(fits, NODES)
    assert sources == {("Big", "GCN", "A"): ("Small", "GAT")}
    assert filled.loc[("Big", "GCN"), "A"] == pytest.approx(20.0)


def test_a_calibrator_without_any_row_stays_missing():
    fits = _fits({("Small", "GCN"): {"A": 1.0, "B": np.nan}, ("Big", "GCN"): {"A": 2.0, "B": np.nan}})
    filled, sources = fill_unmeasured(fits, NODES)
    assert sources == {} and filled["B"].isna().all()


def test_the_rule_is_checked_on_cells_that_have_rows():
    # A scales with node count exactly, B not at all; C has a missing cell, so it cannot be checked
    fits = _fits({
        ("Small", "GCN"): {"A": 1.0, "B": 5.0, "C": 1.0},
        ("Big", "GCN"): {"A": 10.0, "B": 5.0, "C": np.nan},
    })
    ratios = check_projection(fits, NODES, [("Big", "GCN")])
    assert ratios.to_dict() == pytest.approx({"A": 1.0, "B": 10.0})


def test_the_cost_command_reads_backbones_and_fits_and_projects_the_rest(tmp_path, capsys):
    """One benchmark of a two-run study: run 0 has both calibrators' rows, run 1 only TS's; two cached backbones
    (10 epochs in 2 s, 30 in 4 s), one of another study (not among the rows' digests) left out."""
    from simcalib.experiment.protocol import backbone_digest

    study = tmp_path / "study.yaml"
    study.write_text("name: c\nbenchmarks: {datasets: [Cora], backbones: [GCN]}\ncalibrators: [TS, VS]\n"
                     "runs: {splits: 1, inits: 1, folds: 2}\ntask_runner: {workers: 2}\n")
    folder = tmp_path / "cache" / "backbones" / "Cora" / "GCN"
    folder.mkdir(parents=True)
    digests = []
    for i, (epochs, seconds) in enumerate([(10, 2.0), (30, 4.0), (99, 99.0)]):
        logits = torch.full((3, 2), float(i))
        torch.save({"epochs": epochs, "train_seconds": seconds, "logits": logits}, folder / f"{i}.pt")
        digests.append(backbone_digest(type("Outputs", (), {"logits": logits})()))
    rows = [{"dataset": "Cora", "backbone": "GCN", "calibrator": name, "split": 0, "init": 0, "fold": fold,
             "seed": fold, "fit_seconds": seconds, "backbone_digest": digests[fold]}
            for fold, name, seconds in [(0, "TS", 1.0), (0, "VS", 3.0), (1, "TS", 2.0)]]
    (tmp_path / "results").mkdir()
    pd.DataFrame(rows).to_csv(tmp_path / "results" / "results.csv", index=False)
    assert cli.main(["cost", str(tmp_path / "results"), "--study", str(study), "--cache", str(tmp_path / "cache"),
                     "--schedule"]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("Cora GCN"))
    # 1 run done of 2 with rows; backbones 2 (of 3 cached); epochs 20, 0.167 s/epoch (mean of 0.2 and 0.133),
    # backbone 3 s; fits TS 1.5 + VS 3 = 4.5 s; run 7.5 s; the rest: VS on run 1, 3 s = 0.00083 CPU-hours
    assert line.split() == ["Cora", "GCN", "1", "2", "2", "20", "0.167", "3.0", "4.5", "7.5", "0.00"]
    assert "the whole study on the 1 benchmarks projected: 0.0 CPU-hours" in out
    from simcalib.report.cost import read_results, study_cost

    table, projected = study_cost(read_results([tmp_path / "results"]), [("Cora", "GCN")], ["TS", "VS"], 2,
                                  tmp_path / "cache", {"Cora": 2708})
    assert projected == {} and table.loc[0, "remaining_s"] == pytest.approx(3.0)  # VS on run 1
    assert table.loc[0, "tasks"] == [1.5, 1.5]  # the runs with rows share what they lack
    assert cli.main(["cost", str(tmp_path / "nothing"), "--study", str(study)]) == 2
    assert "no results.csv below" in capsys.readouterr().err


def test_a_benchmark_with_a_cached_backbone_and_no_rows_is_projected_whole(tmp_path):
    """Citeseer GCN: a cached backbone, no rows, its fits projected from Cora's by node count: every planned run
    is a whole task (its fits summed run by run equal the run's fits times the runs only up to float rounding)."""
    from simcalib.report.cost import study_cost

    for dataset in ("Cora", "Citeseer"):
        folder = tmp_path / "cache" / "backbones" / dataset / "GCN"
        folder.mkdir(parents=True)
        torch.save({"epochs": 10, "train_seconds": 2.0, "logits": torch.zeros(3, 2)}, folder / "0.pt")
    rows = pd.DataFrame([{"dataset": "Cora", "backbone": "GCN", "calibrator": name, "split": 0, "init": 0,
                          "fold": 0, "seed": 0, "fit_seconds": seconds, "backbone_digest": "x"}
                         for name, seconds in [("TS", 0.1), ("VS", 0.2), ("ETS", 0.7)]])
    table, projected = study_cost(rows, [("Cora", "GCN"), ("Citeseer", "GCN")], ["TS", "VS", "ETS"], 3,
                                  tmp_path / "cache", {"Cora": 2708, "Citeseer": 3327})
    citeseer = table.set_index("dataset").loc["Citeseer"]
    assert citeseer["with_rows"] == 0 and len(projected) == 3
    assert citeseer["tasks"] == [pytest.approx(citeseer["run_s"])] * 3
    assert citeseer["remaining_s"] == pytest.approx(3 * citeseer["run_s"])


def test_a_shift_study_counts_each_property_in_its_own_folder(tmp_path, capsys):
    """A shift study of Cora GCN under two properties, one results folder each: popularity holds both runs of TS,
    density one. The runs are counted per folder (pooled by dataset and backbone, density would look complete);
    TS's fit seconds are the mean over both folders (1, 1 and 4 s: 2 s), and density's missing run costs a
    recorded backbone (5 s) and that fit: 7 s."""
    study = tmp_path / "study.yaml"
    study.write_text("name: s\nbenchmarks: {datasets: [Cora], backbones: [GCN]}\ncalibrators: [TS]\n"
                     "runs: {splits: 1, inits: 1, folds: 2, generated_splits: true}\n"
                     "shift: {properties: [popularity, density]}\n")
    for prop, runs in (("popularity", [(0, 1.0), (1, 1.0)]), ("density", [(0, 4.0)])):
        folder = tmp_path / "results" / f"Cora_GCN_{prop}"
        folder.mkdir(parents=True)
        pd.DataFrame([{"dataset": "Cora", "backbone": "GCN", "calibrator": "TS", "split": 0, "init": 0, "fold": fold,
                       "seed": fold, "fit_seconds": seconds, "backbone_digest": f"{prop}{fold}"}
                      for fold, seconds in runs]).to_csv(folder / "results.csv", index=False)
    pd.DataFrame({"dataset": ["Cora"], "backbone": ["GCN"], "backbone_s": [5.0]}).to_csv(tmp_path / "s.csv", index=False)
    assert cli.main(["cost", str(tmp_path / "results"), "--study", str(study), "--cache", str(tmp_path / "cache"),
                     "--backbone-seconds", str(tmp_path / "s.csv")]) == 0
    lines = {" ".join(line.split()[:3]): line.split()[3:] for line in capsys.readouterr().out.splitlines()
             if line.startswith("Cora GCN")}
    assert lines["Cora GCN popularity"] == ["2", "2", "0", "-", "recorded", "5.0", "2.0", "7.0", "0.00"]
    assert lines["Cora GCN density"] == ["1", "1", "0", "-", "recorded", "5.0", "2.0", "7.0", "0.00"]
    from simcalib.report.cost import read_results, study_cost

    table, _ = study_cost(read_results([tmp_path / "results"]),
                          [("Cora", "GCN", "Cora_GCN_popularity"), ("Cora", "GCN", "Cora_GCN_density")], ["TS"], 2,
                          tmp_path / "cache", {"Cora": 2708}, {("Cora", "GCN"): 5.0})
    assert table["remaining_s"].tolist() == [pytest.approx(0.0), pytest.approx(7.0)]
    assert cli.main(["cost", str(tmp_path / "results"), "--study", str(study), "--calibrators", "VS"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--calibrators names VS" in err and "its calibrators are: TS" in err and len(err.splitlines()) == 1


def test_fits_of_a_benchmark_the_study_does_not_plan_project_it_and_a_calibrator_without_rows_is_named(tmp_path, capsys):
    """A study of Citeseer GCN with TS and VS: the folder holds TS rows of Cora GCN only (another study's). TS's
    cost on Citeseer is projected from Cora's by node count; VS has no row anywhere, so its cost is not counted
    as zero in silence: the command names it."""
    from simcalib.report.cost import study_cost

    folder = tmp_path / "cache" / "backbones" / "Citeseer" / "GCN"
    folder.mkdir(parents=True)
    torch.save({"epochs": 10, "train_seconds": 2.0, "logits": torch.zeros(3, 2)}, folder / "0.pt")
    rows = pd.DataFrame([{"dataset": "Cora", "backbone": "GCN", "calibrator": "TS", "split": 0, "init": 0,
                          "fold": 0, "seed": 0, "fit_seconds": 1.0, "backbone_digest": "x"}])
    table, projected = study_cost(rows, [("Citeseer", "GCN")], ["TS", "VS"], 2, tmp_path / "cache",
                                  {"Cora": 2708, "Citeseer": 3327})
    assert projected == {("Citeseer", "GCN", "TS"): ("Cora", "GCN")}  # the source's own cells are not listed
    citeseer = table.iloc[0]
    assert citeseer["calib_s"] == pytest.approx(3327 / 2708) and citeseer["unmeasured"] == ["VS"]
    assert citeseer["remaining_s"] == pytest.approx(2 * (2.0 + 3327 / 2708))

    study = tmp_path / "study.yaml"
    study.write_text("name: c\nbenchmarks: {datasets: [Citeseer], backbones: [GCN]}\ncalibrators: [TS, VS]\n"
                     "runs: {splits: 1, inits: 1, folds: 2}\n")
    (tmp_path / "results").mkdir()
    rows.to_csv(tmp_path / "results" / "results.csv", index=False)
    assert cli.main(["cost", str(tmp_path / "results"), "--study", str(study), "--cache", str(tmp_path / "cache")]) == 0
    out = capsys.readouterr().out
    assert "Citeseer GCN from Cora GCN: TS" in out
    assert "not counted: VS (no row below" in out and "name a results folder that holds their rows" in out


def test_a_benchmark_without_a_cached_backbone_takes_the_recorded_seconds_and_its_partial_runs_retrain(tmp_path, capsys):
    """A fresh machine: no backbone cached. Cora GCN of a three-run study, run 0 with both calibrators' rows, run 1
    with TS's only, run 2 none; 5 s per backbone recorded. Without the table the benchmark is not projected; with
    it, run 2 costs a backbone and both fits, run 1 its backbone again (the cache does not hold it) and VS's fit:
    (5 + 1 + 3) + (5 + 3) = 17 s."""
    from simcalib.report.cost import read_results, recorded_backbone_seconds, study_cost

    rows = pd.DataFrame([{"dataset": "Cora", "backbone": "GCN", "calibrator": name, "split": 0, "init": 0,
                          "fold": fold, "seed": fold, "fit_seconds": seconds, "backbone_digest": "x"}
                         for fold, name, seconds in [(0, "TS", 1.0), (0, "VS", 3.0), (1, "TS", 1.0)]])
    (tmp_path / "results").mkdir()
    rows.to_csv(tmp_path / "results" / "results.csv", index=False)
    pd.DataFrame({"dataset": ["Cora", "Citeseer"], "backbone": ["GCN", "GCN"], "backbone_s": [9.0, 8.0],
                  "after_backbone_s": [5.0, None]}).to_csv(tmp_path / "seconds.csv", index=False)
    recorded = recorded_backbone_seconds(tmp_path / "seconds.csv", "after_backbone_s")
    assert recorded == {("Cora", "GCN"): 5.0}  # a row without a number is left out
    args = (read_results([tmp_path / "results"]), [("Cora", "GCN")], ["TS", "VS"], 3, tmp_path / "cache",
            {"Cora": 2708})
    table, _ = study_cost(*args)
    assert table.loc[0, "backbone_source"] is None and math.isnan(table.loc[0, "remaining_s"])
    table, _ = study_cost(*args, recorded)
    assert table.loc[0, "backbone_source"] == "recorded" and table.loc[0, "remaining_s"] == pytest.approx(17.0)
    assert sum(table.loc[0, "tasks"]) == pytest.approx(17.0)
    # TS's row of run 0 alone (VS without a fit anywhere): runs 1 and 2 cost 5 + 1 s each, run 0 its backbone
    # again, 17 s, in the rest and in the tasks alike
    table, _ = study_cost(args[0][args[0]["calibrator"] == "TS"].iloc[:1], *args[1:], recorded)
    assert table.loc[0, "remaining_s"] == pytest.approx(17.0) and sum(table.loc[0, "tasks"]) == pytest.approx(17.0)

    study = tmp_path / "study.yaml"
    study.write_text("name: c\nbenchmarks: {datasets: [Cora], backbones: [GCN]}\ncalibrators: [TS, VS]\n"
                     "runs: {splits: 1, inits: 1, folds: 3}\n")
    command = ["cost", str(tmp_path / "results"), "--study", str(study), "--cache", str(tmp_path / "cache")]
    assert cli.main([*command, "--backbone-seconds", str(tmp_path / "seconds.csv"),
                     "--backbone-column", "after_backbone_s"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("Cora GCN"))
    assert line.split() == ["Cora", "GCN", "1", "2", "0", "-", "recorded", "5.0", "4.0", "9.0", "0.00"]
    assert cli.main([*command, "--backbone-seconds", str(tmp_path / "seconds.csv"), "--backbone-column", "t"]) == 2
    err = capsys.readouterr().err.strip()
    assert "lacks column(s) t" in err and "--backbone-column" in err and len(err.splitlines()) == 1
