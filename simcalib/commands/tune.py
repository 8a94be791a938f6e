"""``simcalib tune``: an Optuna search of one calibrator's options on one benchmark (resumable).

The study lives in an RDB storage (``sqlite:///optuna.db`` by default, any SQLAlchemy URL); running the
same command again continues it until it holds ``--trials`` finished trials. The best options are
written to ``study/tuned/<Dataset>_<Backbone>.yaml``; ``--evaluate`` then compares default and tuned
options on the test nodes of the protocol's runs and writes a report.

``--candidates FILE`` screens named option sets instead (:mod:`simcalib.tuning.screen`): each scored on the
same labelled-node objective over the tuning runs, rows appended to ``--out`` and skipped when re-run.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from simcalib.commands.common import add_data_options, count_or_list, protocol_settings, sigterm_as_interrupt

COMMANDS = ("tune",)  # the sub-commands register() adds


def register(sub) -> None:
    from simcalib.calibrators import calibrator_names
    from simcalib.data import dataset_names
    from simcalib.tuning import (
        DEFAULT_OPTUNA_STORAGE,
        DEFAULT_SPACE,
        DEFAULT_SPACES_FILE,
        EVALUATIONS,
        METRICS,
    )

    tune = sub.add_parser(
        "tune", help="search a calibrator's hyperparameters with Optuna (resumable)",
        description="Search the options of one calibrator on one benchmark. The objective uses labelled nodes only "
                    "(calibration folds of the tuning runs), never test nodes. Re-running continues the same study.")
    tune.add_argument("--dataset", required=True, help=f"one of: {', '.join(dataset_names())}")
    tune.add_argument("--backbone", required=True, help="GCN or GAT")
    tune.add_argument("--calibrator", default=None, help=f"one of: {', '.join(calibrator_names())}")
    tune.add_argument("--trials", type=int, default=30,
                      help="finished trials the study should hold (default 30); a re-run only runs the missing ones")
    runs = tune.add_argument_group("tuning runs (labelled nodes of these runs score each trial)")
    runs.add_argument("--splits", type=count_or_list, default=[0, 1, 2], help="splits (default 3: 0,1,2)")
    runs.add_argument("--inits", type=count_or_list, default=[0], help="backbone inits (default 1: 0)")
    runs.add_argument("--folds", type=count_or_list, default=[0, 1, 2], help="folds (default 3: 0,1,2)")
    search = tune.add_argument_group("search")
    search.add_argument("--space", default=DEFAULT_SPACE, help=f"named search space (default: {DEFAULT_SPACE})")
    search.add_argument("--spaces", default=None, help=f"search spaces file (default: {DEFAULT_SPACES_FILE})")
    search.add_argument("--sampler", choices=["tpe", "grid"], default="tpe",
                        help="seeded TPE (default) or every point of an all-categorical space once")
    search.add_argument("--objective", choices=list(METRICS), default="nll", help="metric minimised (default: nll)")
    search.add_argument("--evaluation", choices=list(EVALUATIONS), default="crossfit",
                        help="crossfit (default): held-out halves of the calibration fold; insample: the fold itself")
    search.add_argument("--no-prune", action="store_true", help="never stop a trial early (median pruner otherwise)")
    search.add_argument("--timeout", type=float, default=None, help="stop starting trials after this many seconds")
    search.add_argument("--worker", type=int, default=0, help="worker index, distinct per process sharing one study")
    screen = tune.add_argument_group("screen named option sets instead of a search (no Optuna)")
    screen.add_argument("--candidates", default=None, metavar="YAML",
                        help="name -> {calibrator: NAME, options: {...}}: score each on the tuning runs' labelled nodes")
    screen.add_argument("--out", default=None,
                        help="screen rows, a CSV appended to and resumed (default: results/tuning/<dataset>_<backbone>_screen.csv)")
    store = tune.add_argument_group("storage and tracking")
    store.add_argument("--storage", default=None,
                       help=f"SQLAlchemy URL of the Optuna storage (default: $SIMCALIB_OPTUNA_STORAGE or {DEFAULT_OPTUNA_STORAGE})")
    store.add_argument("--study-name", default=None, help="Optuna study name (default: <Dataset>_<Backbone>_<Calibrator>)")
    store.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI or sqlite:///mlflow.db)")
    store.add_argument("--no-mlflow", action="store_true", help="do not log trials to MLflow")
    store.add_argument("--tuned-dir", default=None, help="folder of tuned-option files (default: study/tuned)")
    evaluate = tune.add_argument_group("before/after evaluation on test nodes")
    evaluate.add_argument("--evaluate", action="store_true",
                          help="after the search, compare default and tuned options on the evaluation runs")
    evaluate.add_argument("--eval-splits", type=count_or_list, default=list(range(5)), help="default 5")
    evaluate.add_argument("--eval-inits", type=count_or_list, default=list(range(5)), help="default 5")
    evaluate.add_argument("--eval-folds", type=count_or_list, default=list(range(3)), help="default 3")
    evaluate.add_argument("--eval-out", default=None, help="benchmark results folder (default: results/tuning/<study>)")
    evaluate.add_argument("--report", default=None,
                          help="report path (default: results/tuning/<dataset>_<backbone>_<calibrator>.md)")
    protocol = tune.add_argument_group("protocol")
    protocol.add_argument("--seed", type=int, default=10, help="study seed (the paper's: 10)")
    protocol.add_argument("--splits-dir", help="fixed GATS split files (default: $SIMCALIB_SPLITS_DIR, else ../shared/datasets/splits beside the checkout, else DATA_ROOT/splits)")
    protocol.add_argument("--generated-splits", action="store_true",
                          help="allow split indices without a fixed split file (e.g. --splits 9 with 5 files): they are drawn "
                               "from the seed by the same rule; without it such a selection is refused")
    protocol.add_argument("--cache-dir", help="backbone cache (default: $SIMCALIB_CACHE_DIR or .cache/simcalib)")
    protocol.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda")
    protocol.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: all cores)")
    protocol.add_argument("--max-epochs", type=int, default=None, help="cap backbone epochs (quick checks only)")
    add_data_options(tune)
    tune.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from simcalib.errors import ConfigError

    if (args.calibrator is None) == (args.candidates is None):
        raise ConfigError("give --calibrator (an Optuna search) or --candidates FILE (a screen of named option sets)")
    if args.candidates is not None:
        return run_screen(args)
    if args.out is not None:
        raise ConfigError("--out is the screen's CSV (with --candidates); a search writes --tuned-dir and --eval-out")
    return run_search_command(args)


def run_screen(args: argparse.Namespace) -> int:
    import torch

    from simcalib.backbones import backbone_name
    from simcalib.data import get_spec
    from simcalib.experiment.protocol import make_runs
    from simcalib.tuning import ObjectiveSettings, tuning_order
    from simcalib.tuning.screen import read_candidates, screen, summarise_screen

    if args.threads:
        torch.set_num_threads(args.threads)
    dataset, backbone = get_spec(args.dataset).name, backbone_name(args.backbone)
    candidates = read_candidates(args.candidates)  # validated before any backbone trains
    settings = protocol_settings(args)
    runs = tuning_order(make_runs(dataset, backbone, args.splits, args.inits, args.folds))
    out = Path(args.out or f"results/tuning/{dataset}_{backbone}_screen.csv".lower())
    report = lambda row: print(f"{row['candidate']:>24} {row['run']}: ece {row['ece']:.3f}  nll {row['nll']:.4f}",  # noqa: E731
                               flush=True)
    with sigterm_as_interrupt():
        try:
            rows = screen(candidates, runs, settings, out, ObjectiveSettings(args.objective, args.evaluation), report)
        except KeyboardInterrupt:
            print(f"\ninterrupted: finished rows are in {out}; the same command continues", file=sys.stderr)
            return 130
    mine = rows[rows["candidate"].isin([c.name for c in candidates]) & rows["run"].isin([r.tag() for r in runs])]
    summary = summarise_screen(mine, metric=args.objective)
    print(summary.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    print(f"\nrows: {out}")
    return 0


def run_search_command(args: argparse.Namespace) -> int:
    import logging

    from simcalib.commands.orchestration import flows_module

    search = flows_module("optuna_search", "tune")  # the study extra checked before Optuna is imported
    SearchRequest, evaluate_tuned, run_search = search.SearchRequest, search.evaluate_tuned, search.run_search

    import optuna
    import torch

    from simcalib.backbones import backbone_name
    from simcalib.calibrators import canonical_calibrator
    from simcalib.data import get_spec
    from simcalib.tuning import ObjectiveSettings, study_name

    if args.threads:
        torch.set_num_threads(args.threads)
    dataset, backbone = get_spec(args.dataset).name, backbone_name(args.backbone)
    calibrator = canonical_calibrator(args.calibrator)
    settings = protocol_settings(args)
    request = SearchRequest(
        dataset, backbone, calibrator, trials=args.trials, splits=args.splits, inits=args.inits, folds=args.folds,
        space=args.space, spaces_file=args.spaces, sampler=args.sampler,
        objective=ObjectiveSettings(args.objective, args.evaluation), storage=args.storage, study_name=args.study_name,
        tracking_uri=args.tracking_uri, track=not args.no_mlflow, tuned_dir=args.tuned_dir, seed=args.seed,
        worker=args.worker, prune=not args.no_prune, timeout=args.timeout,
    )
    name = args.study_name or study_name(dataset, backbone, calibrator, args.space)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    optuna.logging.set_verbosity(optuna.logging.INFO)
    try:
        with sigterm_as_interrupt():
            result = run_search(request, settings)
    except KeyboardInterrupt:  # Optuna has marked the running trial FAIL; finished ones are stored
        print(f"\ninterrupted: finished trials are stored in study {name}; the same command continues it",
              file=sys.stderr)
        return 130
    print(f"\nstudy {result.study_name} ({result.storage}): {result.finished} finished trials "
          f"({result.complete} complete, {result.pruned} pruned; {result.failed} failed), {result.new_trials} new")
    if result.best_value is None:
        print("no complete trial yet: nothing written")
        return 1 if args.evaluate else 0
    print(f"best trial {result.best_trial}: {args.objective} = {result.best_value:.5f} with {result.best_params}")
    if result.tuned_path:
        print(f"tuned options written to {result.tuned_path}")
    if not args.evaluate:
        return 0
    from tqdm import tqdm

    # the command line, for the report (only when run as the `simcalib` program, not from tests)
    command = "simcalib " + shlex.join(sys.argv[1:]) if Path(sys.argv[0]).name == "simcalib" else None
    report = Path(args.report or f"results/tuning/{dataset}_{backbone}_{calibrator}.md".lower())
    out = Path(args.eval_out or f"results/tuning/{name}")
    evaluation = evaluate_tuned(request, settings, out, report, args.eval_splits, args.eval_inits, args.eval_folds,
                                command=command, progress=lambda runs: tqdm(runs, unit="run", desc=name))
    print(evaluation["summary"].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(f"\nreport: {evaluation['report']} (per-run pairs: {evaluation['csv']})")
    return 0
