import pytest
import torch

from simcalib.backbones import BackboneConfig, cache_key
from simcalib.backbones.batched import BatchedGAT, BatchedGCN, keep_masks, train_backbones_batched
from simcalib.backbones.training import graph_inputs

SEEDS = [11, 12, 13, 14]


def _folds(graph, count=len(SEEDS)):
    """``count`` different (train, validation) folds: rotating thirds of a fixed permutation."""
    perm = torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(0))
    third = graph.num_nodes // 3
    parts = [perm[:third], perm[third:2 * third], perm[2 * third:]]
    return [(parts[m % 3], parts[(m + 1) % 3]) for m in range(count)]


@pytest.mark.parametrize("name", ["GCN", "GAT"])
def test_a_model_in_a_batch_equals_the_same_seed_trained_alone(sbm_graph, name):
    config = BackboneConfig(name, max_epochs=15, patience=100)
    folds = _folds(sbm_graph)
    batch = train_backbones_batched(sbm_graph, folds, SEEDS, config, "cpu")
    for m in (0, 2):
        alone = train_backbones_batched(sbm_graph, folds[m:m + 1], SEEDS[m:m + 1], config, "cpu")[0]
        assert torch.allclose(batch[m].logits, alone.logits, atol=1e-5)
        assert torch.allclose(batch[m].hidden, alone.hidden, atol=1e-5)
        assert batch[m].best_epoch == alone.best_epoch and batch[m].epochs == alone.epochs
    assert not torch.allclose(batch[0].logits, batch[1].logits, atol=1e-3)  # different seeds, different models


@pytest.mark.parametrize("name", ["GCN", "GAT"])
def test_training_is_deterministic_and_learns(sbm_graph, name):
    config = BackboneConfig(name, max_epochs=60, patience=30)
    folds = _folds(sbm_graph, 2)
    a = train_backbones_batched(sbm_graph, folds, SEEDS[:2], config, "cpu")
    b = train_backbones_batched(sbm_graph, folds, SEEDS[:2], config, "cpu")
    for x, y in zip(a, b):
        assert torch.equal(x.logits, y.logits) and torch.equal(x.hidden, y.hidden)
        assert x.val_accuracy > 0.6  # 3 well-separated blocks
        assert x.logits.shape == (sbm_graph.num_nodes, sbm_graph.num_classes) and x.hidden.shape[1] == 64
        assert x.info["trainer"] == "batched"


def test_early_stopping_stops_each_model_at_its_own_epoch(sbm_graph):
    # Short patience: the models stop at different epochs; each must stop where it stops when trained alone,
    # which also checks that dropping stopped models (parameters and Adam state sliced) leaves the others intact.
    config = BackboneConfig("GCN", max_epochs=150, patience=5)
    folds = _folds(sbm_graph)
    stopped_at = []
    batch = train_backbones_batched(sbm_graph, folds, SEEDS, config, "cpu",
                                    on_stopped=lambda m, out: stopped_at.append((m, out.epochs)))
    epochs = [out.epochs for out in batch]
    early = [e for e in epochs if e < 150]
    assert len(set(early)) == len(early) >= 2, epochs  # two stop early, at different epochs; two run to the end
    assert sorted(stopped_at, key=lambda t: t[1]) == stopped_at  # reported in stopping order
    for m in range(len(SEEDS)):
        alone = train_backbones_batched(sbm_graph, folds[m:m + 1], SEEDS[m:m + 1], config, "cpu")[0]
        assert alone.epochs == batch[m].epochs and alone.best_epoch == batch[m].best_epoch
        assert torch.allclose(alone.logits, batch[m].logits, atol=1e-5)


def test_groups_of_models_per_batch_give_the_same_models(sbm_graph):
    config = BackboneConfig("GAT", max_epochs=10, patience=100)
    folds = _folds(sbm_graph)
    whole = train_backbones_batched(sbm_graph, folds, SEEDS, config, "cpu")
    seen = []
    grouped = train_backbones_batched(sbm_graph, folds, SEEDS, config, "cpu", models_per_batch=3,
                                      on_stopped=lambda m, out: seen.append(m))
    assert sorted(seen) == [0, 1, 2, 3]
    for a, b in zip(whole, grouped):
        assert torch.allclose(a.logits, b.logits, atol=1e-5)


def test_dropout_masks_come_from_each_models_generator():
    gens = [torch.Generator().manual_seed(s) for s in (1, 2, 1)]
    masks = keep_masks((50, 8), 0.5, gens, axis=1)  # [50, 3, 8]
    assert masks.shape == (50, 3, 8)
    assert not torch.equal(masks[:, 0], masks[:, 1])  # different seeds, different masks
    assert torch.equal(masks[:, 0], masks[:, 2])  # same seed, same mask, whatever the neighbours
    assert set(masks.unique().tolist()) == {0.0, 2.0}


@pytest.mark.parametrize("name,cls", [("GCN", BatchedGCN), ("GAT", BatchedGAT)])
def test_models_in_training_mode_draw_different_dropout(sbm_graph, name, cls):
    # Two models with the same weights (copied) but different generators must see different dropout.
    gens = [torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)]
    model = cls(sbm_graph.num_features, sbm_graph.num_classes, gens)
    with torch.no_grad():
        for pname, axis in model.model_axes.items():
            param = getattr(model, pname)
            first = param.select(axis, 0).clone()
            param.select(axis, 1).copy_(first)
    x, graph = graph_inputs(sbm_graph, name, torch.device("cpu"))
    logits, _ = model.eval()(x, graph)
    assert torch.allclose(logits[:, 0], logits[:, 1])  # same weights, no dropout: same outputs
    logits, _ = model.train()(x, graph)
    assert not torch.allclose(logits[:, 0], logits[:, 1])


def test_batched_backbones_have_their_own_cache_key():
    config = BackboneConfig("GCN")
    idx = torch.arange(5)
    per_run = cache_key("Cora", config, 0, 0, 0, 7, idx, idx)
    assert cache_key("Cora", config, 0, 0, 0, 7, idx, idx, trainer="per-run") == per_run  # old keys unchanged
    assert cache_key("Cora", config, 0, 0, 0, 7, idx, idx, trainer="batched") != per_run


def per_run_copy(batched, m: int, name: str, num_features: int, num_classes: int):
    """The per-run model (simcalib.backbones.models) holding model ``m``'s weights of a batched model."""
    from simcalib.backbones.models import GAT, GCN

    with torch.no_grad():
        if name == "GCN":
            model = GCN(num_features, num_classes)
            model.weight1.copy_(batched.weight1[:, m])
            model.bias1.copy_(batched.bias1[m])
            model.weight2.copy_(batched.weight2[m])
            model.bias2.copy_(batched.bias2[m])
            return model
        model = GAT(num_features, num_classes)
        model.weight1.copy_(batched.weight1[m])
        model.conv1.att_src.copy_(batched.att_src1[m].view_as(model.conv1.att_src))
        model.conv1.att_dst.copy_(batched.att_dst1[m].view_as(model.conv1.att_dst))
        model.conv1.bias.copy_(batched.bias1[m])
        model.conv2.lin.weight.copy_(batched.weight2[m].T)
        model.conv2.att_src.copy_(batched.att_src2[m].view_as(model.conv2.att_src))
        model.conv2.att_dst.copy_(batched.att_dst2[m].view_as(model.conv2.att_dst))
        model.conv2.bias.copy_(batched.bias2[m])
        return model


def randomised_biases(model, seed: int = 0) -> None:
    """Non-zero biases (they start at zero), so that a bias added in the wrong place shows."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for pname in ("bias1", "bias2"):
            bias = getattr(model, pname)
            bias.copy_(0.1 * torch.randn(bias.shape, generator=g))


@pytest.mark.parametrize("name,cls", [("GCN", BatchedGCN), ("GAT", BatchedGAT)])
def test_each_model_of_a_batch_computes_what_the_per_run_model_with_its_weights_computes(sbm_graph, name, cls):
    gens = [torch.Generator().manual_seed(s) for s in SEEDS[:3]]
    batched = cls(sbm_graph.num_features, sbm_graph.num_classes, gens).eval()
    randomised_biases(batched)
    x, graph = graph_inputs(sbm_graph, name, torch.device("cpu"))
    with torch.no_grad():
        logits, hidden = batched(x, graph)
        for m in range(3):
            alone = per_run_copy(batched, m, name, sbm_graph.num_features, sbm_graph.num_classes).eval()
            want_logits, want_hidden = alone(x, graph)
            assert torch.allclose(hidden[:, m], want_hidden, atol=1e-5), m
            assert torch.allclose(logits[:, m], want_logits, atol=1e-5), m
    assert not torch.allclose(logits[:, 0], logits[:, 1], atol=1e-3)  # the models differ: the check compares something


def test_a_batched_gcn_in_training_mode_draws_the_per_run_dropout_masks(sbm_graph):
    """Model m's dropout comes from its own generator in the order the per-run GCN draws from the global one, so
    the same seed gives the same training-mode output."""
    x, adj = graph_inputs(sbm_graph, "GCN", torch.device("cpu"))
    batched = BatchedGCN(sbm_graph.num_features, sbm_graph.num_classes,
                         [torch.Generator().manual_seed(s) for s in SEEDS[:3]])
    randomised_biases(batched)
    copies = [per_run_copy(batched, m, "GCN", sbm_graph.num_features, sbm_graph.num_classes) for m in range(3)]
    batched.generators = [torch.Generator().manual_seed(s) for s in SEEDS[:3]]  # masks from the seeds' start
    with torch.no_grad():
        logits, _ = batched.train()(x, adj)
        for m in range(3):
            torch.manual_seed(SEEDS[m])
            want, _ = copies[m].train()(x, adj)
            assert torch.allclose(logits[:, m], want, atol=1e-5), m
            assert not torch.allclose(logits[:, m], copies[m].eval()(x, adj)[0], atol=1e-3)  # dropout was on
