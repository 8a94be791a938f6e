"""``simcalib data check``: which datasets load, with their statistics and source. ``simcalib data fetch``:
download ahead of time the datasets and fixed split files a study needs, verified by SHA-256."""

from __future__ import annotations

import argparse
from pathlib import Path

from simcalib.commands.common import add_data_options

COMMANDS = ("data",)  # the sub-commands register() adds


def register(sub) -> None:
    data = sub.add_parser("data", help="dataset utilities")
    data_sub = data.add_subparsers(dest="data_command", required=True)
    check = data_sub.add_parser("check", help="load every dataset (or those named) and print its statistics")
    check.add_argument("datasets", nargs="*", help="dataset names (default: all eight)")
    add_data_options(check)
    check.set_defaults(func=run_check)
    fetch = data_sub.add_parser(
        "fetch", help="download the datasets and fixed GATS splits a study needs, checked by SHA-256",
        description="Download ahead of time (e.g. on a machine with internet access, or from a mirror for compute "
                    "nodes without it) what a study needs: datasets through torch_geometric's classes into the data "
                    "root, the GATS fixed split files checked against their pinned SHA-256 and stored as plain "
                    "arrays in <data root>/splits. A file whose checksum differs is refused and nothing is written.")
    fetch.add_argument("--study", metavar="STUDY_FILE", help="fetch the datasets of this study, and the fixed split "
                       "files it reads (its label rate is the paper's 15%%)")
    fetch.add_argument("--splits", action="store_true", help="fetch every published GATS split file (40: 8 datasets x 5)")
    fetch.add_argument("--datasets", nargs="+", default=[], metavar="DATASET", help="fetch these datasets")
    fetch.add_argument("--from", dest="base_url", metavar="URL",
                       help="a mirror instead of the upstream sources: split files at "
                            "URL/data/split/<Dataset>/5_3f_85/<dataset>_split_<k>.npz (the GATS repository's layout), "
                            "datasets at URL/<Name>/raw/<file> (torch_geometric's raw layout)")
    fetch.add_argument("--data-root", help="torch_geometric data root (default: the study's data.root, else "
                       "$SIMCALIB_DATA_ROOT or ./data)")
    fetch.add_argument("--splits-dir", help="where the split files go (default: <data root>/splits)")
    fetch.set_defaults(func=run_fetch)


def run_check(args: argparse.Namespace) -> int:
    from simcalib.data import dataset_names, get_spec, load_dataset
    from simcalib.errors import SimCalibError

    names = [get_spec(n).name for n in args.datasets] if args.datasets else dataset_names()
    failures = 0
    print(f"{'dataset':<18} {'nodes':>7} {'edges':>8} {'features':>8} {'classes':>7}  source")
    for name in names:
        try:
            g = load_dataset(name, root=args.data_root, mirror=args.data_mirror)
            print(f"{g.name:<18} {g.num_nodes:>7} {g.num_edges:>8} {g.num_features:>8} {g.num_classes:>7}  {g.source}")
        except SimCalibError as exc:
            failures += 1
            print(f"{name:<18} cannot load: {exc}")
    if failures:
        print(f"\n{failures} of {len(names)} datasets cannot be loaded here (see above for how to provide them)")
    return 1 if failures else 0


def run_fetch(args: argparse.Namespace) -> int:
    from simcalib.data import get_spec
    from simcalib.data.fetch import fetch_dataset
    from simcalib.data.gats_splits import fetch_gats_splits, splits_source
    from simcalib.data.loading import data_root
    from simcalib.errors import ConfigError
    from simcalib.experiment.splits import NO_SPLITS_DIR, resolve_splits_dir

    datasets = [get_spec(name).name for name in args.datasets]
    split_datasets: list[str] | None = [] if not args.splits else None  # None: every published split file
    root = args.data_root
    if args.study:
        from simcalib.experiment.needs import study_data_needs
        from simcalib.experiment.study import load_study

        study = load_study(args.study)
        needs = study_data_needs(study)
        datasets += needs.datasets
        if split_datasets is not None:
            split_datasets += needs.fixed_splits
        root = root or study.spec.data.root
    datasets = list(dict.fromkeys(datasets))
    if not datasets and split_datasets == [] and not args.study:
        raise ConfigError("nothing to fetch: name a study (--study FILE), --splits or --datasets NAME ...")
    root = data_root(root)
    if args.splits_dir is not None and str(args.splits_dir).lower() == NO_SPLITS_DIR:
        raise ConfigError("--splits-dir none stores nothing; give the folder the split files go to")
    splits_dir = Path(args.splits_dir) if args.splits_dir else root / "splits"
    source = splits_source()
    if split_datasets is None or split_datasets:
        written = fetch_gats_splits(splits_dir, args.base_url, split_datasets)
        print(f"split files: {len(written)} fetched from {args.base_url or source['url']}, SHA-256 checked "
              f"against {source['repository']} at commit {source['commit'][:12]}, written to "
              f"{splits_dir / ('gats_' + source['protocol'])}")
        used, origin = resolve_splits_dir(None, root)
        if used is None or used.resolve() != splits_dir.resolve():
            print(f"note: benchmarks read fixed splits from {used} ({origin}); pass --splits-dir {splits_dir} "
                  f"(or set SIMCALIB_SPLITS_DIR) to use these")
    if datasets:
        print(f"{'dataset':<18} {'nodes':>7} {'edges':>8} {'features':>8} {'classes':>7}  fetched")
    for name in datasets:
        fetched = fetch_dataset(name, root, args.base_url)
        g = fetched.graph
        checks = ", ".join(f"{count} {how}" for how, count in _counts(fetched.checks.values()).items())
        print(f"{g.name:<18} {g.num_nodes:>7} {g.num_edges:>8} {g.num_features:>8} {g.num_classes:>7}  "
              f"{fetched.action}{f' (SHA-256: {checks})' if checks else ''}")
    if datasets:
        print(f"data root: {root}")
    return 0


def _counts(values) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts
