"""SimCalib: GNN calibration based on similarity between nodes (AAAI-24), and the GATS-protocol benchmark.

The library is pure PyTorch / torch_geometric: it imports no orchestration or tracking code.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    """``simcalib.select_calibrator`` (:mod:`simcalib.calibrators.selection`), imported on first use: importing
    the package (e.g. for the command line's help) loads no torch."""
    if name == "select_calibrator":
        from simcalib.calibrators.selection import select_calibrator

        return select_calibrator
    raise AttributeError(f"module 'simcalib' has no attribute {name!r}")
