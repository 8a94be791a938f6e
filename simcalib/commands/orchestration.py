"""Where the study commands find the orchestration layer, and the one-line answer when it cannot be used.

The orchestration layer (Prefect flows, MLflow tracking, Optuna search, the dashboards) is the repository's
``flows/`` folder. The wheel installs that folder as the package ``simcalib_flows`` (a top-level name no other
project uses), and only ``pip install "simcalib[study]"`` brings the packages it needs. :func:`flows_module`
returns one of its modules:

* from a checkout (``flows/`` beside the imported ``simcalib`` and importable as ``flows``): ``flows.<name>``,
  the modules the tests and ``benchmarks/`` scripts import, so one process never holds two copies;
* otherwise the installed ``simcalib_flows.<name>``.

Before either, :func:`require_study_extra` checks that the study extra's packages are installed; without them a
study command (``simcalib study run``, ``tune search``, ``track``, ``ui``, ``report --flow``) ends with one line
naming the extra (:class:`~simcalib.errors.MissingExtraError`, exit code 2), before any work starts.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from pathlib import Path
from types import ModuleType

from simcalib.errors import MissingExtraError

INSTALL_STUDY = 'pip install "simcalib[study]"'
# The import names of the study extra's packages ([project.optional-dependencies] study in pyproject.toml).
STUDY_MODULES = ("prefect", "prefect_dask", "mlflow", "optuna", "optuna_integration", "optuna_dashboard", "dask")
CHECKOUT_PACKAGE = "flows"
INSTALLED_PACKAGE = "simcalib_flows"


def missing_study_modules() -> list[str]:
    """The study extra's packages that cannot be imported here (none when the extra is installed)."""
    return [name for name in STUDY_MODULES if importlib.util.find_spec(name) is None]


def require_study_extra(command: str) -> None:
    """Raise :class:`~simcalib.errors.MissingExtraError` naming the extra when one of its packages is missing."""
    missing = missing_study_modules()
    if missing:
        raise MissingExtraError(f"`simcalib {command}` needs the study extra (not installed: {', '.join(missing)}); "
                                f"install it with: {INSTALL_STUDY}")


def _checkout_flows() -> Path:
    import simcalib

    return Path(simcalib.__file__).resolve().parent.parent / CHECKOUT_PACKAGE


@functools.lru_cache(maxsize=1)
def orchestration_package() -> str:
    """``"flows"`` in a checkout whose ``flows/`` is importable, else ``"simcalib_flows"`` (the wheel's name)."""
    checkout = _checkout_flows()
    if (checkout / "__init__.py").is_file():
        spec = importlib.util.find_spec(CHECKOUT_PACKAGE)
        if spec is not None and spec.origin and Path(spec.origin).resolve().parent == checkout:
            return CHECKOUT_PACKAGE
    if importlib.util.find_spec(INSTALLED_PACKAGE) is not None:
        return INSTALLED_PACKAGE
    raise MissingExtraError(f"the orchestration package {INSTALLED_PACKAGE} is not installed beside simcalib "
                            f"(nor is a checkout's flows/ importable); reinstall with: {INSTALL_STUDY}")


def flows_module(name: str, command: str = "study") -> ModuleType:
    """The orchestration layer's module ``name`` (``"study"``, ``"runners"``, ``"tracking"``...), after checking
    that the study extra is installed for ``simcalib <command>``."""
    require_study_extra(command)
    return importlib.import_module(f"{orchestration_package()}.{name}")
