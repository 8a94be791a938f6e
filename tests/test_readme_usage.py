"""The README's "Use it in your project" section runs as written: every ```python block, in order, in one
namespace holding what the section assumes (a trained torch_geometric ``model`` and its ``Data`` with boolean
masks; here a small GCN on a synthetic graph), and its calibrator is the benchmark's recommendation."""

from __future__ import annotations

import csv
import re

import torch
import torch.nn.functional as F
from shared_paths import PROJECT_ROOT
from synthetic_graphs import make_sbm_graph
from torch_geometric.data import Data
from torch_geometric.nn import GCNConv

SECTION = "## Use it in your project"


def section_blocks() -> list[str]:
    text = (PROJECT_ROOT / "README.md").read_text()
    assert SECTION in text, f"README.md has no section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)


class GCN(torch.nn.Module):
    def __init__(self, in_channels, num_classes, hidden=16):
        super().__init__()
        self.conv1, self.conv2 = GCNConv(in_channels, hidden), GCNConv(hidden, num_classes)

    def forward(self, x, edge_index):
        return self.conv2(F.dropout(F.relu(self.conv1(x, edge_index)), 0.5, self.training), edge_index)


def trained_model() -> tuple[GCN, Data]:
    graph = make_sbm_graph(num_nodes=120, seed=4)
    n = graph.num_nodes
    data = Data(x=graph.x.to_dense(), edge_index=graph.edge_index, y=graph.y)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(0))
    data.train_mask, data.val_mask = torch.zeros(n, dtype=torch.bool), torch.zeros(n, dtype=torch.bool)
    data.train_mask[order[:30]], data.val_mask[order[30:60]] = True, True
    torch.manual_seed(0)
    model = GCN(data.num_features, graph.num_classes)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    for _ in range(50):
        model.train()
        optimizer.zero_grad()
        F.cross_entropy(model(data.x, data.edge_index)[data.train_mask], data.y[data.train_mask]).backward()
        optimizer.step()
    return model, data


def test_every_python_block_of_the_section_runs(tmp_path, monkeypatch):
    blocks = section_blocks()
    assert len(blocks) >= 3  # the five lines with a Data, plain logits, save and load
    monkeypatch.chdir(tmp_path)  # the blocks write their files here
    model, data = trained_model()
    namespace = {"model": model, "data": data}
    for number, block in enumerate(blocks, 1):
        exec(compile(block, f"README.md, {SECTION[3:]!r} block {number}", "exec"), namespace)
    assert namespace["probs"].shape == (data.num_nodes, int(data.y.max()) + 1)
    assert (tmp_path / "gats.pt").is_file()


def test_the_section_uses_the_recommended_calibrator():
    with (PROJECT_ROOT / "reports" / "recommendation.csv").open() as rows:
        recommended = next(row["calibrator"] for row in csv.DictReader(rows) if row["family"] == "homophilous")
    assert f'build_calibrator("{recommended}"' in section_blocks()[0]
