"""``simcalib data check``: which datasets load, with their statistics and source."""

from __future__ import annotations

import argparse

from simcalib.commands.common import add_data_options


def register(sub) -> None:
    data = sub.add_parser("data", help="dataset utilities")
    data_sub = data.add_subparsers(dest="data_command", required=True)
    check = data_sub.add_parser("check", help="load every dataset (or those named) and print its statistics")
    check.add_argument("datasets", nargs="*", help="dataset names (default: all eight)")
    add_data_options(check)
    check.set_defaults(func=run_check)


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
