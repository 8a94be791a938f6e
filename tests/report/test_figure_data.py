"""The reliability and confidence figures drawn from a figure pass's rows, with the recommended calibrators."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from simcalib.analysis.figure_bins import to_json
from simcalib.cli import main
from simcalib.commands.report import read_manifest
from simcalib.report import figures
from simcalib.report.build import make_figures
from simcalib.report.results import load_study_results

from .synthetic import write_benchmark

FIGURE_PASS = ["UnCal", "TS", "GATS", "ETS", "Dirichlet", "SimCalib"]
RECOMMENDATION = "family,calibrator\nhomophilous,GATS\nheterophilous,ETS\nbinary,Dirichlet\n"


def _rows_with_figure_bins(folder: Path, keep: tuple[str, ...] | None = None) -> None:
    """Rewrite ``folder``'s results.csv as a pass writes it: each row's ``figure_bins`` from its saved test
    predictions (only for ``keep`` when given, as rows of a pass that binned those calibrators only), and no
    predictions left."""
    study = load_study_results(folder)
    bins = figures.figure_bins_frame(study.main_predictions())
    if keep is not None:
        bins = bins[bins["calibrator"].isin(keep)]
    text = bins[figures.BINS_KEYS].astype(str).assign(figure_bins=[to_json(b) for b in bins["bins"]])
    rows = pd.read_csv(folder / "results.csv").drop(columns="figure_bins")
    keys = rows[figures.BINS_KEYS].astype(str)
    rows["figure_bins"] = keys.merge(text, on=figures.BINS_KEYS, how="left")["figure_bins"].to_numpy()
    rows.to_csv(folder / "results.csv", index=False)
    shutil.rmtree(folder / "predictions")


@pytest.fixture
def two_passes(tmp_path: Path) -> tuple[Path, Path]:
    """A report's results (figure_bins for UnCal, GATS and SimCalib only, every calibrator of the figure pass
    among its rows) and a figure pass of the same runs whose rows carry every calibrator's figure_bins."""
    report, figure_pass = tmp_path / "results", tmp_path / "figure_pass"
    calibrators = [*FIGURE_PASS, "SimCalib_decay_all"]
    write_benchmark(report / "Cora_GCN", "Cora", "GCN", calibrators, seed=1)
    _rows_with_figure_bins(report / "Cora_GCN", keep=("UnCal", "GATS", "SimCalib"))
    write_benchmark(figure_pass / "Cora_GCN", "Cora", "GCN", calibrators, seed=1)
    _rows_with_figure_bins(figure_pass / "Cora_GCN")
    return report, figure_pass


def test_rows_without_figure_bins_for_ts_still_read_and_the_caption_names_ts(two_passes, tmp_path):
    report, _ = two_passes
    study = load_study_results(report)
    assert study.rows.loc[study.rows["calibrator"] == "TS", "figure_bins"].isna().all()
    bins = figures.figure_bins_frame(study.main_predictions(), study.main_rows())
    assert set(bins["calibrator"]) == {"UnCal", "GATS", "SimCalib"} and len(bins) == 3 * 6
    entries = {e.stem: e for e in make_figures(study, tmp_path / "out", figure_calibrators=FIGURE_PASS).entries}
    caption = entries["reliability_uncal_vs_simcalib"].caption
    assert "Reliability diagrams of UnCal, GATS, SimCalib per benchmark" in caption
    assert "TS, ETS, Dirichlet ran but have no figure data here" in caption


def test_recommended_figure_calibrators_read_the_recommendation_in_its_order(tmp_path):
    path = tmp_path / "recommendation.csv"
    path.write_text(RECOMMENDATION + "binary,TS\n")
    assert figures.recommended_figure_calibrators(path) == ("UnCal", "TS", "GATS", "ETS", "Dirichlet", "SimCalib")
    from simcalib.errors import DataCorruptError, DataMissingError

    with pytest.raises(DataMissingError, match="simcalib report --leaderboard"):
        figures.recommended_figure_calibrators(tmp_path / "none.csv")
    path.write_text("family,method\nhomophilous,GATS\n")
    with pytest.raises(DataCorruptError, match="expected a column `calibrator`"):
        figures.recommended_figure_calibrators(path)


def test_the_figures_of_a_manifest_entry_come_from_its_figure_data_with_the_recommended_calibrators(two_passes,
                                                                                                    tmp_path, capsys):
    report, figure_pass = two_passes
    out, manifest = tmp_path / "report", tmp_path / "reports.yaml"
    (tmp_path / "recommendation.csv").write_text(RECOMMENDATION)
    manifest.write_text(f"- results: {report}\n  out: {out}\n  title: t\n  theory: false\n"
                        f"  figure_calibrators: recommended\n  figure_data: {figure_pass}\n")
    assert main(["report", "--every", str(manifest), "--paper-dir", str(tmp_path / "np")]) == 0
    md = (out / "report.md").read_text()
    shown = "UnCal, TS, GATS, ETS, Dirichlet, SimCalib"
    assert f"Reliability diagrams of {shown} per benchmark" in md
    assert f"Top-1 confidence of the test nodes of {shown} per benchmark" in md
    assert "GATS on homophilous graphs, ETS on heterophilous graphs, Dirichlet on binary graphs" in md
    assert f"Drawn from the figure pass `{figure_pass}` (6 runs per benchmark)" in md
    # the same runs and draws in both folders: every row of the drawn calibrators matches the report's
    assert "Of its 36 rows of these calibrators, 36 are of runs this report also has, 36 of them with the same ECE (within 1e-05 points)" in md
    assert "first that of the pooled test nodes of the figure pass's runs" in md and "no figure data here" not in md
    assert (out / "figures" / "reliability_uncal_vs_simcalib.png").is_file()
    manifest.write_text(f"- results: {report}\n  out: {out}\n  title: t\n  figure_data: {tmp_path / 'none'}\n")
    assert main(["report", "--every", str(manifest)]) == 2
    assert "figure_data folder" in capsys.readouterr().err


def test_the_headline_entry_draws_ts_and_the_recommended_calibrators_from_the_figure_pass():
    root = Path(__file__).resolve().parents[2]
    entries = read_manifest(root / "reports" / "reports.yaml") if Path.cwd() == root else None
    if entries is None:
        pytest.skip("run from the project root (the manifest's paths are relative to it)")
    offline = next(e for e in entries if e["out"] == "reports/offline")
    recommended = pd.read_csv(root / "reports" / "recommendation.csv")["calibrator"]
    assert {"UnCal", "TS", "SimCalib", *recommended} <= set(offline["figure_calibrators"])
    figure_data = load_study_results(offline["figure_data"])
    bins = figures.figure_bins_frame(figure_data.main_predictions(), figure_data.main_rows(),
                                     offline["figure_calibrators"])
    assert set(bins["calibrator"]) == set(offline["figure_calibrators"])  # each has its figure data
