"""The measured cost of the study flow's pass beside the projection, from the committed results alone.

For each benchmark folder of a results directory written by ``simcalib study run``:

* complete (``completion.json`` beside ``results.csv``): backbone training seconds from ``completion.json``'s
  ``backbone_stats``, calibrator fit seconds summed over ``results.csv``'s rows of the projected calibrators;
* under way (``finished-tasks.jsonl``): the same two sums over the recorded tasks (``pretrain-`` records hold a
  backbone's ``train_seconds``, the others a calibrator's row or rows).

Beside each: the projection's seconds per run (``measured_study_cost.py``'s table: backbone s and calibrator s of
one core), the ratio, and the CPU-hours of the benchmark's 75 runs. What remains is projected per benchmark from
what its folder lacks (a backbone per run not recorded, each calibrator's missing fits) at the projection's rates,
and again at each measured benchmark's ratios (backbones, fits), which brackets it. Wall time is not in
the files: the provenance records it from the pass's logs. A stop of the pass (SIGSTOP for a measurement on
idle cores) lands in the seconds of the tasks in flight; the provenance lists each under a ``stops`` key
(``benchmark``, ``from``, ``to``, ``in_flight: ["s0 i1 f2 GETS", ...]``) and its length is taken off those
fits (``--provenance``, by default the results folder's parent's ``provenance.yaml``).

    python benchmarks/flow_pass_cost.py reports/offline/results \\
        --projection reports/performance/measured_study_cost_newer_measured_scaled.txt
"""

from __future__ import annotations

import argparse
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from cost_table import BenchmarkCost, read_cost_table  # same folder: run as a script

FULL_RUNS = 75
SHOWN = ("GETS", "GETS_holdout", "GETS_ap")  # the calibrators whose fits dominate a run's


@dataclass
class Measured:
    state: str  # "complete" or "under way"
    backbone_seconds: list[float] = field(default_factory=list)
    fit_seconds: dict[str, list[float]] = field(default_factory=dict)  # calibrator -> one entry per row
    runs_complete: int = 0  # runs with every projected calibrator's row

    def backbones_per_run(self) -> float:
        """Mean training seconds of the backbones recorded (one backbone per run)."""
        return sum(self.backbone_seconds) / len(self.backbone_seconds)

    def fits_per_run(self) -> float:
        """Sum of the calibrators' mean fit seconds: under way, calibrators have different row counts."""
        means = [sum(v) / len(v) for v in self.fit_seconds.values() if v]
        return sum(means) if means else math.nan


def read_projection(path: Path) -> dict[str, BenchmarkCost]:
    """The projection per benchmark 'Dataset_Backbone' from a measured_study_cost.py table."""
    return {f"{dataset}_{backbone}": cost for (dataset, backbone), cost in read_cost_table(path).items()}


def _add_row(measured: Measured, row: dict, calibrators: set[str], stopped: dict | None = None) -> None:
    if row.get("calibrator") in calibrators:
        seconds = float(row["fit_seconds"])
        if stopped:
            seconds -= stopped.get((int(row["split"]), int(row["init"]), int(row["fold"]), row["calibrator"]), 0.0)
        measured.fit_seconds.setdefault(row["calibrator"], []).append(seconds)


IN_FLIGHT = re.compile(r"^s(?P<split>\d+) i(?P<init>\d+) f(?P<fold>\d+) (?P<calibrator>\S+)$")


def read_stops(provenance: Path) -> dict[str, dict[tuple[int, int, int, str], float]]:
    """Benchmark 'Dataset_Backbone' -> {(split, init, fold, calibrator): seconds the pass stood still during that
    fit}, from every ``stops`` list of a provenance file (none when the file is absent)."""
    import yaml

    if not provenance.is_file():
        return {}
    stops: dict[str, dict[tuple[int, int, int, str], float]] = {}

    def visit(node) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "stops" and isinstance(value, list):
                    for stop in value:
                        seconds = (stop["to"] - stop["from"]).total_seconds()
                        for task in stop["in_flight"]:
                            m = IN_FLIGHT.match(task)
                            if m is None:
                                raise SystemExit(f"{provenance}: stop task {task!r} is not 's<split> i<init> "
                                                 "f<fold> <calibrator>'")
                            where = (int(m["split"]), int(m["init"]), int(m["fold"]), m["calibrator"])
                            stops.setdefault(stop["benchmark"], {})[where] = seconds
                else:
                    visit(value)
        elif isinstance(node, list):
            for item in node:
                visit(item)

    visit(yaml.safe_load(provenance.read_text()))
    return stops


def read_benchmark(folder: Path, calibrators: set[str],
                   stopped: dict[tuple[int, int, int, str], float] | None = None) -> Measured | None:
    """The measured seconds of one benchmark folder, or None when it holds neither a complete benchmark nor
    records of one under way."""
    from flows.study import FINISHED_TASKS, read_finished_tasks  # the flow's own reading of its records

    completion = folder / "completion.json"
    if completion.is_file():
        measured = Measured("complete")
        stats = json.loads(completion.read_text())["backbone_stats"]
        measured.backbone_seconds = [float(s["train_seconds"]) for s in stats]
        for row in pd.read_csv(folder / "results.csv").to_dict("records"):
            _add_row(measured, row, calibrators, stopped)
    elif (folder / FINISHED_TASKS).is_file():
        measured = Measured("under way")
        for key, result in read_finished_tasks(folder).items():
            if key.startswith("pretrain-"):
                measured.backbone_seconds.append(float(result["train_seconds"]))
            else:
                for row in result if isinstance(result, list) else [result]:
                    _add_row(measured, row, calibrators, stopped)
    else:
        return None
    counts = [len(measured.fit_seconds.get(c, [])) for c in calibrators]
    measured.runs_complete = min(counts) if counts else 0
    return measured


def remaining_seconds(measured: Measured | None, projection: BenchmarkCost,
                      ratios: tuple[float, float] = (1.0, 1.0)) -> float:
    """Projected one-core seconds of what the benchmark lacks, backbone and fit rates scaled by ``ratios``."""
    if measured is not None and measured.state == "complete":
        return 0.0
    backbones = len(measured.backbone_seconds) if measured else 0
    fits = measured.fit_seconds if measured else {}
    backbone_left = max(0, FULL_RUNS - backbones) * projection.backbone_s
    fit_left = sum(max(0, FULL_RUNS - len(fits.get(c, []))) * s for c, s in projection.per_calibrator.items())
    return ratios[0] * backbone_left + ratios[1] * fit_left


def benchmark_line(label: str, m: Measured, projection: BenchmarkCost) -> str:
    """One benchmark's row: measured seconds per run against the projection. Before any run has every calibrator's
    row the fits per run lack the calibrators not yet fitted (a GETS fit takes minutes, a TS fit milliseconds), so
    only the backbones are set against the projection."""
    b = m.backbones_per_run()
    backbones = (f"{label:<16} {m.state:<10} {m.runs_complete:>4}  {b:6.1f} ({min(m.backbone_seconds):.0f}-"
                 f"{max(m.backbone_seconds):.0f}) vs {projection.backbone_s:6.1f} {b / projection.backbone_s:4.2f}x  ")
    if not m.runs_complete:
        return backbones + f"no run has every calibrator yet: fits not measured ({len(m.backbone_seconds)} backbones)"
    f = m.fits_per_run()
    hours, projected = FULL_RUNS * (b + f) / 3600, FULL_RUNS * projection.run_s / 3600
    shown = "  ".join(
        f"{sum(m.fit_seconds.get(c, [math.nan])) / max(1, len(m.fit_seconds.get(c, []))):.1f} "
        f"({projection.per_calibrator.get(c, math.nan):.1f})" for c in SHOWN)
    return (backbones + f"{f:6.1f} vs {projection.calib_s:6.1f} {f / projection.calib_s:4.2f}x  "
            f"{hours:5.1f} vs {projected:5.1f} {hours / projected:4.2f}x   {shown}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="the study's results folder (one folder per benchmark)")
    parser.add_argument("--projection", type=Path,
                        default=Path("reports/performance/measured_study_cost_newer_measured_scaled.txt"))
    parser.add_argument("--provenance", type=Path, help="the pass's provenance, for its stops (default: "
                        "provenance.yaml beside the results folder)")
    args = parser.parse_args()
    projections = read_projection(args.projection)
    stops = read_stops(args.provenance or args.results.parent / "provenance.yaml")
    measured = {name: read_benchmark(args.results / name, set(p.per_calibrator), stops.get(name))
                for name, p in projections.items()}

    print(f"# python benchmarks/flow_pass_cost.py {args.results} --projection {args.projection}")
    print("benchmark        state      runs  backbone s/run (min-max)        fits s/run        CPU-h (75 runs)"
          "   " + "  ".join(f"{c} s/fit" for c in SHOWN))
    ratios = {}
    for name, projection in projections.items():
        m = measured[name]
        label = name.replace("_", " ")
        if m is None or not m.backbone_seconds:
            print(f"{label:<16} {'none':<10} {0:>4}  projected {projection.backbone_s:.1f} s backbone, "
                  f"{projection.calib_s:.1f} s fits, {FULL_RUNS * projection.run_s / 3600:.1f} CPU-hours")
            continue
        print(benchmark_line(label, m, projection))
        b, f = m.backbones_per_run(), m.fits_per_run()
        if m.runs_complete:  # a benchmark just begun has partial runs: no ratio yet
            ratios[f"{label} ({m.state}, {m.runs_complete} runs)"] = (b / projection.backbone_s, f / projection.calib_s)

    for name, stopped in stops.items():
        print(f"{name.replace('_', ' ')}: {sum(stopped.values()):.0f} s of stops taken off {len(stopped)} fits "
              "(the provenance's stops)")
    left = {name: remaining_seconds(measured[name], p) for name, p in projections.items()}
    print("\nremaining, projected from what each folder lacks (one core): "
          f"{sum(left.values()) / 3600:.1f} CPU-hours, {sum(left.values()) / 7200:.1f} h on 2 worker processes")
    for name, seconds in left.items():
        if seconds:
            print(f"  {name.replace('_', ' '):<16} {seconds / 3600:5.1f}")
    for label, (rb, rf) in ratios.items():
        total = sum(remaining_seconds(measured[n], p, (rb, rf)) for n, p in projections.items())
        print(f"  at {label}'s measured ratios (backbones {rb:.2f}x, fits {rf:.2f}x): {total / 3600:.1f} CPU-hours")


if __name__ == "__main__":
    main()
