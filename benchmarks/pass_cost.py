"""The measured cost of a study pass beside the projection it was planned with.

A pass's ``provenance.yaml`` records, per benchmark, the wall and CPU seconds that ``/usr/bin/time -v`` measured
for its ``simcalib benchmark`` commands (``offline`` and, where Table 4's sweep ran, ``table4``) and how many
backbones those commands trained (``backbones_trained``; the others came from the backbone cache). The
projection is ``measured_study_cost.py``'s table: one core's seconds per run for the backbone and for the
calibrators, and the whole study's total in CPU-hours. The same work projected is runs x calibrator seconds +
backbones trained x backbone seconds. The projection's calibrator set and machine may differ from the pass's
(say so beside the numbers).

A benchmark whose entry says ``timed_runs`` (fewer runs timed than it has, e.g. a process stopped with its
machine) is projected over the timed runs; one with ``timed_calibrators`` (only some calibrators computed, the
others copied) is listed but left out of the projected comparison. Runs of later inits appended to a benchmark by
separate commands are listed under ``later_inits``, each with the same keys; each is a line of its own.

    python benchmarks/pass_cost.py reports/offline/provenance.yaml \\
        --projection reports/performance/measured_study_cost.txt
"""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml
from cost_table import read_cost_table, read_total_hours  # same folder: run as a script

FULL_RUNS = 75


def read_projection(path: Path) -> tuple[dict[str, tuple[float, float]], float | None]:
    """((backbone s, calibrators s) per run of each benchmark 'Dataset_Backbone', whole-study CPU-hours) of a
    measured_study_cost.py output."""
    per_run = {f"{dataset}_{backbone}": (cost.backbone_s, cost.calib_s)
               for (dataset, backbone), cost in read_cost_table(path).items()}
    return per_run, read_total_hours(path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("provenance", type=Path)
    parser.add_argument("--projection", type=Path, default=Path("reports/performance/measured_study_cost.txt"))
    args = parser.parse_args(argv)
    entries = yaml.safe_load(args.provenance.read_text())["benchmarks"]
    projected, projected_total = read_projection(args.projection)

    print(f"{'benchmark':<22} {'runs':>4} {'trained':>7} {'wall s':>8} {'CPU s':>8} {'projected':>9} {'ratio':>6}")
    total_cpu = total_wall = compared_cpu = compared_projection = 0.0
    commands = [(name, name, entry) for name, entry in entries.items()]
    commands += [(name, f"{name} init {later['inits']}", later)
                 for name, entry in entries.items() for later in entry.get("later_inits", [])]
    for name, label, entry in commands:
        parts = [entry[k] for k in ("offline", "table4") if k in entry]
        cpu, wall = sum(p["cpu_s"] for p in parts), sum(p["wall_s"] for p in parts)
        total_cpu, total_wall = total_cpu + cpu, total_wall + wall
        runs, trained = int(entry["runs"]), int(entry.get("backbones_trained", entry["runs"]))
        timed = int(entry.get("timed_runs", runs))
        expected = None
        if "timed_calibrators" not in entry and name in projected:
            backbone_s, calibrators_s = projected[name]
            expected = timed * calibrators_s + trained * backbone_s
            compared_cpu, compared_projection = compared_cpu + cpu, compared_projection + expected
        note = ("  (some calibrators only)" if "timed_calibrators" in entry else
                f"  ({timed} of {runs} runs timed)" if timed < runs else "")
        print(f"{label.replace('_', ' '):<22} {runs:>4} {trained:>7} {wall:>8.0f} {cpu:>8.0f} "
              f"{'' if expected is None else f'{expected:.0f}':>9} "
              f"{'' if expected is None else f'{cpu / expected:.2f}':>6}{note}")
    print(f"\nthe pass: {total_cpu / 3600:.1f} CPU-hours, {total_wall / 3600:.1f} h wall over {len(entries)} "
          f"benchmarks, {sum(int(entry['runs']) for _, _, entry in commands)} runs (as timed)")
    if compared_projection:
        print(f"the benchmarks with a projection: {compared_cpu / 3600:.1f} CPU-hours measured, "
              f"{compared_projection / 3600:.1f} projected for the same runs and backbones trained")
    if projected_total is not None:
        print(f"the projection for the whole study ({len(projected)} benchmarks x {FULL_RUNS} runs, every backbone "
              f"trained): {projected_total:.1f} CPU-hours")


if __name__ == "__main__":
    main()
