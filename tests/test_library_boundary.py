"""The library boundary: every module of ``simcalib`` except the command-line layer (``simcalib/cli.py`` and
``simcalib/commands/``) imports without the orchestration stack (``flows`` or ``simcalib_flows``, Prefect, MLflow,
Optuna, Dask).

Each check runs in a fresh interpreter whose import system refuses those packages, so a module that needs
one fails to import, and one that merely pulls it in (an unused import) is caught by ``sys.modules``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import simcalib

ORCHESTRATION = ("flows", "simcalib_flows", "prefect", "mlflow", "optuna", "dask")
# The command-line layer wires the library to orchestration; everything else is library code.
COMMAND_LAYER = ("simcalib.cli", "simcalib.commands")


def library_modules(package_dir: Path = Path(simcalib.__file__).parent) -> list[str]:
    """Every module under ``simcalib/`` (packages included) outside the command-line layer."""
    names = []
    for path in sorted(package_dir.rglob("*.py")):
        parts = ("simcalib", *path.relative_to(package_dir).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        name = ".".join(parts)
        if not any(name == layer or name.startswith(layer + ".") for layer in COMMAND_LAYER):
            names.append(name)
    return names


CHILD = textwrap.dedent("""
    import importlib, importlib.abc, json, sys

    BLOCKED = {blocked!r}

    class Refuse(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"{{name}} is not available to library code (blocked by the boundary test)")
            return None

    sys.meta_path.insert(0, Refuse())
    failures = {{}}
    for module in {modules!r}:
        try:
            importlib.import_module(module)
        except Exception as exc:
            failures[module] = f"{{type(exc).__name__}}: {{exc}}"
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    print(json.dumps({{"failures": failures, "loaded": loaded}}))
""")


def import_without_orchestration(modules: list[str]) -> dict:
    """Import ``modules`` in a fresh interpreter where the orchestration packages cannot be imported; the
    modules that failed (with their error) and the orchestration modules that ended up loaded."""
    code = CHILD.format(blocked=ORCHESTRATION, modules=modules)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                          cwd=Path(simcalib.__file__).parent.parent)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_library_modules_are_found():
    modules = library_modules()
    assert {"simcalib", "simcalib.experiment.protocol", "simcalib.calibrators", "simcalib.report"} <= set(modules)
    assert not [m for m in modules if m.startswith("simcalib.commands") or m == "simcalib.cli"]


def test_library_imports_without_orchestration():
    result = import_without_orchestration(library_modules())
    assert result["failures"] == {}, (
        "library modules that need an orchestration package (move that code to simcalib/commands/ or flows/): "
        f"{result['failures']}")
    assert result["loaded"] == [], f"orchestration modules loaded by library code: {result['loaded']}"


def test_the_check_catches_an_orchestration_import(tmp_path):
    """The blocker itself works: a module importing optuna fails in the child (guards against a check that
    passes because nothing is blocked)."""
    package = tmp_path / "boundary_probe"
    package.mkdir()
    (package / "__init__.py").write_text("import optuna\n")
    code = CHILD.format(blocked=ORCHESTRATION, modules=["boundary_probe"])
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "boundary_probe" in done.stdout and "ImportError" in done.stdout
