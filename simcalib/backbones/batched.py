r"""M backbones of one graph trained together as one batched model (PROTOCOL section 3, same rule per model).

The runs of a split (5 inits x 3 folds) share the graph, so their GCNs / GATs are stacked along a model
axis m = 1..M and every propagation runs once over the models side by side:

.. math::
    \text{GCN:}\quad [X^{(1)}_1 \dots X^{(1)}_M] = \mathrm{ReLU}\big(\hat A\, X [W^1_1 \dots W^1_M] + [b^1_1 \dots b^1_M]\big),
    \qquad z_m = \hat A\, \mathrm{dropout}_m(X^{(1)}_m) W^2_m + b^2_m

    \text{GAT:}\quad \alpha^{m,h}_{ij} = \mathrm{softmax}_{j \in N(i) \cup \{i\}}
    \mathrm{LeakyReLU}\big(a^{m,h\top}_{src} W_m x_j + a^{m,h\top}_{dst} W_m x_i\big)
    \quad (M \cdot 8 \text{ heads in the first layer, } M \text{ in the output layer})

The loss is :math:`\sum_m \mathrm{CE}_m` (each model's mean over its own training fold), so each model's
gradient is its own; Adam is element-wise and every model has the same weight decay, so one optimizer over
the stacked parameters is M independent optimizers. Each model draws its initialisation and every dropout
mask from its own ``torch.Generator`` seeded with its run seed, in a fixed order, so its numbers do not
depend on which other models share the batch (up to floating-point reduction order). Early stopping follows
the GATS rule of :mod:`simcalib.backbones.training` per model, its state on the device
(:mod:`simcalib.early_stopping`); a stopped model keeps the outputs of its kept epoch and is removed from the
batch (parameters and optimizer state sliced) when the host next reads the stopping state, so it costs
nothing afterwards.

For GCN the draws are those of the per-run path (same seed, same CPU generator, same order: W1, W2, then
one [N, h] dropout mask per epoch), so a batched GCN reproduces the per-run one up to floating-point
reduction order (on Cora split 0, 11 of 15 runs gave the same ECE to 1e-4; in the others a rounding
difference moved the early stop). A GAT draws in another order (the per-run ``GATConv`` initialises a
projection it then discards, and drops attention with ``bernoulli_``), so it is a different, equally valid
draw. Either way a batched backbone is cached under its own key.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.utils import softmax as edge_softmax

from simcalib.backbones.first_layer import SharedFirstLayer, keep_first_layers
from simcalib.backbones.models import BACKBONES, DEFAULT_ATTENTION
from simcalib.backbones.sparse import SparseOperand
from simcalib.backbones.training import BackboneConfig, BackboneOutput, graph_inputs, resolve_device
from simcalib.data.loading import GraphData
from simcalib.early_stopping import check_interval, is_check_epoch, python_max, python_min
from simcalib.errors import ConfigError, TrainingDivergedError

TRAINER = "batched"


def glorot_models(shape: tuple[int, ...], fan: tuple[int, int], generators: Sequence[torch.Generator],
                  axis: int) -> Tensor:
    """A tensor with a model axis, model m's slice drawn from U(-b, b), b = sqrt(6 / (fan_in + fan_out)),
    by generator m (so a model's initialisation is the same whatever else is in the batch)."""
    bound = math.sqrt(6.0 / (fan[0] + fan[1]))
    slices = [torch.rand(shape, generator=g, device=g.device) * (2 * bound) - bound for g in generators]
    return torch.stack(slices, dim=axis)


def keep_masks(shape: tuple[int, ...], p: float, generators: Sequence[torch.Generator], axis: int) -> Tensor:
    """Inverted-dropout multipliers (0 or 1/(1-p)), one mask per model from its own generator, stacked on ``axis``."""
    scale = 1.0 / (1.0 - p)
    masks = [(torch.rand(shape, generator=g, device=g.device) >= p) * scale for g in generators]
    return torch.stack(masks, dim=axis)


def attention(projected: Tensor, att_src: Tensor, att_dst: Tensor, edge_index: Tensor, p: float, training: bool,
              generators: Sequence[torch.Generator]) -> Tensor:
    r"""Graph attention of M models x H heads at once, as torch_geometric's ``GATConv`` computes each head
    (no bias, no projection): ``projected`` [N, M, H, C], ``att_*`` [M, H, C] -> [N, M, H, C].
    Attention dropout draws model m's mask [E, H] from generator m."""
    src, dst = edge_index
    num_nodes = projected.size(0)
    score_src = (projected * att_src).sum(-1)  # [N, M, H]
    score_dst = (projected * att_dst).sum(-1)
    alpha = F.leaky_relu(score_src[src] + score_dst[dst], 0.2)  # [E, M, H]
    alpha = edge_softmax(alpha, dst, num_nodes=num_nodes)
    if training and p > 0.0:
        alpha = alpha * keep_masks((alpha.size(0), alpha.size(2)), p, generators, axis=1)
    messages = projected[src] * alpha.unsqueeze(-1)  # [E, M, H, C]
    return torch.zeros_like(projected).index_add_(0, dst, messages)


class BatchedBackbone(nn.Module):
    """Common part: the generators, the model axis of each parameter, and dropping stopped models."""

    model_axes: dict[str, int] = {}

    def __init__(self, generators: Sequence[torch.Generator], dropout: float):
        super().__init__()
        self.generators = list(generators)
        self.dropout = dropout

    @property
    def num_models(self) -> int:
        return len(self.generators)

    def keep_models(self, keep: Sequence[int], optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """Keep only models ``keep`` (positions in the batch); returns a new Adam with their state."""
        index = torch.tensor(list(keep), dtype=torch.long, device=next(self.parameters()).device)
        old_state = {name: optimizer.state.get(param, {}) for name, param in self.named_parameters()}
        for name, axis in self.model_axes.items():
            sliced = getattr(self, name).detach().index_select(axis, index)
            setattr(self, name, nn.Parameter(sliced))
        self.generators = [self.generators[i] for i in keep]
        new = torch.optim.Adam(self.parameters(), **{k: v for k, v in optimizer.defaults.items()
                                                       if k in ("lr", "betas", "eps", "weight_decay")})
        for name, param in self.named_parameters():
            state = old_state[name]
            if state:
                axis = self.model_axes[name]
                new.state[param] = {k: (v if k == "step" else v.index_select(axis, index)) for k, v in state.items()}
        return new


class BatchedGCN(SharedFirstLayer, BatchedBackbone):
    r"""M two-layer GCNs (:class:`~simcalib.backbones.models.GCN`): the first layer is one sparse product
    :math:`X [W^1_1 \dots W^1_M]` and one propagation of [N, M*h]; the second one propagation of [N, M*K]. While
    the trainer trains it, an evaluation forward's first layer is kept for the next training forward
    (:mod:`simcalib.backbones.first_layer`; slicing the batch replaces the parameters, so it is recomputed)."""

    model_axes = {"weight1": 1, "bias1": 0, "weight2": 0, "bias2": 0}

    def __init__(self, in_channels: int, num_classes: int, generators: Sequence[torch.Generator], hidden: int = 64,
                 dropout: float = 0.5):
        super().__init__(generators, dropout)
        m = len(generators)
        self.weight1 = nn.Parameter(glorot_models((in_channels, hidden), (in_channels, hidden), generators, axis=1))
        self.weight2 = nn.Parameter(glorot_models((hidden, num_classes), (hidden, num_classes), generators, axis=0))
        self.bias1 = nn.Parameter(torch.zeros(m, hidden))
        self.bias2 = nn.Parameter(torch.zeros(m, num_classes))

    prepare_graph = staticmethod(BACKBONES["GCN"].prepare_graph)

    def forward(self, x: SparseOperand, adj: SparseOperand) -> tuple[Tensor, Tensor]:
        """-> logits [N, M, K], hidden [N, M, h]."""
        features, models, hidden_size = self.weight1.shape
        n = x.matrix.size(0)
        hidden = self._first_layer((x, adj), (self.weight1, self.bias1), lambda: F.relu(
            adj.matmul(x.matmul(self.weight1.reshape(features, models * hidden_size)))
            + self.bias1.reshape(-1)).view(n, models, hidden_size))
        h = hidden * keep_masks((n, hidden_size), self.dropout, self.generators, axis=1) if self.training else hidden
        projected = torch.einsum("nmh,mhk->nmk", h, self.weight2)
        logits = adj.matmul(projected.reshape(n, -1)).view(n, models, -1) + self.bias2
        return logits, hidden


class BatchedGAT(BatchedBackbone):
    r"""M two-layer GATs (:class:`~simcalib.backbones.models.GAT`: 8 heads x 8 hidden, ELU, one output
    head): M*8 attention heads in the first layer and M in the second, each model with its own dropout on
    the sparse input, the attention and the hidden layer."""

    model_axes = {"weight1": 0, "att_src1": 0, "att_dst1": 0, "bias1": 0,
                  "weight2": 0, "att_src2": 0, "att_dst2": 0, "bias2": 0}

    def __init__(self, in_channels: int, num_classes: int, generators: Sequence[torch.Generator], hidden: int = 8,
                 heads: int = 8, dropout: float = 0.5):
        super().__init__(generators, dropout)
        m, width = len(generators), heads * hidden
        self.heads, self.head_size = heads, hidden
        # Draw order per generator is fixed by this statement order (and does not depend on M).
        draws = []
        for g in generators:
            draws.append([
                glorot_models((in_channels, width), (in_channels, width), [g], 0)[0],
                glorot_models((heads, hidden), (heads, hidden), [g], 0)[0],  # as GATConv's glorot on [1, H, C]
                glorot_models((heads, hidden), (heads, hidden), [g], 0)[0],
                glorot_models((width, num_classes), (width, num_classes), [g], 0)[0],
                glorot_models((1, num_classes), (1, num_classes), [g], 0)[0],
                glorot_models((1, num_classes), (1, num_classes), [g], 0)[0],
            ])
        w1, as1, ad1, w2, as2, ad2 = (torch.stack(parts) for parts in zip(*draws))
        self.weight1, self.att_src1, self.att_dst1 = nn.Parameter(w1), nn.Parameter(as1), nn.Parameter(ad1)
        self.weight2, self.att_src2, self.att_dst2 = nn.Parameter(w2), nn.Parameter(as2), nn.Parameter(ad2)
        self.bias1 = nn.Parameter(torch.zeros(m, width))
        self.bias2 = nn.Parameter(torch.zeros(m, num_classes))

    prepare_graph = staticmethod(BACKBONES["GAT"].prepare_graph)

    def forward(self, x: SparseOperand, edge_index: Tensor) -> tuple[Tensor, Tensor]:
        """-> logits [N, M, K], hidden [N, M, 64]."""
        models, features, width = self.weight1.shape
        n = x.matrix.size(0)
        if self.training and self.dropout > 0.0:  # each model's own input dropout: M sparse products
            nnz = x.matrix.values().numel()
            projected = torch.stack([
                x.scaled(keep_masks((nnz,), self.dropout, [g], 0)[0]).matmul(self.weight1[i])
                for i, g in enumerate(self.generators)], dim=1)
        else:  # one product X [W_1 ... W_M]
            stacked = self.weight1.permute(1, 0, 2).reshape(features, models * width)
            projected = x.matmul(stacked).view(n, models, width)
        heads = projected.view(n, models, self.heads, self.head_size)
        out = attention(heads, self.att_src1, self.att_dst1, edge_index, self.dropout, self.training, self.generators)
        hidden = F.elu(out.reshape(n, models, width) + self.bias1)
        h = hidden * keep_masks((n, width), self.dropout, self.generators, axis=1) if self.training else hidden
        z = torch.einsum("nmi,mik->nmk", h, self.weight2).unsqueeze(2)  # [N, M, 1, K]
        logits = attention(z, self.att_src2, self.att_dst2, edge_index, self.dropout, self.training,
                           self.generators).squeeze(2) + self.bias2
        return logits, hidden


BATCHED_BACKBONES = {"GCN": BatchedGCN, "GAT": BatchedGAT}


def _fold_weights(indices: Sequence[Tensor], num_nodes: int, device: torch.device) -> Tensor:
    """[N, M]: 1/|fold_m| on model m's fold nodes, 0 elsewhere (so a weighted sum is each model's mean)."""
    weights = torch.zeros(num_nodes, len(indices), device=device)
    for m, idx in enumerate(indices):
        weights[idx.to(device), m] = 1.0 / len(idx)
    return weights


def train_backbones_batched(
    data: GraphData,
    folds: Sequence[tuple[Tensor, Tensor]],
    seeds: Sequence[int],
    config: BackboneConfig,
    device: str | torch.device | None = "auto",
    on_stopped: Callable[[int, BackboneOutput], None] | None = None,
    models_per_batch: int | None = None,
    check_every: int | None = None,
) -> list[BackboneOutput]:
    """Train ``len(seeds)`` backbones at once: model m from ``seeds[m]`` on ``folds[m] = (train_idx, val_idx)``,
    each early-stopped on its own validation fold. ``on_stopped(m, output)`` is called as each model stops
    (e.g. to cache it at once). ``models_per_batch`` trains consecutive groups of at most that many models
    one group after another (on CPU, a batch wider than the cache is slower per model than a narrow one).
    ``check_every``: epochs between two host reads of the stopping state (default
    :func:`~simcalib.early_stopping.check_interval`: 1 on CPU); any value gives the same stopping decisions on CPU,
    and the same outputs up to float rounding: a stopped model leaves the batch at the next host read, and a
    batch of another width may be summed in another order (bit-identical on some CPU models, not on all).
    Returns one :class:`BackboneOutput` per model, in the order of ``seeds``."""
    if len(folds) != len(seeds) or not seeds:
        raise ValueError("train_backbones_batched needs one (train_idx, val_idx) per seed, and at least one")
    if config.attention != DEFAULT_ATTENTION:
        raise ConfigError(f"the batched trainer has its own attention (simcalib/backbones/batched.py); attention "
                          f"kernel {config.attention!r} applies to backbones trained one run at a time")
    if models_per_batch is not None and len(seeds) > models_per_batch:
        outputs = []
        for first in range(0, len(seeds), models_per_batch):
            group = slice(first, first + models_per_batch)
            callback = None if on_stopped is None else (lambda m, out, first=first: on_stopped(first + m, out))
            outputs += train_backbones_batched(data, folds[group], seeds[group], config, device, callback,
                                               check_every=check_every)
        return outputs
    device = resolve_device(device)
    generators = [torch.Generator(device=device).manual_seed(int(s)) for s in seeds]
    model = BATCHED_BACKBONES[config.name](data.num_features, data.num_classes, generators,
                                           dropout=config.dropout).to(device)
    keep_first_layers(model)  # a GCN's training forward takes the first layer of the last early-stopping forward
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    x, graph = graph_inputs(data, config.name, device)
    y = data.y.to(device)
    n = data.num_nodes
    train_w = _fold_weights([f[0] for f in folds], n, device)
    val_w = _fold_weights([f[1] for f in folds], n, device)
    val_mask = val_w > 0

    # The GATS rule per model, its state on the device (simcalib.early_stopping), one slot per model m; the host
    # reads which models stopped every `interval` epochs and then removes them from the batch (between two reads a
    # stopped model is still computed, its slots masked).
    interval = check_interval(device, check_every)
    total = len(seeds)
    active = list(range(total))  # batch position -> original model index
    cols = torch.tensor(active, device=device)
    best_acc = torch.full((total,), -1.0, dtype=torch.float64, device=device)
    best_loss = torch.full((total,), float("inf"), device=device)
    patience = torch.full((total,), config.patience, dtype=torch.long, device=device)
    full_patience = torch.full_like(patience, config.patience)
    stopped = torch.zeros(total, dtype=torch.bool, device=device)
    epochs_run = torch.zeros(total, dtype=torch.long, device=device)
    diverged_at = torch.full((total,), -1, dtype=torch.long, device=device)
    kept_epoch = torch.full((total,), -1, dtype=torch.long, device=device)
    kept_acc, kept_loss = torch.zeros_like(best_acc), torch.zeros_like(best_loss)
    kept_logits = kept_hidden = None  # [N, M, K], [N, M, h], allocated at the first epoch
    outputs: list[BackboneOutput | None] = [None] * total
    start = time.perf_counter()

    def finish(m: int) -> None:
        if int(kept_epoch[m]) < 0:
            raise TrainingDivergedError(f"{config.name} on {data.name}: no checkpoint was kept (max_epochs={config.max_epochs})")
        logits, hidden = kept_logits[:, m].clone(), kept_hidden[:, m].clone()
        if not (torch.isfinite(logits).all() and torch.isfinite(hidden).all()):
            raise TrainingDivergedError(f"{config.name} on {data.name} (seed {seeds[m]}) produced non-finite outputs; "
                                        "lower the learning rate")
        outputs[m] = BackboneOutput(logits=logits.float().cpu(), hidden=hidden.float().cpu(),
                                    val_accuracy=kept_acc[m].item(), val_nll=kept_loss[m].item(),
                                    best_epoch=int(kept_epoch[m]), epochs=int(epochs_run[m]),
                                    train_seconds=time.perf_counter() - start,
                                    info={"trainer": TRAINER, "batch_size": total})
        if on_stopped is not None:
            on_stopped(m, outputs[m])

    def raise_if_diverged() -> None:
        bad = diverged_at.tolist()
        if max(bad) >= 0:
            first = min(e for e in bad if e >= 0)
            raise TrainingDivergedError(
                f"{config.name} training on {data.name} diverged at epoch {first} "
                f"(seeds {[seeds[m] for m, e in enumerate(bad) if e == first]}); "
                f"lower the learning rate (now {config.lr}) or check the input features for NaNs")

    for epoch in range(config.max_epochs):
        model.train()
        optimizer.zero_grad()
        logits, _ = model(x, graph)
        nll = -F.log_softmax(logits, dim=-1).gather(2, y.view(n, 1, 1).expand(n, len(active), 1)).squeeze(2)  # [N, M]
        per_model = (nll * train_w[:, cols]).sum(0)
        first_bad = ~stopped[cols] & ~torch.isfinite(per_model.detach()) & (diverged_at[cols] < 0)
        diverged_at[cols] = torch.where(first_bad, epoch, diverged_at[cols])
        live = ~stopped[cols] & (diverged_at[cols] < 0)  # [M_active]
        per_model.sum().backward()
        optimizer.step()

        model.eval()
        with torch.no_grad():
            logits, hidden = model(x, graph)
            nll = -F.log_softmax(logits, dim=-1).gather(2, y.view(n, 1, 1).expand(n, len(active), 1)).squeeze(2)
            val_losses = (nll * val_w[:, cols]).sum(0)
            correct = (logits.argmax(-1) == y.view(n, 1)) & val_mask[:, cols]
            val_accs = correct.sum(0).double() / val_mask[:, cols].sum(0).double()
            if kept_logits is None:
                kept_logits = torch.zeros(n, total, logits.size(-1), dtype=logits.dtype, device=device)
                kept_hidden = torch.zeros(n, total, hidden.size(-1), dtype=hidden.dtype, device=device)
            acc_ok, loss_ok = val_accs >= best_acc[cols], val_losses <= best_loss[cols]
            improved = live & (acc_ok | loss_ok)
            keep = improved & acc_ok & loss_ok
            kept_logits.index_copy_(1, cols, torch.where(keep.view(1, -1, 1), logits, kept_logits[:, cols]))
            kept_hidden.index_copy_(1, cols, torch.where(keep.view(1, -1, 1), hidden, kept_hidden[:, cols]))
            kept_acc[cols] = torch.where(keep, val_accs, kept_acc[cols])
            kept_loss[cols] = torch.where(keep, val_losses, kept_loss[cols])
            kept_epoch[cols] = torch.where(keep, epoch, kept_epoch[cols])
            best_acc[cols] = torch.where(improved, python_max(val_accs, best_acc[cols]), best_acc[cols])
            best_loss[cols] = torch.where(improved, python_min(val_losses, best_loss[cols]), best_loss[cols])
            left = torch.where(improved, full_patience[cols], torch.where(live, patience[cols] - 1, patience[cols]))
            patience[cols] = left
            stopped[cols] = stopped[cols] | (live & ~improved & (left <= 0))
            epochs_run[cols] = torch.where(live, epoch + 1, epochs_run[cols])
        if not is_check_epoch(epoch, interval, config.max_epochs - 1):
            continue
        raise_if_diverged()
        done = stopped[cols].tolist()
        for pos, m in enumerate(active):
            if done[pos]:
                finish(m)
        if any(done):
            keep_positions = [pos for pos in range(len(active)) if not done[pos]]
            active = [active[pos] for pos in keep_positions]
            if not active:
                break
            optimizer = model.keep_models(keep_positions, optimizer)
            cols = torch.tensor(active, device=device)
    for m in active:  # reached max_epochs
        finish(m)
    return outputs  # type: ignore[return-value]
