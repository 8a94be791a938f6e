import dataclasses
from pathlib import Path

import pytest
import torch

from simcalib.backbones import BackboneCache, BackboneConfig, cache_key, train_backbone
from simcalib.backbones.models import GAT, GCN
from simcalib.backbones.training import graph_inputs
from simcalib.errors import ConfigError, TrainingDivergedError, UnknownNameError


def _idx(graph):
    """A fixed random third of the nodes for training and another for validation (every class in both)."""
    perm = torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(0))
    third = graph.num_nodes // 3
    return perm[:third], perm[third:2 * third]


@pytest.mark.parametrize("name,cls", [("GCN", GCN), ("GAT", GAT)])
def test_models_return_logits_and_first_layer_representation(sbm_graph, name, cls):
    x, adj = graph_inputs(sbm_graph, name, torch.device("cpu"))
    model = cls(sbm_graph.num_features, sbm_graph.num_classes).eval()
    logits, hidden = model(x, adj)
    assert logits.shape == (sbm_graph.num_nodes, sbm_graph.num_classes)
    assert hidden.shape == (sbm_graph.num_nodes, 64)


def test_gcn_matches_torch_geometric_gcnconv(sbm_graph):
    from torch_geometric.nn import GCNConv

    x, adj = graph_inputs(sbm_graph, "GCN", torch.device("cpu"))
    ours = GCN(sbm_graph.num_features, sbm_graph.num_classes).eval()
    conv1, conv2 = GCNConv(sbm_graph.num_features, 64), GCNConv(64, sbm_graph.num_classes)
    with torch.no_grad():
        conv1.lin.weight.copy_(ours.weight1.t())
        conv1.bias.copy_(ours.bias1)
        conv2.lin.weight.copy_(ours.weight2.t())
        conv2.bias.copy_(ours.bias2)
    dense_x = sbm_graph.x.to_dense()
    hidden_ref = torch.relu(conv1(dense_x, sbm_graph.edge_index))
    logits_ref = conv2(hidden_ref, sbm_graph.edge_index)
    logits, hidden = ours(x, adj)
    assert torch.allclose(hidden, hidden_ref, atol=1e-5)
    assert torch.allclose(logits, logits_ref, atol=1e-5)


@pytest.mark.parametrize("name", ["GCN", "GAT"])
def test_training_is_deterministic_and_learns(sbm_graph, name):
    train, val = _idx(sbm_graph)
    config = BackboneConfig(name, max_epochs=80, patience=30)
    a = train_backbone(sbm_graph, train, val, config, seed=5, device="cpu")
    b = train_backbone(sbm_graph, train, val, config, seed=5, device="cpu")
    c = train_backbone(sbm_graph, train, val, config, seed=6, device="cpu")
    assert torch.equal(a.logits, b.logits) and torch.equal(a.hidden, b.hidden)
    assert not torch.equal(a.logits, c.logits)
    assert a.val_accuracy > 0.6  # 3 well-separated blocks
    assert 0 <= a.best_epoch < a.epochs <= 80


def test_early_stopping_stops_before_max_epochs(sbm_graph):
    train, val = _idx(sbm_graph)
    out = train_backbone(sbm_graph, train, val, BackboneConfig("GCN", max_epochs=2000, patience=5), seed=0, device="cpu")
    assert out.epochs < 2000


def test_nan_features_raise_a_clear_error(sbm_graph):
    bad = dataclasses.replace(sbm_graph, x=torch.full((sbm_graph.num_nodes, sbm_graph.num_features), float("nan")).to_sparse_csr())
    train, val = _idx(bad)
    with pytest.raises(TrainingDivergedError, match="diverged"):
        train_backbone(bad, train, val, BackboneConfig("GCN", max_epochs=5), seed=0, device="cpu")


def test_unknown_backbone_lists_valid_names():
    with pytest.raises(UnknownNameError, match="^unknown backbone 'sage'; valid backbones are: GCN, GAT$"):
        BackboneConfig("sage")
    with pytest.raises(ConfigError, match="^unknown attention kernel 'dense'; valid attention kernels are: pyg, csr$"):
        BackboneConfig("GAT", attention="dense")


def test_backbone_names_and_kernels_are_read_in_any_case():
    config = BackboneConfig("gat", attention=" CSR ")
    assert (config.name, config.attention, config.model_options()) == ("GAT", "csr", {"attention": "csr"})
    assert BackboneConfig("gcn", attention="csr").model_options() == {}  # a GCN has no attention kernel


def test_cache_round_trip_and_key_sensitivity(sbm_graph, tmp_path):
    train, val = _idx(sbm_graph)
    config = BackboneConfig("GCN", max_epochs=10)
    out = train_backbone(sbm_graph, train, val, config, seed=1, device="cpu")
    cache = BackboneCache(tmp_path)
    key = cache_key("SBM", config, 0, 0, 0, 1, train, val)
    assert cache.load("SBM", "GCN", key) is None
    cache.save("SBM", "GCN", key, out)
    loaded = cache.load("SBM", "GCN", key)
    assert torch.equal(loaded.logits, out.logits) and loaded.best_epoch == out.best_epoch
    assert key != cache_key("SBM", config, 0, 0, 0, 2, train, val)  # seed
    assert key != cache_key("SBM", dataclasses.replace(config, lr=0.02), 0, 0, 0, 1, train, val)  # settings
    assert key != cache_key("SBM", config, 0, 0, 0, 1, train[1:], val)  # split indices
    assert key != cache_key("SBM", config, 0, 0, 0, 1, train, val, trainer="batched")  # other random streams
    assert key == cache_key("SBM", config, 0, 0, 0, 1, train, val, device="cpu")
    assert key != cache_key("SBM", config, 0, 0, 0, 1, train, val, device="cuda:0")  # CUDA's dropout stream
    assert cache_key("SBM", config, 0, 0, 0, 1, train, val, device="cuda:1") == cache_key(
        "SBM", config, 0, 0, 0, 1, train, val, device="cuda")  # the device type, not its index
    other = cache_key("SBM", config, 0, 0, 0, 2, train, val)
    cache.save("SBM", "GCN", other, out)  # a second entry in the same folder
    assert cache.load("SBM", "GCN", other) is not None
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads + 1)
        assert key != cache_key("SBM", config, 0, 0, 0, 1, train, val)  # thread count changes the numbers
    finally:
        torch.set_num_threads(threads)


def test_corrupt_cache_entry_is_ignored(sbm_graph, tmp_path):
    cache = BackboneCache(tmp_path)
    path = cache.path("SBM", "GCN", "abc")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"garbage")
    with pytest.warns(UserWarning, match="recomputed"):
        assert cache.load("SBM", "GCN", "abc") is None


def _gats_rule(history, patience):
    """(kept epoch, epochs run) of the GATS rule over per-epoch (val accuracy, val loss), written out: keep
    when accuracy >= best and loss <= best; patience resets when either improves, else counts down to 0."""
    best_acc, best_loss, left, kept = -1.0, float("inf"), patience, None
    for epoch, (acc, loss) in enumerate(history):
        if acc >= best_acc or loss <= best_loss:
            if acc >= best_acc and loss <= best_loss:
                kept = epoch
            best_acc, best_loss, left = max(acc, best_acc), min(loss, best_loss), patience
        else:
            left -= 1
            if left == 0:
                return kept, epoch + 1
    return kept, len(history)


def test_training_keeps_and_stops_where_the_gats_rule_says(sbm_graph):
    """The epoch kept and the epoch stopped at equal the rule applied to an independent replay of the same
    training (same seed, model, optimiser), on a trajectory that has accuracy ties with a worse loss."""
    from simcalib.seeding import seed_everything

    train, val = _idx(sbm_graph)
    config = BackboneConfig("GCN", lr=0.05, max_epochs=300, patience=6)
    out = train_backbone(sbm_graph, train, val, config, seed=3, device="cpu")

    seed_everything(3)
    model = GCN(sbm_graph.num_features, sbm_graph.num_classes, dropout=config.dropout)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    x, adj = graph_inputs(sbm_graph, "GCN", torch.device("cpu"))
    history, outputs = [], []
    for _ in range(config.max_epochs):
        model.train()
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x, adj)[0][train], sbm_graph.y[train]).backward()
        optimizer.step()
        model.eval()
        with torch.no_grad():
            logits = model(x, adj)[0]
        history.append(((logits[val].argmax(1) == sbm_graph.y[val]).float().mean().item(),
                        torch.nn.functional.cross_entropy(logits[val], sbm_graph.y[val]).item()))
        outputs.append(logits)
    kept, epochs = _gats_rule(history, config.patience)
    assert (out.best_epoch, out.epochs) == (kept, epochs)
    assert 0 < kept < epochs - 1 < config.max_epochs - 1  # it stopped on patience, after a kept epoch
    assert torch.equal(out.logits, outputs[kept]) and out.val_nll == history[kept][1]
    # the trajectory exercises the rule's edges: an epoch whose accuracy ties the best so far with a worse
    # loss (>= versus >), and one that improves only one of the two (or versus and)
    assert any(acc == max(a for a, _ in history[:e]) and loss > min(v for _, v in history[:e])
               for e, (acc, loss) in enumerate(history[:epochs]) if e > 0)


@pytest.mark.parametrize("change", [{"weight_decay": 0.0}, {"dropout": 0.0}])
def test_training_applies_the_configs_weight_decay_and_dropout(sbm_graph, change):
    train, val = _idx(sbm_graph)
    config = BackboneConfig("GCN", max_epochs=15, patience=15)
    base = train_backbone(sbm_graph, train, val, config, seed=2, device="cpu")
    changed = train_backbone(sbm_graph, train, val, dataclasses.replace(config, **change), seed=2, device="cpu")
    assert not torch.equal(base.logits, changed.logits)


def test_training_builds_the_attention_kernel_the_config_names(sbm_graph):
    """The two kernels agree up to rounding, so a GAT trained with each differs in its last bits only; the
    same kernel gives the same bits."""
    train, val = _idx(sbm_graph)
    runs = {attention: train_backbone(sbm_graph, train, val, BackboneConfig("GAT", max_epochs=5, patience=5,
                                                                             attention=attention), seed=2, device="cpu")
            for attention in ("pyg", "csr")}
    again = train_backbone(sbm_graph, train, val, BackboneConfig("GAT", max_epochs=5, patience=5, attention="csr"),
                           seed=2, device="cpu")
    assert torch.equal(again.logits, runs["csr"].logits)
    assert not torch.equal(runs["pyg"].logits, runs["csr"].logits)
    assert torch.allclose(runs["pyg"].logits, runs["csr"].logits, atol=1e-3)


@pytest.mark.parametrize("cuda", [True, False])
def test_auto_device_is_cuda_when_present_and_a_named_device_is_kept(monkeypatch, cuda):
    from simcalib.backbones.training import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    expected = torch.device("cuda" if cuda else "cpu")
    assert resolve_device() == resolve_device("auto") == resolve_device(None) == expected
    assert resolve_device("cpu") == torch.device("cpu") and resolve_device("cuda:1") == torch.device("cuda:1")


def test_training_reports_its_duration_and_runs_on_the_default_device(sbm_graph):
    import time

    train, val = _idx(sbm_graph)
    start = time.perf_counter()
    out = train_backbone(sbm_graph, train, val, BackboneConfig("GCN", max_epochs=3), seed=0)  # device "auto"
    assert 0 < out.train_seconds <= time.perf_counter() - start
    assert out.epochs == 3 and out.logits.device.type == "cpu"


def test_zero_epochs_are_refused_with_the_setting_named(sbm_graph):
    train, val = _idx(sbm_graph)
    with pytest.raises(TrainingDivergedError, match=r"^GCN on SBM: no checkpoint was kept \(max_epochs=0\)$"):
        train_backbone(sbm_graph, train, val, BackboneConfig("GCN", max_epochs=0), seed=0, device="cpu")


def test_the_cache_folder_defaults_to_the_environment_variable_then_to_a_local_folder(monkeypatch, tmp_path):
    from simcalib.backbones.cache import CACHE_ENV

    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    assert BackboneCache().root == tmp_path
    monkeypatch.delenv(CACHE_ENV)
    assert BackboneCache().root == Path(".cache/simcalib")
