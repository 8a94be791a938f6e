"""What the runs of a study actually cost, read back from a real pass, re-projected with other measurements.

The cost itself is a command, ``simcalib cost RESULTS --study FILE`` (:mod:`simcalib.report.cost`, whose functions
this script uses); this script adds the re-projections of the performance reports: ``--across-runs``,
``--epochs-from``, ``--epoch-times`` and ``--epoch-basis`` (below).

`bench_study_cost.py` times one run per benchmark in isolation. This script reads the runs that a study (or
`simcalib benchmark`) has already done instead, so its figures are means over every finished run:

- the backbone of each run, from the backbone cache (``<cache>/backbones/<Dataset>/<Backbone>/*.pt`` stores
  the epochs to the early stop and the training seconds of every backbone trained there);
- each calibrator's fit seconds, from the ``fit_seconds`` column of the benchmark's ``results.csv``.

The projection: for each benchmark of ``--study``, (runs the study asks for - runs finished) x (mean backbone
seconds + sum of the calibrators' mean fit seconds), divided by the study's worker processes. Timings are those
of the machine while the pass ran (other processes included); state the load beside the table.

``--across-runs``: outputs of ``bench_calibrators_across_runs.py``. Each line there measures one calibrator's fit
seconds over 15 runs of one benchmark, one run at a time and fitted across the runs (``--batch-calibrators``);
their ratio scales that calibrator's mean fit seconds here, giving the "after" columns and projection. Only
measured pairs are scaled: a calibrator or benchmark without a line keeps its per-run cost (the table says how
many of the benchmark's calibrators were scaled), so the "after" projection never assumes a gain.

``--epochs-from``: an earlier output of this script; a benchmark without a cached backbone takes its mean epochs
to the early stop (and its seconds per epoch) from there. ``--epoch-times``: outputs of ``gat_attention_speed.py
--gcn`` (per dataset: the median epoch of the GAT backbone with each attention kernel and of the GCN backbone,
measured in one loop under one load). With them a backbone costs epochs x today's seconds per epoch of the kernel
that the study uses (``backbone: {attention: ...}``). ``--epoch-basis earlier-scaled`` instead keeps the earlier
seconds per epoch of ``--epochs-from`` (GAT timed with torch_geometric's ``GATConv``, "pyg") and scales a GAT
epoch by today's measured ratio (study's kernel / pyg); GCN as it was. Epoch times measured under a heavy load
carry the load; the ratio of two kernels timed alternately carries much less of it.

A calibrator of the study with no row on a benchmark is never left out: its fit seconds are projected from the
same calibrator on the most similar benchmark with rows (the same backbone first, then the nearest node count),
scaled by node count, and listed below the table. The remaining runs are counted per calibrator: (runs asked -
the calibrator's rows) x its fit seconds, plus a backbone for every run with no row at all. With
``--schedule``, the makespan of the whole study on the study's workers: runs as tasks in the study's order (how
the flow submits them) against longest first, and whole benchmarks as jobs (one process per benchmark) likewise.

    python benchmarks/measured_study_cost.py --results reports/archive/offline_constant_branch/results reports/archive/full/results \\
        [--cache .cache/simcalib] [--study study/offline.yaml] \\
        [--across-runs reports/performance/calibrators_across_runs_*.txt] \\
        [--epochs-from reports/performance/measured_study_cost.txt] \\
        [--epoch-times reports/performance/gat_attention_speed_six.txt] [--epoch-basis earlier-scaled] [--schedule]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from cost_table import read_cost_table  # same folder: run as a script

from simcalib.report.cost import backbone_costs, check_projection, fill_unmeasured, makespan, read_results

RUN_KEYS = ["split", "init", "fold"]
# a measurement line of bench_calibrators_across_runs.py: benchmark, calibrator, one-by-one s, together s, speed-up
ACROSS_RUNS_LINE = re.compile(r"^(?P<dataset>\S+) (?P<backbone>\S+)\s+(?P<calibrator>\S+)\s+(?P<alone>[\d.]+)\s+"
                              r"(?P<together>[\d.]+)\s+[\d.]+x\s")
# a benchmark line of an earlier output of this script: name, runs, backbones, s/epoch, epochs, backbone s, ...
# gat_attention_speed.py: a dataset's header, its epoch line (pyg, csr medians in ms) and, with --gcn, its GCN line
SPEED_DATASET = re.compile(r"^(?P<dataset>\S+) GAT: \d+ nodes")
SPEED_EPOCH = re.compile(r"^\s+epoch \(both\)\s+(?P<pyg>[\d.]+) \[[^]]*\]\s+(?P<csr>[\d.]+) \[")
SPEED_GCN = re.compile(r"^\s+GCN backbone\s.*\bepoch\s+(?P<gcn>[\d.]+) \[")


def read_across_runs(paths: list[Path]) -> dict[tuple[str, str, str], float]:
    """(dataset, backbone, calibrator) -> fit seconds together / one by one, from the benchmark's outputs."""
    ratios = {}
    for path in paths:
        for line in path.read_text().splitlines():
            match = ACROSS_RUNS_LINE.match(line)
            if match and float(match["alone"]) > 0:
                key = (match["dataset"], match["backbone"], match["calibrator"])
                ratios[key] = float(match["together"]) / float(match["alone"])
    if paths and not ratios:
        sys.exit(f"no measurement line of bench_calibrators_across_runs.py in {', '.join(map(str, paths))}")
    return ratios


def read_earlier(path: Path) -> dict[tuple[str, str], dict[str, float]]:
    """(dataset, backbone) -> mean epochs, seconds per epoch and backbone seconds of an earlier output."""
    return {key: {"epochs": cost.epochs, "s_per_epoch": cost.s_per_epoch, "seconds": cost.backbone_s}
            for key, cost in read_cost_table(path).items()}


def read_epoch_times(paths: list[Path]) -> dict[tuple[str, str], float]:
    """(dataset, "pyg" | "csr" | "gcn") -> median seconds of one epoch, from outputs of gat_attention_speed.py
    (a later file's value of the same key wins)."""
    times: dict[tuple[str, str], float] = {}
    for path in paths:
        dataset = None
        for line in path.read_text().splitlines():
            if header := SPEED_DATASET.match(line):
                dataset = header["dataset"]
            elif dataset and (epoch := SPEED_EPOCH.match(line)):
                times[dataset, "pyg"] = float(epoch["pyg"]) / 1e3
                times[dataset, "csr"] = float(epoch["csr"]) / 1e3
            elif dataset and (gcn := SPEED_GCN.match(line)):
                times[dataset, "gcn"] = float(gcn["gcn"]) / 1e3
    if paths and not times:
        sys.exit(f"no epoch line of gat_attention_speed.py in {', '.join(map(str, paths))}")
    return times


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f}"


def print_schedule(label: str, jobs: list[tuple[str, list[float]]], workers: int) -> None:
    """The makespan on ``workers`` of ``jobs`` (per benchmark, in the study's order: the seconds of each of its
    runs), runs as tasks and whole benchmarks as jobs, each in the study's order and longest first."""
    runs = [s for _, per_run in jobs for s in per_run]
    whole = [(name, sum(per_run)) for name, per_run in jobs]
    longest = sorted(whole, key=lambda job: -job[1])
    print(f"\n{label}: makespan on {workers} worker processes, hours (ideal: "
          f"{_hours(sum(runs) / workers)}, the CPU-hours shared evenly)")
    print(f"  runs as tasks (the flow's tasks, one queue):   study order {_hours(makespan(runs, workers))}, "
          f"longest first {_hours(makespan(sorted(runs, reverse=True), workers))}")
    print(f"  benchmarks as jobs (one process each):         study order "
          f"{_hours(makespan([s for _, s in whole], workers))}, longest first "
          f"{_hours(makespan([s for _, s in longest], workers))}")
    print("  longest first: " + ", ".join(f"{name} {_hours(s)}" for name, s in longest if s > 0))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--results", nargs="+", type=Path, required=True, help="results folders (results.csv below)")
    parser.add_argument("--cache", type=Path, default=Path(".cache/simcalib"), help="backbone cache of the runs")
    parser.add_argument("--study", default="study/offline.yaml", help="the study whose remaining runs are projected")
    parser.add_argument("--digests", nargs="*", type=Path, default=[],
                        help="more results folders whose backbone_digest values name the study's backbones in the cache "
                             "(rows of the same runs computed on this machine, e.g. reports/archive/simcalib_joint)")
    parser.add_argument("--across-runs", nargs="*", type=Path, default=[],
                        help="outputs of bench_calibrators_across_runs.py: the 'after' (--batch-calibrators) columns")
    parser.add_argument("--epochs-from", type=Path, default=None,
                        help="an earlier output of this script (GAT timed with GATConv): epochs and seconds per epoch "
                             "of the benchmarks without a cached backbone")
    parser.add_argument("--epoch-times", nargs="*", type=Path, default=[],
                        help="outputs of gat_attention_speed.py --gcn: today's seconds per epoch of each backbone")
    parser.add_argument("--epoch-basis", choices=["today", "earlier-scaled"], default="today",
                        help="with --epoch-times: today's seconds per epoch, or the earlier ones of --epochs-from with a "
                             "GAT epoch scaled by today's kernel ratio")
    parser.add_argument("--schedule", action="store_true",
                        help="print the makespan of the study's order against longest first")
    args = parser.parse_args()

    from simcalib.backbones.models import DEFAULT_ATTENTION
    from simcalib.data.registry import get_spec
    from simcalib.experiment.study import load_study

    study = load_study(args.study)
    names = [c.name for c in study.calibrators]
    runs_asked = study.runs_per_benchmark()
    workers = study.spec.task_runner.workers
    attention = study.spec.backbone.get("attention", DEFAULT_ATTENTION)
    rows = read_results(args.results)
    ratios = read_across_runs(args.across_runs)
    earlier = read_earlier(args.epochs_from) if args.epochs_from else {}
    epoch_times = read_epoch_times(args.epoch_times)
    digest_rows = pd.concat([rows, *(read_results([f]) for f in args.digests)], ignore_index=True)
    digests = set(digest_rows.get("backbone_digest", pd.Series(dtype=str)).dropna().astype(str))

    # First pass: the backbone and the calibrator rows of every benchmark.
    benchmarks, unmeasured = {}, []
    fits = pd.DataFrame(np.nan, index=pd.MultiIndex.from_tuples(study.benchmarks()), columns=names)
    for dataset, backbone in study.benchmarks():
        mine = rows[(rows["dataset"] == dataset) & (rows["backbone"] == backbone) & rows["calibrator"].isin(names)]
        # a run is finished when every calibrator of the study has its row
        per_run = mine.groupby(RUN_KEYS)["calibrator"].nunique()
        rows_per_calibrator = mine.drop_duplicates([*RUN_KEYS, "calibrator"]).groupby("calibrator").size()
        info = {"done": int((per_run == len(names)).sum()), "with_rows": len(per_run),
                "rows": rows_per_calibrator.reindex(names, fill_value=0)}
        fits.loc[(dataset, backbone)] = mine.groupby("calibrator")["fit_seconds"].mean().reindex(names)
        costs = backbone_costs(args.cache, dataset, backbone, digests)
        if not costs.empty:
            info.update(backbones=f"{len(costs)}{'' if costs['matched'].all() else '*'}", epochs=costs["epochs"].mean(),
                        s_per_epoch=costs["s_per_epoch"].mean(), seconds=costs["seconds"].mean(),
                        matched=bool(costs["matched"].all()), earlier=False)
        elif (dataset, backbone) in earlier:
            info.update(backbones="0", matched=True, earlier=True, **earlier[dataset, backbone])
        else:
            unmeasured.append((dataset, backbone, len(costs)))
            continue
        benchmarks[dataset, backbone] = info
    nodes = {dataset: get_spec(dataset).num_nodes for dataset, _ in study.benchmarks()}
    filled, projected_from = fill_unmeasured(fits, nodes)

    after_header = f" {'calib s after':>13} {'run s after':>11} {'scaled':>6}" if ratios else ""
    print(f"{'benchmark':<15} {'runs':>4} {'backbones':>9} {'s/epoch':>8} {'epochs':>7} {'backbone s':>10} "
          f"{'calib s':>8} {'run s':>7}{after_header}  per calibrator: mean fit s (~ projected)")
    measured: list[tuple[int, float, float]] = []  # per benchmark: runs done, run seconds before and after
    backbone_total = 0.0
    remaining, remaining_jobs, whole_jobs = [], [], []
    for dataset, backbone in study.benchmarks():
        if (dataset, backbone) not in benchmarks:
            count = next(c for d, b, c in unmeasured if (d, b) == (dataset, backbone))
            print(f"{dataset + ' ' + backbone:<15} {0:>4} {count:>9}  not measured (no cached backbone or earlier line)")
            continue
        info = benchmarks[dataset, backbone]
        s_per_epoch, backbone_s = info["s_per_epoch"], info["seconds"]
        if epoch_times:
            kernel = attention if backbone == "GAT" else "gcn"
            needed = [kernel] if args.epoch_basis == "today" else [attention, "pyg"] if backbone == "GAT" else []
            for name in needed:
                if (dataset, name) not in epoch_times:
                    sys.exit(f"--epoch-times has no {name} epoch of {dataset}: measure it with "
                             f"benchmarks/speed/gat_attention_speed.py --datasets {dataset} --gcn")
            if args.epoch_basis == "today":
                s_per_epoch = epoch_times[dataset, kernel]
                backbone_s = info["epochs"] * s_per_epoch
            elif not info["earlier"]:
                sys.exit(f"--epoch-basis earlier-scaled scales the GATConv timings of --epochs-from, but {dataset} "
                         f"{backbone} takes its backbone from the cache {args.cache}, which does not record the kernel; "
                         "use --epoch-basis today or another --cache")
            else:  # the earlier backbone seconds (GATConv) x today's (study's kernel / pyg); GCN as it was
                ratio = epoch_times[dataset, attention] / epoch_times[dataset, "pyg"] if backbone == "GAT" else 1.0
                backbone_s = info["seconds"] * ratio
                s_per_epoch = backbone_s / info["epochs"]
        fit = filled.loc[(dataset, backbone)]
        calib_s = float(np.nansum(fit.to_numpy()))
        run_s = backbone_s + calib_s
        run_after, after = run_s, ""
        if ratios:
            scaled = {n: v * ratios[(dataset, backbone, n)] for n, v in fit.items()
                      if np.isfinite(v) and (dataset, backbone, n) in ratios}
            calib_after = calib_s - sum(fit[n] for n in scaled) + sum(scaled.values())
            run_after = backbone_s + calib_after
            after = f" {calib_after:>13.1f} {run_after:>11.1f} {len(scaled):>3}/{len(names):<2}"
        measured.append((info["done"], run_s, run_after))
        backbone_total += runs_asked * backbone_s
        whole_jobs.append((f"{dataset} {backbone}", [run_s] * runs_asked))
        # the rest to runs_asked: a backbone per run without any row, each calibrator's missing fits
        missing_runs = max(runs_asked - info["with_rows"], 0)
        missing_fits = float(np.nansum([max(runs_asked - info["rows"][n], 0) * fit[n] for n in names]))
        rest_s = missing_runs * backbone_s + missing_fits
        partial = info["with_rows"] - info["done"]  # runs with rows that lack a calibrator
        remaining.append((f"{dataset} {backbone}", info["with_rows"], missing_runs, rest_s, partial * backbone_s,
                          info["rows"][info["rows"] < runs_asked]))
        extra = (rest_s - missing_runs * run_s) / info["with_rows"] if info["with_rows"] else 0.0
        remaining_jobs.append((f"{dataset} {backbone}", [run_s] * missing_runs + ([extra] * info["with_rows"]
                                                                                  if extra > 0 else [])))
        per = " ".join(f"{n}={v:.1f}{'~' if (dataset, backbone, n) in projected_from else ''}"
                       for n, v in fit.items() if np.isfinite(v))
        print(f"{dataset + ' ' + backbone:<15} {info['done']:>4} {info['backbones']:>9} {s_per_epoch:>8.3f} "
              f"{info['epochs']:>7.0f} {backbone_s:>10.1f} {calib_s:>8.1f} {run_s:>7.1f}{after}  {per}")

    def projected(seconds: float) -> str:
        return f"{seconds / 3600:.1f} CPU-hours, {seconds / workers / 3600:.1f} h wall on {workers} worker processes"

    after_label = "after (--batch-calibrators, measured calibrators scaled)"
    if any(not info["matched"] for info in benchmarks.values()):
        print("\n* no cached backbone matches a digest of the study's rows (other machine): every cached one counts")
    if any(info["earlier"] for info in benchmarks.values()):
        print(f"\nbackbones 0: no cached backbone; epochs to the early stop from {args.epochs_from}")
    if epoch_times and args.epoch_basis == "today":
        print(f"s/epoch: today's epoch ({', '.join(map(str, args.epoch_times))}), GAT with the {attention} kernel "
              "(the study's), GCN as measured there")
    elif epoch_times:
        print(f"s/epoch: {args.epochs_from}'s, GAT x today's {attention}/pyg epoch ratio "
              f"({', '.join(map(str, args.epoch_times))}), GCN unchanged")
    if projected_from:
        print("\n~ no row on the benchmark; projected from the same calibrator on the most similar benchmark with rows "
              "(same backbone, nearest node count), scaled by node count:")
        for (dataset, backbone, name), (source, source_backbone) in projected_from.items():
            print(f"  {dataset} {backbone} {name}: {fits.loc[(source, source_backbone), name]:.1f} s on {source} "
                  f"{source_backbone} x {nodes[dataset]}/{nodes[source]} nodes = {filled.loc[(dataset, backbone), name]:.1f} s")
        targets = sorted({(d, b) for d, b, _ in projected_from}, key=list(fits.index).index)
        checked = check_projection(fits, nodes, targets)
        if not checked.empty:
            print(f"  the same rule where the rows exist (each calibrator with rows everywhere: its rows on these "
                  f"{len(targets)} benchmarks hidden and projected), projected / measured fit seconds: "
                  + " ".join(f"{n}={v:.2f}" for n, v in checked.items()))
    nowhere = [n for n in names if fits[n].isna().all()]
    if nowhere:
        print(f"\nno row on any benchmark, left out of every total: {', '.join(nowhere)}")
    print(f"\nthe whole of {args.study} ({runs_asked} runs per benchmark) on the {len(measured)} benchmarks measured: "
          f"{projected(sum(runs_asked * before for _, before, _ in measured))}")
    whole_s = sum(runs_asked * before for _, before, _ in measured)
    print(f"  of which backbones {_hours(backbone_total)}, calibrators {_hours(whole_s - backbone_total)} CPU-hours")
    if ratios:
        print(f"{after_label}: {projected(sum(runs_asked * after for _, _, after in measured))}")
    print(f"\nremaining runs of {args.study} to {runs_asked} per benchmark: {projected(sum(r[3] for r in remaining))} "
          "(a backbone per run without rows, each calibrator's missing fits)")
    for name, with_rows, missing_runs, rest_s, _, short in remaining:
        if rest_s > 0:
            groups = short.groupby(short).groups  # rows -> the calibrators with that many
            rows_of = "; ".join(f"{int(count)}: {', '.join(group) if len(group) <= 4 else f'{len(group)} calibrators'}"
                                for count, group in sorted(groups.items()))
            print(f"  {name:<15} {with_rows:>3} runs with rows, {missing_runs:>3} without: {rest_s / 3600:5.1f} CPU-hours;"
                  f" rows per calibrator {rows_of}")
    partial_s = sum(r[4] for r in remaining)
    if partial_s > 0:
        print(f"  + {_hours(partial_s)} CPU-hours if the backbones of the runs with rows but without every calibrator "
              "are not in the cache (retrained)")
    if ratios:
        print(f"{after_label}, remaining as finished runs: "
              f"{projected(sum(max(runs_asked - done, 0) * after for done, _, after in measured))}")
    if args.schedule:
        print_schedule(f"the whole of {args.study}", whole_jobs, workers)
        print_schedule("the remaining runs", remaining_jobs, workers)
    return 0


if __name__ == "__main__":
    from simcalib.errors import SimCalibError

    try:
        sys.exit(main())
    except SimCalibError as error:
        sys.exit(f"error: {error}")
