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


def build_parser(command: str | None = None, commands: bool = True) -> argparse.ArgumentParser:
    """The CLI's parser: with ``command``, only the module that declares it in its ``COMMANDS`` registers (a
    command's parser may import what its help lists, e.g. ``benchmark`` the calibrators), so another command
    starts without those imports; without it (``simcalib --help``), or for a name no module declares, every
    module registers; with ``commands=False``, none (the top level's own options only)."""
    from simcalib.commands import COMMAND_MODULES

    parser = argparse.ArgumentParser(prog="simcalib", description="GNN calibration: SimCalib and the GATS-protocol benchmark")
    parser.add_argument("--version", action="version", version=f"simcalib {simcalib_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    modules = [importlib.import_module(name) for name in COMMAND_MODULES] if commands else []
    owner = [module for module in modules if command in module.COMMANDS]
    for module in owner or modules:
        module.register(sub)
    return parser


def _parser_for(argv: list[str]) -> argparse.ArgumentParser:
    """The parser ``argv`` needs: ``simcalib --version`` alone registers no command (it prints and exits)."""
    version_only = bool(argv) and all(arg == "--version" for arg in argv)
    return build_parser(invoked_command(argv), commands=not version_only)


def invoked_command(argv: list[str]) -> str | None:
    """The sub-command ``argv`` names: its first argument that is not an option (the top level takes options
    without values only)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


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
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parser_for(argv).parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except SimCalibError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
