"""SimCalib: GNN calibration based on similarity between nodes (AAAI-24), and the GATS-protocol benchmark.

The library is pure PyTorch / torch_geometric: it imports no orchestration or tracking code.
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _installed_version

try:  # the version is pyproject.toml's, read from the installed package's metadata
    __version__ = _installed_version("simcalib")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"


def __getattr__(name: str):
    """``simcalib.load_calibrator``: :func:`simcalib.calibrators.load_calibrator`, imported when first used
    (``import simcalib`` stays light)."""
    if name == "load_calibrator":
        from simcalib.calibrators import load_calibrator

        return load_calibrator
    if name == "select_calibrator":  # simcalib.calibrators.selection; importing the package loads no torch
        from simcalib.calibrators.selection import select_calibrator

        return select_calibrator
    raise AttributeError(f"module 'simcalib' has no attribute {name!r}")
