"""``simcalib data fetch`` against a local HTTP server: the 40 GATS split files fetched, checked and read by a
benchmark; an altered file refused by the command with nothing written; a study's datasets and splits fetched
from one mirror URL."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest
from local_http import serve_folder
from shared_paths import MIRROR, SPLITS

from simcalib.cli import main

ORIGINALS = SPLITS / "gats_original"


@pytest.fixture(scope="module")
def originals():
    if not (ORIGINALS / "data" / "split").is_dir():
        pytest.skip(f"the original GATS split files are not in {ORIGINALS} (shared data folder absent)")
    return ORIGINALS


def test_fetched_splits_are_read_by_a_benchmark(originals, mirror_dir, tmp_path, capsys):
    root = tmp_path / "data"
    with serve_folder(originals) as (url, _):
        assert main(["data", "fetch", "--splits", "--from", url, "--data-root", str(root)]) == 0
    out = capsys.readouterr().out
    assert f"split files: 40 fetched from {url}, SHA-256 checked against hans66hsu/GATS" in out
    assert len(list((root / "splits" / "gats_5_3f_85").glob("*/split_*.npz"))) == 40
    code = main(["benchmark", "--dataset", "cora", "--backbone", "gcn", "--calibrators", "uncal,ts", "--splits", "=2",
                 "--inits", "1", "--folds", "=0", "--max-epochs", "5", "--threads", "1", "--no-progress",
                 "--splits-dir", str(root / "splits"), "--data-root", str(root), "--data-mirror", str(mirror_dir),
                 "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "out")])
    assert code == 0
    rows = pd.read_csv(tmp_path / "out" / "results.csv")
    assert sorted(rows.calibrator) == ["TS", "UnCal"] and set(rows.split) == {2}
    assert set(rows.split_source) == {f"fixed:{root / 'splits' / 'gats_5_3f_85' / 'Cora' / 'split_2.npz'}"}


def test_an_altered_split_file_is_refused_by_the_command(originals, tmp_path, capsys):
    served = tmp_path / "served"
    shutil.copytree(originals, served)
    altered = served / "data/split/CS/5_3f_85/cs_split_4.npz"
    altered.write_bytes(altered.read_bytes()[:-1])
    with serve_folder(served) as (url, _):
        code = main(["data", "fetch", "--splits", "--from", url, "--data-root", str(tmp_path / "data")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: split file data/split/CS/5_3f_85/cs_split_4.npz")
    assert "SHA-256 checksum" in err and "pinned" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "data").exists()


def test_a_study_fetches_its_datasets_and_splits_from_one_mirror_url(originals, mirror_dir, tmp_path, capsys):
    served = tmp_path / "served"
    served.mkdir()
    (served / "data").symlink_to(originals / "data")  # the GATS repository's layout
    (served / "Cora").symlink_to(MIRROR / "Cora")  # torch_geometric's raw layout
    study = tmp_path / "study.yaml"
    study.write_text("name: fetched\nbenchmarks: {datasets: [Cora], backbones: [GCN]}\ncalibrators: [TS]\n"
                     "runs: {splits: 1, inits: 1}\n")
    root = tmp_path / "data"
    with serve_folder(served) as (url, requested):
        assert main(["data", "fetch", "--study", str(study), "--from", url, "--data-root", str(root)]) == 0
    out = capsys.readouterr().out
    assert "split files: 5 fetched" in out and "downloaded (SHA-256: 8 pinned)" in out
    assert "/Cora/raw/ind.cora.graph" in requested
    assert sorted(p.name for p in (root / "splits" / "gats_5_3f_85").iterdir()) == ["Cora"]
    assert (root / "Cora" / "processed").is_dir()
    with serve_folder(tmp_path) as (url, requested):  # fetched already: nothing downloaded again
        assert main(["data", "fetch", "--datasets", "Cora", "--from", url, "--data-root", str(root)]) == 0
    assert requested == [] and "processed files present (SHA-256: 8 checked)" in capsys.readouterr().out


def test_nothing_to_fetch_is_an_error_naming_the_options(capsys):
    assert main(["data", "fetch"]) == 2
    assert "nothing to fetch: name a study (--study FILE), --splits or --datasets" in capsys.readouterr().err
