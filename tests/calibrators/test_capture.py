"""node_outputs: a torch_geometric model's logits and first-layer representation, the tensor the benchmark's own
backbones return as ``hidden`` (after the non-linearity, before dropout)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.data import Data
from torch_geometric.nn import GCNConv
from torch_geometric.nn.models import GCN as PyGGCN

from simcalib.backbones.models import GAT, GCN
from simcalib.backbones.sparse import SparseOperand
from simcalib.calibrators import node_outputs
from simcalib.errors import ConfigError


def small_graph(seed: int = 0, n: int = 40, f: int = 12, k: int = 3) -> Data:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, f, generator=g)
    upper = torch.triu(torch.rand(n, n, generator=g) < 0.15, diagonal=1)
    src, dst = torch.nonzero(upper | upper.T, as_tuple=True)
    return Data(x=x, edge_index=torch.stack([src, dst]), y=torch.arange(n) % k)


class TwoLayerGCN(nn.Module):
    """A torch_geometric GCN as a user writes it: conv1, ReLU, dropout, conv2."""

    def __init__(self, in_channels: int, hidden: int, num_classes: int):
        super().__init__()
        self.conv1, self.conv2 = GCNConv(in_channels, hidden), GCNConv(hidden, num_classes)

    def forward(self, x, edge_index):
        h = F.dropout(F.relu(self.conv1(x, edge_index)), 0.5, self.training)
        return self.conv2(h, edge_index)


def test_a_user_gcn_gives_the_hidden_of_the_benchmark_gcn_with_the_same_weights():
    data = small_graph()
    torch.manual_seed(0)
    benchmark = GCN(data.num_features, 3, hidden=16).eval()
    user = TwoLayerGCN(data.num_features, 16, 3)
    with torch.no_grad():  # GCNConv: x W^T, the benchmark's: x W
        user.conv1.lin.weight.copy_(benchmark.weight1.T)
        user.conv1.bias.copy_(benchmark.bias1)
        user.conv2.lin.weight.copy_(benchmark.weight2.T)
        user.conv2.bias.copy_(benchmark.bias2)
    features = SparseOperand.from_csr(data.x.to_sparse_csr())
    expected_logits, expected_hidden = benchmark(features, GCN.prepare_graph(data.edge_index, data.num_nodes))
    user.train()
    logits, hidden = node_outputs(user, data, activation=torch.relu)
    assert user.training  # the mode is given back
    assert hidden.shape == (data.num_nodes, 16) and (hidden >= 0).all()
    assert torch.allclose(hidden, expected_hidden, atol=1e-5)
    assert torch.allclose(logits, expected_logits, atol=1e-5)
    # the pre-activation output is another tensor: the test tells the two apart
    _, raw = node_outputs(user, data, activation=None)
    assert not torch.allclose(raw, expected_hidden, atol=1e-3)


def test_the_benchmark_gat_itself_gives_its_own_hidden():
    data = small_graph(1)
    torch.manual_seed(1)
    gat = GAT(data.num_features, 3).train()
    features = SparseOperand.from_csr(data.x.to_sparse_csr())
    graph = GAT.prepare_graph(data.edge_index, data.num_nodes)
    gat.eval()
    with torch.no_grad():
        expected_logits, expected_hidden = gat(features, graph)
    gat.train()
    logits, hidden = node_outputs(gat, data, activation=F.elu, inputs=(features, graph))  # conv1: its first GATConv
    assert torch.equal(hidden, expected_hidden) and torch.equal(logits, expected_logits)


def test_a_torch_geometric_basic_gnn_carries_its_own_activation():
    data = small_graph(2)
    torch.manual_seed(2)
    model = PyGGCN(data.num_features, 8, num_layers=2, out_channels=3, dropout=0.5)
    logits, hidden = node_outputs(model, data)
    model.eval()
    with torch.no_grad():
        assert torch.allclose(hidden, model.act(model.convs[0](data.x, data.edge_index)))
        assert torch.allclose(logits, model(data.x, data.edge_index))


def test_what_node_outputs_cannot_guess_is_asked_for_in_one_line():
    data = small_graph()
    user = TwoLayerGCN(data.num_features, 4, 3)
    with pytest.raises(ConfigError) as exc:
        node_outputs(user, data)
    assert "activation=torch.relu" in str(exc.value) and "\n" not in str(exc.value)
    with pytest.raises(ConfigError, match="no torch_geometric message-passing layer"):
        node_outputs(nn.Linear(12, 3), data, activation=None)
    with pytest.raises(ConfigError, match="was not called"):
        node_outputs(user, data, activation=None, layer=nn.Linear(2, 2))
