"""SimCalib: GNN calibration based on similarity between nodes (AAAI-24), and the GATS-protocol benchmark.

The library is pure PyTorch / torch_geometric: it imports no orchestration or tracking code.
"""

__version__ = "0.1.0"
