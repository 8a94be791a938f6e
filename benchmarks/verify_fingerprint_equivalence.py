"""Recompute a study's finished tasks with the library as it is now; every number must equal its record.

The evidence behind an entry of ``flows/fingerprint_equivalences.yaml``. For each benchmark folder given, the
first ``--runs`` runs recorded in its ``finished-tasks.jsonl`` are computed again through the flow's own task
functions (``flows.study.pretrain_backbone`` and ``calibrate_and_evaluate``, one torch thread as the study
runs them), the backbone trained anew in an empty cache:

1. each record's key must be the key that fingerprint ``--against`` gives the task (the records were computed by
   that source), and
2. the backbone's statistics (validation accuracy and NLL, best and last epoch) and every column of every
   calibrator's row but ``fit_seconds`` must equal the record exactly (NaN equal to NaN).

A complete benchmark has no task records left: its ``completion.json`` holds the benchmark's key (every task key,
checked against ``--against`` likewise) and the backbones' statistics (compared exactly), and its
``results.csv`` the rows, compared to every stored digit (the file keeps 10 significant digits).

    python benchmarks/verify_fingerprint_equivalence.py reports/offline/results/Photo_GCN \\
        reports/offline/results/Photo_GAT --against f6ba7eac2982c278 --runs 1

Exit status 0: every number equal; 1: a difference or a key of another fingerprint (each printed).
Uses $SIMCALIB_DATA_MIRROR and $SIMCALIB_SPLITS_DIR like the CLI.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import os
import re
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # the study's workers run one thread; set before torch loads

PROJECT_ROOT = Path(__file__).resolve().parents[1]
TIMINGS = {"fit_seconds", "train_seconds"}  # wall time: never equal between two computations
RUN_TAG = re.compile(r"^(?P<dataset>.+)_(?P<backbone>GCN|GAT)_s(?P<split>\d+)_i(?P<init>\d+)_f(?P<fold>\d+)$")


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def differences(recorded: dict, computed: dict, where: str) -> list[str]:
    """One line per column whose value differs (timings left out)."""
    return [f"{where}: {column} recorded {recorded[column]!r}, now {computed.get(column)!r}"
            for column in recorded if column not in TIMINGS and not same(recorded[column], computed.get(column))]


def stored(value) -> str:
    """``value`` as ``results.csv`` stores it (``%.10g`` floats, empty for None and NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.10g}"
    return str(value)


def stored_differences(row: dict[str, str], computed: dict, where: str) -> list[str]:
    """Columns of a ``results.csv`` row (read as text) that differ from ``computed`` at the stored precision."""
    return [f"{where}: {column} stored {row[column]!r}, now {stored(computed[column])!r}"
            for column in row if column in computed and column not in TIMINGS and row[column] != stored(computed[column])]


def recorded_runs(records: dict[str, dict]) -> list[str]:
    """Run tags with a recorded backbone, in the order of the records."""
    return [result["run"] for key, result in records.items() if key.startswith("pretrain-")]


def verify_benchmark(folder: Path, study_path: Path, against: str, runs: int, report) -> list[str]:
    import flows.caching
    from flows.study import calibrate_and_evaluate, pretrain_backbone, read_finished_tasks
    from simcalib.experiment.protocol import Run

    records = read_finished_tasks(folder)
    complete = folder / "completion.json"
    if not records and complete.is_file():
        return verify_complete_benchmark(folder, study_path, against, runs, report)
    tags = recorded_runs(records)[:runs]
    if not tags:
        return [f"{folder}: no recorded backbone in finished-tasks.jsonl and no completion.json"]
    plan = benchmark_plan(study_path, tags[0])
    problems = []
    with tempfile.TemporaryDirectory() as cache:
        settings = dataclasses.replace(plan.settings, cache_dir=cache)  # empty: the backbone is trained anew
        for tag in tags:
            m = RUN_TAG.match(tag)
            run = Run(m["dataset"], m["backbone"], int(m["split"]), int(m["init"]), int(m["fold"]))
            with keys_of(against):  # the keys that source gave these tasks
                pretrain = flows.caching.pretrain_key(run, plan.settings)
                calibrations = {c.name: flows.caching.calibrate_key(run, plan.settings, c.name, c.options_dict)
                                for c in plan.calibrators}
            if pretrain not in records:
                problems.append(f"{tag}: no backbone record under fingerprint {against}'s key {pretrain}")
                continue
            problems += differences(records[pretrain], pretrain_backbone(run, settings, torch_threads=1),
                                    f"{tag} backbone")
            checked = 0
            for entry in plan.calibrators:
                key = calibrations[entry.name]
                if key not in records:  # not computed yet (a run in progress): the backbone's key checked the source
                    continue
                row = calibrate_and_evaluate(run, settings, entry.name, entry.options_dict, torch_threads=1)
                problems += differences(records[key], row, f"{tag} {entry.name}")
                checked += 1
            if not checked:
                problems.append(f"{tag}: no calibrator record under fingerprint {against}'s keys")
            report(f"{tag}: backbone and {checked} calibrator rows recomputed")
    return problems


@contextlib.contextmanager
def keys_of(fingerprint: str):
    """Task keys computed inside the block use ``fingerprint`` as their code part instead of the library's."""
    import flows.caching

    current = flows.caching.library_fingerprint
    flows.caching.library_fingerprint = lambda: fingerprint
    try:
        yield
    finally:
        flows.caching.library_fingerprint = current


def benchmark_plan(study_path: Path, tag: str):
    from simcalib.experiment.plan import plan_one_benchmark

    first = RUN_TAG.match(tag)
    return plan_one_benchmark(study_path, first["dataset"], first["backbone"])


def verify_complete_benchmark(folder: Path, study_path: Path, against: str, runs: int, report) -> list[str]:
    import json

    import pandas as pd

    import flows.caching
    from flows.study import calibrate_and_evaluate, pretrain_backbone

    completion = json.loads((folder / "completion.json").read_text())
    stats = {entry["run"]: entry for entry in completion["backbone_stats"]}
    tags = list(stats)[:runs]
    plan = benchmark_plan(study_path, tags[0])
    with keys_of(against):
        key = flows.caching.benchmark_key(list(plan.runs), plan.settings, plan.calibrator_options, set())
    if key != completion["benchmark_key"]:
        return [f"{folder}: completion.json's benchmark key {completion['benchmark_key']} is not fingerprint "
                f"{against}'s ({key})"]
    rows = pd.read_csv(folder / "results.csv", dtype=str, keep_default_na=False)
    problems = []
    with tempfile.TemporaryDirectory() as cache:
        settings = dataclasses.replace(plan.settings, cache_dir=cache)
        for run in (r for r in plan.runs if r.tag() in tags):
            problems += differences(stats[run.tag()], pretrain_backbone(run, settings, torch_threads=1),
                                    f"{run.tag()} backbone")
            mine = rows[(rows.split == str(run.split)) & (rows.init == str(run.init)) & (rows.fold == str(run.fold))]
            for entry in plan.calibrators:
                match = mine[mine.calibrator == entry.name]
                if len(match) != 1:
                    problems.append(f"{run.tag()} {entry.name}: {len(match)} rows in results.csv")
                    continue
                row = calibrate_and_evaluate(run, settings, entry.name, entry.options_dict, torch_threads=1)
                problems += stored_differences(match.iloc[0].to_dict(), row, f"{run.tag()} {entry.name}")
            report(f"{run.tag()}: backbone and {len(plan.calibrators)} calibrator rows recomputed (results.csv)")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="benchmark folders holding finished-tasks.jsonl")
    parser.add_argument("--against", required=True, help="the fingerprint the records were computed with")
    parser.add_argument("--runs", type=int, default=1, help="recorded runs to recompute per folder (default 1)")
    parser.add_argument("--study", type=Path, default=PROJECT_ROOT / "study" / "offline.yaml")
    args = parser.parse_args(argv)

    import torch

    from flows.caching import library_fingerprint, source_fingerprint

    torch.set_num_threads(1)
    print(f"source fingerprint now {source_fingerprint()} (keys use {library_fingerprint()}); records of {args.against}")
    problems = []
    for folder in args.folders:
        problems += verify_benchmark(folder, args.study, args.against, args.runs, print)
    for line in problems:
        print(line)
    print("every number equal" if not problems else f"{len(problems)} difference(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
