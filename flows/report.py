"""The Prefect flow ``report``: a study's results -> tables, significance tests, figures, theory check, document.

Each task is a thin call into :mod:`simcalib.report.build`; the flow then logs the whole report folder
(report.md, report.html, tables, figures, CSVs) to MLflow as artifacts when tracking is configured: an
explicit ``tracking_uri``, ``$MLFLOW_TRACKING_URI``, or an MLflow run already active in this process (e.g.
the study flow's), in which case the artifacts go to that run under ``report/``.

Usage::

    from .report import report_flow
    report_flow("results/quick", "results/quick/report", paper_dir="../shared/paper")
"""

from __future__ import annotations

import os
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from simcalib.report import build
from simcalib.report.definitions import definitions_frame, write_definitions

REPORT_EXPERIMENT = "simcalib-report"


@task(name="report-load", cache_policy=NO_CACHE)
def load(results_dir: str, paper_dir: str | None, splits: list[int] | None = None, study_file: str | None = None):
    return build.load_inputs(results_dir, paper_dir, splits, study_file)


@task(name="report-tables", cache_policy=NO_CACHE)
def tables(study, paper, out_dir: str) -> build.TableSet:
    table_set = build.build_tables(study, paper)
    build.write_tables(table_set, Path(out_dir))
    write_definitions(definitions_frame(study.rows), Path(out_dir))
    return table_set


@task(name="report-significance", cache_policy=NO_CACHE)
def significance(study, table_set, paper, out_dir: str) -> build.Significance:
    sig = build.compute_significance(study, table_set, paper)
    build.write_significance(sig, Path(out_dir))
    return sig


@task(name="report-figures", cache_policy=NO_CACHE)
def figures(study, out_dir: str) -> build.FigureSet:
    return build.make_figures(study, Path(out_dir))


@task(name="report-theory", cache_policy=NO_CACHE)
def theory(out_dir: str, reps: int, seed: int) -> build.TheoryResult:
    return build.run_theory(Path(out_dir), reps, seed)


@task(name="report-render", cache_policy=NO_CACHE)
def render(study, paper, table_set, sig, figure_set, theory_result, out_dir: str, title: str) -> str:
    from simcalib.report.render import write_report
    from simcalib.report.summary import write_summary

    summary = build.report_summary(table_set, sig, study.left_out)
    blocks = build.assemble(study, paper, table_set, sig, figure_set, theory_result, Path(out_dir), title,
                            summary=summary)
    md, _ = write_report(blocks, Path(out_dir), title)
    write_summary(summary, Path(out_dir))
    return str(md)


def tracking_configured(tracking_uri: str | None = None) -> bool:
    if tracking_uri or os.environ.get("MLFLOW_TRACKING_URI"):
        return True
    import mlflow

    return mlflow.active_run() is not None


def log_report_to_mlflow(out_dir: str, tracking_uri: str | None = None, run_name: str | None = None,
                         experiment: str = REPORT_EXPERIMENT) -> str | None:
    """Log the report folder as artifacts; returns the MLflow run id, or None when tracking is not configured."""
    if not tracking_configured(tracking_uri):
        return None
    import mlflow

    active = mlflow.active_run()
    if active is not None:  # inside a caller's run (e.g. the study flow): attach the report to it
        mlflow.log_artifacts(out_dir, artifact_path="report")
        return active.info.run_id
    if tracking_uri:
        mlflow.set_tracking_uri(tracking_uri)
    mlflow.set_experiment(experiment)
    with mlflow.start_run(run_name=run_name or Path(out_dir).name, tags={"simcalib.kind": "report"}) as run:
        mlflow.log_artifacts(out_dir)
        return run.info.run_id


@task(name="report-mlflow", cache_policy=NO_CACHE)
def log_to_mlflow(out_dir: str, tracking_uri: str | None, run_name: str, experiment: str) -> str | None:
    return log_report_to_mlflow(out_dir, tracking_uri, run_name, experiment)


@flow(name="report")
def report_flow(results_dir: str, out_dir: str, paper_dir: str | None = None, title: str | None = None,
                theory_reps: int = 2000, seed: int = 10, tracking_uri: str | None = None,
                experiment: str = REPORT_EXPERIMENT, splits: list[int] | None = None,
                study_file: str | None = None) -> str:
    """Write the report of the results below ``results_dir`` into ``out_dir``; returns the report.md path.

    A study passes its ``tracking_uri`` and experiment name so the report sits beside its benchmark runs.
    ``splits`` restricts the report to those splits' runs; ``study_file``: the study whose results these are (only
    its complete benchmarks are reported, :mod:`simcalib.report.completeness`).
    """
    logger = get_run_logger()
    title = title or f"SimCalib study report: {Path(results_dir).name}"
    study, paper = load(results_dir, paper_dir, splits, study_file)
    table_set = tables(study, paper, out_dir)
    sig = significance(study, table_set, paper, out_dir)
    figure_set = figures(study, out_dir)
    theory_result = theory(out_dir, theory_reps, seed)
    md = render(study, paper, table_set, sig, figure_set, theory_result, out_dir, title)
    run_id = log_to_mlflow(out_dir, tracking_uri, f"report-{Path(results_dir).name}", experiment)
    logger.info("report written to %s%s", md, f"; logged to MLflow run {run_id}" if run_id else
                " (MLflow tracking not configured: nothing logged)")
    return md


__all__ = ["log_report_to_mlflow", "report_flow", "tracking_configured"]
