"""The ``simcalib`` command line.

Sub-commands live in :mod:`simcalib.commands` (one module per group). Errors caused by input (a bad name,
missing or corrupt data, an invalid option or study file) are printed as one line naming the problem and
the fix, with exit code 2 and no traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings
from pathlib import Path

from simcalib.errors import SimCalibError


def build_parser() -> argparse.ArgumentParser:
    from simcalib.commands import COMMAND_MODULES

    parser = argparse.ArgumentParser(prog="simcalib", description="GNN calibration: SimCalib and the GATS-protocol benchmark")
    parser.add_argument("--version", action="version", version=f"simcalib {simcalib_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMAND_MODULES:
        importlib.import_module(module).register(sub)
    return parser


def simcalib_version() -> str:
    """The installed distribution's version (``importlib.metadata``; pyproject.toml's ``version``)."""
    import simcalib

    return simcalib.__version__


def quiet_environment() -> None:
    """Keep Prefect, MLflow and matplotlib offline and quiet (../shared/STACK.md) unless the user chose."""
    defaults = {
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "true",
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
        "PREFECT_HOME": str(Path(".prefect").absolute()),
        "MPLCONFIGDIR": str(Path(".cache/matplotlib").absolute()),
    }
    for key, value in defaults.items():
        os.environ.setdefault(key, value)
    warnings.filterwarnings("ignore", message=".*[Ss]parse.*")


def main(argv: list[str] | None = None) -> int:
    quiet_environment()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except SimCalibError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
