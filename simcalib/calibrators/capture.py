r"""What the graph calibrators read of a torch_geometric model: its logits and its first-layer representation.

For a model whose first layer is a message-passing layer (``GCNConv``, ``GATConv``...),

.. math::
    X^{(1)} = \sigma\big(\mathrm{layer}_1(X, A)\big), \qquad z = \mathrm{model}(X, A),

the first layer's output **after** its non-linearity :math:`\sigma` (ReLU for a GCN, ELU for a GAT) and
**before** dropout, computed in evaluation mode (no dropout anywhere). This is the ``hidden`` the benchmark's own
backbones return (:mod:`simcalib.backbones.models`) and the one SimCalib's feature similarity and GETS_ap read;
GATS, CaGCN, TS and the other graph-free calibrators do not read it.

Shapes:
    logits [N, K], hidden [N, h] (h: the first layer's output width, all heads concatenated).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from simcalib.errors import ConfigError

FROM_MODEL = "from the model"  # activation's default: a torch_geometric BasicGNN's own ``act``


def first_message_passing(model: nn.Module) -> nn.Module:
    """The model's first torch_geometric ``MessagePassing`` module, in registration order."""
    from torch_geometric.nn.conv import MessagePassing

    for module in model.modules():
        if isinstance(module, MessagePassing):
            return module
    raise ConfigError(f"{type(model).__name__} has no torch_geometric message-passing layer; name the module "
                      "whose output is the first layer's: node_outputs(model, data, layer=model.conv1, ...)")


def _activation_of(model: nn.Module, activation) -> Callable[[Tensor], Tensor] | None:
    if activation is not FROM_MODEL:
        return activation
    from torch_geometric.nn.models.basic_gnn import BasicGNN

    if isinstance(model, BasicGNN):
        norms = getattr(model, "norms", None)
        if norms is not None and any(not isinstance(norm, nn.Identity) for norm in norms):
            raise ConfigError(f"{type(model).__name__} normalises its first layer's output: name the module whose "
                              "output to take and its non-linearity, node_outputs(model, data, layer=model.norms[0], "
                              "activation=model.act)")
        return model.act if model.act is not None else None
    raise ConfigError(f"node_outputs: say which non-linearity follows {type(model).__name__}'s first layer: "
                      "activation=torch.relu (a GCN), torch.nn.functional.elu (a GAT), or None when that layer's "
                      "output is already activated")


@torch.no_grad()
def node_outputs(model: nn.Module, data, activation=FROM_MODEL, layer: nn.Module | None = None,
                 inputs: tuple | None = None) -> tuple[Tensor, Tensor]:
    """``(logits [N, K], hidden [N, h])`` of a torch_geometric ``model`` on ``data``, in evaluation mode.

    ``hidden`` is ``activation(layer output)``: the first layer's representation after its non-linearity,
    before dropout (the module docstring). ``layer``: the module whose output is the first layer's, default
    the model's first ``MessagePassing`` module; ``activation``: the non-linearity the model applies to it
    (``torch.relu``, ``torch.nn.functional.elu``...; None when ``layer``'s output is already activated; a
    torch_geometric ``BasicGNN`` such as ``torch_geometric.nn.models.GCN`` needs none given: its ``act``);
    ``inputs``: the arguments of ``model(...)``, default ``(data.x, data.edge_index)``. The model's output is
    its logits, or a tuple whose first entry is. The model's training mode is restored afterwards.
    """
    activation = _activation_of(model, activation)
    layer = first_message_passing(model) if layer is None else layer
    if inputs is None:
        if getattr(data, "x", None) is None or getattr(data, "edge_index", None) is None:
            raise ConfigError("the Data has no x or no edge_index; pass inputs=(...), the arguments of model(...)")
        inputs = (data.x, data.edge_index)
    captured: list[Tensor] = []

    def keep_first(module, args, output):
        if not captured:
            captured.append((output[0] if isinstance(output, tuple) else output).clone())  # before any in-place op

    handle = layer.register_forward_hook(keep_first)
    was_training = model.training
    try:
        model.eval()
        output = model(*inputs)
    finally:
        handle.remove()
        model.train(was_training)
    logits = output[0] if isinstance(output, tuple) else output
    if not captured:
        raise ConfigError(f"the layer {type(layer).__name__} was not called by the model's forward pass; name the "
                          "first layer the forward pass runs: node_outputs(model, data, layer=...)")
    num_nodes = logits.shape[0] if isinstance(logits, Tensor) else None
    if not isinstance(logits, Tensor) or logits.dim() != 2:
        raise ConfigError(f"the model returned {type(logits).__name__} of shape {list(getattr(logits, 'shape', []))}; "
                          "node_outputs needs logits [N, K] (or a tuple starting with them)")
    first = captured[0]
    if first.dim() != 2 or first.shape[0] != num_nodes:
        raise ConfigError(f"the first layer's output has shape {list(first.shape)}, not [N, h] with N = {num_nodes}; "
                          "name the layer whose output is one row per node: node_outputs(..., layer=...)")
    hidden = first if activation is None else activation(first)
    return logits.detach().float(), hidden.detach().float()


__all__ = ["FROM_MODEL", "first_message_passing", "node_outputs"]
