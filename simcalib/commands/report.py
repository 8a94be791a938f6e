"""``simcalib report RESULTS_DIR_OR_STUDY``: the paper's tables, tests, figures and theory check as a report.

The source is a results folder (every ``results.csv`` below it is read) or a study file, which resolves to
its output folder. The report goes to ``--out`` (default ``reports/<name>``). ``--flow`` runs the same steps
as the Prefect flow ``report``; either way the folder is logged to MLflow when ``--tracking-uri`` or
``$MLFLOW_TRACKING_URI`` is set.

``simcalib report --every reports/reports.yaml`` (``make report``) re-renders every report folder listed in
that manifest from its committed ``results.csv`` files, each with its own title and split selection; figures
that need the (uncommitted) test predictions are kept from the earlier rendering and labelled so.

``simcalib report --leaderboard reports/leaderboard.yaml`` (part of ``make report``) writes the leaderboard, the
recommendation per family of graphs and their CSVs beside the manifest, from the committed rows
(:mod:`simcalib.report.leaderboard`).

``simcalib report --check-claims reports/claims`` renders nothing: it checks every number that the hand-written
findings quote against the committed table it comes from (:mod:`simcalib.report.claims`) and exits non-zero
naming each stale one.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from simcalib.commands.common import count_or_list
from simcalib.errors import ConfigError, DataMissingError

COMMANDS = ("report",)  # the sub-commands register() adds


def register(sub) -> None:
    report = sub.add_parser("report", help="tables, significance tests, figures and theory check of a study's results",
                            description="Build report.md and report.html (figures inline) from results files; "
                                        "never retrains.")
    report.add_argument("source", metavar="RESULTS_DIR_OR_STUDY", nargs="?",
                        help="a results folder (all results.csv below it) or a study YAML file")
    report.add_argument("--every", metavar="MANIFEST", default=None,
                        help="re-render every report listed in MANIFEST (e.g. reports/reports.yaml) from its results")
    report.add_argument("--check-claims", metavar="CLAIMS", default=None,
                        help="render nothing; check the numbers quoted by the hand-written findings against their "
                             "tables (a claims YAML file or a folder of them, e.g. reports/claims)")
    report.add_argument("--leaderboard", metavar="FAMILIES", default=None,
                        help="write leaderboard.md, leaderboard.csv, leaderboard_benchmarks.csv and recommendation.csv "
                             "beside FAMILIES (e.g. reports/leaderboard.yaml) from the families' committed results")
    report.add_argument("--summary-in", metavar="FILE", action="append", default=None,
                        help="with --leaderboard: replace FILE's block between the markers of "
                             "reports/leaderboard.md with the recommendation and the leaderboard's top rows "
                             "(repeatable; e.g. README.md)")
    report.add_argument("--only", metavar="OUT", action="append", default=None,
                        help="with --every: re-render only the entry whose out folder is OUT (repeatable)")
    report.add_argument("--keep-figures", action="store_true",
                        help="keep figures of an earlier rendering that need saved predictions not present here")
    report.add_argument("--out", default=None, help="output folder (default: reports/<study or folder name>)")
    report.add_argument("--study", metavar="STUDY", default=None,
                        help="the study file whose results the folder holds: only its complete benchmarks are "
                             "reported, the others named under the summary (a study file as the source implies it)")
    report.add_argument("--paper-dir", default=None,
                        help="folder of the paper's table*.csv (default: $SIMCALIB_PAPER_DIR; absent: comparison skipped)")
    report.add_argument("--title", default=None, help="report title")
    report.add_argument("--theory-reps", type=int, default=2000,
                        help="Monte-Carlo replicates per cell of the Theorem 1 check (default 2000)")
    report.add_argument("--seed", type=int, default=10, help="seed of the Monte-Carlo check (default 10)")
    report.add_argument("--splits", type=count_or_list, default=None,
                        help="only these splits' runs, e.g. =1,2,3,4 (the splits no default was chosen on); default: all")
    report.add_argument("--flow", action="store_true", help="run as the Prefect flow `report`")
    report.add_argument("--dedupe", action="store_true",
                        help="where a results folder repeats a run with identical rows (e.g. appended twice), count "
                             "the first once instead of refusing the folder (repeats that differ are still refused)")
    report.add_argument("--tracking-uri", default=None,
                        help="MLflow tracking URI to log the report to (default: $MLFLOW_TRACKING_URI; unset: no logging)")
    report.set_defaults(func=run)


def resolve_source(source: str) -> tuple[Path, str]:
    """(results folder, report name) of a results folder or a study file."""
    path = Path(source)
    if path.suffix.lower() in (".yaml", ".yml"):
        return study_output(path)
    if not path.exists():
        raise DataMissingError(f"{source} does not exist; pass a results folder (the --out of `simcalib benchmark`) "
                               "or a study YAML file")
    name = path.parent.name if path.is_file() else path.resolve().name
    return path, name


def study_output(path: Path) -> tuple[Path, str]:
    """A study file's output folder and name, read with the study schema (:mod:`simcalib.experiment.study`)."""
    from simcalib.experiment.study import load_study

    study = load_study(path)
    return study.output, study.name


MANIFEST_KEYS = {"results", "out", "title", "splits", "data_efficiency", "pinned_figures", "summary_in", "paper",
                 "figure_calibrators", "theory", "figure_data", "kind", "study"}
RECOMMENDED = "recommended"  # figure_calibrators: UnCal, TS, the recommendation.csv beside the manifest, SimCalib
# ``kind: shift`` / ``kind: conformal``: the entry is rendered by simcalib.report.shift / simcalib.report.conformal
# from the rows of simcalib.experiment.node_runs.evaluate_run (``study``: the study file whose plan the report
# compares the rows with), and skipped with one line while its results folder holds no rows.
# ``kind: autocal``: simcalib.report.autocal, AutoCal's regret against the headline's calibrators on the same runs;
# with ``summary_in``, its summary.md replaces that file's summary block of the entry.
KIND_REPORTS = {"shift": "simcalib.report.shift:build_shift_report",
                "conformal": "simcalib.report.conformal:build_conformal_report",
                "autocal": "simcalib.report.autocal:build_autocal_report"}


def render_kind_entry(entry: dict, command: str) -> Path | None:
    """The report of a manifest entry with ``kind``; None when its results folder holds no rows yet."""
    import importlib

    module, function = KIND_REPORTS[entry["kind"]].split(":")
    build = getattr(importlib.import_module(module), function)
    return build(entry["results"], entry["out"], entry["title"], entry.get("study"), regenerate=command)


def _as_list(value) -> list:
    """A manifest value that is one item or a list of them, as a list (absent: empty)."""
    return [] if value is None else value if isinstance(value, list) else [value]


def read_manifest(path: str | os.PathLike) -> list[dict]:
    """The reports of a manifest: a YAML list of {results, out, title, splits (optional), data_efficiency
    (optional)}, paths relative to the working directory (the project root); ``results`` is one folder or a
    list of folders read as one; ``data_efficiency`` names the folder(s) of a label-rate sweep drawn as the
    data-efficiency figure (kept apart so that its runs at 15% do not replace the tables' runs);
    ``pinned_figures`` lists figure stems kept from the earlier rendering even where they could be redrawn;
    ``summary_in`` names Markdown files whose summary block of this report (markers of
    :mod:`simcalib.report.summary`) is replaced by the new ``summary.md``; ``figure_calibrators`` lists the
    calibrators of the reliability and confidence figures (default
    :data:`simcalib.report.figures.REPORT_FIGURE_CALIBRATORS`), or ``recommended``: UnCal, TS, the calibrators
    of the ``recommendation.csv`` beside the manifest and SimCalib
    (:func:`simcalib.report.figures.recommended_figure_calibrators`; the entry gains ``figure_recommendation``,
    that file's path); ``figure_data`` names the results folder(s) those two figures are drawn from (default:
    ``results``), e.g. the figure pass reports/figures/results, whose rows carry every calibrator's
    ``figure_bins``; ``theory: false`` leaves the Theorem 1 check out (default: in); ``study`` names the study
    file whose results ``results`` holds (or a list of the study files writing into it): the report shows its
    complete benchmarks only and names the others under its summary (:mod:`simcalib.report.completeness`)."""
    import yaml

    from simcalib.report.completeness import study_files
    from simcalib.report.summary import BEGIN, END

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"report manifest {path} does not exist; see reports/reports.yaml")
    entries = yaml.safe_load(path.read_text())
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{path}: expected a list of reports, each with results, out and title")
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or not {"results", "out", "title"} <= set(entry) or set(entry) - MANIFEST_KEYS:
            raise ConfigError(f"{path}: entry {index} must have the keys results, out, title (and optionally "
                              f"splits, data_efficiency, pinned_figures, summary_in, paper, figure_calibrators, "
                              f"theory, figure_data, kind, study), got {entry!r}")
        shown = entry.get("figure_calibrators")
        if shown == RECOMMENDED:
            from simcalib.report.figures import recommended_figure_calibrators

            recommendation = path.parent / "recommendation.csv"
            entry["figure_calibrators"] = list(recommended_figure_calibrators(recommendation))
            entry["figure_recommendation"] = str(recommendation)
        elif shown is not None and (not isinstance(shown, list) or not shown
                                    or not all(isinstance(m, str) for m in shown)):
            raise ConfigError(f"{path}: entry {index}: figure_calibrators must be a list of calibrator names, e.g. "
                              f"[UnCal, TS, SimCalib], or `{RECOMMENDED}`, got {shown!r}")
        if entry.get("kind") is not None and entry["kind"] not in KIND_REPORTS:
            raise ConfigError(f"{path}: entry {index}: kind must be one of {', '.join(KIND_REPORTS)}, got "
                              f"{entry['kind']!r}")
        for target in _as_list(entry.get("summary_in")):
            if not isinstance(target, str) or not Path(target).is_file():
                raise DataMissingError(f"{path}: entry {index}: summary_in file {target!r} does not exist")
            if BEGIN.format(out=entry["out"]) not in Path(target).read_text():
                raise ConfigError(f"{path}: entry {index}: {target} has no summary block for {entry['out']}; put "
                                  f"the two lines {BEGIN.format(out=entry['out'])!r} and {END!r} where it goes")
        for study in study_files(entry.get("study")):
            if not Path(str(study)).is_file():
                raise DataMissingError(f"{path}: entry {index}: study file {study!r} does not exist; `study` names "
                                       "the study file (or a list of them) whose results the entry reads (e.g. "
                                       "study/offline.yaml)")
        if entry.get("kind") is not None:
            continue  # rendered from its rows when there are any (render_kind_entry)
        if not isinstance(entry.get("theory", True), bool):
            raise ConfigError(f"{path}: entry {index}: theory must be true or false, got {entry['theory']!r}")
        for key in ("results", "data_efficiency", "figure_data"):
            for folder in _as_list(entry.get(key)):
                if not isinstance(folder, str) or not Path(folder).is_dir():
                    raise DataMissingError(f"{path}: entry {index}: {key} folder {folder!r} does not exist; "
                                           f"`{key}` is a folder or a list of folders")
    return entries


def run_every(args: argparse.Namespace) -> int:
    from simcalib.report import build_report
    from simcalib.report.summary import embed_summary

    command = f"`make report` (= `simcalib report --every {args.every}`)"
    entries = read_manifest(args.every)
    if args.only:
        outs = [str(e["out"]).rstrip("/") for e in entries]
        wanted = {o.rstrip("/") for o in args.only}
        unknown = sorted(wanted - set(outs))
        if unknown:
            raise ConfigError(f"--only {', '.join(unknown)}: no entry of {args.every} has that out folder; its "
                              f"entries: {', '.join(outs)}")
        entries = [e for e, out in zip(entries, outs) if out in wanted]
    for entry in entries:
        if entry.get("kind") is not None:
            written = render_kind_entry(entry, command)
            print(f"report: {written}" if written else f"report: {entry['out']} skipped (no {entry['kind']} rows below "
                  f"{entry['results']} yet)", flush=True)
            summary_md = Path(entry["out"]) / "summary.md" if written else None
        else:
            outputs = build_report(entry["results"], entry["out"], args.paper_dir, entry["title"], args.theory_reps,
                                   args.seed, splits=entry.get("splits"), keep_figures=True, regenerate=command,
                                   data_efficiency=entry.get("data_efficiency"),
                                   pinned_figures=entry.get("pinned_figures") or (),
                                   compare_paper=entry.get("paper", True),
                                   figure_calibrators=entry.get("figure_calibrators"),
                                   theory_check=entry.get("theory", True),
                                   figure_data=entry.get("figure_data"),
                                   figure_recommendation=entry.get("figure_recommendation"),
                                   study_file=entry.get("study"))
            print(f"report: {outputs.report_md}", flush=True)
            summary_md = outputs.summary_md
        for target in _as_list(entry.get("summary_in")) if summary_md is not None and summary_md.is_file() else []:
            embed_summary(target, entry["out"], summary_md.read_text())
            print(f"summary: {target}", flush=True)
    return 0


def run(args: argparse.Namespace) -> int:
    import contextlib

    from simcalib.report.results import dedupe_identical

    with dedupe_identical() if getattr(args, "dedupe", False) else contextlib.nullcontext():
        return _run(args)


def check_claims_command(args: argparse.Namespace) -> int:
    from simcalib.report.claims import check_claims

    if args.every or args.source or args.out or args.title or args.splits:
        raise ConfigError("--check-claims renders nothing; drop the report source, --every, --out, --title and "
                          "--splits")
    result = check_claims(args.check_claims)
    for claim in result.stale:
        print(f"stale: {claim}", flush=True)
    print(f"claims: {result.claims} passages, {result.numbers_checked} numbers checked against their tables, "
          f"{result.numbers_unchecked} not from a table, {len(result.stale)} stale", flush=True)
    return 1 if result.stale else 0


def leaderboard_command(args: argparse.Namespace) -> int:
    from simcalib.report.leaderboard import (
        build_leaderboard,
        leaderboard_excerpt,
        read_families,
        write_leaderboard,
    )
    from simcalib.report.summary import BEGIN, END, embed_summary

    if args.every or args.source or args.out or args.title or args.splits or args.check_claims:
        raise ConfigError("--leaderboard reads its families' results from FAMILIES and writes beside it; drop the "
                          "report source, --every, --check-claims, --out, --title and --splits")
    families = read_families(args.leaderboard)
    targets = args.summary_in or []
    out = Path(args.leaderboard).parent
    for target in targets:  # checked before the work, so a wrong name costs nothing
        if not Path(target).is_file() or BEGIN.format(out=out / "leaderboard.md") not in Path(target).read_text():
            raise ConfigError(f"--summary-in {target}: no such file or no leaderboard block in it; put the two lines "
                              f"{BEGIN.format(out=out / 'leaderboard.md')!r} and {END!r} where it goes")
    result = build_leaderboard(families)
    paths = write_leaderboard(result, out)
    for path in paths:
        print(f"leaderboard: {path}", flush=True)
    for target in targets:
        embed_summary(target, str(out / "leaderboard.md"),
                      leaderboard_excerpt(result.table, result.recommendation, families, link=str(paths[0])))
        print(f"summary: {target}", flush=True)
    for row in result.recommendation.itertuples():
        print(f"recommended for {row.family}: {row.calibrator} (mean ECE rank {row.ece_rank:.1f})", flush=True)
    return 0


def _run(args: argparse.Namespace) -> int:
    if getattr(args, "summary_in", None) and not getattr(args, "leaderboard", None):
        raise ConfigError("--summary-in writes the leaderboard's excerpt; use it with --leaderboard FAMILIES")
    if getattr(args, "leaderboard", None):
        return leaderboard_command(args)
    if getattr(args, "check_claims", None):
        return check_claims_command(args)
    if args.every:
        if args.source or args.out or args.title or args.splits or args.study:
            raise ConfigError("--every takes each report's source, --out, --title, --splits and study from the "
                              "manifest; drop them from the command line")
        return run_every(args)
    if args.source is None:
        raise ConfigError("name a results folder or study file to report on (or --every MANIFEST)")
    results_dir, name = resolve_source(args.source)
    study_file = args.study or (args.source if Path(args.source).suffix.lower() in (".yaml", ".yml") else None)
    out = Path(args.out or Path("reports") / name)
    if args.theory_reps < 10:
        raise ConfigError("--theory-reps must be at least 10")
    title = args.title or f"SimCalib study report: {name}"
    if args.flow:
        from simcalib.commands.orchestration import flows_module

        report_flow = flows_module("report", "report --flow").report_flow
        start_temporary_server = flows_module("temporary_server", "report --flow").start_temporary_server

        start_temporary_server()  # where no Prefect server is configured: one a Ctrl-C does not stop mid-flow
        md = Path(report_flow(str(results_dir), str(out), args.paper_dir, title, args.theory_reps, args.seed,
                              args.tracking_uri, splits=args.splits, study_file=study_file))
    else:
        from simcalib.report import build_report

        md = build_report(results_dir, out, args.paper_dir, title, args.theory_reps, args.seed,
                          splits=args.splits, keep_figures=args.keep_figures, study_file=study_file).report_md
        if args.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI"):
            from simcalib.commands.orchestration import flows_module

            log_report_to_mlflow = flows_module("report", "report (logging to MLflow)").log_report_to_mlflow

            run_id = log_report_to_mlflow(str(out), args.tracking_uri, name)
            print(f"logged to MLflow run {run_id}")
    print(f"report: {md}\nhtml:   {md.with_suffix('.html')}")
    return 0
