"""The ``simcalib`` command line.

Errors caused by input (a bad name, missing or corrupt data, an invalid option) are printed as one line
naming the problem and the fix, with exit code 2 and no traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path

from simcalib.errors import SimCalibError


def _csv_list(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _count_or_list(value: str) -> list[int]:
    """``5`` means 0..4; ``0,2`` means exactly those indices."""
    try:
        if "," in value or value.startswith("="):
            return [int(v) for v in value.lstrip("=").split(",") if v.strip()]
        return list(range(int(value)))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a count (e.g. 5) or a comma list of indices (e.g. 0,2), got {value!r}") from None


def _add_data_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-root", help="torch_geometric data root (default: $SIMCALIB_DATA_ROOT or ./data)")
    parser.add_argument("--data-mirror", help="offline mirror in torch_geometric's raw layout (default: $SIMCALIB_DATA_MIRROR)")


def build_parser() -> argparse.ArgumentParser:
    from simcalib.calibrators import calibrator_names
    from simcalib.data import dataset_names

    parser = argparse.ArgumentParser(prog="simcalib", description="GNN calibration: SimCalib and the GATS-protocol benchmark")
    sub = parser.add_subparsers(dest="command", required=True)

    bench = sub.add_parser("benchmark", help="run the 75-run protocol (or a subset) on one benchmark",
                           description="Train backbones and fit calibrators under the GATS protocol; writes OUT/results.csv.")
    bench.add_argument("--dataset", required=True, help=f"one of: {', '.join(dataset_names())}")
    bench.add_argument("--backbone", required=True, help="GCN or GAT")
    bench.add_argument("--calibrators", type=_csv_list, default=["uncal", "ts", "vs", "ets"],
                       help=f"comma list among: {', '.join(calibrator_names())} (default: uncal,ts,vs,ets)")
    bench.add_argument("--splits", type=_count_or_list, default=list(range(5)), help="number of splits (5) or a list like 0,3")
    bench.add_argument("--inits", type=_count_or_list, default=list(range(5)), help="number of backbone inits (5) or a list")
    bench.add_argument("--folds", type=_count_or_list, default=list(range(3)), help="number of folds (3) or a list")
    bench.add_argument("--seed", type=int, default=10, help="study seed (the paper's: 10)")
    bench.add_argument("--label-rate", type=float, default=None,
                       help="labelled fraction L (default 0.15 = 3 folds x 5%%); other rates use generated splits")
    bench.add_argument("--out", default=None, help="output folder (default: results/<dataset>_<backbone>)")
    bench.add_argument("--save-predictions", action="store_true", help="also save test probabilities per run and calibrator")
    bench.add_argument("--splits-dir", help="fixed GATS split files (default: $SIMCALIB_SPLITS_DIR; absent: generated)")
    bench.add_argument("--cache-dir", help="backbone cache (default: $SIMCALIB_CACHE_DIR or .cache/simcalib)")
    bench.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda")
    bench.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: all cores)")
    bench.add_argument("--max-epochs", type=int, default=None, help="cap backbone epochs (quick checks only; the protocol uses 2000)")
    bench.add_argument("--no-progress", action="store_true", help="no progress bar")
    _add_data_options(bench)

    data = sub.add_parser("data", help="dataset utilities")
    data_sub = data.add_subparsers(dest="data_command", required=True)
    check = data_sub.add_parser("check", help="load every dataset (or those named) and print its statistics")
    check.add_argument("datasets", nargs="*", help="dataset names (default: all eight)")
    _add_data_options(check)
    return parser


def cmd_benchmark(args: argparse.Namespace) -> int:
    import torch
    from tqdm import tqdm

    from simcalib.backbones import backbone_name
    from simcalib.calibrators import canonical_calibrator
    from simcalib.data import get_spec
    from simcalib.protocol import BenchmarkRequest, ProtocolSettings, run_benchmark, summarize

    if args.threads:
        torch.set_num_threads(args.threads)
    dataset, backbone = get_spec(args.dataset).name, backbone_name(args.backbone)
    calibrators = [canonical_calibrator(c) for c in args.calibrators]  # validate names before any work
    fold_rate = 0.05 if args.label_rate is None else args.label_rate / 3
    overrides = (("max_epochs", args.max_epochs),) if args.max_epochs else ()
    settings = ProtocolSettings(study_seed=args.seed, fold_rate=fold_rate, data_root=args.data_root,
                                mirror=args.data_mirror, splits_dir=args.splits_dir, cache_dir=args.cache_dir,
                                device=args.device, backbone_overrides=overrides)
    out = Path(args.out or f"results/{dataset}_{backbone}")
    request = BenchmarkRequest(dataset, backbone, calibrators, args.splits, args.inits, args.folds)
    progress = None if args.no_progress else (lambda runs: tqdm(runs, desc=f"{dataset}-{backbone}", unit="run"))
    try:
        results = run_benchmark(request, settings, out, save_predictions=args.save_predictions, progress=progress)
    except KeyboardInterrupt:
        print(f"\ninterrupted: finished runs are kept in {out / 'results.csv'}; the same command resumes", file=sys.stderr)
        return 130
    print_summary(summarize(results))
    print(f"\n{len(results)} rows in {out / 'results.csv'}")
    return 0


def print_summary(summary) -> None:
    cols = ["ece", "ace", "mce", "classwise_ece", "kde_ece", "nll", "brier", "accuracy"]
    header = f"{'calibrator':<12}{'runs':>5}  " + "  ".join(f"{c:>15}" for c in cols)
    for (dataset, backbone), group in summary.groupby(["dataset", "backbone"], sort=False):
        print(f"\n{dataset} / {backbone}  (mean ± std over runs; ECE-type metrics and accuracy in %)")
        print(header)
        for _, row in group.iterrows():
            cells = "  ".join(f"{row[c + '_mean']:>7.{4 if c in ('nll', 'brier') else 2}f}±{row[c + '_std']:<7.{4 if c in ('nll', 'brier') else 2}f}" for c in cols)
            print(f"{row['calibrator']:<12}{int(row['runs']):>5}  {cells}")


def cmd_data_check(args: argparse.Namespace) -> int:
    from simcalib.data import dataset_names, load_dataset

    names = args.datasets or dataset_names()
    failures = 0
    print(f"{'dataset':<10} {'nodes':>7} {'edges':>8} {'features':>8} {'classes':>7}  source")
    for name in names:
        try:
            g = load_dataset(name, root=args.data_root, mirror=args.data_mirror)
            print(f"{g.name:<10} {g.num_nodes:>7} {g.num_edges:>8} {g.num_features:>8} {g.num_classes:>7}  {g.source}")
        except SimCalibError as exc:
            failures += 1
            print(f"{name:<10} cannot load: {exc}")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("MPLCONFIGDIR", str(Path(".cache/matplotlib").absolute()))
    warnings.filterwarnings("ignore", message=".*[Ss]parse.*")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "benchmark":
            return cmd_benchmark(args)
        if args.command == "data" and args.data_command == "check":
            return cmd_data_check(args)
    except SimCalibError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
