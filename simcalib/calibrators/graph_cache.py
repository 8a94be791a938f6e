"""Structures derived from a graph's constant tensors alone, built once per tensor object and shared by every
calibrator fitted on that graph (every run, fold and calibrator of a benchmark in one process).

A benchmark builds a fresh :class:`~simcalib.calibrators.base.CalibrationGraph` per fit, but its
``edge_index`` and ``features`` are the loaded dataset's own tensor objects (``from_run`` and ``to`` return
a tensor unchanged when its type and device already match), so a cache keyed on their identity reaches
across fits where one keyed on the ``CalibrationGraph`` cannot. An entry lives as long as its key tensor
(a weak reference); the key tensors are never written in place by this library. A built structure is a
deterministic function of the key tensor, so a cached value is the value a fresh build gives, bit for bit.

Usage::

    adj = shared(graph.edge_index, ("gets_adjacency", graph.num_nodes, True), lambda: build(...))
"""

from __future__ import annotations

import hashlib
import itertools
import weakref
from collections.abc import Callable, Hashable
from typing import TypeVar

from torch import Tensor

T = TypeVar("T")

# id(tensor) -> (weak reference to the tensor, {key: structure}, the tensor's token)
_ENTRIES: dict[int, tuple[weakref.ref, dict, int]] = {}
_tokens = itertools.count()
_enabled = True  # private switch: False builds every structure afresh (the equality tests compare both)


def _drop(ident: int, ref: weakref.ref, entries: dict = _ENTRIES) -> None:
    entry = entries.get(ident)  # ``entries`` bound at definition: still there while the interpreter exits
    if entry is not None and entry[0] is ref:
        del entries[ident]


def _entry(tensor: Tensor) -> tuple[weakref.ref, dict, int]:
    ident = id(tensor)
    entry = _ENTRIES.get(ident)
    if entry is None or entry[0]() is not tensor:
        ref = weakref.ref(tensor, lambda r, i=ident, drop=_drop: drop(i, r))
        entry = _ENTRIES[ident] = (ref, {}, next(_tokens))
    return entry


def shared(tensor: Tensor, key: Hashable, build: Callable[[], T]) -> T:
    """``build()``, computed once per (``tensor`` object, ``key``) while ``tensor`` is alive. ``key`` must name
    everything else the structure depends on (its kind, the node count, options; another tensor object by
    its :func:`token`)."""
    if not _enabled:
        return build()
    structures = _entry(tensor)[1]
    if key not in structures:
        structures[key] = build()
    return structures[key]


def token(tensor: Tensor) -> int:
    """A number naming the ``tensor`` object in a :func:`shared` key: never given to another object, even
    after ``tensor`` is gone (an ``id`` can be)."""
    return _entry(tensor)[2]


def clear() -> None:
    """Forget every cached structure."""
    _ENTRIES.clear()


def content_key(tensor: Tensor) -> tuple:
    """A hashable key of ``tensor``'s values (dtype, shape, a digest of its bytes): for small index tensors
    (a run's training nodes) that a benchmark rebuilds per fit, as part of a :func:`shared` key."""
    array = tensor.detach().cpu().contiguous().numpy()
    return str(tensor.dtype), tuple(tensor.shape), hashlib.blake2b(array.tobytes(), digest_size=16).hexdigest()
