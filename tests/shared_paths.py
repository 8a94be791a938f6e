"""Paths the tests share: the project root and the specification's data under ../shared. A module of its own, not
conftest.py: a test imports it by name, and ``conftest`` would name whichever conftest.py pytest loaded last."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("SIMCALIB_SHARED_DIR", PROJECT_ROOT.parent / "shared"))
MIRROR = SHARED / "datasets" / "pyg"
SPLITS = SHARED / "datasets" / "splits"
PAPER = SHARED / "paper"
