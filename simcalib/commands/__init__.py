"""Sub-commands of the ``simcalib`` CLI, one module per command group.

Each module defines ``register(subparsers)``, which adds its parsers and sets ``func`` (taking the parsed
arguments, returning an exit code), and ``COMMANDS``, the names it adds: the CLI registers only the module of the
command invoked (tests/test_cli.py checks that each module adds exactly its ``COMMANDS``). Modules that need
orchestration code (``flows/``) import it inside their command functions, so importing the library never imports
Prefect, MLflow or Optuna.
"""

COMMAND_MODULES = [
    "simcalib.commands.benchmark",
    "simcalib.commands.data",
    "simcalib.commands.tune",
    "simcalib.commands.report",
    "simcalib.commands.study",
    "simcalib.commands.ui",
    "simcalib.commands.track",
    "simcalib.commands.feature_signal",
    "simcalib.commands.select",
    "simcalib.commands.results",
]
