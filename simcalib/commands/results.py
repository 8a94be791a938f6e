"""``simcalib compare``, ``simcalib paired-tests`` and ``simcalib cost``: questions about finished results, no
training.

* ``compare NEW OLD``: do two results files agree on the runs both hold (:mod:`simcalib.report.compare`); OLD may
  be ``git:REV:PATH``, the file as committed at REV, so rows a study has just rewritten are compared with the rows
  they replace.
* ``paired-tests RESULTS...``: paired Wilcoxon tests between calibrators over the runs of each benchmark, as the
  report's (:func:`simcalib.report.stats.paired_comparisons`), for any pairs and optionally a subset of splits;
  with ``--across-benchmarks``, the paper's test over per-benchmark means instead
  (:func:`simcalib.report.stats.across_benchmarks_all`), each benchmark from the first folder that has it.
* ``cost RESULTS... --study FILE``: what the study's runs cost, read back from their rows and the backbone cache,
  and what the rest of the study will cost (:mod:`simcalib.report.cost`).
"""

from __future__ import annotations

import argparse
import io
import subprocess
from pathlib import Path

from simcalib.errors import ConfigError

COMMANDS = ("compare", "paired-tests", "cost")  # the sub-commands register() adds


def register(sub) -> None:
    compare = sub.add_parser("compare", help="do two results files agree on the runs both hold",
                             description="Pair the rows of two results.csv files by (split, init, fold, "
                                         "calibrator); print per calibrator each numeric column that differs "
                                         "(largest difference, rows differing), then the digest and seed "
                                         "mismatches.")
    compare.add_argument("new", help="a results.csv")
    compare.add_argument("old", help="a results.csv, or git:REV:PATH (the file as committed at REV)")
    compare.add_argument("--ignore", default="fit_seconds", help="columns not compared (default: fit_seconds)")
    compare.add_argument("--splits", type=_int_list, help="compare the runs of these splits only (e.g. 2,3,4)")
    compare.add_argument("--means", help="columns whose means over the paired rows are printed (e.g. ece,accuracy)")
    compare.set_defaults(func=run_compare)

    paired = sub.add_parser("paired-tests", help="paired Wilcoxon tests between calibrators over finished runs",
                            description="Pair runs by (split, init, fold) per benchmark and test METHOD against "
                                        "REFERENCE (Wilcoxon, Holm over the benchmarks); one Markdown table.")
    paired.add_argument("results", nargs="+", help="results folders or results.csv files (rows are pooled; with "
                                                   "--across-benchmarks, in order of precedence)")
    paired.add_argument("--pairs", type=_pairs, default=[("SimCalib", "GATS")],
                        help="comma list of METHOD:REFERENCE (default SimCalib:GATS)")
    paired.add_argument("--splits", type=_int_list, help="keep the runs of these splits only (e.g. 1,2,3,4)")
    paired.add_argument("--metric", default="ece")
    paired.add_argument("--across-benchmarks", action="store_true",
                        help="the paper's across-benchmark test on per-benchmark means: --method against each of "
                             "--references")
    paired.add_argument("--method", default="SimCalib", help="with --across-benchmarks (default SimCalib)")
    paired.add_argument("--references", help="with --across-benchmarks: comma list (default: every other calibrator)")
    paired.set_defaults(func=run_paired_tests)

    cost = sub.add_parser("cost", help="what a study's finished runs cost and what the rest will cost",
                          description="Per benchmark of the study: a backbone's epochs and seconds (backbone cache), "
                                      "each calibrator's mean fit seconds (results.csv; a calibrator without rows "
                                      "projected by node count), and the CPU-hours and wall hours of the runs "
                                      "the results folders lack.")
    cost.add_argument("results", nargs="+", help="results folders (every results.csv below them is read)")
    cost.add_argument("--study", required=True, help="the study file whose runs are counted and projected")
    cost.add_argument("--cache", default=None, help="backbone cache of the runs (default: the study's, else "
                                                    "$SIMCALIB_CACHE_DIR or .cache/simcalib)")
    cost.add_argument("--calibrators", default=None,
                      help="comma list of the study's calibrators to count (default: all it plans), e.g. those a "
                           "slice computes")
    cost.add_argument("--backbone-seconds", default=None, metavar="CSV",
                      help="recorded backbone seconds per run for benchmarks with no backbone in the cache: a CSV "
                           "with columns dataset, backbone and --backbone-column (e.g. "
                           "reports/performance/reprojected_cost.csv)")
    cost.add_argument("--backbone-column", default="backbone_s",
                      help="the column of --backbone-seconds to read (default backbone_s; the headline's table "
                           "has after_backbone_s: with the adopted speed-ups)")
    cost.add_argument("--schedule", action="store_true",
                      help="the remaining runs as tasks in the study's order on its workers: their makespan")
    cost.set_defaults(func=run_cost)


def _int_list(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma list of integers, e.g. 2,3,4") from None


def _pairs(text: str) -> list[tuple[str, str]]:
    pairs = [tuple(pair.split(":")) for pair in text.split(",")]
    if any(len(pair) != 2 or not all(pair) for pair in pairs):
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma list of METHOD:REFERENCE, e.g. SimCalib:GATS")
    return pairs


def read_rows(source: str):
    """A results file from a path or from ``git:REV:PATH`` (read in the current directory's repository)."""
    import pandas as pd

    from simcalib.report.compare import KEY

    if source.startswith("git:"):
        rev, _, path = source[4:].partition(":")
        shown = subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True, text=True)
        if shown.returncode != 0:
            raise ConfigError(f"{source}: `git show {rev}:{path}` failed ({shown.stderr.strip()}); name a committed "
                              f"file as git:REV:PATH")
        frame = pd.read_csv(io.StringIO(shown.stdout))
    elif not Path(source).is_file():
        raise ConfigError(f"{source}: no such results file; name a results.csv or git:REV:PATH")
    else:
        frame = pd.read_csv(source)
    missing = [column for column in KEY if column not in frame.columns]
    if missing:
        raise ConfigError(f"{source}: not a results file (no {', '.join(missing)} column); name a results.csv")
    return frame


def run_compare(args: argparse.Namespace) -> int:
    from simcalib.report.compare import RUN, compare, means

    new, old = read_rows(args.new), read_rows(args.old)
    if args.splits:
        new, old = new[new["split"].isin(args.splits)], old[old["split"].isin(args.splits)]
    for label, frame in (("new", new), ("old", old)):
        print(f"{label}: {len(frame)} rows, {frame.groupby(RUN).ngroups} runs, {frame['calibrator'].nunique()} "
              f"calibrators")
    result = compare(new, old, set(filter(None, args.ignore.split(","))))
    print(f"runs in both: {result['runs']}")
    for name, entry in result["calibrators"].items():
        differing = ", ".join(f"{c} {gap:.3g} ({rows} rows)" for c, (gap, rows) in entry["differing"].items())
        print(f"  {name:18s} {entry['rows']:4d} rows  {'differing: ' + differing if differing else 'equal'}")
    for column, (mismatches, compared) in result["identity"].items():
        print(f"{column}: {mismatches} of {compared} differ")
    for label in ("only_new", "only_old"):
        if result[label]:
            print(f"columns {label.replace('_', ' in ')}: {', '.join(result[label])}")
    if args.means:
        columns = args.means.split(",")
        absent = [c for c in columns if c not in new.columns or c not in old.columns]
        if absent:
            raise ConfigError(f"--means: no column {', '.join(absent)} in both files; name numeric columns of both")
        print("means over the paired rows (diff_over_std: the difference over the old rows' std over runs)")
        print(means(new, old, columns).to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return 0


def pooled_means(folders: list[str], metric: str):
    """Per-benchmark mean of ``metric`` per calibrator, each benchmark from the first folder that has it, and
    each benchmark's (folder, runs)."""
    import pandas as pd

    from simcalib.report.results import load_study_results

    means, sources = [], {}
    for folder in folders:
        rows = load_study_results(folder).rows
        for (dataset, backbone), block in rows.groupby(["dataset", "backbone"]):
            if (dataset, backbone) in sources:
                continue
            sources[(dataset, backbone)] = (folder, int(block.groupby("calibrator").size().max()))
            means.append(block.groupby("calibrator")[metric].mean().rename((dataset, backbone)))
    return pd.DataFrame(means), sources


def run_paired_tests(args: argparse.Namespace) -> int:
    import pandas as pd

    from simcalib.report.render import table_block, to_markdown
    from simcalib.report.results import load_study_results
    from simcalib.report.stats import (
        PAIRED_HEADER,
        across_benchmarks_all,
        paired_comparison_cells,
        paired_comparisons,
    )

    if args.across_benchmarks:
        means, sources = pooled_means(args.results, args.metric)
        for (dataset, backbone), (folder, runs) in sorted(sources.items()):
            has = "yes" if args.method in means.columns and pd.notna(means.loc[(dataset, backbone), args.method]) else "no"
            print(f"{dataset:>10} {backbone}: {folder} ({runs} runs; {args.method}: {has})")
        if args.method not in means.columns:
            raise ConfigError(f"--method {args.method}: no rows of it in {', '.join(args.results)}")
        frame = across_benchmarks_all(means, args.method, args.references.split(",") if args.references else None)
        cells = [[r.method, r.reference, str(r.n), f"{r.wins}/{r.n}", f"{100 * r.relative_reduction:+.1f}%",
                  f"{r.pvalue:.3g}", f"{r.pvalue_holm:.3g}"] for r in frame.itertuples()]
        header = ["Method", "Reference", "Benchmarks", "Method lower", "Mean relative reduction", "p", "p (Holm)"]
        print(to_markdown([table_block(header, cells, 2)]))
        return 0
    rows = pd.concat([load_study_results(path).rows for path in args.results], ignore_index=True)
    if args.metric not in rows.columns:
        raise ConfigError(f"--metric {args.metric}: no such column in the results; name a metric column, e.g. ece")
    if args.splits:
        rows = rows[rows["split"].isin(args.splits)]
    frame = paired_comparisons(rows, args.pairs, args.metric)
    found = set(zip(frame["method"], frame["reference"])) if len(frame) else set()
    for method, reference in args.pairs:
        if (method, reference) not in found:
            print(f"{method}:{reference}: no run with both calibrators")
    print(to_markdown([table_block(PAIRED_HEADER, paired_comparison_cells(frame), 3)]))
    return 0


def run_cost(args: argparse.Namespace) -> int:
    import contextlib
    import math
    import os

    from simcalib.data.registry import get_spec
    from simcalib.errors import UnknownNameError
    from simcalib.experiment.plan import plan_study
    from simcalib.experiment.study import load_study
    from simcalib.report.cost import makespan, read_results, recorded_backbone_seconds, study_cost

    study = load_study(args.study)
    # a shift study plans a benchmark per property of each dataset x backbone, each in its own results folder
    shift = study.spec.shift is not None
    benchmarks = ([(b.dataset, b.backbone, b.out_dir.name) for b in plan_study(study, data=False).benchmarks]
                  if shift else study.benchmarks())
    cache = Path(args.cache or study.spec.data.cache_dir or os.environ.get("SIMCALIB_CACHE_DIR") or ".cache/simcalib")
    names = [c.name for c in study.calibrators]
    if args.calibrators:
        chosen = [c.strip() for c in args.calibrators.split(",") if c.strip()]
        unknown = [c for c in chosen if c not in names]
        if unknown:
            raise ConfigError(f"--calibrators names {', '.join(unknown)}, which {args.study} does not plan; its "
                              f"calibrators are: {', '.join(names)}")
        names = chosen
    runs_asked = {dataset: study.runs_per_benchmark(dataset) for dataset, _ in study.benchmarks()}
    workers = study.spec.task_runner.workers
    rows = read_results(args.results)
    nodes = {dataset: get_spec(dataset).num_nodes for dataset, _ in study.benchmarks()}
    for dataset in set(rows["dataset"].astype(str)) - set(nodes):  # other graphs' rows: sources of the projection
        with contextlib.suppress(UnknownNameError):
            nodes[dataset] = get_spec(dataset).num_nodes
    recorded = recorded_backbone_seconds(args.backbone_seconds, args.backbone_column) if args.backbone_seconds \
        else None
    table, projected = study_cost(rows, benchmarks, names, runs_asked, cache, nodes, recorded)
    where = f"{cache}" + (f", else {args.backbone_seconds} ({args.backbone_column})" if recorded is not None else "")
    print(f"{args.study}: runs {study.describe_runs()}; {len(names)} calibrators, {workers} worker processes; "
          f"backbones from {where}")
    labels = [f"{r.dataset} {r.backbone}" + (f" {r.folder.removeprefix(f'{r.dataset}_{r.backbone}_')}" if r.folder
              else "") for r in table.itertuples()]
    width = max(16, *map(len, labels))
    print(f"{'benchmark':<{width}} {'done':>4} {'with rows':>9} {'backbones':>9} {'epochs':>6} {'s/epoch':>8} "
          f"{'backbone s':>10} {'calib s':>8} {'run s':>7} {'rest CPU-h':>10}")
    for name, r in zip(labels, table.itertuples()):
        if math.isnan(r.backbone_s):  # neither a cached backbone nor a recorded one
            why = f"no cached backbone in {cache}" + ("" if recorded is None else f" nor a row in {args.backbone_seconds}")
            state = "complete, nothing left" if r.done >= runs_asked[r.dataset] else "not projected"
            print(f"{name:<{width}} {r.done:>4} {r.with_rows:>9} {0:>9}  {why}: {state}")
            continue
        epochs, per_epoch = ((f"{r.epochs:>6.0f}", f"{r.s_per_epoch:>8.3f}") if r.backbone_source == "cache"
                             else (f"{'-':>6}", f"{'recorded':>8}"))
        print(f"{name:<{width}} {r.done:>4} {r.with_rows:>9} {r.backbones:>9} {epochs} {per_epoch} "
              f"{r.backbone_s:>10.1f} {r.calib_s:>8.1f} {r.run_s:>7.1f} {r.remaining_s / 3600:>10.2f}")
    if projected:  # one clause per benchmark and source: its calibrators, or "every calibrator"
        groups: dict[tuple[str, str, str, str], list[str]] = {}
        for (d, b, n), (source, source_backbone) in projected.items():
            groups.setdefault((d, b, source, source_backbone), []).append(n)
        print("fit seconds projected by node count (no row on the benchmark): " + "; ".join(
            f"{d} {b} from {source} {source_backbone}: "
            + ("every calibrator" if len(group) == len(names) else ", ".join(group))
            for (d, b, source, source_backbone), group in groups.items()))
    unmeasured = sorted({n for entry in table["unmeasured"] for n in entry})
    if unmeasured:
        print(f"not counted: {', '.join(unmeasured)} (no row below {', '.join(map(str, args.results))}, so no fit "
              "seconds to project); the costs above leave them out: name a results folder that holds their rows")
    measured = table.dropna(subset=["backbone_s"])
    whole = float(sum(runs_asked[r.dataset] * r.run_s for r in measured.itertuples()))
    rest = measured["remaining_s"].sum()
    print(f"the whole study on the {len(measured)} benchmarks projected: {whole / 3600:.1f} CPU-hours, "
          f"{whole / workers / 3600:.1f} h on {workers} workers")
    print(f"the rest: {rest / 3600:.1f} CPU-hours, {rest / workers / 3600:.1f} h on {workers} workers")
    if args.schedule:
        tasks = [t for entry in measured["tasks"] for t in entry]
        print(f"the rest as tasks in the study's order: makespan {makespan(tasks, workers) / 3600:.1f} h, longest "
              f"first {makespan(sorted(tasks, reverse=True), workers) / 3600:.1f} h")
    return 0
