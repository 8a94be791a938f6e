"""Training a backbone with the GATS early-stopping rule (PROTOCOL section 3).

Adam, lr 0.01, up to 2000 full-batch epochs, patience 100. After every epoch the model is evaluated on the
validation (= calibration) fold; the checkpoint is kept when validation accuracy >= best **and**
validation loss <= best, and patience resets when either improves. The outputs at the kept checkpoint are
returned directly, so no state dict needs to be reloaded. The rule's state lives on the training device and
the host reads it every few epochs (:mod:`simcalib.early_stopping`; every epoch on CPU).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

from simcalib.backbones.first_layer import keep_first_layers
from simcalib.backbones.models import ATTENTION_KERNELS, BACKBONES, DEFAULT_ATTENTION
from simcalib.backbones.sparse import SparseOperand
from simcalib.data.loading import GraphData
from simcalib.early_stopping import check_interval, is_check_epoch, python_max, python_min
from simcalib.errors import ConfigError, TrainingDivergedError, resolve_name
from simcalib.seeding import seed_everything


@dataclass(frozen=True)
class BackboneConfig:
    """Settings of one backbone training (all part of the cache key)."""

    name: str = "GCN"
    lr: float = 0.01
    weight_decay: float = 5e-4
    max_epochs: int = 2000
    patience: int = 100
    dropout: float = 0.5
    # GAT's attention kernel (simcalib.backbones.models.ATTENTION_KERNELS); a backbone without attention keeps
    # the default, so the option never changes a GCN's identity. Enters the cache key only when not the default.
    attention: str = DEFAULT_ATTENTION

    def __post_init__(self):
        object.__setattr__(self, "name", backbone_name(self.name))
        object.__setattr__(self, "attention", str(self.attention).strip().lower())
        if self.attention not in ATTENTION_KERNELS:
            raise ConfigError(f"unknown attention kernel {self.attention!r}; valid attention kernels are: "
                              f"{', '.join(ATTENTION_KERNELS)}")
        if self.name != "GAT":
            object.__setattr__(self, "attention", DEFAULT_ATTENTION)

    def model_options(self) -> dict:
        """Keyword arguments of the backbone's constructor and ``prepare_graph`` beyond the graph's sizes."""
        return {"attention": self.attention} if self.name == "GAT" else {}


@dataclass
class BackboneOutput:
    """The frozen backbone at its kept checkpoint."""

    logits: Tensor  # [N, K] float32
    hidden: Tensor  # [N, h] float32, first-layer representation
    val_accuracy: float
    val_nll: float
    best_epoch: int
    epochs: int
    train_seconds: float
    info: dict = field(default_factory=dict)


def backbone_name(name: str) -> str:
    return resolve_name(name, BACKBONES, "backbone")


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    if device is None or str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def graph_inputs(data: GraphData, backbone: str, device: torch.device, **options):
    """(features, graph) in the fastest layout measured on CPU: sparse CSR features with a cached
    transpose, a sparse normalised adjacency for GCN and an ``edge_index`` with self-loops for GAT (with
    ``attention="csr"``: its CSR structure, :class:`~simcalib.backbones.gat_attention.AttentionGraph`)."""
    x = SparseOperand.from_csr(data.x).to(device)
    adj = BACKBONES[backbone].prepare_graph(data.edge_index, data.num_nodes, **options)
    return x, adj.to(device)


def train_backbone(
    data: GraphData,
    train_idx: Tensor,
    val_idx: Tensor,
    config: BackboneConfig,
    seed: int,
    device: str | torch.device | None = "auto",
    check_every: int | None = None,
) -> BackboneOutput:
    """Train a fresh backbone from ``seed`` on ``train_idx`` with early stopping on ``val_idx``.

    ``check_every``: epochs between two host reads of the stopping state (default
    :func:`~simcalib.early_stopping.check_interval`: 1 on CPU); any value gives the same outputs."""
    device = resolve_device(device)
    seed_everything(seed)
    model_cls = BACKBONES[config.name]
    model = model_cls(data.num_features, data.num_classes, dropout=config.dropout, **config.model_options()).to(device)
    keep_first_layers(model)  # a GCN's training forward takes the first layer of the last early-stopping forward
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    x, adj = graph_inputs(data, config.name, device, **config.model_options())
    y = data.y.to(device)
    train_idx, val_idx = train_idx.to(device), val_idx.to(device)

    # The GATS rule, its state on the device (simcalib.early_stopping): read by the host every `interval` epochs.
    interval = check_interval(device, check_every)
    best_acc = torch.tensor(-1.0, device=device)
    best_loss = torch.tensor(float("inf"), device=device)
    patience_left = torch.tensor(config.patience, device=device)
    full_patience = torch.full_like(patience_left, config.patience)
    stopped = torch.tensor(False, device=device)
    epochs_run = torch.tensor(0, device=device)
    diverged_at = torch.tensor(-1, device=device)  # the first epoch with a non-finite training loss
    diverged_loss = torch.tensor(0.0, device=device)
    kept_epoch = torch.tensor(-1, device=device)
    kept_acc, kept_loss = torch.tensor(0.0, device=device), torch.tensor(0.0, device=device)
    kept_logits = kept_hidden = None  # preallocated at the first epoch, when the shapes are known
    start = time.perf_counter()
    for epoch in range(config.max_epochs):
        model.train()
        optimizer.zero_grad()
        logits, _ = model(x, adj)
        loss = F.cross_entropy(logits[train_idx], y[train_idx])
        finite = torch.isfinite(loss.detach())
        first_bad = ~stopped & ~finite & (diverged_at < 0)
        diverged_at = torch.where(first_bad, epoch, diverged_at)
        diverged_loss = torch.where(first_bad, loss.detach(), diverged_loss)
        live = ~stopped & (diverged_at < 0)  # a diverged model's later epochs change nothing kept
        loss.backward()
        optimizer.step()

        model.eval()
        with torch.no_grad():
            logits, hidden = model(x, adj)
            val_loss = F.cross_entropy(logits[val_idx], y[val_idx])
            val_acc = (logits[val_idx].argmax(1) == y[val_idx]).float().mean()
            if kept_logits is None:
                kept_logits, kept_hidden = torch.zeros_like(logits), torch.zeros_like(hidden)
            acc_ok, loss_ok = val_acc >= best_acc, val_loss <= best_loss
            improved = live & (acc_ok | loss_ok)
            keep = improved & acc_ok & loss_ok
            kept_logits.copy_(torch.where(keep, logits, kept_logits))
            kept_hidden.copy_(torch.where(keep, hidden, kept_hidden))
            kept_acc = torch.where(keep, val_acc, kept_acc)
            kept_loss = torch.where(keep, val_loss, kept_loss)
            kept_epoch = torch.where(keep, epoch, kept_epoch)
            best_acc = torch.where(improved, python_max(val_acc, best_acc), best_acc)
            best_loss = torch.where(improved, python_min(val_loss, best_loss), best_loss)
            patience_left = torch.where(improved, full_patience, torch.where(live, patience_left - 1, patience_left))
            stopped = stopped | (live & ~improved & (patience_left <= 0))
            epochs_run = torch.where(live, epoch + 1, epochs_run)
        if is_check_epoch(epoch, interval, config.max_epochs - 1) and bool(stopped | (diverged_at >= 0)):
            break
    if int(diverged_at) >= 0:
        raise TrainingDivergedError(
            f"{config.name} training on {data.name} diverged at epoch {int(diverged_at)} (loss {diverged_loss.item()}); "
            f"lower the learning rate (now {config.lr}) or check the input features for NaNs"
        )
    if int(kept_epoch) < 0:  # cannot happen after one epoch with finite losses; guard for max_epochs = 0
        raise TrainingDivergedError(f"{config.name} on {data.name}: no checkpoint was kept (max_epochs={config.max_epochs})")
    logits, hidden = kept_logits, kept_hidden
    if not (torch.isfinite(logits).all() and torch.isfinite(hidden).all()):
        raise TrainingDivergedError(f"{config.name} on {data.name} produced non-finite outputs; lower the learning rate")
    return BackboneOutput(
        logits=logits.float().cpu(),
        hidden=hidden.float().cpu(),
        val_accuracy=kept_acc.item(),
        val_nll=kept_loss.item(),
        best_epoch=int(kept_epoch),
        epochs=int(epochs_run),
        train_seconds=time.perf_counter() - start,
    )
