"""``simcalib study run|check FILE``: an orchestrated study (Prefect flow, MLflow tracking, report).

``run`` validates the file and checks its data before Prefect even starts (input errors: one line, exit 2),
then runs :func:`flows.study.study_flow` and prints where the results, the MLflow UI and the report are.
Interrupted (Ctrl-C, kill -9), the same command resumes: every row already in a benchmark's results.csv under the
plan's calibrator digest is kept and not computed again (:mod:`simcalib.experiment.ledger`).

``check`` prints the plan without computing anything and, where the output folder exists, what each benchmark's
results.csv already holds of it, by the same ledger the study run uses (complete, runs and calibrations done, rows
under another definition, runs with rows on two backbones).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

QUIET_TASK_LOGS = {"PREFECT_LOGGING_LOGGERS_PREFECT_TASK_RUNS_LEVEL": "WARNING"}  # one line per task is enough


COMMANDS = ("study",)  # the sub-commands register() adds


def register(sub) -> None:
    study = sub.add_parser("study", help="run a study file: benchmarks x calibrators as Prefect flows, tracked in MLflow",
                           description="Orchestrated studies (study/*.yaml).")
    study_sub = study.add_subparsers(dest="study_command", required=True)

    run = study_sub.add_parser("run", help="run (or resume) a study", description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("study_file", help="a study file, e.g. study/quick.yaml")
    add_override_options(run)
    run.add_argument("--no-report", action="store_true", help="do not build the report at the end")
    run.add_argument("--verbose", action="store_true", help="also show Prefect's log line for every task run")
    run.add_argument("--wait", action="store_true",
                     help="if another command writes to the same output folder, wait for it to finish instead of failing")
    run.set_defaults(func=run_study)

    check = study_sub.add_parser("check", help="validate a study file and print its plan: what it would run (no work)")
    check.add_argument("study_file")
    check.add_argument("--data", action="store_true",
                       help="also load every dataset and split file (their digests join the plan)")
    check.add_argument("--json", metavar="FILE", help="also write the plan as JSON to FILE")
    add_override_options(check)
    check.set_defaults(func=check_study)

    forget = study_sub.add_parser(
        "forget", help="remove one run's rows from a results.csv, so the next study run computes the run whole",
        description="A run's rows share one backbone: rows computed on another machine's backbone are removed "
                    "here (every other line kept as it is) and the same `simcalib study run` computes the run again.")
    forget.add_argument("results", help="a benchmark's results.csv")
    forget.add_argument("--run", required=True, metavar="SPLIT,INIT,FOLD", help="the run, e.g. 1,4,1")
    forget.add_argument("--calibrators", help="comma-separated: only these calibrators' rows of the run")
    forget.set_defaults(func=forget_rows)


def add_override_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", help="output folder (default: the file's `output`)")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: the file's, else sqlite:///mlflow.db)")
    parser.add_argument("--runner", choices=["threads", "processes", "dask"], help="task runner (default: the file's)")
    parser.add_argument("--workers", type=int, help="parallel tasks (threads, processes or Dask workers)")
    parser.add_argument("--dask-address", help="Dask scheduler address, e.g. tcp://10.0.0.5:8786 (implies --runner dask)")
    parser.add_argument("--torch-threads", type=int, help="torch threads per task process")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="settings",
                        help="any study-file key, dotted for nesting, VALUE read as YAML (repeatable): e.g. "
                             "--set 'benchmarks.datasets=[Computers, Photo]' --set save_predictions=false")


def settings_overrides(settings: list[str]) -> dict:
    """``--set`` values (``a.b=VALUE``, VALUE as YAML) as nested study-file keys; ConfigError names a malformed one."""
    import yaml

    from simcalib.errors import ConfigError

    overrides: dict = {}
    for setting in settings:
        key, sep, text = setting.partition("=")
        parts = key.strip().split(".")
        if not sep or not all(parts):
            raise ConfigError(f"--set {setting!r}: expected KEY=VALUE with a dotted study-file key, "
                              "e.g. --set save_predictions=false or --set 'benchmarks.datasets=[Cora, CS]'")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"--set {setting!r}: the value is not valid YAML ({str(exc).splitlines()[0]})") from None
        node = overrides
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {setting!r}: {part!r} is also set to a value by an earlier --set")
        node[parts[-1]] = value
    return overrides


def overrides_from(args: argparse.Namespace) -> dict:
    """Command-line values as nested study-file keys (they win over the file): ``--set`` first, then the named
    options, which win over a ``--set`` of the same key."""
    from simcalib.experiment.study import merge_overrides

    overrides: dict = {}
    if args.output:
        overrides["output"] = args.output
    if args.tracking_uri:
        overrides["tracking_uri"] = args.tracking_uri
    runner = {k: v for k, v in (("kind", args.runner), ("workers", args.workers), ("address", args.dask_address),
                                ("torch_threads", args.torch_threads)) if v is not None}
    if args.dask_address:
        runner["kind"] = "dask"
    if runner:
        overrides["task_runner"] = runner
    if getattr(args, "no_report", False):
        overrides["report"] = False
    return merge_overrides(settings_overrides(getattr(args, "settings", [])), overrides)


def check_study(args: argparse.Namespace) -> int:
    from simcalib.experiment.plan import plan_study
    from simcalib.experiment.study import load_study

    study = load_study(args.study_file, overrides_from(args))
    plan = plan_study(study, data=args.data)  # tuned options read; with --data every dataset and split loaded
    if study.spec.description:
        print(f"study {study.name}: {study.spec.description}")
    print("\n".join(plan.lines()))
    if any(benchmark.out_dir.is_dir() for benchmark in plan.benchmarks):
        from simcalib.experiment.ledger import read_ledger
        from simcalib.experiment.protocol import code_versions

        print(f"  progress in {study.output} (what `simcalib study run` takes from there instead of computing it)")
        print("    declared versions " + ", ".join(f"{k} {v}" for k, v in code_versions().items())
              + " (and each calibrator's numbers_version: its rows' calibrator_digest)")
        for benchmark in plan.benchmarks:
            print(f"    {read_ledger(benchmark).line()}")
    if args.json:
        Path(args.json).write_text(json.dumps(plan.to_json(), indent=1) + "\n")
        print(f"plan written to {args.json}")
    return 0


def forget_rows(args: argparse.Namespace) -> int:
    from simcalib.errors import ConfigError
    from simcalib.experiment.ledger import forget_run
    from simcalib.store.integrity import results_lock

    try:
        split, init, fold = (int(part) for part in args.run.split(","))
    except ValueError:
        raise ConfigError(f"--run {args.run!r}: expected SPLIT,INIT,FOLD, e.g. --run 1,4,1") from None
    path = Path(args.results)
    if not path.is_file():
        raise ConfigError(f"{path}: no such file; give a benchmark's results.csv")
    calibrators = [c.strip() for c in args.calibrators.split(",")] if args.calibrators else None
    with results_lock(path.parent, command="simcalib study forget"):
        removed = forget_run(path, split, init, fold, calibrators)
    print(f"{path}: {removed} rows of run s{split} i{init} f{fold} removed; the next study run computes them again")
    return 0


def run_study(args: argparse.Namespace) -> int:
    from simcalib.commands.orchestration import flows_module, require_study_extra
    from simcalib.errors import WorkerProcessLost
    from simcalib.experiment.plan import plan_study
    from simcalib.experiment.study import load_study

    require_study_extra("study run")  # before any work: one line naming the extra
    overrides = overrides_from(args)
    study = load_study(args.study_file, overrides)  # input errors end here: one line, exit 2
    plan = plan_study(study)  # resolved once: the flow reads this plan
    if not args.verbose:
        for key, value in QUIET_TASK_LOGS.items():
            os.environ.setdefault(key, value)
    start_temporary_server = flows_module("temporary_server").start_temporary_server
    study_flow = flows_module("study").study_flow

    start_temporary_server()  # where no Prefect server is configured: one a Ctrl-C does not stop mid-study
    print(f"study {study.name}: {len(study.benchmarks())} benchmarks, runs: {plan.describe_runs()}, "
          f"{len(study.calibrators)} calibrators on {study.spec.task_runner.kind}; output {study.output}; "
          f"plan {plan.digest()}", flush=True)
    _exit_cleanly_on_sigterm(study.output)
    try:
        result = study_flow(args.study_file, overrides or None, plan.to_json(), args.wait)
    except KeyboardInterrupt:
        print(f"\ninterrupted: every finished row is kept in {study.output}/<Dataset>_<Backbone>/results.csv; "
              f"run the same command to resume", file=sys.stderr)
        return 130
    except WorkerProcessLost as exc:  # a worker process killed (out of memory, SIGKILL): the finished rows are kept
        print(f"\nerror: {exc}", file=sys.stderr)
        return 1
    print_outcome(result)
    return 0


def _exit_cleanly_on_sigterm(output) -> None:
    """SIGTERM (a batch scheduler's time limit, ``kill``) ends the study through ``SystemExit(143)``, so that the
    interpreter's exit handlers run: without them Prefect's temporary API server outlives the study as an
    orphan process. Prefect's flow engine takes SIGTERM over while a flow runs, marks the run crashed and then
    re-sends the signal to this handler."""
    import signal

    def terminate(signum, frame):
        print(f"\nterminated (signal {signum}): every finished row is kept in {output}/<Dataset>_<Backbone>/"
              f"results.csv; run the same command to resume", file=sys.stderr, flush=True)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminate)


def print_outcome(result: dict) -> None:
    import pandas as pd

    from simcalib.commands.benchmark import print_summary

    summaries = [pd.read_csv(b["summary"]) for b in result["benchmarks"]]
    if summaries:
        print_summary(pd.concat(summaries, ignore_index=True))
    tasks = result["tasks"]
    runs = f"run {tasks['run']['computed']} computed; " if "run" in tasks else ""  # a task per run (on devices)
    print(f"\ntasks: pretrain {tasks['pretrain']['computed']} computed; calibrate {tasks['calibrate']['computed']} "
          f"computed; {runs}{result.get('rows_found', 0)} rows already in results.csv (not computed again)")
    if result.get("complete_before"):
        print(f"complete before this run (rows read from results.csv, no task submitted): "
              f"{', '.join(result['complete_before'])}")
    print(f"results: {result['output']}/<Dataset>_<Backbone>/results.csv and summary.csv "
          f"({len(result['benchmarks'])} benchmarks)")
    for line in result.get("splits", []):
        print(f"splits:  {line}")
    from simcalib.commands.orchestration import flows_module

    runs_table_url = flows_module("tracking").runs_table_url

    uri = result["tracking_uri"]
    print(f"MLflow:  experiment {result['experiment']!r} in {uri}\n"
          f"         view it: `simcalib ui` (all dashboards) or "
          f"`mlflow ui --backend-store-uri {uri} --host 127.0.0.1 --port 5000`, then open\n"
          f"         {runs_table_url('http://127.0.0.1:5000', result['experiment_id'])}")
    report = result.get("report")
    if report:
        html = Path(report).with_suffix(".html")
        print(f"report:  {report}" + (f" and {html}" if html.is_file() else ""))
    else:
        print("report:  not built (disabled, or flows/report.py is not available)")
