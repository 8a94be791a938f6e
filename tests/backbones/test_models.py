import math

import pytest
import torch

from simcalib.backbones.models import GAT, glorot_, normalized_adjacency
from simcalib.backbones.training import graph_inputs


def test_glorot_draws_uniformly_within_the_fan_in_plus_fan_out_bound():
    weight = glorot_(torch.empty(400, 100))
    bound = math.sqrt(6.0 / (400 + 100))
    assert weight.abs().max() <= bound
    assert weight.abs().max() > 0.99 * bound  # 40,000 uniform draws reach the edge
    assert weight.std().item() == pytest.approx(bound / math.sqrt(3.0), rel=0.02)


def test_normalized_adjacency_is_the_symmetric_normalisation_with_self_loops_on_every_node():
    """D^-1/2 (A + I) D^-1/2 written out, on a graph whose last node is isolated (its row is its self loop)."""
    edge_index = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    num_nodes = 4
    dense = torch.zeros(num_nodes, num_nodes)
    dense[edge_index[1], edge_index[0]] = 1.0
    dense += torch.eye(num_nodes)
    d = dense.sum(1).rsqrt()
    expected = d[:, None] * dense * d[None, :]
    adj = normalized_adjacency(edge_index, num_nodes)
    assert torch.allclose(adj.matrix.to_dense(), expected)
    assert adj.matrix.to_dense()[3].tolist() == [0.0, 0.0, 0.0, 1.0]


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_the_two_attention_kernels_compute_the_same_gat_from_the_same_seed(sbm_graph, dropout):
    """The model of each kernel from one seed: the same parameters, and in evaluation the same outputs (the
    graph's self loops added once, by prepare_graph); each attention layer has the model's dropout."""
    models = {}
    for attention in ("pyg", "csr"):
        torch.manual_seed(0)
        models[attention] = GAT(sbm_graph.num_features, sbm_graph.num_classes, dropout=dropout,
                                attention=attention).eval()
        assert models[attention].conv1.dropout == models[attention].conv2.dropout == dropout
    outputs = {attention: model(*graph_inputs(sbm_graph, "GAT", torch.device("cpu"), attention=attention))
               for attention, model in models.items()}
    assert torch.allclose(outputs["pyg"][0], outputs["csr"][0], atol=1e-5)
    assert torch.allclose(outputs["pyg"][1], outputs["csr"][1], atol=1e-5)


def test_each_kernel_takes_either_form_of_the_graph(sbm_graph):
    for attention in ("pyg", "csr"):
        torch.manual_seed(0)
        model = GAT(sbm_graph.num_features, sbm_graph.num_classes, attention=attention).eval()
        outputs = [model(*graph_inputs(sbm_graph, "GAT", torch.device("cpu"), attention=form))[0]
                   for form in ("pyg", "csr")]
        assert torch.allclose(outputs[0], outputs[1], atol=1e-5)


def test_gat_graph_has_one_self_loop_on_every_node_including_a_trailing_isolated_one():
    edge_index = torch.tensor([[0, 1, 1, 1], [1, 0, 1, 1]])  # a self loop given twice; node 2 isolated
    prepared = GAT.prepare_graph(edge_index, 3)
    loops = prepared[:, prepared[0] == prepared[1]]
    assert sorted(loops[0].tolist()) == [0, 1, 2]
    assert prepared.size(1) == 2 + 3


def test_an_unknown_attention_kernel_is_refused_by_the_model_with_the_valid_ones():
    with pytest.raises(ValueError, match="^unknown attention kernel 'dense'; valid: pyg, csr$"):
        GAT(4, 2, attention="dense")


@pytest.mark.parametrize("attention", ["pyg", "csr"])
def test_gat_drops_each_layers_input_in_training_and_never_in_evaluation(sbm_graph, attention):
    """Forward hooks read what each attention layer receives: in training the input projection differs from
    X W_1 (dropout on X) and the second layer's input from ELU of the first layer's output (dropout on the
    hidden layer); in evaluation both are exact."""
    torch.manual_seed(0)
    model = GAT(sbm_graph.num_features, sbm_graph.num_classes, dropout=0.5, attention=attention)
    seen = {}
    model.conv1.register_forward_hook(lambda m, args, out: seen.update(conv1_in=args[0], conv1_out=out))
    model.conv2.register_forward_pre_hook(lambda m, args: seen.update(conv2_in=args[0]))
    x, graph = graph_inputs(sbm_graph, "GAT", torch.device("cpu"), attention=attention)
    undropped = sbm_graph.x.to_dense() @ model.weight1
    for training in (True, False):
        model.train(training)
        with torch.no_grad():
            model(x, graph)
        same_projection = torch.allclose(seen["conv1_in"], undropped, atol=1e-6)
        same_hidden = torch.equal(seen["conv2_in"], torch.nn.functional.elu(seen["conv1_out"]))
        assert same_projection is (not training) and same_hidden is (not training)
