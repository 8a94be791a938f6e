"""SimCalib: GNN calibration based on similarity between nodes (AAAI-24), and the GATS-protocol benchmark.

The library is pure PyTorch / torch_geometric: it imports no orchestration or tracking code.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    """``simcalib.load_calibrator``: :func:`simcalib.calibrators.load_calibrator`, imported when first used
    (``import simcalib`` stays light)."""
    if name == "load_calibrator":
        from simcalib.calibrators import load_calibrator

        return load_calibrator
    raise AttributeError(f"module 'simcalib' has no attribute {name!r}")
