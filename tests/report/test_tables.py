"""Tables: mean ± population std, bold best, 'not run' cells, paper-vs-ours in paper stds, three formats."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from simcalib.report.paper import LONG_COLUMNS, PaperTables, load_paper_tables, w_method
from simcalib.report.tables import (
    NOT_RUN,
    TABLE_SPECS,
    build_comparison,
    build_result_table,
    display_name,
    table_latex,
    table_markdown,
    w_sweep_methods,
    write_table,
)

SPEC = {s.key: s for s in TABLE_SPECS}


def _rows() -> pd.DataFrame:
    records = []
    for method, values in {"UnCal": [10.0, 12.0, 14.0], "GATS": [3.0, 4.0, 5.0], "SimCalib": [2.0, 3.0, 7.0]}.items():
        for fold, v in enumerate(values):
            records.append({"dataset": "Cora", "backbone": "GCN", "calibrator": method, "split": 0, "init": 0,
                            "fold": fold, "ece": v, "nll": v / 10})
    records.append({"dataset": "Citeseer", "backbone": "GAT", "calibrator": "UnCal", "split": 0, "init": 0, "fold": 0,
                    "ece": 8.0, "nll": 0.8})
    return pd.DataFrame(records)


def test_result_table_has_mean_population_std_and_runs():
    table = build_result_table(_rows(), SPEC["table1_ece"])
    b = ("Cora", "GCN")
    assert table.mean.at[b, "SimCalib"] == pytest.approx(4.0)
    assert table.std.at[b, "SimCalib"] == pytest.approx(np.std([2.0, 3.0, 7.0], ddof=0))
    assert table.runs.at[b, "SimCalib"] == 3 and table.runs.at[b, "TS"] == 0
    assert table.benchmarks == [("Cora", "GCN"), ("Citeseer", "GAT")]  # paper order, not alphabetical


def test_missing_methods_render_as_not_run_and_the_lowest_mean_is_bold():
    table = build_result_table(_rows(), SPEC["table1_ece"])
    md = table_markdown(table)
    cora = next(line for line in md.splitlines() if line.startswith("| Cora"))
    assert "**4.00 ± 2.16**" in cora and "**4.00 ± 0.82**" in cora  # SimCalib and GATS tie at 4.00: both bold
    assert "**12.00" not in cora
    citeseer = next(line for line in md.splitlines() if line.startswith("| Citeseer"))
    assert citeseer.count(NOT_RUN) == 6 and "**8.00 ± 0.00**" in citeseer


def test_latex_is_booktabs_with_bold_math_and_not_run():
    latex = table_latex(build_result_table(_rows(), SPEC["table1_ece"]), "Table 1")
    for token in (r"\toprule", r"\midrule", r"\bottomrule", r"\mathbf{4.00 \pm 0.82}", r"\textit{not run}"):
        assert token in latex
    assert "±" not in latex


def test_empty_results_give_a_not_run_table_not_an_error(tmp_path):
    empty = pd.DataFrame(columns=["dataset", "backbone", "calibrator", "split", "init", "fold", "ece"])
    table = build_result_table(empty, SPEC["table3_ablation_ece"])
    assert table.empty and NOT_RUN in table_markdown(table)
    paths = write_table(table, tmp_path, "t3", "Table 3")
    assert all(p.is_file() for p in paths)


def _paper(rows: list[tuple]) -> PaperTables:
    return PaperTables(None, pd.DataFrame(rows, columns=LONG_COLUMNS))


def test_comparison_expresses_differences_in_paper_standard_deviations():
    paper = _paper([("table1", "Cora", "GCN", "SimCalib", "ece", 3.32, 0.99),
                    ("table1", "Cora", "GCN", "TS", "ece", 3.92, 1.29),
                    ("table1", "Pubmed", "GCN", "SimCalib", "ece", 0.93, 0.32)])
    comparison = build_comparison(build_result_table(_rows(), SPEC["table1_ece"]), paper)
    row = comparison.long.set_index(["dataset", "method"]).loc[("Cora", "SimCalib")]
    assert row["z"] == pytest.approx((4.0 - 3.32) / 0.99)
    assert comparison.long.set_index(["dataset", "method"]).loc[("Cora", "TS"), "runs"] == 0
    md = table_markdown(comparison)
    assert "4.00 vs 3.32 (+0.69σ)" in md and f"{NOT_RUN} (3.92)" in md and f"{NOT_RUN} (0.93)" in md


def test_comparison_without_paper_std_says_n_a():
    paper = _paper([("table2", "Cora", "GCN", "UnCal", "ace", 16.23, np.nan)])
    rows = _rows().assign(ace=lambda f: f["ece"])
    comparison = build_comparison(build_result_table(rows, SPEC["table2_ace"]), paper)
    assert "(n/a)" in table_markdown(comparison)


def test_w_sweep_columns_come_from_results_names_and_the_paper_in_w_order():
    rows = pd.DataFrame([{"dataset": "CoraFull", "backbone": "GCN", "calibrator": name, "split": 0, "init": 0,
                          "fold": 0, "ece": 3.0} for name in ("SimCalib_w0.9", "SimCalib_w0.5", "SimCalib")])
    paper = _paper([("table4", "CoraFull", "GCN", w_method(0.6), "ece", 3.22, 0.74)])
    table = build_result_table(rows, SPEC["table4_w_sweep_ece"], paper)
    assert table.methods == ["SimCalib_w0.5", "SimCalib_w0.6", "SimCalib_w0.9"]
    assert w_sweep_methods(["SimCalib_w0.8", "GATS", "SimCalib_w0.6"]) == ["SimCalib_w0.6", "SimCalib_w0.8"]
    assert display_name("SimCalib_w0.5") == "w=0.5" and display_name("SimCalib_l", latex=True) == r"SimCalib$_{l}$"


def test_paper_tables_load_to_results_names(tmp_path):
    missing = load_paper_tables(tmp_path / "nowhere")
    assert missing.long.empty and any("does not exist" in n for n in missing.notes)
    (tmp_path / "table4_w_sweep_corafull.csv").write_text("backbone,w,ece_mean,ece_std\nGCN,0.6,3.22,0.74\n")
    paper = load_paper_tables(tmp_path)
    assert list(paper.table("table4")["method"]) == ["SimCalib_w0.6"]
    assert any("table1_ece.csv is absent" in n for n in paper.notes)


def test_accuracy_table_bolds_the_highest_mean():
    rows = _rows().assign(accuracy=lambda f: f["ece"])  # SimCalib/GATS 4.0 < UnCal 12.0
    table = build_result_table(rows, SPEC["metric_accuracy"])
    best = table.best()
    assert best.at[("Cora", "GCN"), "UnCal"] and not best.at[("Cora", "GCN"), "GATS"]


def test_extra_calibrator_tables_sit_beside_the_paper_tables_without_changing_them():
    from simcalib.report.tables import EXTRA_CALIBRATORS, MAIN_METHODS

    assert SPEC["table1_ece"].methods == MAIN_METHODS  # the paper's seven, untouched
    for metric in ("ece", "ace", "nll", "brier", "accuracy"):
        assert SPEC[f"extra_{metric}"].methods == (*MAIN_METHODS, *EXTRA_CALIBRATORS)
    assert not SPEC["extra_accuracy"].lower_is_better
    rows = pd.concat([_rows(), pd.DataFrame([
        {"dataset": "Cora", "backbone": "GCN", "calibrator": "Dirichlet", "split": 0, "init": 0, "fold": f,
         "ece": 1.0 + f, "nll": 0.1, "accuracy": 80.0 + f} for f in range(3)])], ignore_index=True)
    table = build_result_table(rows, SPEC["extra_ece"])
    assert table.runs.at[("Cora", "GCN"), "Dirichlet"] == 3 and table.runs.at[("Cora", "GCN"), "GETS"] == 0
    cora = next(line for line in table_markdown(table).splitlines() if line.startswith("| Cora"))
    assert "**2.00 ± 0.82**" in cora  # Dirichlet's mean is the row's best
    accuracy = build_result_table(rows, SPEC["extra_accuracy"])
    assert accuracy.mean.at[("Cora", "GCN"), "Dirichlet"] == pytest.approx(81.0)


def _two_split_rows() -> pd.DataFrame:
    """Cora GCN: two splits x 3 folds of UnCal and GATS; GATS has smece in split 0's runs only."""
    records = []
    for method, values in {"UnCal": [10.0, 11.0, 12.0, 14.0, 15.0, 16.0], "GATS": [3.0, 4.0, 5.0, 5.0, 6.0, 7.0]}.items():
        for i, v in enumerate(values):
            records.append({"dataset": "Cora", "backbone": "GCN", "calibrator": method, "split": i // 3, "init": 0,
                            "fold": i % 3, "ece": v, "smece": v / 2 if (method == "GATS" and i < 3) else np.nan})
    return pd.DataFrame(records)


def test_every_mean_has_its_split_bootstrap_interval_on_the_line_below():
    from simcalib.report.bootstrap import mean_interval

    rows = pd.concat([_two_split_rows(), _rows().iloc[[-1]]], ignore_index=True)  # + Citeseer GAT: one run
    table = build_result_table(rows, SPEC["table1_ece"])
    want = mean_interval([10.0, 11.0, 12.0, 14.0, 15.0, 16.0], [0, 0, 0, 1, 1, 1])
    assert table.interval(("Cora", "GCN"), "UnCal") == pytest.approx((want.low, want.high))
    assert (want.low, want.high) == pytest.approx((11.0, 15.0))  # the two split means
    assert table.interval(("Citeseer", "GAT"), "UnCal") is None  # one run: no interval
    lines = table_markdown(table).splitlines()
    cora = next(i for i, line in enumerate(lines) if line.startswith("| Cora"))
    assert lines[cora + 1] == "|  | 95% CI |  | [11.00, 15.00] |  |  |  |  | [4.00, 6.00] |  |"
    assert not lines[-1].startswith("|  | 95% CI")  # Citeseer's single run: no interval line under it
    latex = table_latex(table, "Table 1")
    assert r" & 95\% CI &  & {\footnotesize $[11.00, 15.00]$}" in latex
    assert latex.count(r"\addlinespace") == 1  # the interval line continues its benchmark's row
    frame = table.to_csv_frame().set_index("dataset")
    assert frame.loc["Cora", "UnCal_ci_low"] == pytest.approx(11.0) and np.isnan(frame.loc["Citeseer", "UnCal_ci_low"])


def test_a_metric_missing_from_some_rows_says_how_many_runs_a_cell_pools_and_never_counts_them_as_zero():
    table = build_result_table(_two_split_rows(), SPEC["metric_smece"])
    b = ("Cora", "GCN")
    assert table.mean.at[b, "GATS"] == pytest.approx(2.0)  # (3 + 4 + 5) / 2 / 3: the missing runs are not zeros
    md = table_markdown(table)
    assert "**2.00 ± 0.41** (3 of 6 runs)" in md and f"{NOT_RUN}" in md
    assert "| not recorded |" in md.replace("**", "")  # UnCal ran, but no row of it has smece
    assert table.interval(b, "GATS") is not None and table.interval(b, "UnCal") is None
    untouched = build_result_table(_two_split_rows().drop(columns="smece"), SPEC["metric_degree_ece"])
    assert untouched.empty and "not recorded: none of the 12 rows" in table_markdown(untouched)
    assert "benchmarks with it: none" in table_latex(untouched, "degree")


def test_signed_error_bolds_the_mean_closest_to_zero_and_fit_time_is_a_median_without_bold():
    rows = _two_split_rows().assign(signed_ce=lambda f: np.where(f["calibrator"] == "GATS", -1.0, 2.0),
                                    fit_seconds=lambda f: f["ece"] / 10)
    signed = build_result_table(rows, SPEC["metric_signed_ce"])
    assert signed.best().at[("Cora", "GCN"), "GATS"] and not signed.best().at[("Cora", "GCN"), "UnCal"]
    cost = build_result_table(rows, SPEC["cost_fit_seconds"])
    assert cost.methods == ["UnCal", "GATS"]  # calibrators that never ran are left out
    assert cost.mean.at[("Cora", "GCN"), "GATS"] == pytest.approx(0.5)  # the median
    assert "| 6 | 1.3 | 0.5 |" in table_markdown(cost) and "**" not in table_markdown(cost)  # 3 significant digits


def test_the_paper_comparison_carries_the_interval_of_our_mean():
    paper = _paper([("table1", "Cora", "GCN", "UnCal", "ece", 13.04, 5.0)])
    comparison = build_comparison(build_result_table(_two_split_rows(), SPEC["table1_ece"]), paper)
    row = comparison.long.iloc[0]
    assert (row["ours_ci_low"], row["ours_ci_high"]) == pytest.approx((11.0, 15.0))
    assert "|  | 95% CI | [11.00, 15.00] |" in table_markdown(comparison)
