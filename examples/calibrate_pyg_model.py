"""Calibrate a torch_geometric GCN trained on Cora with the calibrator the benchmark recommends.

Offline, from the data mirror: SIMCALIB_DATA_MIRROR=/path/to/mirror python examples/calibrate_pyg_model.py
"""

import csv
from pathlib import Path

import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.nn import GCNConv

from simcalib.calibrators import CalibrationGraph, build_calibrator, node_outputs
from simcalib.data import load_dataset
from simcalib.metrics import ece, nll

RECOMMENDATION = Path(__file__).resolve().parents[1] / "reports" / "recommendation.csv"


class GCN(torch.nn.Module):
    def __init__(self, in_channels, num_classes, hidden=64):
        super().__init__()
        self.conv1, self.conv2 = GCNConv(in_channels, hidden), GCNConv(hidden, num_classes)

    def forward(self, x, edge_index):
        h = F.relu(self.conv1(x, edge_index))  # node_outputs' hidden: this, after the ReLU
        return self.conv2(F.dropout(h, 0.5, self.training), edge_index)


torch.manual_seed(0)
cora = load_dataset("Cora")  # the data root, else the mirror (SIMCALIB_DATA_MIRROR), else a download
data = Data(x=cora.x.to_dense(), edge_index=cora.edge_index, y=cora.y)
order = torch.randperm(data.num_nodes)  # 140 training, 500 calibration (validation), the rest test nodes
data.train_mask, data.val_mask, test_mask = (torch.zeros(data.num_nodes, dtype=torch.bool) for _ in range(3))
data.train_mask[order[:140]], data.val_mask[order[140:640]], test_mask[order[640:]] = True, True, True

model = GCN(data.num_features, cora.num_classes)
optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
for _ in range(200):  # full-batch epochs
    model.train()
    optimizer.zero_grad()
    F.cross_entropy(model(data.x, data.edge_index)[data.train_mask], data.y[data.train_mask]).backward()
    optimizer.step()

logits, hidden = node_outputs(model, data, activation=torch.relu)
graph = CalibrationGraph.from_data(data, logits, hidden)  # train_mask, val_mask; every other label hidden
with RECOMMENDATION.open() as rows:
    name = next(row["calibrator"] for row in csv.DictReader(rows) if row["family"] == "homophilous")
calibrator = build_calibrator(name, cora.num_classes, dataset="Cora", backbone="GCN").fit(graph)

before, after = logits.softmax(-1)[test_mask], calibrator.predict_proba(graph)[test_mask]
labels = data.y[test_mask]
print(f"{name} on {int(test_mask.sum())} Cora test nodes: ECE {100 * ece(before, labels):.2f} -> "
      f"{100 * ece(after, labels):.2f} (%), NLL {nll(before, labels):.3f} -> {nll(after, labels):.3f}")
