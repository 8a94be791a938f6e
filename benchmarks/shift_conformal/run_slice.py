"""Compute a slice of study/shift.yaml and study/conformal.yaml through the library, resumable.

For each benchmark plan of the chosen datasets and backbones (every calibrator of the study file planned, so the
study flow later computes only what is missing), the runs' rows for the chosen calibrators are computed by
:func:`simcalib.experiment.node_runs.evaluate_run` and appended to the plan's ``results.csv`` under ``--out`` with
the ledger's rule (:meth:`~simcalib.experiment.ledger.BenchmarkLedger.accept`), one run at a time; rows already
there are not computed again. ``--budget-minutes`` (CPU minutes of this process) and ``--stop-at`` (a UTC time)
stop it between runs; Ctrl-C or SIGTERM stops it at once, losing only the run in flight. A stopped slice resumes
from its rows.
``<out>/provenance.yaml`` records the command, code commit, dates, machine and the rows per benchmark.

    python benchmarks/shift_conformal/run_slice.py --study study/conformal.yaml --out reports/conformal/results \
        --datasets Cora Citeseer --backbones GCN --calibrators UnCal TS ...
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _write_provenance(out: Path, args: argparse.Namespace, record: dict) -> None:
    path = out / "provenance.yaml"
    old = yaml.safe_load(path.read_text()) if path.is_file() else {}
    passes = list((old or {}).get("passes", []))
    passes.append(record)
    data = {"what": f"rows of {args.study} computed by simcalib.experiment.node_runs.evaluate_run through "
                    "benchmarks/shift_conformal/run_slice.py (the ledger's rows: the study flow resumes from them)",
            "study": args.study, "results": str(out), "passes": passes}
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False, width=120))


def _compute(plan, args: argparse.Namespace, counts: dict, cpu0: float) -> str | None:
    """Compute the chosen calibrators' missing rows run by run, filling ``counts`` per benchmark; the reason it
    stopped early (budget, stop time, interruption), or None when every chosen row is there."""
    from simcalib.experiment.ledger import read_ledger
    from simcalib.experiment.node_runs import evaluate_run
    from simcalib.store.results_store import append_rows, check_results_file

    stopped = None
    for benchmark in plan.benchmarks:
        chosen = [c for c in (args.calibrators or benchmark.calibrator_names) if c in benchmark.calibrator_names]
        added = 0
        try:
            check_results_file(benchmark.out_dir / "results.csv", benchmark.planned_runs(), benchmark.definitions())
            ledger = read_ledger(benchmark)
            for run in benchmark.runs:
                todo = [c for c in ledger.todo(run) if c in chosen]
                if not todo:
                    continue
                if args.budget_minutes is not None and time.process_time() - cpu0 > 60 * args.budget_minutes:
                    stopped = (f"budget of {args.budget_minutes:g} CPU minutes reached before "
                               f"{benchmark.name} {run.tag()}")
                    break
                if args.stop_at is not None and _now()[11:16] >= args.stop_at:
                    stopped = f"stop time {args.stop_at} UTC reached before {benchmark.name} {run.tag()}"
                    break
                t = time.perf_counter()
                rows = evaluate_run(benchmark, run, todo)
                append_rows(ledger.results, ledger.accept(rows))
                added += len(rows)
                print(f"{benchmark.name} {run.tag()}: {len(rows)} rows in {time.perf_counter() - t:.1f} s", flush=True)
        except KeyboardInterrupt:
            stopped = f"interrupted in {benchmark.name}: the rows of the run in flight are not written"
        ledger = read_ledger(benchmark)
        whole = sum(1 for r in benchmark.runs if all(c in ledger.done.get(r, ()) for c in chosen))
        counts[benchmark.out_dir.name] = {"runs_with_all_chosen_calibrators": whole, "runs_planned": len(benchmark.runs),
                                          "rows_added": added}
        if stopped:
            break
    return stopped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", required=True)
    parser.add_argument("--out", required=True, help="the study's output folder (a results folder per benchmark)")
    parser.add_argument("--datasets", nargs="+", required=True)
    parser.add_argument("--backbones", nargs="+", default=["GCN"])
    parser.add_argument("--calibrators", nargs="+", default=None, help="default: every calibrator of the study")
    parser.add_argument("--budget-minutes", type=float, default=None,
                        help="stop between runs after this many CPU minutes of this process")
    parser.add_argument("--stop-at", default=None, metavar="HH:MM", help="stop between runs after this UTC time today")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)

    import torch

    from simcalib.commands.common import sigterm_as_interrupt
    from simcalib.experiment.plan import plan_study
    from simcalib.experiment.study import load_study

    # benchmarks/speed/utils.py: the CPU model, on which a backbone's weights and so the rows' pairing depend
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "speed"))
    from utils import cpu_model

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    study = load_study(args.study, {"benchmarks": {"datasets": args.datasets, "backbones": args.backbones},
                                    "output": str(out)})
    plan = plan_study(study, data=True)
    start, started, commit = time.perf_counter(), _now(), _commit()  # the code the rows are computed with
    cpu0 = time.process_time()
    counts: dict[str, dict] = {}
    signal.signal(signal.SIGINT, signal.default_int_handler)  # a shell's `cmd &` starts it with SIGINT ignored
    with sigterm_as_interrupt():
        stopped = _compute(plan, args, counts, cpu0)
    record = {"command": " ".join([os.path.relpath(sys.argv[0]) if argv is None else "run_slice.py",
                                   *(sys.argv[1:] if argv is None else argv)]),
              "code_commit": commit, "started": started, "finished": _now(),
              "wall_s": round(time.perf_counter() - start), "cpu_s": round(time.process_time() - cpu0),
              "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "gpu": None,
                          "torch_threads": args.threads},
              "calibrators": args.calibrators or "all of the study", "benchmarks": counts,
              "stopped": stopped}
    _write_provenance(out, args, record)
    print(stopped or "done", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
