"""Study files: the schema, errors that name the line, tuned options, and the shipped study files."""

from __future__ import annotations

from pathlib import Path

import pytest
from shared_paths import PROJECT_ROOT

from simcalib.errors import ConfigError, DataMissingError
from simcalib.experiment.plan import plan_benchmark, plan_study
from simcalib.experiment.study import load_study

STUDY_DIR = PROJECT_ROOT / "study"

VALID = """\
name: t
benchmarks:
  datasets: [cora, CiteSeer]
  backbones: [gcn]
calibrators:
  UnCal: {}
  ts: {lr: 0.05}
runs: {splits: [0, 3], inits: 2, folds: 1, label_rate: 0.15}
backbone: {max_epochs: 50}
output: out/t
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(text)
    return path


def error_of(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as info:
        load_study(write(tmp_path, text))
    return str(info.value)


def test_a_valid_file_is_normalised(tmp_path):
    study = load_study(write(tmp_path, VALID))
    assert study.datasets == ["Cora", "Citeseer"] and study.backbones == ["GCN"]
    assert [(c.name, c.options) for c in study.calibrators] == [("UnCal", {}), ("TS", {"lr": 0.05})]
    assert (study.splits, study.inits, study.folds) == ([0, 3], [0, 1], [0])
    assert study.runs_per_benchmark() == 4
    settings = study.settings()
    assert settings.study_seed == 10 and settings.fold_rate == pytest.approx(0.05)
    assert settings.backbone_overrides == (("max_epochs", 50),)
    assert study.output == Path("out/t") and study.benchmark_dir("Cora", "GCN") == Path("out/t/Cora_GCN")
    assert study.spec.task_runner.kind == "processes" and study.experiment_name == "study-t"


@pytest.mark.parametrize("text, expected", [
    (VALID.replace("runs:", "runz:"), "study.yaml:8: unknown key 'runz'"),
    (VALID.replace("label_rate", "labelrate"), "study.yaml:8: unknown key 'runs.labelrate'"),
    (VALID.replace("CiteSeer", "Citeseerx"), "study.yaml:3: benchmarks.datasets.1: unknown dataset 'Citeseerx'"),
    (VALID.replace("[gcn]", "[gcn, gin]"), "study.yaml:4: benchmarks.backbones.1: unknown backbone 'gin'"),
    (VALID.replace("  ts:", "  TSS:"), "study.yaml:7: calibrators.TSS: unknown calibrator 'TSS'"),
    (VALID.replace("lr: 0.05", "learning_rate: 0.05"), "study.yaml:7: calibrators.ts: invalid options for calibrator TS"),
    (VALID.replace("max_epochs", "epochs"), "study.yaml:9: backbone.epochs: unknown backbone option 'epochs'"),
    (VALID.replace("folds: 1", "folds: [3]"), "study.yaml:8: runs.folds: folds are 0..2"),
    (VALID.replace("inits: 2", "inits: two"), "study.yaml:8: runs.inits:"),
    (VALID + "output: again\n", "study.yaml:11: key 'output' is given twice (first on line 10)"),
    (VALID.replace("  UnCal: {}", "  UnCal: [1]"), "study.yaml:6: calibrators.UnCal"),
    (VALID.replace("runs: {", "runs: {{"), "study.yaml:9: not valid YAML (expected ',' or '}', but got '<scalar>'; "
                                           "the mapping opened on line 8)"),
])
def test_errors_name_the_line_and_the_key(tmp_path, text, expected):
    assert expected in error_of(tmp_path, text)


PER_DATASET = VALID.replace("runs: {splits: [0, 3], inits: 2, folds: 1, label_rate: 0.15}\n",
                            "runs:\n  splits: [0, 3]\n  inits: 2\n  folds: 1\n  per_dataset:\n"
                            "    citeseer: {inits: 1, folds: [0, 2]}\n")  # per_dataset on line 12, citeseer 13


def test_a_datasets_own_runs_replace_the_studys_for_its_benchmarks_only(tmp_path):
    study = load_study(write(tmp_path, PER_DATASET))
    assert study.runs_of("Cora") == ([0, 3], [0, 1], [0])  # the study's
    assert study.runs_of("Citeseer") == ([0, 3], [0], [0, 2])  # splits: the study's; inits, folds: its own
    assert (study.runs_per_benchmark(), study.runs_per_benchmark("Citeseer")) == (4, 4)
    plan = {b.name: b for b in plan_study(study, data=False).benchmarks}
    without = {b.name: b for b in plan_study(load_study(write(tmp_path, VALID)), data=False).benchmarks}
    assert plan["Cora-GCN"] == without["Cora-GCN"]  # runs, seeds and everything else unchanged
    citeseer = plan["Citeseer-GCN"]
    assert citeseer.run_indices == {"splits": [0, 3], "inits": [0], "folds": [0, 2]}
    assert [(r.split, r.init, r.fold) for r in citeseer.runs] == [(0, 0, 0), (0, 0, 2), (3, 0, 0), (3, 0, 2)]
    assert without["Citeseer-GCN"].run_indices == {"splits": [0, 3], "inits": [0, 1], "folds": [0]}
    assert citeseer.seeds[0] == without["Citeseer-GCN"].seeds[0]  # run (0, 0, 0): its seed is its identity's


def test_the_study_and_its_plan_describe_the_runs_per_benchmark_alike(tmp_path):
    """One description of the runs per benchmark (simcalib.experiment.study.describe_runs), from the study file
    (``simcalib cost``) and from its plan (``simcalib study check``, the study flow's log)."""
    own = load_study(write(tmp_path, PER_DATASET.replace("citeseer: {inits: 1, folds: [0, 2]}", "citeseer: {inits: 1}")))
    same = load_study(write(tmp_path, PER_DATASET))  # Citeseer's own runs: as many as the study's
    for study, expected in [(own, "4 per benchmark, 2 on Citeseer"), (same, "4 per benchmark")]:
        assert study.describe_runs() == plan_study(study, data=False).describe_runs() == expected
    everyone = load_study(write(tmp_path, PER_DATASET.replace("citeseer: {inits: 1, folds: [0, 2]}",
                                                              "citeseer: {inits: 1}\n    cora: {folds: [0, 1, 2]}")))
    assert everyone.describe_runs() == plan_study(everyone, data=False).describe_runs() == "12 on Cora, 2 on Citeseer"


@pytest.mark.parametrize("entry, expected", [
    ("citeser: {inits: 1}", "study.yaml:13: runs.per_dataset.citeser: unknown dataset 'citeser' (did you mean "
                            "'Citeseer'?); valid datasets are: Cora, Citeseer; a key of runs.per_dataset is a dataset"),
    ("citeseer: {}", "study.yaml:13: runs.per_dataset.citeseer: names none of splits, inits, folds"),
    ("citeseer: {init: 1}", "study.yaml:13: unknown key 'runs.per_dataset.citeseer.init'; valid keys here are: "
                            "splits, inits, folds"),
    ("citeseer: {folds: [3]}", "study.yaml:13: runs.per_dataset.citeseer.folds: folds are 0..2"),
    ("citeseer: {splits: 0}", "study.yaml:13: runs.per_dataset.citeseer.splits: selects no splits"),
    ("citeseer: {inits: 1}\n    CiteSeer: {inits: 2}", "study.yaml:14: runs.per_dataset.CiteSeer: Citeseer has two "
                                                     "runs.per_dataset entries"),
])
def test_a_bad_per_dataset_entry_is_one_line_naming_its_line(tmp_path, entry, expected):
    message = error_of(tmp_path, PER_DATASET.replace("citeseer: {inits: 1, folds: [0, 2]}", entry))
    assert expected in message and "\n" not in message, message


def test_list_and_all_forms_of_calibrators(tmp_path, monkeypatch):
    from simcalib import calibrators

    study = load_study(write(tmp_path, VALID.replace("calibrators:\n  UnCal: {}\n  ts: {lr: 0.05}", "calibrators: [ts, VS]")))
    assert [c.name for c in study.calibrators] == ["TS", "VS"]
    # `all` means whatever is registered when the file is read, new calibrators included, but for those that select
    # among others (AutoCal): a study names them
    monkeypatch.setitem(calibrators.CALIBRATORS, "TS2", calibrators.CalibratorEntry("TS2", calibrators.TS))
    study = load_study(write(tmp_path, VALID.replace("calibrators:\n  UnCal: {}\n  ts: {lr: 0.05}", "calibrators: all")))
    names = [c.name for c in study.calibrators]
    assert names == [n for n in calibrators.calibrator_names() if n != "AutoCal"] and names[-1] == "TS2"
    assert "AutoCal" in calibrators.calibrator_names()


def test_tuned_options_are_read_per_benchmark_and_missing_ones_name_the_line(tmp_path, mirror_dir):
    from simcalib.store.tuned import save_tuned_params

    text = VALID.replace("ts: {lr: 0.05}", "ts: tuned\n  VS: tuned:TS").replace("[cora, CiteSeer]", "[cora]")
    text += f"tuned_dir: {tmp_path / 'tuned'}\ndata: {{mirror: {mirror_dir}}}\n"
    study = load_study(write(tmp_path, text))
    with pytest.raises(ConfigError, match=r"study.yaml:7: calibrators.ts: no tuned hyperparameters for TS on Cora/GCN"):
        plan_study(study)
    save_tuned_params("Cora", "GCN", "TS", {"lr": 0.02}, folder=tmp_path / "tuned")
    [plan] = plan_study(study).benchmarks
    assert [(c.name, c.options_dict, c.tuned_from) for c in plan.calibrators] == [
        ("UnCal", {}, None), ("TS", {"lr": 0.02}, "TS"), ("VS", {"lr": 0.02}, "TS")]
    assert len(plan.runs) == 4 and plan.out_dir == Path("out/t/Cora_GCN")


def test_missing_data_fails_before_work_naming_the_dataset_line(tmp_path, monkeypatch):
    monkeypatch.setenv("SIMCALIB_OFFLINE", "1")
    study = load_study(write(tmp_path, VALID.replace("[cora, CiteSeer]", "[Cora, Pubmed]") +
                             f"data: {{root: {tmp_path / 'data'}, mirror: {tmp_path}}}\n"))
    with pytest.raises(DataMissingError, match=r"study.yaml:3: benchmarks.datasets.0: dataset Cora is not available"):
        plan_study(study)


def test_overrides_win_over_the_file(tmp_path):
    study = load_study(write(tmp_path, VALID), {"output": "elsewhere", "task_runner": {"kind": "dask", "workers": 3}})
    assert study.output == Path("elsewhere") and study.spec.task_runner.kind == "dask"
    with pytest.raises(ConfigError, match=r"task_runner.kind: Input should be 'threads', 'processes' or 'dask'"):
        load_study(write(tmp_path, VALID), {"task_runner": {"kind": "ray"}})


def test_the_shipped_study_files():
    quick = load_study(STUDY_DIR / "quick.yaml")
    assert quick.benchmarks() == [("Cora", "GCN"), ("Cora", "GAT"), ("Citeseer", "GCN"), ("Citeseer", "GAT")]
    assert quick.runs_per_benchmark() == 3 and quick.spec.calibrators == "all"

    offline = load_study(STUDY_DIR / "offline.yaml")
    assert offline.datasets == ["Cora", "Citeseer", "Pubmed", "Computers", "Photo", "CS", "Physics"]
    assert len(offline.benchmarks()) == 14 and offline.runs_per_benchmark() == 75

    paper = load_study(STUDY_DIR / "paper.yaml")
    assert len(paper.benchmarks()) == 16 and paper.runs_per_benchmark() == 75
    names = [c.name for c in paper.calibrators]
    assert names == ["UnCal", "TS", "VS", "ETS", "CaGCN", "GATS", "SimCalib",
                     "SimCalib_l", "SimCalib_m", "SimCalib_h", "SimCalib_r", "SimCalib_n"]
    assert [c.name for c in offline.calibrators] == [*names[:7], "SimCalib_decay_all", *names[7:], "Dirichlet", "IRM",
                                                     "Spline", "OrderInvariant", "GETS", "GETS_ap", "GETS_holdout",
                                                     "WATS"]
    # one kernel for the headline's GAT backbones, also for Table 4's sweep that sits beside them
    assert offline.spec.backbone == load_study(STUDY_DIR / "offline_table4.yaml").spec.backbone == {"attention": "csr"}


def test_a_list_of_label_rates_plans_every_benchmark_at_each_rate(tmp_path, mirror_dir):
    text = VALID.replace("label_rate: 0.15", "label_rate: [0.01, 0.15]") + f"data: {{mirror: {mirror_dir}}}\n"
    study = load_study(write(tmp_path, text))
    assert study.label_rates == [0.01, 0.15] and study.runs_per_benchmark() == 4
    plans = plan_study(study).benchmarks
    assert [(p.name, p.out_dir, round(p.settings.label_rate, 6)) for p in plans] == [
        ("Cora-GCN-rate0.01", Path("out/t/label_rate_0.01/Cora_GCN"), 0.01),
        ("Cora-GCN-rate0.15", Path("out/t/label_rate_0.15/Cora_GCN"), 0.15),
        ("Citeseer-GCN-rate0.01", Path("out/t/label_rate_0.01/Citeseer_GCN"), 0.01),
        ("Citeseer-GCN-rate0.15", Path("out/t/label_rate_0.15/Citeseer_GCN"), 0.15)]
    assert error_of(tmp_path, VALID.replace("label_rate: 0.15", "label_rate: [0.05, 0.05]")).endswith(
        "study.yaml:8: runs.label_rate: rates must be distinct, got [0.05, 0.05]")
    assert "runs.label_rate" in error_of(tmp_path, VALID.replace("label_rate: 0.15", "label_rate: [0.05, 1.5]"))


def test_splits_beyond_the_fixed_files_are_refused_before_work_unless_allowed(tmp_path, mirror_dir, splits_dir):
    text = VALID.replace("splits: [0, 3]", "splits: 7") + f"data: {{mirror: {mirror_dir}, splits_dir: {splits_dir}}}\n"
    study = load_study(write(tmp_path, text))
    with pytest.raises(ConfigError, match=r"study.yaml:8: runs.splits: Cora: split\(s\) 5, 6 have no fixed split file"):
        plan_study(study)
    allowed = load_study(write(tmp_path, text.replace("splits: 7", "splits: 7, generated_splits: true")))
    sources = plan_study(allowed).benchmarks[0].split_sources
    assert [s for s, source in sources.items() if source == "generated"] == [5, 6]


def test_batch_runs_is_a_study_key_that_reaches_the_protocol_settings(tmp_path):
    from simcalib.experiment.study import study_from_dict

    study = study_from_dict({"name": "b", "benchmarks": {"datasets": ["Cora"]},
                             "runs": {"batch_runs": True, "models_per_batch": 5}})
    assert study.settings().batch_runs and study.spec.runs.models_per_batch == 5
    assert not study_from_dict({"name": "p", "benchmarks": {"datasets": ["Cora"]}}).settings().batch_runs


def test_the_heterophily_study_runs_every_calibrator_of_the_headline_on_generated_splits(tmp_path, mirror_dir):
    study = load_study(STUDY_DIR / "heterophily.yaml")
    offline = load_study(STUDY_DIR / "offline.yaml")
    assert study.datasets == ["Actor", "chameleon_filtered", "squirrel_filtered", "minesweeper", "tolokers"]
    assert len(study.benchmarks()) == 10 and study.runs_per_benchmark() == 75
    # the binary graphs: init 0 only, as their committed rows (reports/heterophily/provenance.yaml)
    assert [study.runs_per_benchmark(d) for d in study.datasets] == [75, 75, 75, 15, 15]
    assert study.runs_of("tolokers") == ([0, 1, 2, 3, 4], [0], [0, 1, 2])
    assert [c.name for c in study.calibrators] == [c.name for c in offline.calibrators]
    assert study.spec.runs.generated_splits and study.spec.backbone == offline.spec.backbone
    # no fixed files for these graphs: every split is drawn from the study seed
    plan = plan_benchmark("tolokers", "GCN", study.splits, study.inits, study.folds, [], study.settings(), tmp_path,
                          data=False)
    assert set(plan.split_sources.values()) == {"generated"} and {e.file for e in plan.splits} == {None}


def test_the_autocal_studies_cover_the_24_benchmarks_on_the_headline_and_heterophily_runs():
    offline, heterophily = load_study(STUDY_DIR / "offline.yaml"), load_study(STUDY_DIR / "heterophily.yaml")
    files = {name: load_study(STUDY_DIR / f"{name}.yaml") for name in ("autocal", "autocal_heterophily", "autocal_binary")}
    assert all([c.name for c in study.calibrators] == ["AutoCal"] for study in files.values())
    assert set(files["autocal"].benchmarks()) == set(offline.benchmarks())
    assert set(files["autocal_heterophily"].benchmarks()) | set(files["autocal_binary"].benchmarks()) == set(
        heterophily.benchmarks())
    assert [s.runs_per_benchmark() for s in files.values()] == [75, 75, 15] and files["autocal_binary"].inits == [0]
    assert files["autocal"].settings() == offline.settings()  # the headline's runs and backbones
    assert files["autocal_heterophily"].settings() == files["autocal_binary"].settings() == heterophily.settings()
    assert len({s.output for s in files.values()}) == 1 and offline.output not in {s.output for s in files.values()}
