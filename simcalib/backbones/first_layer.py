r"""A GCN's first layer computed once per optimiser step: the early-stopping forward's value, with its autograd
history, taken by the next training forward.

A trainer's epoch is a training forward, an optimiser step, then an early-stopping forward in evaluation mode.
The GCN has no input dropout, so the early-stopping forward after step t computes
:math:`X^{(1)} = \mathrm{ReLU}(\hat A X W_1 + b_1)` with exactly the :math:`W_1, b_1` that the training forward
of step t+1 reads, and no random number is drawn in between (dropout comes after the first layer). While a
trainer trains (``_keeps_first_layer``), the early-stopping forward computes the first layer with autograd
recording (the operations a training forward records), uses it detached, and keeps it; the next training
forward takes it when it reads the same inputs and every parameter is the same tensor at the same in-place
version (an optimiser step or a slice of the batch in between means recomputing). Its backward then runs the
same operations on the same tensors, so the gradients, and every later number, are bit for bit those of a
recomputation. A kept value is taken by one training forward at most (its backward frees the history).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import torch
from torch import Tensor


class SharedFirstLayer:
    """Mixin of a module whose first layer depends on its inputs and ``parameters`` only (no random draw)."""

    _reuse_first_layer = True  # private switch: False computes the first layer in every forward
    _keeps_first_layer = False  # set by a trainer on its own model: only then are first layers kept

    def _first_layer(self, inputs: Sequence[object], parameters: Sequence[Tensor], compute: Callable[[], Tensor]) -> Tensor:
        """``compute()``, or in a training forward the value the last evaluation forward computed from the same
        ``inputs`` (the same objects) and ``parameters`` (the same tensors at the same ``_version``)."""
        key = (tuple(inputs), tuple((p, p._version) for p in parameters))
        kept = getattr(self, "_kept_first_layer", None)
        self._kept_first_layer = None
        if self.training and self._reuse_first_layer and kept is not None and _same_key(kept[0], key):
            return kept[1]
        keep = (self._reuse_first_layer and self._keeps_first_layer and not self.training
                and not torch.is_inference_mode_enabled())
        with torch.enable_grad() if keep else contextlib.nullcontext():
            value = compute()
        if not keep:
            return value
        self._kept_first_layer = (key, value)
        return value.detach()


def _same_key(a: tuple, b: tuple) -> bool:
    (inputs_a, params_a), (inputs_b, params_b) = a, b
    return (len(inputs_a) == len(inputs_b) and all(u is v for u, v in zip(inputs_a, inputs_b))
            and len(params_a) == len(params_b)
            and all(p is q and v == w for (p, v), (q, w) in zip(params_a, params_b)))


def keep_first_layers(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with its evaluation forwards keeping their first layer (a trainer's own model; no-op for a
    module without a shared first layer, e.g. a GAT, whose input dropout comes before its first layer)."""
    if isinstance(model, SharedFirstLayer):
        model._keeps_first_layer = True
    return model
