"""``simcalib benchmark``: the 75-run protocol (or a subset) on one benchmark."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from simcalib.commands.common import (
    add_attention_option,
    add_data_options,
    count_or_list,
    csv_list,
    protocol_settings,
    sigterm_as_interrupt,
)

SUMMARY_METRICS = ["ece", "ace", "mce", "classwise_ece", "kde_ece", "nll", "brier", "accuracy"]


COMMANDS = ("benchmark",)  # the sub-commands register() adds


def register(sub) -> None:
    from simcalib.calibrators import calibrator_names
    from simcalib.data import dataset_names

    bench = sub.add_parser("benchmark", help="run the 75-run protocol (or a subset) on one benchmark",
                           description="Train backbones and fit calibrators under the GATS protocol; writes OUT/results.csv.")
    bench.add_argument("--dataset", required=True, help=f"one of: {', '.join(dataset_names())}, an entry point of "
                                                        "group simcalib.datasets, or package.module:function")
    bench.add_argument("--backbone", required=True, help="GCN or GAT")
    bench.add_argument("--calibrators", type=csv_list, default=None,
                       help=f"comma list among: {', '.join(calibrator_names(include_tuned=True))}, an entry point of "
                            "group simcalib.calibrators, or package.module:Class (default: those of --study, else "
                            "uncal,ts,vs,ets)")
    bench.add_argument("--study", default=None, metavar="STUDY_FILE",
                       help="take the calibrators, their options (e.g. a SimCalib grid criterion), "
                            "the seed, the label rate, runs.generated_splits and the runs' batch keys from this study "
                            "file, so a pass run here computes the same rows as the study; the command line's options "
                            "still win")
    bench.add_argument("--splits", type=count_or_list, default=list(range(5)), help="number of splits (5) or a list like 0,3")
    bench.add_argument("--inits", type=count_or_list, default=list(range(5)), help="number of backbone inits (5) or a list")
    bench.add_argument("--folds", type=count_or_list, default=list(range(3)), help="number of folds (3) or a list")
    bench.add_argument("--seed", type=int, default=None, help="study seed (default: the --study file's, else the paper's: 10)")
    bench.add_argument("--label-rate", type=float, default=None,
                       help="labelled fraction L (default: the --study file's, else 0.15 = 3 folds x 5%%); other rates use "
                            "generated splits")
    bench.add_argument("--out", default=None, help="output folder (default: results/<dataset>_<backbone>)")
    bench.add_argument("--save-predictions", action="store_true", help="also save test probabilities per run and calibrator")
    bench.add_argument("--splits-dir", help="fixed GATS split files (default: $SIMCALIB_SPLITS_DIR, else "
                                            "../shared/datasets/splits beside the checkout, else DATA_ROOT/splits; "
                                            "'none': no fixed files)")
    bench.add_argument("--generated-splits", action="store_true",
                       help="allow splits drawn from the seed by the same rule where no fixed split file is found (no "
                            "fixed files at all, or e.g. --splits 9 with 5 files); without it the paper's 15%% protocol "
                            "refuses to run on anything but the fixed files")
    bench.add_argument("--wait", action="store_true",
                       help="if another command writes to the same --out, wait for it to finish instead of failing")
    bench.add_argument("--tuned-dir", default=None,
                       help="where *_tuned calibrators find their options (default: the --study file's tuned_dir, "
                            "else $SIMCALIB_TUNED_DIR, else study/tuned)")
    bench.add_argument("--cache-dir", help="backbone cache (default: $SIMCALIB_CACHE_DIR or .cache/simcalib)")
    bench.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda")
    bench.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: all cores)")
    bench.add_argument("--workers", type=int, default=1,
                       help="runs in parallel, each in its own process with one torch thread (e.g. 2 on 2 cores)")
    bench.add_argument("--batch-runs", action=argparse.BooleanOptionalAction, default=None,
                       help="train the backbones of a split's runs together as one batched model (another random "
                            "stream than one run at a time, cached separately; default: the --study file's "
                            "runs.batch_runs, else --no-batch-runs, which was faster on 2 CPU cores, see reports/performance/)")
    bench.add_argument("--batch-calibrators", action=argparse.BooleanOptionalAction, default=None,
                       help="fit TS, VS, ETS, CaGCN and GATS on the runs of a split together (the same models to float "
                            "rounding, several times faster on small graphs; a split's rows arrive once its backbones "
                            "are all trained). Default: the --study file's runs.batch_calibrators, else "
                            "--no-batch-calibrators, one run at a time")
    bench.add_argument("--models-per-batch", type=int, default=None,
                       help="with --batch-runs: at most this many models in one batch (default: all runs of a split)")
    bench.add_argument("--resume-from", default=None, metavar="RESULTS_CSV",
                       help="a results.csv (e.g. committed under reports/) whose rows for these runs are copied "
                            "into OUT/results.csv first, so they are not computed again")
    bench.add_argument("--max-epochs", type=int, default=None, help="cap backbone epochs (quick checks only; the protocol uses 2000)")
    add_attention_option(bench)  # per-run trainer only
    bench.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_data_options(bench)
    bench.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch
    from tqdm import tqdm

    from simcalib.backbones import backbone_name
    from simcalib.calibrators import calibrator_entry
    from simcalib.data import get_spec
    from simcalib.errors import ConfigError
    from simcalib.experiment.executor import run_planned_benchmark
    from simcalib.experiment.plan import plan_benchmark
    from simcalib.experiment.splits import record_split_sources
    from simcalib.experiment.study import load_study, probe_external
    from simcalib.store.integrity import results_lock
    from simcalib.store.results_store import check_results_file, check_resume_source, summarize
    from simcalib.store.tuned import load_tuned_params

    if args.workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {args.workers}")
    if args.workers > 1 and args.threads not in (None, 1):
        raise ConfigError("--workers runs each process with one torch thread; drop --threads or set it to 1")
    if args.models_per_batch is not None and args.models_per_batch < 1:
        raise ConfigError(f"--models-per-batch must be >= 1, got {args.models_per_batch}")
    if args.threads:
        torch.set_num_threads(args.threads)
    dataset, backbone = get_spec(args.dataset).name, backbone_name(args.backbone)
    study = load_study(args.study) if args.study else None
    study_options = study.benchmark_options(dataset, backbone) if study else None  # tuned ones resolved here
    take_study_defaults(args, study)
    attention = args.attention or (study.spec.backbone.get("attention") if study else None)
    if attention not in (None, "pyg") and args.batch_runs:
        raise ConfigError("--attention csr (or a study's backbone: {attention: csr}) applies to backbones trained "
                          "one run at a time; use --no-batch-runs")
    names = args.calibrators if args.calibrators is not None else (
        list(study_options) if study_options is not None else ["uncal", "ts", "vs", "ets"])
    found = [calibrator_entry(c) for c in names]  # names checked before any work
    calibrators, entries = [entry.name for entry in found], {entry.name: entry for entry in found}
    options = {c: study_options[c] for c in calibrators if study_options and c in study_options}
    tuned_dir = args.tuned_dir or (study.spec.tuned_dir if study else None)
    for c in calibrators:  # e.g. SimCalib_tuned without --study: the options a search stored for the benchmark
        if c not in options and entries[c].tuned_from is not None:
            options[c] = load_tuned_params(dataset, backbone, entries[c].tuned_from, tuned_dir)
    for c in calibrators:  # a calibrator from another package: fitted on a probe graph before any work
        probe_external(c, dataset, backbone, options.get(c) or {})
    tuned_from = {c.name: c.tuned_from for c in study.calibrators} if study else {}
    for c in calibrators:
        tuned_from.setdefault(c, entries[c].tuned_from)
    fold_rate = 0.05 if args.label_rate is None else args.label_rate / 3
    settings = protocol_settings(args, fold_rate, study.spec.backbone if study else None)
    settings = dataclasses.replace(settings, batch_runs=args.batch_runs)
    out = Path(args.out or f"results/{dataset}_{backbone}")
    if args.resume_from is not None:
        check_resume_source(args.resume_from)
    # resolved once: splits (a fixed/generated mix is refused here), data, seeds, calibrator definitions
    plan = plan_benchmark(dataset, backbone, args.splits, args.inits, args.folds,
                          [(c, options.get(c), tuned_from.get(c)) for c in calibrators], settings, out)
    sources = f"{dataset}: {plan.describe_splits()}"
    print(f"splits: {sources}", flush=True)
    progress = None if args.no_progress else (lambda runs: tqdm(runs, desc=f"{dataset}-{backbone}", unit="run"))
    notify = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    try:
        with sigterm_as_interrupt(), results_lock(out, wait=args.wait, notify=notify):
            # the folder's rows and splits.json must be of these runs' splits before anything is written
            check_results_file(out / "results.csv", plan.planned_runs(), plan.definitions())
            record_split_sources(out, plan.split_sources)
            results = run_planned_benchmark(plan, save_predictions=args.save_predictions, progress=progress,
                                            workers=args.workers, resume_from=args.resume_from,
                                            models_per_batch=args.models_per_batch,
                                            batch_calibrators=args.batch_calibrators)
    except KeyboardInterrupt:
        print(f"\ninterrupted: finished runs are kept in {out / 'results.csv'}; the same command resumes", file=sys.stderr)
        return 130
    print_summary(summarize(results))
    print(f"\n{len(results)} rows in {out / 'results.csv'}\nsplits: {sources}")
    return 0


def take_study_defaults(args: argparse.Namespace, study) -> None:
    """Fill the protocol options the command line left unset from ``study`` (a loaded study file, or None: the
    paper's): its seed, label rate, generated splits and batch keys, so the command computes the study's rows.

    A study that sweeps several label rates names none of them; the command then asks for ``--label-rate``.
    """
    from simcalib.errors import ConfigError

    if args.seed is None:
        args.seed = study.spec.seed if study else 10
    for key, default in (("batch_runs", False), ("batch_calibrators", False), ("models_per_batch", None)):
        if getattr(args, key) is None:  # not on the command line, which wins over the study file
            setattr(args, key, getattr(study.spec.runs, key) if study else default)
    if study is None:
        return
    if args.label_rate is None:
        if study.sweeps_label_rate:
            rates = ", ".join(f"{rate:g}" for rate in study.label_rates)
            raise ConfigError(f"{args.study} sweeps the label rates {rates}; pass --label-rate with one of them")
        args.label_rate = study.label_rates[0]
    if study.spec.runs.generated_splits:  # the study's runs.generated_splits: true, as --generated-splits
        args.generated_splits = True


def print_summary(summary) -> None:
    header = f"{'calibrator':<12}{'runs':>5}  " + "  ".join(f"{c:>15}" for c in SUMMARY_METRICS)
    for (dataset, backbone), group in summary.groupby(["dataset", "backbone"], sort=False):
        print(f"\n{dataset} / {backbone}  (mean ± std over runs; ECE-type metrics and accuracy in %)")
        print(header)
        for _, row in group.iterrows():
            cells = []
            for c in SUMMARY_METRICS:
                digits = 4 if c in ("nll", "brier") else 2
                cells.append(f"{row[c + '_mean']:>7.{digits}f}±{row[c + '_std']:<7.{digits}f}")
            print(f"{row['calibrator']:<12}{int(row['runs']):>5}  " + "  ".join(cells))
