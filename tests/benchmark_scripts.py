"""A script of ``benchmarks/`` imported as a module (it is not a package), for testing its functions."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def load_script(path: Path):
    if str(path.parent) not in sys.path:  # as when run as a script: its folder's modules import
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
