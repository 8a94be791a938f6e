"""benchmarks/measured_study_cost.py: the parsing of the outputs it reads (an earlier output of itself,
gat_attention_speed.py's epoch lines) and the re-projection of the backbones with them."""

from __future__ import annotations

import pandas as pd
import pytest
from benchmark_scripts import load_script
from shared_paths import PROJECT_ROOT

SCRIPT = PROJECT_ROOT / "benchmarks" / "measured_study_cost.py"


@pytest.fixture(scope="module")
def cost():
    return load_script(SCRIPT)


def test_read_earlier_takes_epochs_and_seconds_per_epoch_of_each_benchmark(cost, tmp_path):
    path = tmp_path / "earlier.txt"
    path.write_text(
        "# python benchmarks/measured_study_cost.py ...\n"
        "benchmark       runs backbones  s/epoch  epochs backbone s  calib s   run s  per calibrator: mean fit s\n"
        "Cora GCN          75        76    0.014     785       10.8     20.6    31.4   5/12  UnCal=0.0 TS=0.2\n"
        "Computers GAT     15       15*    1.897     882     1672.5     87.9  1760.4  UnCal=0.0\n"
        "the whole of study/offline.yaml (75 runs per benchmark) on the 12 benchmarks measured: 80.4 CPU-hours\n")
    assert cost.read_earlier(path) == {
        ("Cora", "GCN"): {"epochs": 785.0, "s_per_epoch": 0.014, "seconds": 10.8},
        ("Computers", "GAT"): {"epochs": 882.0, "s_per_epoch": 1.897, "seconds": 1672.5},
    }


def test_read_epoch_times_takes_the_medians_of_each_dataset_in_seconds(cost, tmp_path):
    path = tmp_path / "speed.txt"
    path.write_text(
        "Cora GAT: 2708 nodes, 13264 edges with self-loops; 5 repetitions; load 5.30 -> 5.35\n"
        "                                         pyg                     csr   ratio\n"
        "  train step           111.8 [ 107.1- 116.6]    92.2 [  91.6-  92.9]   1.21x\n"
        "  epoch (both)         153.3 [ 151.3- 155.3]   113.5 [ 113.0- 114.0]   1.35x\n"
        "  GCN backbone        train     30.7 [  30.2-  31.2]  eval      6.8 [   2.7-  10.8]  epoch     37.5 [  32.9-  42.0]\n"
        "\nPhysics GAT: 34493 nodes, 530417 edges with self-loops; 5 repetitions\n"
        "  epoch (both)        1110.1 [1082.0-1150.0]   472.9 [ 459.5- 482.6]   2.35x\n")
    times = cost.read_epoch_times([path])
    assert times == pytest.approx({("Cora", "pyg"): 0.1533, ("Cora", "csr"): 0.1135, ("Cora", "gcn"): 0.0375,
                                   ("Physics", "pyg"): 1.1101, ("Physics", "csr"): 0.4729})


STUDY = PROJECT_ROOT / "study" / "offline.yaml"


@pytest.mark.parametrize("basis,gat_seconds,gcn_seconds", [
    ("today", 100 * 0.25, 100 * 0.1),  # epochs x today's csr epoch; GCN: epochs x today's GCN epoch
    ("earlier-scaled", 50 * 0.25, 50),  # earlier GAT seconds x csr/pyg; GCN unchanged
])
def test_a_backbone_costs_its_epochs_at_the_basis_chosen(cost, tmp_path, monkeypatch, capsys, basis, gat_seconds,
                                                         gcn_seconds):
    from simcalib.experiment.study import load_study

    study = load_study(STUDY)
    names = [c.name for c in study.calibrators]
    earlier = tmp_path / "earlier.txt"
    earlier.write_text("".join(f"{d} {b}  75  0  0.500  100  50.0  1.0  51.0\n" for d, b in study.benchmarks()))
    speed = tmp_path / "speed.txt"
    speed.write_text("".join(
        f"{d} GAT: 10 nodes\n  epoch (both)  1000.0 [ 1.0- 2.0]  250.0 [ 1.0- 2.0]  4.00x\n"
        f"  GCN backbone  train 1.0 [ 1.0- 2.0]  eval 1.0 [ 1.0- 2.0]  epoch  100.0 [ 1.0- 2.0]\n"
        for d in {d for d, _ in study.benchmarks()}))
    results = tmp_path / "results"
    results.mkdir()
    pd.DataFrame([{"dataset": "Cora", "backbone": b, "calibrator": n, "split": 0, "init": 0, "fold": 0, "seed": 1,
                   "fit_seconds": 1.0} for b in ("GCN", "GAT") for n in names]).to_csv(results / "results.csv")
    monkeypatch.setattr("sys.argv", ["measured_study_cost.py", "--results", str(results), "--study", str(STUDY),
                                     "--cache", str(tmp_path / "no_cache"), "--epochs-from", str(earlier),
                                     "--epoch-times", str(speed), "--epoch-basis", basis])
    assert cost.main() == 0
    table = tmp_path / "table.txt"
    table.write_text(capsys.readouterr().out)
    backbones = {key: value["seconds"] for key, value in cost.read_earlier(table).items()}
    assert backbones[("Cora", "GAT")] == pytest.approx(gat_seconds, abs=0.05)
    assert backbones[("Physics", "GCN")] == pytest.approx(gcn_seconds, abs=0.05)
    # every calibrator on Cora has its row (1 s each); the other benchmarks' are projected by node count
    assert f"{len(names) * 1.0:.1f}" in next(line for line in table.read_text().splitlines()
                                              if line.startswith("Cora GAT"))
    assert "Physics GCN GETS: 1.0 s on Cora GCN x 34493/2708 nodes" in table.read_text()
