"""benchmarks/reprojected_cost.py: before and after CPU-hours from a tiny provenance, rows and speed-up files."""

import pandas as pd
import pytest
import yaml
from benchmark_scripts import load_script
from shared_paths import PROJECT_ROOT

script = load_script(PROJECT_ROOT / "benchmarks" / "reprojected_cost.py")


def fixture(tmp_path, computers_lines):
    study = {"benchmarks": {"datasets": ["Cora", "Computers", "Pubmed"], "backbones": ["GCN", "GAT"]},
             "calibrators": {"TS": {}, "GETS": {}}, "runs": {"splits": 1, "inits": 1, "folds": 2}}
    entry = lambda backbone_s, fits_s: {"runs": 2, "backbone_train_seconds": backbone_s,  # noqa: E731
                                        "calibrator_fit_seconds": fits_s, "cpu_hours": (backbone_s + fits_s) / 3600}
    provenance = {"flow_pass": {
        "small_benchmarks": {"benchmarks": {"Cora_GCN": entry(20, 80), "Cora_GAT": entry(40, 80)}},
        "large_benchmarks": {"benchmarks": {"Computers_GCN": entry(200, 800), "Computers_GAT": entry(600, 400)}}},
        "pubmed_pass": {"started": "2026-12-01T00:00:00Z", "stopped": "2026-12-01T00:10:00Z"}}
    (tmp_path / "provenance.yaml").write_text(yaml.safe_dump(provenance))
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(study))
    for name, (ts, gets) in {"Cora_GCN": (10, 30), "Cora_GAT": (10, 30), "Computers_GCN": (100, 300),
                             "Computers_GAT": (100, 100), "Pubmed_GCN": (50, 150)}.items():
        folder = tmp_path / "results" / name
        folder.mkdir(parents=True)
        rows = [{"calibrator": c, "split": 0, "init": 0, "fold": f, "fit_seconds": s}
                for f in (0, 1) for c, s in (("TS", ts), ("GETS", gets), ("UnCal", 0.0))]
        pd.DataFrame(rows).to_csv(folder / "results.csv", index=False)
    (tmp_path / "fit_seconds_computers_gcn.txt").write_text(
        "Computers GCN run 0,0,0, 1 repeats\n" + computers_lines + "load average at the end 3.9\n")
    (tmp_path / "fit_seconds_cora_gcn.txt").write_text(
        "Cora GCN run 0,0,0, 2 repeats\nGETS           without    40.00 s  with    20.00 s  (2.00x)  probabilities "
        "bit-equal; without ['30.00', '50.00'] with ['20.00', '35.00']\n")
    return tmp_path


def epoch_line(dataset: str, reuse: str, cpu_ms: float) -> str:
    """A line of benchmarks/speed/gcn_shared_first_layer.py's output."""
    return (f"{dataset:10s} reuse {reuse:3s}  epochs   40 (kept   39)  cpu     1.00 s  wall     2.00 s  cpu/epoch "
            f"{cpu_ms:8.2f} ms  wall/epoch    50.00 ms  digest 0123456789abcdef  load 3.0\n")


def run(tmp_path, capsys, backbone_speedups=()):
    script.main(["--provenance", str(tmp_path / "provenance.yaml"), "--results", str(tmp_path / "results"),
                 "--study", str(tmp_path / "study.yaml"), "--speedups", str(tmp_path / "fit_seconds_computers_gcn.txt"),
                 str(tmp_path / "fit_seconds_cora_gcn.txt"), "--backbone-speedups", *map(str, backbone_speedups),
                 "--out", str(tmp_path / "out" / "cost")])
    capsys.readouterr()
    return pd.read_csv(tmp_path / "out" / "cost.csv").set_index("benchmark")


def test_before_after_and_unresolved_ratios(tmp_path, capsys):
    path = fixture(tmp_path, "GETS           without   100.00 s  with    75.00 s  (1.33x)  probabilities bit-equal; "
                             "without ['100.00'] with ['75.00']\n")
    frame = run(path, capsys)
    # before: (backbone + fits) per run x 2 runs
    assert frame.loc["Computers_GCN", "before_cpu_hours"] == pytest.approx(2 * (100 + 400) / 3600)
    # GETS is 3/4 of Computers GCN's row seconds; its measured factor 0.75; Cora's repeats overlap: factor 1
    assert frame.loc["Computers_GCN", "gets_factor"] == pytest.approx(0.75)
    assert frame.loc["Computers_GCN", "after_fits_s"] == pytest.approx(400 * 0.25 + 400 * 0.75 * 0.75)
    assert frame.loc["Cora_GCN", "gets_factor"] == 1.0
    assert frame.loc["Cora_GCN", "after_cpu_hours"] == frame.loc["Cora_GCN", "before_cpu_hours"]
    # Pubmed GCN: fits from its rows (200 s a run), backbone = 600 s wall / 2 runs - 200
    assert frame.loc["Pubmed_GCN", "fits_s"] == pytest.approx(200)
    assert frame.loc["Pubmed_GCN", "backbone_s"] == pytest.approx(100)
    # Pubmed GAT projected with the median GAT/GCN ratios of Cora (2, 1) and Computers (3, 0.5)
    assert frame.loc["Pubmed_GAT", "backbone_s"] == pytest.approx(100 * 2.5)
    assert frame.loc["Pubmed_GAT", "fits_s"] == pytest.approx(200 * 0.75)
    assert frame.loc["Pubmed_GAT", "runs_measured"] == 0
    text = (tmp_path / "out" / "cost.md").read_text()
    assert "against the target of 50" in text and "not resolved" in text
    assert (frame.backbone_factor == 1.0).all()  # no backbone measurement given


def test_gcn_backbone_factors_by_graph_and_by_size_class(tmp_path, capsys):
    path = fixture(tmp_path, "GETS           without   100.00 s  with    75.00 s  (1.33x)  probabilities bit-equal; "
                             "without ['100.00'] with ['75.00']\n")
    epochs = path / "gcn_first_layer_epochs.txt"
    epochs.write_text("GCN run 0,0,0, 2 pair(s) per graph, 40 epochs\n"
                      + epoch_line("Computers", "off", 100) + epoch_line("Computers", "on", 70)
                      + epoch_line("Computers", "on", 72) + epoch_line("Computers", "off", 104)
                      + epoch_line("Cora", "off", 10) + epoch_line("Cora", "on", 9)
                      + epoch_line("Cora", "on", 11) + epoch_line("Cora", "off", 10.5))
    frame = run(path, capsys, [epochs])
    # Computers: medians 102 -> 71 ms, the repeats do not overlap; Pubmed (not measured) takes its size class's
    assert frame.loc["Computers_GCN", "backbone_factor"] == pytest.approx(71 / 102)
    assert frame.loc["Computers_GCN", "after_backbone_s"] == pytest.approx(100 * 71 / 102)
    assert frame.loc["Pubmed_GCN", "backbone_factor"] == pytest.approx(71 / 102)
    # Cora's repeats overlap: factor 1; GAT keeps its seconds
    assert frame.loc["Cora_GCN", "backbone_factor"] == 1.0
    assert (frame[frame.backbone == "GAT"].backbone_factor == 1.0).all()
    assert frame.loc["Computers_GCN", "after_cpu_hours"] == pytest.approx(
        2 * (100 * 71 / 102 + frame.loc["Computers_GCN", "after_fits_s"]) / 3600, rel=1e-5)  # the CSV's 6 digits


def test_pubmed_backbone_counts_every_pass(tmp_path, capsys):
    path = fixture(tmp_path, "GETS           without   100.00 s  with    75.00 s  (1.33x)  probabilities bit-equal; "
                             "without ['100.00'] with ['75.00']\n")
    provenance = yaml.safe_load((path / "provenance.yaml").read_text())
    provenance["pubmed_pass"]["resumed"] = [{"started": "2026-12-01T01:00:00Z", "stopped": "2026-12-01T01:05:00Z"}]
    (path / "provenance.yaml").write_text(yaml.safe_dump(provenance))
    frame = run(path, capsys)
    # (600 s + 300 s) wall / 2 runs - 200 s of fits
    assert frame.loc["Pubmed_GCN", "backbone_s"] == pytest.approx(250)

