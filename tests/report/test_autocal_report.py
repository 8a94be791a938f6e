"""The AutoCal report on tiny synthetic rows (no training): the regret of a calibrator equal to the best is 0, the
pairing by backbone_digest leaves out (and counts) an AutoCal row without a headline row of the same backbone,
the selection counts per family, and the report's answer sentence and `make report` wiring."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simcalib.report.autocal import (
    answer_sentence,
    answer_table,
    best_calibrator,
    build_autocal_report,
    pair_rows,
    per_run,
    regret_table,
    selection_counts,
    with_local_references,
)
from simcalib.store.results_store import append_rows

ROOT = Path(__file__).resolve().parents[2]
RUNS = [(s, 0, f) for s in range(5) for f in range(3)]
# per-run offsets of each headline calibrator's ECE over a run-specific base (Best lowest on every run)
OFFSETS = {"UnCal": -5.0, "TS": 1.0, "GATS": 0.5, "Best": 0.0, "ETS": 2.0}


def _digest(split: int, fold: int) -> str:
    return f"b{split}{fold}"


def _headline(dataset: str = "Cora") -> list[dict]:
    rng = np.random.default_rng(0)
    rows = []
    for split, init, fold in RUNS:
        base = 4 + rng.normal(0, 0.5)
        for name, offset in OFFSETS.items():  # UnCal lowest: it must not count as the best calibrator
            rows.append({"dataset": dataset, "backbone": "GCN", "calibrator": name, "split": split, "init": init,
                         "fold": fold, "seed": 100 * split + fold, "label_rate": 0.15,
                         "backbone_digest": _digest(split, fold), "ece": base + offset,
                         "nll": (base + offset) / 10, "fit_seconds": 0.1 + offset / 100})
    return rows


def _autocal(dataset: str = "Cora", equal_to: str = "Best") -> list[dict]:
    """AutoCal rows with ``equal_to``'s metrics on every run, selecting it."""
    headline = pd.DataFrame(_headline(dataset))
    own = headline[headline["calibrator"] == equal_to].assign(calibrator="AutoCal", selected=equal_to,
                                                               fit_seconds=2.0)
    return own.to_dict("records")


def test_a_calibrator_equal_to_the_best_has_zero_regret_and_the_others_their_offset():
    rows, unpaired = pair_rows(pd.DataFrame(_autocal()), pd.DataFrame(_headline()))
    assert unpaired == 0
    assert best_calibrator(per_run(rows, "ece")) == "Best"  # UnCal (lower) is not a calibrator
    table = regret_table(rows, "homophilous", "GATS")
    ece = table[table["metric"] == "ece"].set_index("choice")
    assert ece.loc["AutoCal", "regret"] == pytest.approx(0.0, abs=1e-12)
    assert ece.loc["AutoCal", ["regret_low", "regret_high"]].tolist() == pytest.approx([0.0, 0.0], abs=1e-12)
    assert ece.loc["always TS", "regret"] == pytest.approx(1.0)
    assert ece.loc["always GATS (recommended)", "regret"] == pytest.approx(0.5)
    assert "recommended (homophilous)" not in ece.index  # the recommendation GATS is always GATS's row, marked
    assert ece.loc["always GATS (recommended)", "calibrator"] == "GATS"
    assert regret_table(rows, "heterophilous", "ETS").query("metric == 'ece'").set_index("choice").loc[
        "recommended (heterophilous)", "regret"] == pytest.approx(2.0)  # one that is not a fixed choice: its own row
    assert ece.loc["always TS", "vs_autocal"] == pytest.approx(-1.0)  # AutoCal minus TS: AutoCal better
    assert set(ece["runs"]) == {15}


def test_an_autocal_row_on_another_backbone_or_without_a_headline_row_is_left_out_and_counted():
    autocal = pd.DataFrame(_autocal())
    autocal.loc[0, "backbone_digest"] = "another backbone"  # same run, another trained backbone: no pair
    headline = pd.DataFrame(_headline())
    headline = headline[~((headline["split"] == 4) & (headline["fold"] == 2))]  # a run the headline lacks
    rows, unpaired = pair_rows(autocal, headline)
    assert unpaired == 2
    assert len(rows[["split", "init", "fold"]].drop_duplicates()) == 13
    assert (rows.groupby("calibrator").size() == 13).all()


def test_autocal_rows_on_their_own_backbones_pair_with_the_headline_calibrators_fitted_beside_them():
    # the headline's backbones trained elsewhere (other digests); the same calibrators fitted beside AutoCal on the
    # AutoCal study's backbones, in its own folder, with a calibrator the headline does not plan
    elsewhere = pd.DataFrame(_headline()).assign(backbone_digest=lambda f: "x" + f["backbone_digest"])
    local = pd.DataFrame([*_headline(), *_autocal()])
    local = pd.concat([local, local[local["calibrator"] == "TS"].assign(calibrator="NotPlanned")])
    assert pair_rows(pd.DataFrame(_autocal()), elsewhere)[1] == 15  # no pair without the local rows
    headline = with_local_references(elsewhere, local, "Cora", "GCN")
    assert "AutoCal" not in set(headline["calibrator"]) and "NotPlanned" not in set(headline["calibrator"])
    rows, unpaired = pair_rows(pd.DataFrame(_autocal()), headline)
    assert unpaired == 0 and (rows.groupby("calibrator").size() == 15).all()
    ece = regret_table(rows, "heterophilous", "GATS").query("metric == 'ece'").set_index("choice")
    assert ece.loc["AutoCal", "regret"] == pytest.approx(0.0, abs=1e-12)
    assert ece.loc["always TS", "regret"] == pytest.approx(1.0)
    # a run both hold on the same backbone counts once, the headline's row first
    same = with_local_references(pd.DataFrame(_headline()), local.assign(ece=99.0), "Cora", "GCN")
    assert len(same) == len(_headline()) and (same["ece"] < 99).all()


def test_the_pairing_refuses_rows_without_backbone_digest():
    from simcalib.errors import DataMissingError

    with pytest.raises(DataMissingError, match="backbone_digest"):
        pair_rows(pd.DataFrame(_autocal()).drop(columns="backbone_digest"), pd.DataFrame(_headline()))


def test_selection_counts_per_family():
    autocal = pd.concat([pd.DataFrame(_autocal("Cora", "TS")), pd.DataFrame(_autocal("Actor", "ETS"))])
    autocal.loc[autocal.index[:4], "selected"] = "GATS"  # 4 Cora runs and 4 Actor runs (each frame's index 0-14)
    counts = selection_counts(autocal, {("Cora", "GCN"): "homophilous", ("Actor", "GCN"): "heterophilous"})
    assert counts.loc["homophilous", "TS"] == 11 and counts.loc["homophilous", "GATS"] == 4
    assert counts.loc["heterophilous", "ETS"] == 11 and counts.loc["heterophilous", "GATS"] == 4
    assert counts.loc["homophilous", "Dirichlet"] == 0
    assert list(counts.columns[:6]) == ["TS", "ETS", "Dirichlet", "IRM", "GATS", "SimCalib_decay_all"]


def test_the_answer_sentence_says_a_fixed_choice_does_as_well_only_when_autocal_never_beats_it():
    rows, _ = pair_rows(pd.DataFrame(_autocal(equal_to="GATS")), pd.DataFrame(_headline()))
    table = regret_table(rows, "homophilous", "GATS")
    assert answer_sentence(answer_table(table)).startswith(
        "Does a fixed choice do as well as AutoCal? Homophilous graphs (1 benchmarks, 2 benchmark-metric cells): yes, "
        "always GATS (recommended) does at least as well as AutoCal.")
    rows, _ = pair_rows(pd.DataFrame(_autocal(equal_to="Best")), pd.DataFrame(_headline()))
    beaten = regret_table(rows, "homophilous", "GATS")
    assert "cells): no: AutoCal beats each fixed choice somewhere and none beats it anywhere." in \
        answer_sentence(answer_table(beaten))
    ts = answer_table(beaten).set_index("choice").loc["always TS"]
    assert (ts["autocal_lower"], ts["autocal_higher"], ts["cells"], ts["benchmarks"]) == (2, 0, 2, 1)
    assert ts["ece_regret"] == pytest.approx(1.0)  # TS's offset over Best on every run
    # one verdict per family: a fixed choice that does as well on one family says nothing of another
    rows, _ = pair_rows(pd.DataFrame(_autocal("Texas", equal_to="Best")), pd.DataFrame(_headline("Texas")))
    both = answer_sentence(answer_table(pd.concat([table, regret_table(rows, "heterophilous", "GATS")],
                                                  ignore_index=True)))
    homophilous, heterophilous = both.split(" Heterophilous graphs (1 benchmarks, 2 benchmark-metric cells): ")
    assert homophilous.endswith("Homophilous graphs (1 benchmarks, 2 benchmark-metric cells): yes, always GATS "
                                "(recommended) does at least as well as AutoCal.")
    assert heterophilous.startswith("no: AutoCal beats each fixed choice")
    assert both.count('"Beats"') == 1 and both.endswith("lies wholly on one side of 0.)")  # defined once


def test_the_answer_sentence_names_the_fixed_choices_that_beat_autocal_where_it_beats_each_somewhere():
    def cell(choice, dataset, low, high):
        return {"family": "heterophilous", "dataset": dataset, "backbone": "GCN", "metric": "ece", "regret": 1.0,
                "calibrator": choice.split()[-1], "choice": choice, "vs_autocal_low": low, "vs_autocal_high": high}

    cells = [cell("always TS", "Actor", -2.0, -1.0), cell("always TS", "Texas", 0.5, 1.5),
             cell("always GATS", "Actor", -2.0, -1.0), cell("always GATS", "Texas", -0.5, 0.5)]
    sentence = answer_sentence(answer_table(pd.DataFrame(cells)))
    assert sentence.startswith("Does a fixed choice do as well as AutoCal? Heterophilous graphs (2 benchmarks, 2 "
                               "benchmark-metric cells): no single choice does: AutoCal beats each fixed choice "
                               "somewhere, and always TS beats AutoCal somewhere.")
    gats = answer_table(pd.DataFrame(cells)).set_index("choice").loc["always GATS"]
    assert (gats["autocal_lower"], gats["autocal_higher"]) == (1, 0)


def test_make_report_renders_the_autocal_entry_from_its_rows(tmp_path, capsys, monkeypatch):
    from simcalib.cli import main

    monkeypatch.chdir(tmp_path)
    append_rows(tmp_path / "headline" / "Cora_GCN" / "results.csv", _headline())
    append_rows(tmp_path / "autocal" / "Cora_GCN" / "results.csv", _autocal(equal_to="GATS"))
    (tmp_path / "leaderboard.yaml").write_text("- name: homophilous\n  title: H\n  results: headline\n")
    pd.DataFrame([{"family": "homophilous", "calibrator": "GATS"}]).to_csv(tmp_path / "recommendation.csv")
    monkeypatch.setattr("simcalib.report.autocal.FAMILIES", "leaderboard.yaml")
    (tmp_path / "README.md").write_text("x\n<!-- summary of out: regenerated by `make report`; edits between these "
                                        "markers are overwritten -->\n<!-- end of summary -->\n")
    (tmp_path / "reports.yaml").write_text("- results: autocal\n  out: out\n  kind: autocal\n  title: AutoCal\n"
                                           "  summary_in: README.md\n")
    assert main(["report", "--every", "reports.yaml"]) == 0
    assert "report: out/report.md" in capsys.readouterr().out
    report = (tmp_path / "out" / "report.md").read_text()
    assert "Homophilous graphs (1 benchmarks, 2 benchmark-metric cells): yes, always GATS (recommended) does" in report
    assert "| homophilous | always TS | 1 | +1.00 | +0.100 | 2 | 0 | 2 |" in report  # TS 1 point above the best
    assert report.index("## Answer") < report.index("## Per benchmark") < report.index("| Cora GCN | ECE (%) |")
    assert "Cora GCN: 15 runs, init(s) 0 of the headline's 15" in report
    assert "| homophilous | 0 | 0 | 0 | 0 | 15 | 0 |" in report
    readme = (tmp_path / "README.md").read_text()
    assert "yes, always GATS (recommended)" in readme and "| Cora GCN | ECE (%) |" not in readme  # the answer, not every cell
    regret = pd.read_csv(tmp_path / "out" / "regret.csv")
    assert regret.loc[(regret["choice"] == "always GATS (recommended)") & (regret["metric"] == "ece"), "regret"].iloc[0] == \
        pytest.approx(0.5)


def test_the_per_benchmark_and_cost_tables_follow_the_families_order(tmp_path, monkeypatch):
    """Families homophilous (Cora) then heterophilous (Actor): Cora's rows come first in the per-benchmark and cost
    tables, as in the answer table, though Actor sorts first by name."""
    monkeypatch.chdir(tmp_path)
    for dataset, folder in (("Cora", "homo"), ("Actor", "hetero")):
        append_rows(tmp_path / folder / f"{dataset}_GCN" / "results.csv", _headline(dataset))
        append_rows(tmp_path / "autocal" / f"{dataset}_GCN" / "results.csv", _autocal(dataset, equal_to="GATS"))
    (tmp_path / "leaderboard.yaml").write_text("- name: homophilous\n  title: H\n  results: homo\n"
                                               "- name: heterophilous\n  title: X\n  results: hetero\n")
    pd.DataFrame([{"family": "homophilous", "calibrator": "GATS"},
                  {"family": "heterophilous", "calibrator": "ETS"}]).to_csv(tmp_path / "recommendation.csv")
    build_autocal_report(tmp_path / "autocal", tmp_path / "out", "t", families=tmp_path / "leaderboard.yaml")
    report = (tmp_path / "out" / "report.md").read_text()
    per_benchmark, cost = report.split("## Per benchmark")[1].split("## Cost")
    for part in (per_benchmark, cost):
        assert part.index("| Cora GCN |") < part.index("| Actor GCN |")


def test_an_autocal_report_without_rows_writes_nothing(tmp_path):
    assert build_autocal_report(tmp_path / "absent", tmp_path / "out", "t") is None
    assert not (tmp_path / "out").exists()


def test_the_best_is_drawn_from_the_calibrators_the_family_study_plans(tmp_path, monkeypatch):
    """A calibrator in the headline's folder that its study does not plan (a side pass, here "Best") is no
    candidate for the best; AutoCal, equal to it, then has a regret below 0."""
    from simcalib.report.autocal import read_reference

    monkeypatch.chdir(tmp_path)
    append_rows(tmp_path / "headline" / "Cora_GCN" / "results.csv", _headline())
    study = Path("study.yaml")
    study.write_text(Path(ROOT / "study" / "autocal_slice.yaml").read_text().replace(
        "  AutoCal: {}", "  UnCal: {}\n  TS: {}\n  GATS: {}\n  ETS: {}"))
    (tmp_path / "leaderboard.yaml").write_text("- name: homophilous\n  title: H\n  results: headline\n"
                                               "  study: study.yaml\n")
    family, headline, recommended = read_reference("Cora", "GCN", "leaderboard.yaml")
    assert family == "homophilous" and recommended is None
    assert set(headline["calibrator"]) == {"UnCal", "TS", "GATS", "ETS"}
    rows, _ = pair_rows(pd.DataFrame(_autocal()), headline)
    ece = regret_table(rows, family, None).query("metric == 'ece'").set_index("choice")
    assert set(ece["best"]) == {"GATS"}
    assert ece.loc["AutoCal", "regret"] == pytest.approx(-0.5)
