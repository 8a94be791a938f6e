"""Is the uncalibrated-GAT ECE gap (ours ~14-16 vs the paper's ~23 on Cora/Citeseer) our GAT's doing?

Trains, on the same runs, seeds, splits and early-stopping rule, (a) the project's GAT (sparse input
projection outside ``GATConv``) and (b) a plain stack of torch_geometric ``GATConv`` layers written the way
the GATS reference code builds its GAT (dense features, dropout before each layer, ``GATConv``'s own
self-loops and projection), and prints the test-node UnCal ECE, accuracy and mean confidence of both.

    .venv/bin/python benchmarks/gat_reference_check.py --dataset Cora --runs 4
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
import torch
import torch.nn.functional as F
from torch_geometric.nn import GATConv

from simcalib.backbones import BackboneConfig, models, train_backbone, training
from simcalib.metrics import compute_metrics
from simcalib.protocol import ProtocolSettings, Run, backbone_config, load_graph, run_split


class PlainGAT(torch.nn.Module):
    """8 heads x 8 hidden, ELU, 1 output head; dropout on each layer's input and on attention."""

    def __init__(self, in_channels: int, num_classes: int, dropout: float = 0.5):
        super().__init__()
        self.dropout = dropout
        self.conv1 = GATConv(in_channels, 8, heads=8, dropout=dropout)
        self.conv2 = GATConv(64, num_classes, heads=1, concat=False, dropout=dropout)

    @staticmethod
    def prepare_graph(edge_index, num_nodes):
        return edge_index  # GATConv adds self-loops itself

    def forward(self, x, edge_index):
        x = x.matrix.to_dense()  # [N, F] dense, as the reference code feeds it
        hidden = F.elu(self.conv1(F.dropout(x, self.dropout, self.training), edge_index))
        return self.conv2(F.dropout(hidden, self.dropout, self.training), edge_index), hidden


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="Cora")
    parser.add_argument("--runs", type=int, default=4, help="runs of split 0, fold 0 (inits 0..runs-1)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    models.BACKBONES["PlainGAT"] = training.BACKBONES["PlainGAT"] = PlainGAT
    settings = ProtocolSettings()
    graph = load_graph(args.dataset, settings)
    for name in ("GAT", "PlainGAT"):
        rows = []
        for init in range(args.runs):
            run = Run(graph.name, "GAT", 0, init, 0)
            train_idx, cal_idx, test_idx = run_split(run, settings, graph).fold_indices(0)
            config = BackboneConfig(name, **{k: v for k, v in vars(backbone_config(run, settings)).items() if k != "name"})
            out = train_backbone(graph, torch.from_numpy(train_idx), torch.from_numpy(cal_idx), config, run.seed(settings), "cpu")
            probs = out.logits.softmax(1)[test_idx]
            metrics = compute_metrics(probs, graph.y[test_idx])
            rows.append((metrics["ece"], metrics["accuracy"], probs.max(1).values.mean().item() * 100, out.best_epoch))
            print(f"{name:<9} init {init}: UnCal ECE {rows[-1][0]:6.2f}  acc {rows[-1][1]:6.2f}  "
                  f"mean confidence {rows[-1][2]:6.2f}  kept epoch {rows[-1][3]}", flush=True)
        mean = np.mean(rows, axis=0)
        print(f"{name:<9} mean  : UnCal ECE {mean[0]:6.2f}  acc {mean[1]:6.2f}  mean confidence {mean[2]:6.2f}")


if __name__ == "__main__":
    main()
