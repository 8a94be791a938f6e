import numpy as np
import pandas as pd
import pytest

from simcalib.errors import ConfigError
from simcalib.experiment.executor import BenchmarkRequest, run_benchmark
from simcalib.experiment.protocol import ProtocolSettings, Run, evaluate_calibrator, fit_calibrator, make_runs
from simcalib.metrics import BINARY_METRIC_NAMES, ESTIMATOR_NAMES
from simcalib.store.integrity import BACKBONE_OPTIONS_COLUMN, DEFINITION_COLUMNS
from simcalib.store.results_store import (
    AUDIT_COLUMNS,
    LATER_COLUMNS,
    RESULT_COLUMNS,
    append_rows,
    read_results,
    summarize,
)


@pytest.fixture
def settings(tmp_path, mirror_dir, splits_dir):
    return ProtocolSettings(data_root=str(tmp_path / "data"), mirror=str(mirror_dir), splits_dir=str(splits_dir),
                            cache_dir=str(tmp_path / "cache"), device="cpu", backbone_overrides=(("max_epochs", 15),))


def test_make_runs_covers_the_75_run_protocol():
    runs = make_runs("cora", "gcn")
    assert len(runs) == 75 and len(set(runs)) == 75
    assert runs[0] == Run("Cora", "GCN", 0, 0, 0)


def test_benchmark_writes_tidy_results_and_resumes_without_recomputing(settings, tmp_path):
    request = BenchmarkRequest("cora", "GCN", ["uncal", "TS"], splits=[0], inits=[0], folds=[0, 1])
    out = tmp_path / "out"
    first = run_benchmark(request, settings, out, save_predictions=True)
    assert list(first.columns[: len(RESULT_COLUMNS)]) == RESULT_COLUMNS
    assert len(first) == 4 and set(first["calibrator"]) == {"UnCal", "TS"}
    assert (first["accuracy"].groupby(first["fold"]).nunique() == 1).all()  # TS keeps the argmax
    assert len(list((out / "predictions").glob("*.npz"))) == 4
    # A resumed benchmark with one more fold computes only the new run.
    bigger = BenchmarkRequest("cora", "GCN", ["uncal", "TS"], splits=[0], inits=[0], folds=[0, 1, 2])
    second = run_benchmark(bigger, settings, out)
    assert len(second) == 6
    raw = pd.read_csv(out / "results.csv")
    assert len(raw) == 6, "no row may be written twice"
    pd.testing.assert_frame_equal(second.iloc[:4].reset_index(drop=True), first.reset_index(drop=True))


def test_a_run_recomputed_alone_gives_the_same_numbers(settings, tmp_path):
    run = Run("Cora", "GCN", 0, 1, 2)
    alone = evaluate_calibrator(run, settings, "TS")
    request = BenchmarkRequest("cora", "GCN", ["TS"], splits=[0], inits=[1], folds=[2])
    inside = run_benchmark(request, settings, tmp_path / "out").iloc[0].to_dict()
    for metric in ("ece", "nll", "accuracy"):
        assert alone[metric] == pytest.approx(inside[metric], rel=1e-9)


def test_fit_calibrator_fits_the_model_whose_numbers_evaluate_calibrator_reports(settings):
    """The benchmarks time fit_calibrator's fits; they must be the study's fits, seeded the same way."""
    import time

    import torch

    from simcalib.experiment.protocol import load_graph
    from simcalib.graph import in_degree
    from simcalib.metrics import ESTIMATOR_NAMES, compute_metrics

    run = Run("Cora", "GCN", 0, 0, 1)
    options = {"max_epochs": 30, "patience": 5}
    start = time.perf_counter()
    fitted = fit_calibrator(run, settings, "simcalib", options)
    wall = time.perf_counter() - start
    with torch.no_grad():
        probs = fitted.model.predict_proba(fitted.graph).cpu()[fitted.test_idx]
    graph = load_graph("Cora", settings)
    degree = in_degree(graph.edge_index, graph.num_nodes)[fitted.test_idx]  # the test nodes' degrees
    metrics = compute_metrics(probs, graph.y[fitted.test_idx], degree=degree)
    row = evaluate_calibrator(run, settings, "SimCalib", options)
    assert 0 < fitted.fit_seconds <= wall  # the fit's own duration, within the call that made it
    assert (metrics["ece"], metrics["nll"]) == pytest.approx((row["ece"], row["nll"]), rel=1e-9)
    for name in ESTIMATOR_NAMES:  # every estimator in the row, degree_ece on the graph's in-degrees
        assert np.isfinite(row[name]) and row[name] == pytest.approx(metrics[name], rel=1e-9, abs=1e-12), name
    assert fitted.model.fit_info["w"] == row["w"]


def test_parallel_workers_give_the_numbers_of_one_single_threaded_process(settings, tmp_path):
    import dataclasses

    import torch

    request = BenchmarkRequest("cora", "GCN", ["uncal", "TS"], splits=[0], inits=[0, 1], folds=[0])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the workers' thread count (part of the backbone's identity)
    try:
        serial = run_benchmark(request, settings, tmp_path / "serial")
    finally:
        torch.set_num_threads(threads)
    fresh_cache = dataclasses.replace(settings, cache_dir=str(tmp_path / "cache-parallel"))  # workers retrain
    parallel = run_benchmark(request, fresh_cache, tmp_path / "parallel", workers=2)
    key = ["calibrator", "split", "init", "fold"]
    serial, parallel = (f.sort_values(key).reset_index(drop=True) for f in (serial, parallel))
    assert len(parallel) == 4 and len(list((tmp_path / "cache-parallel").rglob("*.pt"))) == 2
    pd.testing.assert_frame_equal(serial.drop(columns="fit_seconds"), parallel.drop(columns="fit_seconds"))


def test_summary_uses_population_std():
    frame = pd.DataFrame({"dataset": "Cora", "backbone": "GCN", "calibrator": "TS",
                          **{m: [1.0, 3.0] for m in ("ece", "ace", "mce", "classwise_ece", "kde_ece", "nll", "brier", "accuracy")}})
    row = summarize(frame).iloc[0]
    assert row["ece_mean"] == 2.0 and row["ece_std"] == 1.0 and row["runs"] == 2


def test_invalid_requests_fail_before_any_work(settings, tmp_path):
    with pytest.raises(ConfigError, match="folds"):
        run_benchmark(BenchmarkRequest("cora", "gcn", ["ts"], folds=[3]), settings, tmp_path)
    with pytest.raises(ConfigError, match="no calibrators"):
        run_benchmark(BenchmarkRequest("cora", "gcn", []), settings, tmp_path)
    assert not (tmp_path / "results.csv").exists()


def test_simcalib_rows_carry_the_chosen_grid_point_and_temperatures(settings):
    row = evaluate_calibrator(Run("Cora", "GCN", 0, 0, 0), settings, "SimCalib", {"max_epochs": 20, "patience": 5})
    assert row["w"] in (0.6, 0.8, 0.9) and row["t"] in (0.3, 0.5, 1.0)
    assert row["t_feat_mean"] > 0 and row["t_move_mean"] > 0
    assert row["t_feat_std"] > 1e-4 and row["t_move_std"] > 1e-4  # node-wise temperatures, not one for all
    ts = evaluate_calibrator(Run("Cora", "GCN", 0, 0, 0), settings, "TS")
    assert all(ts[column] is None for column in AUDIT_COLUMNS)


def test_rows_of_the_figures_calibrators_carry_their_binned_test_predictions(settings, tmp_path):
    import numpy as np

    from simcalib.analysis.figure_bins import from_json
    from simcalib.report.results import load_predictions

    run, out = Run("Cora", "GCN", 0, 0, 0), tmp_path / "predictions"
    uncal = evaluate_calibrator(run, settings, "UnCal", predictions_dir=out)
    bins = from_json(uncal["figure_bins"])
    assert bins.ece() == pytest.approx(uncal["ece"], abs=1e-5)  # the row's own ECE, from the bins alone
    saved = load_predictions(out / "Cora_GCN_s0_i0_f0_UnCal.npz")
    assert bins.nodes == len(saved.labels) and bins.count.shape == (5, 15)
    assert np.all(np.diff(bins.distance) > 0)  # groups ordered by feature distance
    assert bins.t_feat is None  # UnCal has no feature temperature


def test_every_calibrators_row_carries_its_figure_bins_and_they_change_no_number(settings):
    from simcalib.analysis.figure_bins import from_json

    run = Run("Cora", "GCN", 0, 0, 0)
    for name in ("TS", "ETS", "Dirichlet"):  # beyond the calibrators of the similarity figure
        row = evaluate_calibrator(run, settings, name)
        bins = from_json(row["figure_bins"])
        assert bins.ece() == pytest.approx(row["ece"], abs=1e-5)  # the row's own ECE, from its bins alone
        assert bins.count.shape == (5, 15) and bins.t_feat is None


def test_simcalib_figure_data_carries_its_feature_temperature_per_distance_group(settings):
    from simcalib.analysis.figure_bins import from_json

    row = evaluate_calibrator(Run("Cora", "GCN", 0, 0, 0), settings, "SimCalib", {"max_epochs": 20, "patience": 5})
    bins = from_json(row["figure_bins"])
    assert bins.t_feat.shape == (5,) and np.all(bins.t_feat > 0)
    # group means weighted by group size give the audit's mean over the test nodes
    sizes = bins.count.sum(1)
    assert float((bins.t_feat * sizes).sum() / sizes.sum()) == pytest.approx(row["t_feat_mean"], rel=1e-4)


def test_appending_to_a_results_file_from_before_the_audit_columns_keeps_every_row(tmp_path):
    path = tmp_path / "results.csv"
    later = ("backbone_digest", "figure_bins", *DEFINITION_COLUMNS, *ESTIMATOR_NAMES, BACKBONE_OPTIONS_COLUMN,
             *LATER_COLUMNS)
    old_columns = [c for c in RESULT_COLUMNS if c not in AUDIT_COLUMNS and c not in later]
    old = pd.DataFrame([{c: 1 for c in old_columns}])
    old.to_csv(path, index=False)
    audit = {c: None for c in AUDIT_COLUMNS} | {"w": 0.8, "t": 0.5}  # as evaluate_calibrator writes it
    definition = {"split_digest": "00000000000000aa", "data_digest": "00000000000000bb", "split_source": "generated"}
    append_rows(path, [{**{c: 2 for c in old_columns}, **audit, "backbone_digest": "0123456789abcdef", "figure_bins": None,
                        **definition, **{m: 0.5 for m in ESTIMATOR_NAMES}, BACKBONE_OPTIONS_COLUMN: "default",
                        **{c: None for c in LATER_COLUMNS}}])
    both = pd.read_csv(path)
    assert list(both.columns[:len(RESULT_COLUMNS)]) == RESULT_COLUMNS and len(both) == 2
    assert both["ece"].tolist() == [1, 2] and pd.isna(both.loc[0, "w"]) and both.loc[1, "w"] == 0.8


def test_a_results_file_from_before_the_estimator_columns_reads_them_as_missing_never_as_zero(tmp_path):
    path = tmp_path / "results.csv"
    newer = (*ESTIMATOR_NAMES, BACKBONE_OPTIONS_COLUMN, *LATER_COLUMNS)
    old_columns = [c for c in RESULT_COLUMNS if c not in newer]
    pd.DataFrame([{c: 1 for c in old_columns}]).to_csv(path, index=False)
    summary = summarize(read_results(path))
    missing = [f"{m}_mean" for m in (*ESTIMATOR_NAMES, *BINARY_METRIC_NAMES)]
    assert summary["ece_mean"].tolist() == [1] and summary[missing].isna().all(None)
    append_rows(path, [{**{c: 2 for c in old_columns}, **{m: 0.5 for m in ESTIMATOR_NAMES}, BACKBONE_OPTIONS_COLUMN: "default",
                        **{m: 0.25 for m in BINARY_METRIC_NAMES}, "one_class_backbone": False, "homophily_bins": "{}",
                        "calibrator_options": '{"class":"TS"}', "calibrator_digest": "0123456789ab"}])
    both = pd.read_csv(path)
    assert list(both.columns) == RESULT_COLUMNS  # widened at the end, where a file written with them has them
    assert both.loc[0, list(ESTIMATOR_NAMES)].isna().all() and (both.loc[1, list(ESTIMATOR_NAMES)] == 0.5).all()
    assert both.loc[0, list(BINARY_METRIC_NAMES)].isna().all() and (both.loc[1, list(BINARY_METRIC_NAMES)] == 0.25).all()


def test_saved_predictions_carry_the_feature_distance_the_similarity_figure_groups_by(settings, tmp_path):
    import numpy as np
    import torch

    from simcalib.experiment.protocol import calibration_graph, train_run_backbone
    from simcalib.report.figures import (
        feature_similarity_figure,
        figure_bins_frame,
        similarity_groups,
        similarity_summary,
    )
    from simcalib.report.results import index_predictions, load_predictions
    from simcalib.similarity import mahalanobis_to_prototypes

    run, out = Run("Cora", "GCN", 0, 0, 0), tmp_path / "Cora_GCN" / "predictions"
    for calibrator, options in (("UnCal", {}), ("GATS", {}), ("SimCalib", {"w": 0.8, "t": 0.5})):  # no grid: quick
        evaluate_calibrator(run, settings, calibrator, options, predictions_dir=out)
    saved = load_predictions(out / "Cora_GCN_s0_i0_f0_UnCal.npz")
    graph, test_idx = calibration_graph(run, settings, train_run_backbone(run, settings))
    # squared Mahalanobis distance to the nearest prototype, prototypes from the training folds only
    expected = mahalanobis_to_prototypes(graph.hidden, graph.labels, graph.train_idx, graph.num_classes)
    assert saved.feature_distance.shape == (len(test_idx),)
    assert np.allclose(saved.feature_distance, expected[torch.as_tensor(test_idx)].min(dim=1).values.numpy())
    assert np.ptp(saved.feature_distance) > 0

    groups = similarity_groups(figure_bins_frame(index_predictions(tmp_path, pd.DataFrame())))
    assert groups is not None and sorted(groups["group"].unique()) == [1, 2, 3, 4, 5]
    summary = similarity_summary(groups)
    assert set(summary["calibrator"]) == {"UnCal", "GATS", "SimCalib"}
    assert (summary.loc[summary["calibrator"] == "UnCal", "improvement"] == 0).all()
    figure = feature_similarity_figure(summary)
    assert [ax.get_title() for ax in figure.axes if ax.get_visible()][0] == "Cora GCN (1 runs)"


def test_batched_benchmark_writes_the_same_rows_caches_per_run_and_resumes(settings, tmp_path):
    request = BenchmarkRequest("cora", "GCN", ["uncal", "TS"], splits=[0], inits=[0, 1], folds=[0])
    out = tmp_path / "batched"
    first = run_benchmark(request, settings, out, batch_runs=True)
    assert list(first.columns[: len(RESULT_COLUMNS)]) == RESULT_COLUMNS and len(first) == 4
    cached = sorted((tmp_path / "cache").rglob("*.pt"))
    assert len(cached) == 2  # one entry per run
    # Resumed with one more init: only the new run is trained (alone), the old rows stay as they were.
    bigger = BenchmarkRequest("cora", "GCN", ["uncal", "TS"], splits=[0], inits=[0, 1, 2], folds=[0])
    second = run_benchmark(bigger, settings, out, batch_runs=True)
    assert len(second) == 6 and len(pd.read_csv(out / "results.csv")) == 6
    pd.testing.assert_frame_equal(second.iloc[:4].reset_index(drop=True), first.reset_index(drop=True))
    # The per-run path never reads a batched backbone: it trains (and caches) its own, another draw.
    per_run = run_benchmark(request, settings, tmp_path / "per-run")
    assert len(list((tmp_path / "cache").rglob("*.pt"))) == 3 + 2
    assert not per_run["ece"].equals(first["ece"])


@pytest.mark.slow  # ~25 s of CPU; by default batched runs in one process and unbatched runs in workers (above)
def test_batched_benchmark_in_worker_processes_gives_the_single_process_numbers(settings, tmp_path):
    import dataclasses

    import torch

    request = BenchmarkRequest("cora", "GAT", ["uncal", "TS"], splits=[0, 1], inits=[0], folds=[0, 1])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the workers' thread count (part of the backbone's identity)
    try:
        serial = run_benchmark(request, settings, tmp_path / "serial", batch_runs=True)
    finally:
        torch.set_num_threads(threads)
    fresh_cache = dataclasses.replace(settings, cache_dir=str(tmp_path / "cache-parallel"))
    parallel = run_benchmark(request, fresh_cache, tmp_path / "parallel", batch_runs=True, workers=2)
    key = ["calibrator", "split", "init", "fold"]
    serial, parallel = (f.sort_values(key).reset_index(drop=True) for f in (serial, parallel))
    assert len(parallel) == 8
    pd.testing.assert_frame_equal(serial.drop(columns="fit_seconds"), parallel.drop(columns="fit_seconds"))


def test_calibrators_fitted_across_runs_give_the_per_run_rows_and_resume(settings, tmp_path):
    import torch

    calibrators = ["uncal", "TS", "ETS", "CaGCN", "GATS", "SimCalib"]  # SimCalib: fitted alone within the group
    quick = {"max_epochs": 120}
    options = {"TS": quick, "ETS": quick, "CaGCN": quick, "GATS": quick, "SimCalib": {"w": 0.8, "t": 0.5, **quick}}
    request = BenchmarkRequest("cora", "GCN", calibrators, splits=[0], inits=[0, 1], folds=[0, 1],
                               calibrator_options=options)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        alone = run_benchmark(request, settings, tmp_path / "alone")
        together = run_benchmark(request, settings, tmp_path / "together", batch_calibrators=True)
        assert len(together) == 24
        numbers = ["ece", "ace", "mce", "nll", "brier", "accuracy"]
        pd.testing.assert_frame_equal(together[numbers], alone[numbers], atol=1e-4, rtol=0)
        assert (together["backbone_digest"] == alone["backbone_digest"]).all()  # the per-run backbones, cached
        # resumed with one more fold: the new runs are fitted together, the old rows stay as they were
        bigger = BenchmarkRequest("cora", "GCN", calibrators, splits=[0], inits=[0, 1], folds=[0, 1, 2],
                                  calibrator_options=options)
        resumed = run_benchmark(bigger, settings, tmp_path / "together", batch_calibrators=True)
    finally:
        torch.set_num_threads(threads)
    key = ["calibrator", "split", "init", "fold"]
    old = resumed.merge(together[key], on=key).sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(old, together.sort_values(key).reset_index(drop=True))
    assert len(resumed) == 36


def test_resume_from_committed_results_skips_the_runs_it_holds(settings, tmp_path):
    request = BenchmarkRequest("cora", "GCN", ["uncal", "TS"], splits=[0], inits=[0], folds=[0, 1])
    committed = run_benchmark(request, settings, tmp_path / "committed")
    import dataclasses

    elsewhere = dataclasses.replace(settings, cache_dir=str(tmp_path / "empty-cache"))  # another machine
    bigger = BenchmarkRequest("cora", "GCN", ["uncal"], splits=[0], inits=[0], folds=[0, 1, 2])
    resumed = run_benchmark(bigger, elsewhere, tmp_path / "continued",
                            resume_from=tmp_path / "committed" / "results.csv")
    assert len(resumed) == 3
    assert len(list((tmp_path / "empty-cache").rglob("*.pt"))) == 1  # only fold 2 was trained
    old = committed[committed["calibrator"] == "UnCal"].reset_index(drop=True)
    pd.testing.assert_frame_equal(resumed.iloc[:2].reset_index(drop=True), old)
    assert set(pd.read_csv(tmp_path / "continued" / "results.csv")["calibrator"]) == {"UnCal"}  # TS not copied
    again = run_benchmark(bigger, elsewhere, tmp_path / "continued", resume_from=tmp_path / "committed" / "results.csv")
    assert len(again) == 3 and len(pd.read_csv(tmp_path / "continued" / "results.csv")) == 3  # nothing twice
    with pytest.raises(ConfigError, match="resume-from"):
        run_benchmark(bigger, elsewhere, tmp_path / "x", resume_from=tmp_path / "missing.csv")


def test_rows_name_their_backbone_and_a_resume_on_another_backbone_is_refused(settings, tmp_path):
    from simcalib.experiment.ledger import BackboneMismatchError, forget_run

    request = BenchmarkRequest("cora", "GCN", ["uncal", "TS"], splits=[0], inits=[0, 1], folds=[0])
    out = tmp_path / "out"
    first = run_benchmark(request, settings, out)
    digests = first.groupby("init")["backbone_digest"].agg(set)
    assert all(len(d) == 1 for d in digests) and digests[0] != digests[1]  # one per backbone, all rows of a run
    # The same runs continued where init 0's backbone was another (as on another machine): a run's rows share one
    # backbone, so its new row is not added and the error names the command that recomputes the run whole.
    raw = pd.read_csv(out / "results.csv")
    raw.loc[raw["init"] == 0, "backbone_digest"] = "0123456789abcdef"
    raw.to_csv(out / "results.csv", index=False)
    more = BenchmarkRequest("cora", "GCN", ["uncal", "TS", "ETS"], splits=[0], inits=[0, 1], folds=[0])
    with pytest.raises(BackboneMismatchError, match=r"Cora-GCN s0 i0 f0: ETS was computed on backbone [0-9a-f]{16}, "
                                                    r"the run's rows in .* on 0123456789abcdef .* simcalib study forget "
                                                    r".*results.csv --run 0,0,0, then run the same command again"):
        run_benchmark(more, settings, out)
    rows = pd.read_csv(out / "results.csv")
    assert len(rows) == 5 and list(rows[rows["init"] == 0]["calibrator"]) == ["UnCal", "TS"]  # i1's ETS added
    assert forget_run(out / "results.csv", 0, 0, 0) == 2
    again = run_benchmark(more, settings, out)
    assert len(again) == 6 and again.groupby("init")["backbone_digest"].nunique().tolist() == [1, 1]


# ---------------------------------------------------------------------------------------------------------
# Results integrity: run definitions, one writer, recovery


def test_rows_record_their_run_definition_and_a_resume_on_other_splits_is_refused(settings, tmp_path):
    import dataclasses

    request = BenchmarkRequest("cora", "GCN", ["uncal"], splits=[0], inits=[0], folds=[0])
    out = tmp_path / "out"
    first = run_benchmark(request, settings, out)
    row = first.iloc[0]
    assert len(row["split_digest"]) == 16 and len(row["data_digest"]) == 16
    assert row["split_source"] == f"fixed:{settings.splits_dir}/gats_5_3f_85/Cora/split_0.npz"
    before = (out / "results.csv").read_bytes()
    more = BenchmarkRequest("cora", "GCN", ["uncal"], splits=[0], inits=[0, 1], folds=[0])
    generated = dataclasses.replace(settings, splits_dir="none", generated_splits=True)
    with pytest.raises(ConfigError, match=r"results.csv: refusing to add runs: Cora GCN s0 i0 f0 \(label rate 0.15\) "
                                          r"was computed on another split \(split_digest \w{16}, fixed:.*\) than this "
                                          r"one \(\w{16}, generated\)"):
        run_benchmark(more, generated, out)
    with pytest.raises(ConfigError, match=r"fixed GATS splits \(gats_5_3f_85\) are not available.*--generated-splits"):
        # no fixed files: never a silent fallback
        run_benchmark(more, dataclasses.replace(generated, generated_splits=False), out)
    with pytest.raises(ConfigError, match="--resume-from copies only rows of the same split"):
        run_benchmark(more, generated, tmp_path / "elsewhere", resume_from=out / "results.csv")
    with pytest.raises(ConfigError, match=r"under another seed \(15475094, here \d+: another --seed\)"):
        run_benchmark(more, dataclasses.replace(settings, study_seed=11), out)
    assert (out / "results.csv").read_bytes() == before  # nothing added by a refused command
    frame = pd.read_csv(out / "results.csv")
    frame["data_digest"] = "0123456789abcdef"  # as if processed by another torch_geometric
    frame.to_csv(out / "results.csv", index=False)
    with pytest.raises(ConfigError, match="another processed graph of Cora"):
        run_benchmark(more, settings, out)
    frame.drop(columns=DEFINITION_COLUMNS).to_csv(out / "results.csv", index=False)  # a file from before the columns
    assert len(run_benchmark(more, settings, out)) == 2  # unknown definitions are not refused


def test_rows_name_the_backbone_settings_and_a_results_file_never_mixes_attention_kernels(settings, tmp_path):
    import dataclasses

    from simcalib.errors import DataCorruptError
    from simcalib.experiment.protocol import backbone_options
    from simcalib.store.integrity import check_results

    assert backbone_options(Run("Cora", "GAT", 0, 0, 0), ProtocolSettings()) == "default"
    batched = ProtocolSettings(batch_runs=True, backbone_overrides=(("attention", "pyg"),))
    assert backbone_options(Run("Cora", "GAT", 0, 0, 0), batched) == "trainer=batched"
    csr = dataclasses.replace(settings, backbone_overrides=(*settings.backbone_overrides, ("attention", "csr")))
    assert backbone_options(Run("Cora", "GCN", 0, 0, 0), csr) == "max_epochs=15"  # a GCN has no attention
    request = BenchmarkRequest("cora", "GAT", ["uncal"], splits=[0], inits=[0], folds=[0])
    out = tmp_path / "out"
    assert run_benchmark(request, settings, out).iloc[0][BACKBONE_OPTIONS_COLUMN] == "max_epochs=15"
    before = (out / "results.csv").read_bytes()
    more = BenchmarkRequest("cora", "GAT", ["uncal"], splits=[0], inits=[0, 1], folds=[0])
    with pytest.raises(ConfigError, match=r"Cora GAT s0 i0 f0 \(label rate 0.15\) was computed on a backbone trained "
                                          r"under other settings \(backbone_options max_epochs=15, here "
                                          r"max_epochs=15;attention=csr\)"):
        run_benchmark(more, csr, out)
    assert (out / "results.csv").read_bytes() == before
    elsewhere = run_benchmark(request, csr, tmp_path / "csr")
    assert elsewhere.iloc[0][BACKBONE_OPTIONS_COLUMN] == "max_epochs=15;attention=csr"
    mixed = pd.concat([pd.read_csv(out / "results.csv"), elsewhere.assign(init=1)], ignore_index=True)
    with pytest.raises(DataCorruptError, match="rows of one benchmark were computed on different backbone_options values "
                                               r"\(Cora GAT\).*see the backbone_options column"):
        check_results(mixed, "mixed")
    assert len(check_results(mixed.drop(index=0), "one kernel")) == 1


def test_a_results_file_that_repeats_a_run_is_not_resumed(settings, tmp_path):
    from simcalib.errors import DataCorruptError

    request = BenchmarkRequest("cora", "GCN", ["uncal", "ts"], splits=[0], inits=[0], folds=[0])
    run_benchmark(request, settings, tmp_path / "out")
    path = tmp_path / "out" / "results.csv"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines + lines[2:]))  # the TS row appended twice, as by two writers
    with pytest.raises(DataCorruptError, match=r"1 result row\(s\) repeat a run \(Cora/GCN/TS s0 i0 f0 L=0.15\)"):
        run_benchmark(request, settings, tmp_path / "out")


def test_a_cut_off_last_results_line_is_set_aside_and_its_run_computed_again(settings, tmp_path):
    request = BenchmarkRequest("cora", "GCN", ["uncal", "ts"], splits=[0], inits=[0], folds=[0, 1])
    out = tmp_path / "out"
    whole = run_benchmark(request, settings, out)
    path = out / "results.csv"
    data = path.read_bytes()
    path.write_bytes(data[:data.rstrip(b"\n").rfind(b"\n") + 40])  # a kill in the middle of the last row
    assert len(pd.read_csv(path)) == 4  # pandas alone would take the cut row as a row (with empty metrics)
    resumed = run_benchmark(request, settings, out)
    pd.testing.assert_frame_equal(resumed.drop(columns="fit_seconds"), whole.drop(columns="fit_seconds"))
    assert len(pd.read_csv(path)) == 4 and (out / "results.csv.cut").read_bytes().count(b"\n") == 1


HOLD_LOCK = """
import sys, time
from simcalib.store.integrity import results_lock
with results_lock(sys.argv[1], command="holder"):
    print("held", flush=True)
    time.sleep(600)
"""


def _hold(folder, script=HOLD_LOCK, ready="held"):
    """A process running ``script`` on ``folder``, returned once it has printed ``ready``."""
    import subprocess
    import sys

    holder = subprocess.Popen([sys.executable, "-c", script, str(folder)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == ready
    return holder


def test_one_writer_per_folder_a_second_is_refused_or_waits_and_a_dead_writers_lock_is_taken_over(settings, tmp_path):
    import signal
    import threading

    from simcalib.store.integrity import ResultsLockedError

    request = BenchmarkRequest("cora", "GCN", ["uncal"], splits=[0], inits=[0], folds=[0])
    out = tmp_path / "out"
    holder = _hold(out)
    try:
        with pytest.raises(ResultsLockedError, match=rf"{out} is being written by pid {holder.pid} on .*\(holder, "
                                                     r"since .*\).*--wait"):
            run_benchmark(request, settings, out)
        assert not (out / "results.csv").exists()
        heard = []
        threading.Timer(1.0, holder.send_signal, [signal.SIGKILL]).start()  # the holder dies while we wait
        assert len(run_benchmark(request, settings, out, wait=True, notify=heard.append)) == 1
        assert heard and heard[0].startswith(f"waiting for pid {holder.pid}")
    finally:
        holder.kill()
        holder.wait()
    holder = _hold(out)
    holder.send_signal(signal.SIGKILL)  # killed while holding: its record stays in the lock file
    holder.wait()
    heard = []
    assert len(run_benchmark(request, settings, out, notify=heard.append)) == 1
    assert len(heard) == 1 and heard[0].startswith(f"taking over the lock of {out} left by pid {holder.pid} on ")
    assert heard[0].endswith("which is no longer running")


HOLD_LOCK_WRITING_LATE = """
import sys, time
from simcalib.store.integrity import results_lock
strftime = time.strftime
def late(fmt, *args):  # called between taking the lock and writing the holder's details into it
    print("locked", flush=True)
    time.sleep(0.5)
    return strftime(fmt, *args)
time.strftime = late
with results_lock(sys.argv[1], command="holder"):
    time.strftime = strftime
    print("held", flush=True)
    time.sleep(600)
"""


def test_a_writer_refused_just_after_another_took_the_lock_still_names_it(tmp_path):
    from simcalib.store.integrity import ResultsLockedError, results_lock

    out = tmp_path / "out"
    holder = _hold(out, HOLD_LOCK_WRITING_LATE, ready="locked")  # the lock is taken, the holder's record not yet written
    try:
        with pytest.raises(ResultsLockedError, match=rf"is being written by pid {holder.pid} on .*\(holder, since "):
            with results_lock(out):
                pass
    finally:
        holder.kill()
        holder.wait()


def test_an_unwritable_or_full_output_folder_fails_in_one_line_and_keeps_what_was_written(settings, tmp_path,
                                                                                          monkeypatch):
    import errno
    import os

    import simcalib.store.results_store as results_store
    from simcalib.store.integrity import LOCK_NAME, ResultsWriteError

    real_open = os.open

    def read_only(path, *args, **kwargs):  # the tests run as root, for whom chmod does not make a folder read-only
        if str(path).endswith(LOCK_NAME):
            raise PermissionError(errno.EROFS, "Read-only file system")
        return real_open(path, *args, **kwargs)

    request = BenchmarkRequest("cora", "GCN", ["uncal"], splits=[0], inits=[0], folds=[0, 1])
    with monkeypatch.context() as patch:
        patch.setattr(os, "open", read_only)
        with pytest.raises(ResultsWriteError, match=r"cannot write to the results folder .* \(Read-only file system\); "
                                                    r"make it writable .*\(nothing was computed\)"):
            run_benchmark(request, settings, tmp_path / "out")
    appends = []

    def full_disk(path, mode="r", *args, **kwargs):
        if mode == "a":
            appends.append(path)
            if len(appends) == 2:
                raise OSError(errno.ENOSPC, "No space left on device")
        return open(path, mode, *args, **kwargs)

    monkeypatch.setattr(results_store, "open", full_disk, raising=False)
    with pytest.raises(ResultsWriteError, match=r"results.csv \(the disk is full\); the rows written before are kept"):
        run_benchmark(request, settings, tmp_path / "out")
    assert len(pd.read_csv(tmp_path / "out" / "results.csv")) == 1
    monkeypatch.undo()
    assert len(run_benchmark(request, settings, tmp_path / "out")) == 2


def test_rows_name_their_calibrator_definition_and_a_file_never_mixes_two(settings, tmp_path):
    import json

    from simcalib.calibrators import calibrator_definition
    from simcalib.errors import DataCorruptError
    from simcalib.store.integrity import CALIBRATOR_DIGEST_COLUMN, CALIBRATOR_OPTIONS_COLUMN, check_results

    request = BenchmarkRequest("cora", "GCN", ["ts", "gats"], splits=[0], inits=[0], folds=[0])
    out = tmp_path / "out"
    rows = run_benchmark(request, settings, out)
    gats = rows[rows["calibrator"] == "GATS"].iloc[0]
    options = json.loads(gats[CALIBRATOR_OPTIONS_COLUMN])
    # every constructor option, resolved for the benchmark: GATS's Cora GCN weight decay, its class defaults
    assert options == {"class": "GATS", "bias": 1.0, "heads": 8, "lr": 0.01, "max_epochs": 2000,
                       "negative_slope": 0.2, "patience": 100, "weight_decay": 0.005}
    assert gats[CALIBRATOR_DIGEST_COLUMN] == calibrator_definition("GATS", "Cora", "GCN").digest
    assert calibrator_definition("GATS", "Cora", "GAT").digest != gats[CALIBRATOR_DIGEST_COLUMN]  # decay 0.01
    assert calibrator_definition("GATS", "Cora", "GCN", heads=4).digest != gats[CALIBRATOR_DIGEST_COLUMN]
    with pytest.raises(ConfigError, match="invalid options for calibrator GATS: hedas"):
        calibrator_definition("GATS", "Cora", "GCN", hedas=4)

    # more runs of the same calibrator under other options: refused before anything is written
    before = (out / "results.csv").read_bytes()
    more = BenchmarkRequest("cora", "GCN", ["ts", "gats"], splits=[0], inits=[0], folds=[0, 1],
                            calibrator_options={"GATS": {"heads": 4}})
    with pytest.raises(ConfigError, match=r"its Cora GCN rows of GATS were computed under another definition of GATS "
                                          r"\(calibrator_digest [0-9a-f]{12}, here [0-9a-f]{12}"):
        run_benchmark(more, settings, out)
    assert (out / "results.csv").read_bytes() == before

    # --resume-from copies only rows of the definition that runs now; the other is computed again
    resumed = run_benchmark(more, settings, tmp_path / "resumed", resume_from=out / "results.csv")
    by = resumed.set_index(["calibrator", "fold"])
    assert by.loc[("TS", 0), "fit_seconds"] == rows.set_index("calibrator").loc["TS", "fit_seconds"]  # copied
    assert by.loc[("GATS", 0), CALIBRATOR_DIGEST_COLUMN] == calibrator_definition("GATS", "Cora", "GCN", heads=4).digest
    assert set(by[CALIBRATOR_DIGEST_COLUMN].groupby("calibrator").nunique()) == {1}

    # a table holding both definitions of one calibrator of one benchmark is refused by name
    mixed = pd.concat([rows, resumed[resumed["calibrator"] == "GATS"].assign(init=1)], ignore_index=True)
    with pytest.raises(DataCorruptError, match=r"rows of one calibrator were computed on different calibrator_digest "
                                               r"values \(Cora GCN GATS\).*see the calibrator_options column"):
        check_results(mixed, "mixed")
    # rows written before the columns existed are unknown, never refused
    assert len(check_results(mixed.assign(**{CALIBRATOR_DIGEST_COLUMN: None}), "old")) == len(mixed)
