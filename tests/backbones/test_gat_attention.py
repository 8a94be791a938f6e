"""The "csr" attention kernel (simcalib/backbones/gat_attention.py) against torch_geometric's GATConv.

``SIMCALIB_TEST_DEVICE=cuda`` runs the equality tests without dropout on that device (``make gpu-check``); the
tests of dropout masks and training compare the two kernels' masks drawn by the CPU generator and stay on CPU.
"""

import dataclasses
import hashlib
import json
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import torch_geometric
from torch_geometric.nn import GATConv

from simcalib.backbones import BackboneConfig, cache_key, train_backbone
from simcalib.backbones.batched import train_backbones_batched
from simcalib.backbones.cache import BACKBONE_CODE_VERSION
from simcalib.backbones.gat_attention import AttentionGraph, GraphAttention
from simcalib.backbones.models import GAT
from simcalib.backbones.training import graph_inputs
from simcalib.errors import ConfigError

DEVICE = torch.device(os.environ.get("SIMCALIB_TEST_DEVICE", "cpu"))
if DEVICE.type == "cuda" and not torch.cuda.is_available():
    raise RuntimeError(f"SIMCALIB_TEST_DEVICE={DEVICE} but torch {torch.__version__} sees no CUDA device")
cpu_only = pytest.mark.skipif(DEVICE.type != "cpu", reason="dropout masks are the CPU generator's: CPU only")

N = 40
# (heads, out_channels, concat): GAT's first and output layers, and heads averaged (the layer's other output)
LAYERS = [(8, 8, True), (1, 5, False), (3, 4, False)]


def awkward_graph(prepared: bool) -> torch.Tensor:
    """Random edges with multi-edges, some self-loops, a node without incoming edges (38) and an isolated node
    (39); ``prepared``: after GAT.prepare_graph (every self-loop removed, then one added on every node)."""
    g = torch.Generator().manual_seed(0)
    edges = torch.randint(0, N - 2, (2, 150), generator=g)
    loops = torch.arange(0, 10).repeat(2, 1)
    from_38 = torch.tensor([[38, 38], [3, 5]])
    edge_index = torch.cat([edges, edges[:, :25], loops, from_38], dim=1)  # 25 multi-edges
    return GAT.prepare_graph(edge_index, N) if prepared else edge_index


def layer_pair(heads, out_channels, concat, dtype, dropout=0.0, seed=1):
    torch.manual_seed(seed)
    reference = GATConv(16, out_channels, heads=heads, concat=concat, dropout=dropout, add_self_loops=False)
    torch.manual_seed(seed)
    ours = GraphAttention(16, out_channels, heads=heads, concat=concat, dropout=dropout)
    return reference.to(dtype), ours.to(dtype)


def forward_backward(layer, x, graph, upstream):
    x = x.detach().clone().requires_grad_(True)
    out = layer(x, graph)
    (out * upstream).sum().backward()
    return out.detach(), x.grad, {name: p.grad for name, p in layer.named_parameters()}


# Both compute the same sums in another order. float64: observed <= 3e-15 relative to the tensor's scale,
# 1e-10 leaves margin. float32 (eps 1.2e-7): a parameter's gradient sums ~200 edge terms in another order,
# observed <= 5e-7 relative to the scale; 1e-5 leaves a 20x margin.
TOLERANCE = {torch.float64: (0.0, 1e-10), torch.float32: (1e-5, 1e-5)}


def assert_close(actual, expected, dtype):
    rtol, atol = TOLERANCE[dtype]
    scale = max(1.0, expected.abs().max().item())
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol * scale)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("prepared", [False, True], ids=["raw-graph", "self-loops-added"])
@pytest.mark.parametrize("heads,out_channels,concat", LAYERS)
def test_layer_matches_gatconv_outputs_and_every_gradient(heads, out_channels, concat, prepared, dtype):
    edge_index = awkward_graph(prepared).to(DEVICE)
    reference, ours = (layer.to(DEVICE) for layer in layer_pair(heads, out_channels, concat, dtype))
    x = torch.randn(N, 16, dtype=dtype, generator=torch.Generator().manual_seed(2)).to(DEVICE)
    upstream = torch.randn(N, heads * out_channels if concat else out_channels, dtype=dtype,
                           generator=torch.Generator().manual_seed(3)).to(DEVICE)
    with torch.no_grad():
        reference.bias.normal_()  # a non-zero bias, so that dropping it would show
        ours.bias.copy_(reference.bias)
    out_ref, grad_x_ref, grads_ref = forward_backward(reference, x, edge_index, upstream)
    out, grad_x, grads = forward_backward(ours, x, AttentionGraph.from_edge_index(edge_index, N), upstream)
    assert out.device.type == DEVICE.type
    assert_close(out, out_ref, dtype)
    assert_close(grad_x, grad_x_ref, dtype)
    assert grads.keys() == grads_ref.keys() == {"lin.weight", "att_src", "att_dst", "bias"}
    for name in grads_ref:
        assert_close(grads[name], grads_ref[name], dtype)
    if not prepared:  # nodes 38 and 39 have no incoming edge: their output is the bias alone, as GATConv's
        for node in (38, 39):
            torch.testing.assert_close(out[node], ours.bias.detach())
    # A bare edge_index gives the same result (its structure built on the call).
    torch.testing.assert_close(ours(x, edge_index), out, rtol=0, atol=0)


def test_parameters_have_gatconvs_names_shapes_and_initial_values():
    for heads, out_channels, concat in LAYERS:
        reference, ours = layer_pair(heads, out_channels, concat, torch.float32, seed=7)
        ref_state, state = reference.state_dict(), ours.state_dict()
        assert ref_state.keys() == state.keys()
        for name, value in ref_state.items():
            assert torch.equal(state[name], value), name
        ours.load_state_dict(ref_state, strict=True)
    without_bias = GraphAttention(16, 8, heads=8, bias=False)
    assert without_bias.bias is None and "bias" not in without_bias.state_dict()
    torch.manual_seed(7)
    GATConv(16, 8, heads=8, add_self_loops=False)
    after_reference = torch.rand(3)
    torch.manual_seed(7)
    GraphAttention(16, 8, heads=8)
    assert torch.equal(torch.rand(3), after_reference)  # the same number of draws: later draws stay aligned


@cpu_only
@pytest.mark.parametrize("heads,out_channels,concat", LAYERS)
def test_attention_dropout_draws_gatconvs_mask(heads, out_channels, concat):
    edge_index = awkward_graph(prepared=True)
    reference, ours = layer_pair(heads, out_channels, concat, torch.float64, dropout=0.5)
    x = torch.randn(N, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    upstream = torch.ones(N, heads * out_channels if concat else out_channels, dtype=torch.float64)
    torch.manual_seed(11)
    out_ref, grad_x_ref, grads_ref = forward_backward(reference.train(), x, edge_index, upstream)
    torch.manual_seed(11)
    out, grad_x, grads = forward_backward(ours.train(), x, AttentionGraph.from_edge_index(edge_index, N), upstream)
    assert_close(out, out_ref, torch.float64)
    assert_close(grad_x, grad_x_ref, torch.float64)
    for name in grads_ref:
        assert_close(grads[name], grads_ref[name], torch.float64)
    torch.manual_seed(12)
    assert not torch.allclose(ours(x, edge_index), out)  # another draw, another mask


def observed_attention(layer: GraphAttention, graph: AttentionGraph) -> torch.Tensor:
    """[N, N] with entry (i, j) = the (dropped-out) coefficient of edge j -> i: one-hot inputs, identity projection."""
    return layer(torch.eye(graph.num_nodes, dtype=torch.float64), graph)


@cpu_only
def test_attention_dropout_keeps_the_rate_and_scales_by_one_over_keep():
    n, p = 200, 0.3
    g = torch.Generator().manual_seed(4)
    src = torch.randint(0, n, (n * 20,), generator=g)
    edge_index = torch.unique(torch.stack([src, torch.arange(n).repeat(20)]), dim=1)  # no multi-edges
    graph = AttentionGraph.from_edge_index(GAT.prepare_graph(edge_index, n), n)
    layer = GraphAttention(n, n, heads=1, concat=False, dropout=p, bias=False).double()
    with torch.no_grad():
        layer.lin.weight.copy_(torch.eye(n))
        layer.att_src.normal_()
        layer.att_dst.normal_()
    exact = observed_attention(layer.eval(), graph)
    edges = exact > 0
    torch.testing.assert_close(exact.sum(1), torch.ones(n, dtype=torch.float64))  # softmax rows sum to 1
    torch.manual_seed(5)
    draws = torch.stack([observed_attention(layer.train(), graph) for _ in range(50)])  # [50, N, N]
    assert torch.all(draws[:, ~edges] == 0)
    kept = draws[:, edges] != 0
    dropped_fraction = 1.0 - kept.double().mean().item()  # 50 x 4k edges: binomial std ~0.001
    assert abs(dropped_fraction - p) < 0.01, dropped_fraction
    scaled = exact[edges].expand_as(kept)[kept] / (1 - p)
    torch.testing.assert_close(draws[:, edges][kept], scaled)  # a kept coefficient is alpha / (1 - p)
    mean_row_sum = draws.sum(2).mean().item()  # expectation preserved: E[sum_j dropout(alpha_ij)] = 1
    assert abs(mean_row_sum - 1.0) < 0.01, mean_row_sum
    layer.dropout = 0.0  # training mode without dropout: the exact coefficients
    torch.testing.assert_close(observed_attention(layer.train(), graph), exact, rtol=0, atol=0)


def model_pair(graph_data, seed=3):
    torch.manual_seed(seed)
    pyg = GAT(graph_data.num_features, graph_data.num_classes)
    torch.manual_seed(seed)
    csr = GAT(graph_data.num_features, graph_data.num_classes, attention="csr")
    return pyg, csr


def model_outputs(model, x, graph, y, seed):
    model.zero_grad()
    torch.manual_seed(seed)  # the same input, attention and hidden dropout masks for both kernels
    logits, hidden = model(x, graph)
    F.cross_entropy(logits, y).backward()
    return logits.detach(), hidden.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}


@pytest.mark.parametrize("mode", ["eval", pytest.param("train", marks=cpu_only)])
def test_gat_model_with_csr_kernel_matches_the_pyg_kernel_from_the_same_seed(sbm_graph, mode):
    pyg, csr = model_pair(sbm_graph)
    for name, value in pyg.state_dict().items():  # the same initial weights
        assert torch.equal(csr.state_dict()[name], value), name
    pyg, csr = pyg.to(DEVICE), csr.to(DEVICE)
    x, edge_index = graph_inputs(sbm_graph, "GAT", DEVICE)
    _, attention_graph = graph_inputs(sbm_graph, "GAT", DEVICE, attention="csr")
    assert isinstance(attention_graph, AttentionGraph) and torch.equal(attention_graph.edge_index, edge_index)
    y = sbm_graph.y.to(DEVICE)
    ref = model_outputs(getattr(pyg, mode)(), x, edge_index, y, seed=9)
    ours = model_outputs(getattr(csr, mode)(), x, attention_graph, y, seed=9)
    # float32, the same sums in another order: observed <= 5e-8 on the outputs and <= 5e-7 relative to each
    # gradient's largest entry (the attention vectors' gradients are ~1e-4, so the bound is relative)
    for a, b in zip(ours[:2], ref[:2]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert ours[2].keys() == ref[2].keys()
    for name in ref[2]:
        torch.testing.assert_close(ours[2][name], ref[2][name], rtol=1e-5, atol=1e-5 * ref[2][name].abs().max().item())


@cpu_only
def test_training_with_the_csr_kernel_follows_the_pyg_kernel(sbm_graph):
    perm = torch.randperm(sbm_graph.num_nodes, generator=torch.Generator().manual_seed(0))
    train, val = perm[:30], perm[30:60]
    config = BackboneConfig("GAT", max_epochs=15, patience=100)
    pyg = train_backbone(sbm_graph, train, val, config, seed=5, device="cpu")
    csr = train_backbone(sbm_graph, train, val, dataclasses.replace(config, attention="csr"), seed=5, device="cpu")
    assert csr.best_epoch == pyg.best_epoch
    torch.testing.assert_close(csr.logits, pyg.logits, rtol=1e-4, atol=1e-4)


def test_the_kernel_is_part_of_the_backbone_identity_only_when_not_the_default():
    idx = torch.arange(12)
    key = lambda config: cache_key("Cora", config, 0, 1, 2, 7, idx, idx)  # noqa: E731
    assert key(BackboneConfig("GAT", attention="csr")) != key(BackboneConfig("GAT"))
    assert key(BackboneConfig("GAT", attention="CSR")) == key(BackboneConfig("GAT", attention="csr"))
    assert key(BackboneConfig("GCN", attention="csr")) == key(BackboneConfig("GCN"))  # GCN has no attention
    # The default's key is the one computed from the settings that existed before the option.
    config = BackboneConfig("GAT")
    before = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name != "attention"}
    digest = lambda values: hashlib.sha256(np.asarray(values, dtype=np.int64).tobytes()).hexdigest()  # noqa: E731
    identity = {"dataset": "Cora", "config": before, "split": 0, "init": 1, "fold": 2, "seed": 7,
                "train": digest(idx), "val": digest(idx), "code": BACKBONE_CODE_VERSION,
                "threads": torch.get_num_threads(), "torch": torch.__version__, "pyg": torch_geometric.__version__}
    assert key(config) == hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:24]


def test_invalid_kernel_and_batched_trainer_are_refused(sbm_graph):
    with pytest.raises(ConfigError, match="attention kernel"):
        BackboneConfig("GAT", attention="dense")
    folds = [(torch.arange(10), torch.arange(10, 20))]
    with pytest.raises(ConfigError, match="batched trainer"):
        train_backbones_batched(sbm_graph, folds, [1], BackboneConfig("GAT", attention="csr", max_epochs=1), "cpu")


def test_benchmark_command_passes_the_kernel_to_the_backbone_settings():
    from simcalib.cli import build_parser
    from simcalib.commands.common import protocol_settings
    from simcalib.experiment.protocol import Run, backbone_config

    parse = lambda *extra: build_parser().parse_args(["benchmark", "--dataset", "cora", "--backbone", "gat",  # noqa: E731
                                                      "--seed", "10", *extra])
    run = Run("Cora", "GAT", 0, 0, 0)
    assert backbone_config(run, protocol_settings(parse("--attention", "csr"))).attention == "csr"
    for default in (parse(), parse("--attention", "pyg")):  # the default leaves the settings as they were
        settings = protocol_settings(default)
        assert settings.backbone_overrides == () and backbone_config(run, settings).attention == "pyg"


def test_attention_auto_is_the_csr_kernel_on_the_cpu_with_its_key_and_gatconv_on_cuda():
    """``backbone: {attention: auto}``: on the CPU the csr kernel, its rows' backbone_options and cache key those of
    an explicit ``csr``; on CUDA torch_geometric's GATConv, the default (out of the key, ``backbone_options``
    default); a GCN is unchanged."""
    from simcalib.backbones.cache import cache_key
    from simcalib.experiment.protocol import ProtocolSettings, Run, backbone_config, backbone_options

    gat, gcn = Run("Cora", "GAT", 0, 0, 0), Run("Cora", "GCN", 0, 0, 0)
    auto = ProtocolSettings(device="cpu", backbone_overrides=(("attention", "auto"),))
    csr = ProtocolSettings(device="cpu", backbone_overrides=(("attention", "csr"),))
    nodes = torch.arange(4)
    assert backbone_config(gat, auto) == backbone_config(gat, csr) and backbone_options(gat, auto) == "attention=csr"
    assert (cache_key("Cora", backbone_config(gat, auto), 0, 0, 0, 1, nodes, nodes)
            == cache_key("Cora", backbone_config(gat, csr), 0, 0, 0, 1, nodes, nodes))
    on_cuda = ProtocolSettings(device="cuda", backbone_overrides=(("attention", "auto"),))
    assert backbone_config(gat, on_cuda).attention == "pyg" and backbone_options(gat, on_cuda) == "default"
    assert backbone_config(gcn, auto) == backbone_config(gcn, ProtocolSettings())
