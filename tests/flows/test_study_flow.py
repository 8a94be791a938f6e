"""The study flow: tasks without Prefect, a tiny study end to end, resuming from the rows (the ledger), keys from
declared versions (a comment computes nothing, a bumped version its calibrator's rows only), MLflow runs, kill -9
and resume, refusals of another split source, of a second writer and of a run's rows on two backbones."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient
from shared_paths import PROJECT_ROOT
from study_helpers import TASKS_LINE, TINY_CALIBRATORS, numbers

from simcalib.experiment.protocol import ProtocolSettings
from simcalib.store.results_store import RESULT_COLUMNS


def test_tasks_are_plain_functions_underneath(tiny_protocol: ProtocolSettings, tmp_path):
    from flows.study import calibrate, pretrain, run_unit, write_summary
    from simcalib.experiment.plan import plan_benchmark
    from simcalib.experiment.schedule import BACKBONE, CALIBRATE, RUN, Unit
    from simcalib.store.results_store import append_rows

    plan = plan_benchmark("Cora", "GCN", [0], [0], [1], [("UnCal", None, None), ("TS", None, None)], tiny_protocol,
                          tmp_path / "bench", data=False)
    (run,) = plan.runs
    predictions = str(tmp_path / "predictions")
    (stats,) = pretrain.fn(Unit(BACKBONE, plan, (run,)))["backbones"]
    assert stats["run"] == run.tag() and 0.3 < stats["val_accuracy"] <= 1 and stats["epochs"] <= 20
    rows = [calibrate.fn(Unit(CALIBRATE, plan, (run,), (name,), predictions_dir=predictions))["rows"][0]
            for name in ("UnCal", "TS")]
    assert all(set(RESULT_COLUMNS) <= set(row) for row in rows)
    assert rows[0]["accuracy"] == pytest.approx(rows[1]["accuracy"])  # TS keeps the argmax
    assert rows[1]["nll"] < rows[0]["nll"]  # ... and lowers the NLL it was fitted on (on test nodes too here)
    assert sorted(p.name for p in (tmp_path / "predictions").iterdir()) == [
        "Cora_GCN_s0_i0_f1_TS.npz", "Cora_GCN_s0_i0_f1_UnCal.npz"]
    whole = run_unit.fn(Unit(RUN, plan, (run,), ("UnCal", "TS")))  # one task: the backbone and both calibrators
    assert whole["backbones"] == [stats]
    assert [row["ece"] for row in whole["rows"]] == [row["ece"] for row in rows]  # the same rows either way

    append_rows(tmp_path / "bench" / "results.csv", rows)
    written = write_summary("Cora", "GCN", str(tmp_path / "bench"))
    results = pd.read_csv(written["results"])
    assert list(results["calibrator"]) == ["UnCal", "TS"] and list(results.columns[:len(RESULT_COLUMNS)]) == RESULT_COLUMNS
    summary = pd.read_csv(written["summary"])
    assert summary.set_index("calibrator").loc["TS", "ece_mean"] == pytest.approx(rows[1]["ece"])


def test_reference_study_writes_results_and_tracks_them(reference):
    tasks = reference.result["tasks"]
    assert tasks["pretrain"] == {"computed": 3, "failed": 0}
    assert tasks["calibrate"] == {"computed": 12, "failed": 0}
    results = reference.results
    assert len(results) == 12 and set(results["calibrator"]) == set(TINY_CALIBRATORS)
    assert list(results["fold"]) == [0] * 4 + [1] * 4 + [2] * 4  # run order, then the study's calibrator order
    assert list(results["calibrator"][:4]) == TINY_CALIBRATORS
    assert (reference.output / "Cora_GCN" / "predictions").is_dir()

    client = MlflowClient(reference.result["tracking_uri"])
    experiment = client.get_experiment_by_name(reference.result["experiment"])
    runs = client.search_runs([experiment.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    assert len(runs) == 5 and len(parents) == 1 and len(children) == 4  # 2 workers: nothing lost, nothing twice
    parent = parents[0]
    assert parent.info.run_name == "Cora-GCN" and parent.info.status == "FINISHED"
    assert parent.data.params["study_seed"] == "10" and parent.data.params["backbone.max_epochs"] == "20"
    assert parent.data.params["version.torch"] and parent.data.params["git_commit"]
    ts = next(c for c in children if c.info.run_name == "Cora-GCN-TS")
    assert ts.data.metrics["ece_mean"] == pytest.approx(results.loc[results.calibrator == "TS", "ece"].mean())
    history = client.get_metric_history(ts.info.run_id, "ece")
    assert [m.step for m in history] == [0, 1, 2]
    assert [m.value for m in history] == pytest.approx(list(results.loc[results.calibrator == "TS", "ece"]))
    assert ts.data.params["lr"] == "0.01" and ts.data.params["max_epochs"] == "2000"
    artifacts = {a.path for a in client.list_artifacts(ts.info.run_id)}
    assert artifacts == {"reliability_TS.png"}
    assert {"results.csv", "summary.csv", "study.yaml"} <= {a.path for a in client.list_artifacts(parent.info.run_id)}


def test_rerun_of_a_complete_study_submits_no_task_and_logs_nothing_twice(reference, monkeypatch):
    from flows.study import study_flow

    reported = []
    fake = types.ModuleType("flows.report")
    fake.report_flow = lambda **kwargs: reported.append(kwargs) or "report.md"
    monkeypatch.setitem(sys.modules, "flows.report", fake)
    before = (reference.output / "Cora_GCN" / "results.csv").read_bytes()

    result = study_flow(str(reference.study_file), {"report": True})

    # every planned row is in results.csv under its calibrator digest: nothing is submitted
    assert result["complete_before"] == ["Cora-GCN"] and result["rows_found"] == 12
    assert result["tasks"]["pretrain"] == {"computed": 0, "failed": 0}
    assert result["tasks"]["calibrate"] == {"computed": 0, "failed": 0}
    assert (reference.output / "Cora_GCN" / "results.csv").read_bytes() == before
    assert result["benchmarks"][0]["mlflow_run_id"] == reference.result["benchmarks"][0]["mlflow_run_id"]
    client = MlflowClient(result["tracking_uri"])
    experiment = client.get_experiment_by_name(result["experiment"])
    assert len(client.search_runs([experiment.experiment_id])) == 5
    assert result["report"] == "report.md" and len(reported) == 1
    assert reported[0]["results_dir"] == str(reference.output)
    assert reported[0]["out_dir"] == str(reference.output / "report")
    assert reported[0]["paper_dir"] == os.environ.get("SIMCALIB_PAPER_DIR")
    assert (reported[0]["tracking_uri"], reported[0]["experiment"]) == (result["tracking_uri"], result["experiment"])


def _library_copy(folder: Path, name: str, edit) -> Path:
    """A copy of the ``simcalib`` package with ``edit(text)`` applied to ``calibrators/<name>.py``; returns the
    folder to put first on PYTHONPATH."""
    import simcalib

    root = folder
    shutil.copytree(Path(simcalib.__file__).parent, root / "simcalib", ignore=shutil.ignore_patterns("__pycache__"))
    module = root / "simcalib" / "calibrators" / f"{name}.py"
    edited = edit(module.read_text())
    assert edited != module.read_text()
    module.write_text(edited)
    return root


def test_a_comment_computes_nothing_and_a_bumped_version_only_its_calibrators_rows(reference, study_env, prefect_api,
                                                                                   tmp_path):
    """Keys come from declared versions, not from the source text: the same study run again by a library whose
    calibrator module has one more comment computes nothing; with VS's numbers_version bumped, VS's rows alone."""
    output = _copy_of_output(reference, tmp_path)
    overrides = ["--output", str(output), "--tracking-uri", f"sqlite:///{tmp_path}/m.db", "--no-report"]
    commented = _library_copy(tmp_path / "commented", "vs", lambda text: text + "\n# a comment: no number moves\n")
    result = _run_cli(reference.study_file, prefect_api, tmp_path, commented, overrides)
    assert [int(x) for x in TASKS_LINE.search(result).groups()] == [0, 0, 12], result

    bumped = _library_copy(tmp_path / "bumped", "vs", lambda text: text.replace(
        "class VS(Calibrator):\n", "class VS(Calibrator):\n    numbers_version = 2\n"))
    result = _run_cli(reference.study_file, prefect_api, tmp_path, bumped, overrides)
    assert [int(x) for x in TASKS_LINE.search(result).groups()] == [3, 3, 9], result  # VS's 3 rows, on 3 backbones
    assert "3 rows under another definition of a planned calibrator removed" in result
    rows = pd.read_csv(output / "Cora_GCN" / "results.csv")
    vs = rows.calibrator == "VS"
    assert rows[vs]["calibrator_options"].str.contains('"numbers_version":2').all()
    old = reference.results
    assert set(rows[vs]["calibrator_digest"]).isdisjoint(old[old.calibrator == "VS"]["calibrator_digest"])
    pd.testing.assert_frame_equal(rows[~vs].reset_index(drop=True),
                                  old[old.calibrator != "VS"].reset_index(drop=True))  # every other row as it was
    pd.testing.assert_frame_equal(numbers(rows[vs]).drop(columns=["calibrator_options", "calibrator_digest"]),
                                  numbers(old[old.calibrator == "VS"]).drop(columns=["calibrator_options",
                                                                                     "calibrator_digest"]))


def _run_cli(study_file: Path, api_url: str, home: Path, library: Path, args: list[str]) -> str:
    """``simcalib study run`` with the ``simcalib`` package of ``library`` (its working folder, first on the path;
    ``flows`` from the checkout); its output (it must succeed)."""
    env = {**os.environ, "PREFECT_API_URL": api_url, "PREFECT_HOME": str(home),
           "PYTHONPATH": os.pathsep.join([str(library), str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")])}
    assert subprocess.run([sys.executable, "-c", "import simcalib; print(simcalib.__file__)"], cwd=library, env=env,
                          capture_output=True, text=True).stdout.startswith(str(library))
    done = subprocess.run([sys.executable, "-m", "simcalib.cli", "study", "run", str(study_file), *args],
                          cwd=library, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def _copy_of_output(reference, tmp_path: Path) -> Path:
    """The reference study's output folder, for a study that must not change the original."""
    output = tmp_path / "copy"
    shutil.copytree(reference.output, output, ignore=shutil.ignore_patterns("report", "*.lock"))
    return output





def test_changed_options_recompute_only_that_calibrator(reference, study_env, tmp_path):
    from flows.study import study_flow

    path = study_env.write("changed", calibrators={"UnCal": {}, "TS": {"lr": 0.05}})
    output = _copy_of_output(reference, tmp_path)  # so the reference's own results.csv stays the reference's
    result = study_flow(str(path), {"output": str(output), "tracking_uri": f"sqlite:///{tmp_path}/m.db"})
    assert result["complete_before"] == [] and result["rows_found"] == 3  # UnCal's rows; TS's are of lr 0.01
    assert result["tasks"]["calibrate"] == {"computed": 3, "failed": 0}
    rows = pd.read_csv(output / "Cora_GCN" / "results.csv")
    assert list(rows["calibrator"]) == ["UnCal", "TS"] * 3 + ["VS", "ETS"] * 3  # the others' rows kept, after
    assert rows[rows.calibrator == "TS"]["calibrator_options"].str.contains('"lr":0.05').all()


def test_a_label_rate_sweep_in_one_study_gives_the_data_efficiency_figure(study_env, prefect_api):
    from flows.study import study_flow
    from simcalib.report.figures import data_efficiency_figure
    from simcalib.report.results import load_study_results

    path = study_env.write("sweep", calibrators=["UnCal", "TS", "ETS"], backbone={"max_epochs": 5},
                           runs={"splits": 1, "inits": 1, "folds": [0], "label_rate": [0.03, 0.15]})
    result = study_flow(str(path))
    out = Path(result["output"])
    assert sorted(str(Path(b["results"]).relative_to(out)) for b in result["benchmarks"]) == [
        "label_rate_0.03/Cora_GCN/results.csv", "label_rate_0.15/Cora_GCN/results.csv"]
    assert (out / "label_rate_0.03" / "Cora_GCN" / "splits.json").read_text().count("generated") == 1  # no 3% files
    runs = MlflowClient(result["tracking_uri"]).search_runs([result["experiment_id"]], "tags.`simcalib.role` = 'benchmark'")
    assert sorted(r.info.run_name for r in runs) == ["Cora-GCN-rate0.03", "Cora-GCN-rate0.15"]
    rows = load_study_results(out).rows
    assert sorted(rows["label_rate"].round(6).unique()) == [0.03, 0.15]
    figure = data_efficiency_figure(rows)
    assert figure is not None and [ax.get_title() for ax in figure.axes if ax.get_visible()][0] == "Cora GCN"


def _start(study_file: Path, api_url: str | None, home: Path, **env) -> subprocess.Popen:
    """``simcalib study run`` as a terminal starts it: a process group of its own (the foreground group, where
    Ctrl-C is delivered), SIGINT at its default even where the tests run with it ignored. ``api_url`` None:
    Prefect's temporary server."""
    env = {**os.environ, "PREFECT_API_URL": api_url, "PREFECT_HOME": str(home), "PYTHONUNBUFFERED": "1", **env}
    if api_url is None:
        del env["PREFECT_API_URL"]
    return subprocess.Popen([sys.executable, "-m", "simcalib.cli", "study", "run", str(study_file)], cwd=PROJECT_ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def test_kill_9_then_the_same_command_recomputes_nothing_finished(reference, study_env, prefect_api, tmp_path):
    study_file = study_env.write("killed")
    results_path = study_file.parent / "out" / "Cora_GCN" / "results.csv"
    # the fault hook: the study's process SIGKILLs itself once its 3rd calibrate task has finished
    process = _start(study_file, prefect_api, tmp_path, SIMCALIB_FAULT_KILL_AFTER="3")
    output, _ = process.communicate(timeout=300)
    assert process.returncode == -signal.SIGKILL, output
    finished = pd.read_csv(results_path)  # each finished task's row is in results.csv at once
    assert 3 <= len(finished) < 12, "the kill came after the study had finished: nothing to resume"
    assert "splits: Cora-GCN: split(s) 0 from the fixed GATS files" in output

    resumed = _start(study_file, prefect_api, tmp_path)
    output, _ = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, output
    pretrained, calibrated, found = (int(x) for x in TASKS_LINE.search(output).groups())
    assert (calibrated, found) == (12 - len(finished), len(finished)), output  # nothing finished computed again
    runs_done = sum(len(group) == 4 for _, group in finished.groupby("fold"))
    assert pretrained == 3 - runs_done, output  # only runs with work left need their backbone
    assert f"splits:  Cora-GCN: split(s) 0 from the fixed GATS files in {study_env.splits} (given)" in output
    results = pd.read_csv(results_path)
    pd.testing.assert_frame_equal(numbers(results), numbers(reference.results))  # identical numbers, bit for bit


# ~1 min each, with `make test-slow`. Ctrl-C to a study on worker processes (the default runner), its temporary
# server included, is checked in the default suite by tests/flows/test_runners.py
# (test_ctrl_c_stops_a_study_on_worker_processes_at_once_keeping_its_finished_tasks).
@pytest.mark.slow
@pytest.mark.parametrize("stop, runner", [("SIGTERM", "threads"), ("Ctrl-C", "threads"), ("Ctrl-C", "processes")])
def test_a_stopped_study_ends_with_its_temporary_prefect_server(study_env, tmp_path, stop, runner):
    """Ephemeral mode (no PREFECT_API_URL): the study starts Prefect's temporary API server and an exit handler
    stops it. SIGTERM (a scheduler's time limit) must still run that handler, or the server outlives the study.
    Ctrl-C (a terminal's SIGINT to its whole foreground process group) must not stop the server with the study
    (the interrupted flow would wait on a dead server) nor leave an interrupted worker's task unresolved."""
    import psutil

    study_file = study_env.write(f"{stop}-{runner}", runner={"kind": runner, "workers": 1})
    results_path = study_file.parent / "out" / "Cora_GCN" / "results.csv"
    process = _start(study_file, None, tmp_path / "home")
    children = []
    try:
        deadline = time.monotonic() + 240
        while not results_path.is_file() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert process.poll() is None, "the study ended before it could be stopped"
        children = psutil.Process(process.pid).children(recursive=True)
        assert any("uvicorn" in " ".join(c.cmdline()) for c in children), "no temporary server was started"
        if stop == "SIGTERM":
            process.send_signal(signal.SIGTERM)
        else:
            os.killpg(process.pid, signal.SIGINT)
        try:
            output, _ = process.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the study still runs 120 s after {stop}")
        expected = {"SIGTERM": (143, "terminated (signal 15)"), "Ctrl-C": (130, "interrupted")}[stop]
        assert process.returncode == expected[0], output
        assert f"{expected[1]}: every finished row is kept in" in output
        _, alive = psutil.wait_procs(children, timeout=30)
        assert not alive, [" ".join(c.cmdline())[:80] for c in alive]
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        for child in children:  # the server is outside the study's process group
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()


@pytest.mark.slow  # 6 study runs in subprocesses: ~3 min on the shared 2-core machine
# (What the resume took from the cache is checked by the fast kill test above; here only the rows, since a
# change to the library's numeric code between the two runs rightly recomputes everything.)
def test_killed_at_several_points_the_study_resumes_to_the_uninterrupted_rows(reference, study_env, prefect_api,
                                                                             tmp_path):
    for after in (1, 6, 11):
        study_file = study_env.write(f"killed-after-{after}", runner={"workers": 1})
        killed = _start(study_file, prefect_api, tmp_path, SIMCALIB_FAULT_KILL_AFTER=str(after))
        output, _ = killed.communicate(timeout=300)
        assert killed.returncode == -signal.SIGKILL, output
        resumed = _start(study_file, prefect_api, tmp_path)
        output, _ = resumed.communicate(timeout=300)
        assert resumed.returncode == 0, output
        results = pd.read_csv(study_file.parent / "out" / "Cora_GCN" / "results.csv")
        pd.testing.assert_frame_equal(numbers(results), numbers(reference.results))


def test_rows_record_their_split_and_data_definition(reference):
    results = reference.results
    assert results["split_digest"].nunique() == 1 and results["data_digest"].nunique() == 1
    assert results["split_source"].iloc[0].startswith("fixed:") and results["split_source"].iloc[0].endswith(
        "Cora/split_0.npz")


def test_a_study_on_another_split_source_refuses_the_folder_of_the_first_and_changes_nothing(reference, tmp_path):
    from flows.study import study_flow
    from simcalib.errors import ConfigError

    out = reference.output / "Cora_GCN"
    before = {name: (out / name).read_bytes() for name in ("results.csv", "splits.json")}
    (tmp_path / "no-files").mkdir()
    switched = {"data": {"splits_dir": str(tmp_path / "no-files")}, "runs": {"generated_splits": True}}
    with pytest.raises(ConfigError, match=r"Cora_GCN/results.csv: refusing to add runs: Cora GCN s0 i0 f0 "
                                          r"\(label rate 0.15\) was computed on another split") as info:
        study_flow(str(reference.study_file), switched)
    assert "\n" not in str(info.value) and "generated" in str(info.value)
    assert {name: (out / name).read_bytes() for name in before} == before


def test_a_second_writer_on_the_study_folder_is_refused_naming_the_holder(reference):
    from flows.study import study_flow
    from simcalib.store.integrity import ResultsLockedError

    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(reference.output)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ResultsLockedError, match=f"is being written by pid {holder.pid} on "):
            study_flow(str(reference.study_file))
    finally:
        holder.kill()
        holder.wait()


def test_a_waiting_study_starts_once_the_holder_of_its_folder_is_gone(reference, caplog):
    from flows.study import study_flow

    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(reference.output)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        killer = threading.Timer(3.0, holder.kill)  # the holder goes (killed, as the worst case) while the study waits
        killer.start()
        result = study_flow(str(reference.study_file), wait=True)
        killer.join()
    finally:
        holder.kill()
        holder.wait()
    assert f"waiting for pid {holder.pid} on " in caplog.text  # the flow's prints are its log lines
    assert result["tasks"]["pretrain"] == {"computed": 0, "failed": 0}  # the reference study is complete: resumed, nothing to do


HOLD_LOCK = """
import sys, time
from simcalib.store.integrity import results_lock
with results_lock(sys.argv[1], command="holder"):
    print("held", flush=True)
    time.sleep(600)
"""


def test_a_batch_runs_study_gives_the_numbers_of_the_batched_benchmark_and_not_the_per_run_ones(study_env, prefect_api, tmp_path):
    import dataclasses

    import torch

    from flows.study import study_flow
    from simcalib.experiment.executor import BenchmarkRequest, run_benchmark
    from simcalib.experiment.study import load_study

    path = study_env.write("batched", calibrators=["UnCal", "TS"],
                           runs={"splits": 1, "inits": 2, "folds": [0, 1], "batch_runs": True})
    threads = torch.get_num_threads()
    try:
        result = study_flow(str(path))
        assert result["tasks"]["pretrain"] == {"computed": 4, "failed": 0}
        flow_rows = pd.read_csv(result["benchmarks"][0]["results"])
        # the same runs through `simcalib benchmark --batch-runs` with its own (empty) backbone cache
        settings = dataclasses.replace(load_study(path).settings(), cache_dir=str(tmp_path / "cache"))
        torch.set_num_threads(1)  # the study's torch_threads, part of a backbone's identity
        direct = run_benchmark(BenchmarkRequest("Cora", "GCN", ["UnCal", "TS"], splits=[0], inits=[0, 1],
                                                folds=[0, 1]), settings, tmp_path / "direct", batch_runs=True)
    finally:
        torch.set_num_threads(threads)
    key = ["calibrator", "split", "init", "fold"]
    pd.testing.assert_frame_equal(numbers(flow_rows.sort_values(key)), numbers(direct.sort_values(key)),
                                  check_dtype=False)
    # batched backbones are another draw than the per-run ones, cached apart
    assert not numbers(flow_rows.sort_values(key))["ece"].equals(
        numbers(run_benchmark(BenchmarkRequest("Cora", "GCN", ["UnCal", "TS"], splits=[0], inits=[0, 1], folds=[0, 1]),
                              dataclasses.replace(settings, batch_runs=False), tmp_path / "per_run"
                              ).sort_values(key))["ece"])


def test_a_batch_calibrators_study_fits_a_splits_runs_together_gives_the_per_run_numbers(reference, study_env):
    import torch

    from flows.study import study_flow

    path = study_env.write("stacked", runs={"splits": 1, "inits": 1, "folds": 3, "batch_calibrators": True})
    threads = torch.get_num_threads()
    try:
        result = study_flow(str(path))
        again = study_flow(str(path))
    finally:
        torch.set_num_threads(threads)
    # UnCal per run (3 tasks); TS, VS and ETS each once for the split's 3 runs
    assert result["tasks"]["calibrate"] == {"computed": 6, "failed": 0}
    assert again["tasks"]["calibrate"] == {"computed": 0, "failed": 0} and again["complete_before"] == ["Cora-GCN"]
    rows = numbers(pd.read_csv(result["benchmarks"][0]["results"]))
    per_run = numbers(reference.results)  # the same runs, one calibrator fit per task, same backbone cache
    key = ["calibrator", "split", "init", "fold"]
    pd.testing.assert_frame_equal(rows[key], per_run[key])  # every row, in the per-run order
    pd.testing.assert_frame_equal(rows[rows["calibrator"] == "UnCal"], per_run[per_run["calibrator"] == "UnCal"])
    assert rows["accuracy"].tolist() == pytest.approx(per_run["accuracy"].tolist(), abs=1e-9)
    # a run's model is its lone fit to float rounding
    assert rows["ece"].tolist() == pytest.approx(per_run["ece"].tolist(), abs=1e-3)
    assert rows["nll"].tolist() == pytest.approx(per_run["nll"].tolist(), rel=1e-4)


def test_a_study_keeps_the_rows_of_calibrators_it_does_not_run(reference, tmp_path):
    from flows.study import study_flow

    output = _copy_of_output(reference, tmp_path)
    results = output / "Cora_GCN" / "results.csv"
    sweep = reference.results[reference.results.calibrator == "TS"].assign(calibrator="TS_sweep", ece=1.5)
    pd.concat([reference.results[reference.results.calibrator != "VS"], sweep]).to_csv(results, index=False)
    result = study_flow(str(reference.study_file), {"output": str(output), "tracking_uri": f"sqlite:///{tmp_path}/m.db"})
    assert result["tasks"]["calibrate"] == {"computed": 3, "failed": 0}  # VS's rows only
    written = pd.read_csv(results)
    assert list(written["calibrator"]) == list(reference.results["calibrator"]) + ["TS_sweep"] * 3
    pd.testing.assert_frame_equal(numbers(written.iloc[:12]), numbers(reference.results))
    assert (written.iloc[12:]["ece"] == 1.5).all()


def _stop_after(path: Path, calibrations: int, cache_dir: Path, monkeypatch) -> Path:
    """Run the study at ``path`` until its flow's process dies after ``calibrations`` finished calibrations;
    returns the study's output folder (the backbone cache ``cache_dir`` is left behind: the machine is gone)."""
    import simcalib.experiment.schedule
    from flows.study import study_flow

    finished = iter(range(1, calibrations + 1))  # the hook runs once a task's rows are in results.csv

    def stop_after_them():
        if next(finished) == calibrations:
            raise RuntimeError("stopped")

    monkeypatch.setattr(simcalib.experiment.schedule, "finished_run", stop_after_them)
    with pytest.raises(Exception, match="stopped"):
        study_flow(str(path), {"data": {"cache_dir": str(cache_dir)}})
    monkeypatch.undo()
    return path.parent / "out"


def test_a_study_stopped_midway_resumes_from_its_rows_without_the_backbone_cache(
        reference, study_env, tmp_path, monkeypatch):
    """The machine is gone: only the benchmark's folder is left. The rows there are not computed again, only the
    backbones of runs with calibrations left are trained, and the rows equal the uninterrupted study's."""
    from flows.study import study_flow

    path = study_env.write("recorded", runner={"workers": 1})
    out = _stop_after(path, 4, tmp_path / "backbones-first", monkeypatch)
    first = pd.read_csv(out / "Cora_GCN" / "results.csv")
    done = set(zip(first["fold"], first["calibrator"]))
    assert len(done) == 4

    cache = tmp_path / "backbones-second"  # empty: every backbone needed is trained again
    result = study_flow(str(path), {"data": {"cache_dir": str(cache)}})

    assert result["rows_found"] == 4
    assert result["tasks"]["calibrate"] == {"computed": 8, "failed": 0}
    folds_left = {fold for fold in range(3)} - {fold for fold in range(3)
                                                if all((fold, c) in done for c in TINY_CALIBRATORS)}
    assert result["tasks"]["pretrain"]["computed"] == len(folds_left) == len(list(cache.rglob("*.pt")))
    results = pd.read_csv(out / "Cora_GCN" / "results.csv")
    pd.testing.assert_frame_equal(numbers(results), numbers(reference.results))
    assert sorted(p.name for p in (out / "Cora_GCN").iterdir() if not p.name.startswith(".")) == [
        "predictions", "results.csv", "splits.json", "summary.csv"]


def test_rows_of_another_machines_backbone_refuse_this_ones_until_the_run_is_forgotten(
        reference, study_env, tmp_path, monkeypatch):
    """The rows came from a machine whose CPU trained the same seeds to other weights: a run's rows share one
    backbone, so this machine's rows of those runs are refused with the command that removes the run; after it the
    same study computes the run whole here."""
    from flows.study import StudyIncompleteError, study_flow
    from simcalib.cli import main

    path = study_env.write("elsewhere", runner={"workers": 1})
    out = _stop_after(path, 2, tmp_path / "backbones-first", monkeypatch)
    results = out / "Cora_GCN" / "results.csv"
    frame = pd.read_csv(results).assign(backbone_digest="another-machine", ece=99.0)  # as another machine wrote them
    frame.to_csv(results, index=False)
    (fold,) = set(frame["fold"])
    overrides = {"data": {"cache_dir": str(tmp_path / "backbones-second")}}

    with pytest.raises(StudyIncompleteError, match=rf"Cora-GCN s0 i0 f{fold}: (VS|ETS) was computed on backbone [0-9a-f]{{16}}, "
                                                   rf"the run's rows in {results} on another-machine"):
        study_flow(str(path), overrides)
    rows = pd.read_csv(results)
    assert set(rows[rows.fold == fold]["backbone_digest"]) == {"another-machine"} and len(rows) == 10

    assert main(["study", "forget", str(results), "--run", f"0,0,{fold}"]) == 0
    result = study_flow(str(path), overrides)
    assert result["tasks"]["calibrate"] == {"computed": 4, "failed": 0}
    pd.testing.assert_frame_equal(numbers(pd.read_csv(results)), numbers(reference.results))




def test_a_study_on_devices_runs_one_task_per_run_with_the_rows_of_the_per_calibrator_tasks(
        reference, study_env, monkeypatch):
    """Two (fake) devices with three runs in flight each: a run unit per run (its backbone and its four calibrators)
    in place of 3 + 12 tasks, and the rows of the reference study's per-calibrator tasks, bit for bit."""
    import torch

    from flows.study import study_flow
    from simcalib.experiment.schedule import FAKE_DEVICES_ENV

    monkeypatch.setenv(FAKE_DEVICES_ENV, "2")
    path = study_env.write("devices", runner={"runs_per_device": 3})
    threads = torch.get_num_threads()
    try:
        result = study_flow(str(path))
    finally:
        torch.set_num_threads(threads)
    assert result["granularity"] == "run"
    assert result["tasks"] == {"pretrain": {"computed": 0, "failed": 0}, "calibrate": {"computed": 0, "failed": 0},
                               "run": {"computed": 3, "failed": 0}}
    rows = pd.read_csv(result["benchmarks"][0]["results"])
    pd.testing.assert_frame_equal(numbers(rows), numbers(reference.results))


@pytest.mark.parametrize("kind, section", [
    ("shift", {"properties": ["popularity"], "id_fraction": 0.5}),
    pytest.param("conformal", {"alphas": [0.1], "scores": ["APS"]}, marks=pytest.mark.slow),  # the same dispatch
])
def test_a_shift_or_conformal_study_runs_through_the_flow_one_task_per_run_with_the_librarys_rows(
        study_env, prefect_api, kind, section):
    """The flow hands a plan of kind shift or conformal to run units computed by node_runs.evaluate_run: the rows in
    results.csv are the library's for that run (every column but the fit time), and a rerun computes nothing."""
    import torch

    from flows.study import study_flow
    from simcalib.experiment.node_runs import evaluate_run
    from simcalib.experiment.plan import plan_study
    from simcalib.experiment.study import load_study

    path = study_env.write(f"kind-{kind}", calibrators=["UnCal", "TS"],
                           runs={"splits": 1, "inits": 1, "folds": 1, "generated_splits": True}, **{kind: section})
    threads = torch.get_num_threads()
    try:
        result = study_flow(str(path))
        again = study_flow(str(path))
    finally:
        torch.set_num_threads(threads)
    assert result["granularity"] == "run" and result["tasks"]["run"] == {"computed": 1, "failed": 0}
    assert again["tasks"]["run"] == {"computed": 0, "failed": 0}
    (plan,) = plan_study(load_study(path)).benchmarks
    assert plan.kind == kind
    rows = pd.read_csv(result["benchmarks"][0]["results"])
    expected = pd.DataFrame(evaluate_run(plan, plan.runs[0], ["UnCal", "TS"]))
    columns = [c for c in expected.columns if c != "fit_seconds" and c in rows.columns]
    pd.testing.assert_frame_equal(rows[columns].reset_index(drop=True), expected[columns].reset_index(drop=True),
                                  check_dtype=False)
