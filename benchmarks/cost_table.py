"""Reads the table that ``measured_study_cost.py`` prints: one line per benchmark, then the whole study's total.

A benchmark line: ``Dataset Backbone``, runs, backbones (a trailing ``*``: cached backbones of another machine),
seconds per epoch, epochs, backbone s, calibrators s and run s of one run on one core; with ``--across-runs``
also calibrators s and run s after the across-runs scaling and ``scaled/of``; then ``name=seconds`` per
calibrator (a trailing ``~``: projected from another benchmark). A benchmark without a measurement reads
``not measured`` and is skipped. Every script that compares a pass with a projection reads the table here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

BENCHMARK_LINE = re.compile(
    r"^(?P<dataset>\S+) (?P<backbone>GCN|GAT)\s+(?P<runs>\d+)\s+(?P<backbones>\d+)\*?\s+(?P<s_per_epoch>[\d.]+)\s+"
    r"(?P<epochs>\d+)\s+(?P<backbone_s>[\d.]+)\s+(?P<calib_s>[\d.]+)\s+(?P<run_s>[\d.]+)"
    r"(?:\s+(?P<calib_s_after>[\d.]+)\s+(?P<run_s_after>[\d.]+))?(?:\s+\d+/\d+)?(?P<per_calibrator>(?:\s+\S+=\S+)*)\s*$")
TOTAL_LINE = re.compile(r"^the whole of .*?: (?P<hours>[\d.]+) CPU-hours")


@dataclass(frozen=True)
class BenchmarkCost:
    """One benchmark line: seconds of one run on one core."""

    runs: int
    backbones: int
    s_per_epoch: float
    epochs: float
    backbone_s: float
    calib_s: float
    calib_s_after: float | None = None  # after the across-runs scaling, where the table has it
    per_calibrator: dict[str, float] = field(default_factory=dict)

    @property
    def run_s(self) -> float:
        return self.backbone_s + self.calib_s


def read_cost_table(path: Path) -> dict[tuple[str, str], BenchmarkCost]:
    """``(dataset, backbone) -> BenchmarkCost`` of each measured benchmark line; exits naming the file when it
    holds none (not an output of measured_study_cost.py)."""
    table = {}
    for line in Path(path).read_text().splitlines():
        match = BENCHMARK_LINE.match(line)
        if not match:
            continue
        per = {name: float(value.rstrip("~")) for name, value in
               (item.split("=", 1) for item in match["per_calibrator"].split())}
        table[match["dataset"], match["backbone"]] = BenchmarkCost(
            runs=int(match["runs"]), backbones=int(match["backbones"]), s_per_epoch=float(match["s_per_epoch"]),
            epochs=float(match["epochs"]), backbone_s=float(match["backbone_s"]), calib_s=float(match["calib_s"]),
            calib_s_after=float(match["calib_s_after"]) if match["calib_s_after"] else None, per_calibrator=per)
    if not table:
        raise SystemExit(f"{path}: no benchmark line of measured_study_cost.py's table")
    return table


def read_total_hours(path: Path) -> float | None:
    """The whole study's CPU-hours (the table's first total line), or None."""
    for line in Path(path).read_text().splitlines():
        match = TOTAL_LINE.match(line)
        if match:
            return float(match["hours"])
    return None
