"""Training a backbone with the GATS early-stopping rule (PROTOCOL section 3).

Adam, lr 0.01, up to 2000 full-batch epochs, patience 100. After every epoch the model is evaluated on the
validation (= calibration) fold; the checkpoint is kept when validation accuracy >= best **and**
validation loss <= best, and patience resets when either improves. The outputs at the kept checkpoint are
returned directly, so no state dict needs to be reloaded.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

from simcalib.backbones.models import ATTENTION_KERNELS, BACKBONES, DEFAULT_ATTENTION
from simcalib.backbones.sparse import SparseOperand
from simcalib.data.loading import GraphData
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
) -> BackboneOutput:
    """Train a fresh backbone from ``seed`` on ``train_idx`` with early stopping on ``val_idx``."""
    device = resolve_device(device)
    seed_everything(seed)
    model_cls = BACKBONES[config.name]
    model = model_cls(data.num_features, data.num_classes, dropout=config.dropout, **config.model_options()).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    x, adj = graph_inputs(data, config.name, device, **config.model_options())
    y = data.y.to(device)
    train_idx, val_idx = train_idx.to(device), val_idx.to(device)

    best_acc, best_loss, patience_left = -1.0, float("inf"), config.patience
    kept: tuple[Tensor, Tensor, float, float, int] | None = None
    start = time.perf_counter()
    epoch = 0
    for epoch in range(config.max_epochs):
        model.train()
        optimizer.zero_grad()
        logits, _ = model(x, adj)
        loss = F.cross_entropy(logits[train_idx], y[train_idx])
        if not torch.isfinite(loss):
            raise TrainingDivergedError(
                f"{config.name} training on {data.name} diverged at epoch {epoch} (loss {loss.item()}); "
                f"lower the learning rate (now {config.lr}) or check the input features for NaNs"
            )
        loss.backward()
        optimizer.step()

        model.eval()
        with torch.no_grad():
            logits, hidden = model(x, adj)
            val_loss = F.cross_entropy(logits[val_idx], y[val_idx]).item()
            val_acc = (logits[val_idx].argmax(1) == y[val_idx]).float().mean().item()
        if val_acc >= best_acc or val_loss <= best_loss:
            if val_acc >= best_acc and val_loss <= best_loss:
                kept = (logits, hidden, val_acc, val_loss, epoch)
            best_acc, best_loss = max(val_acc, best_acc), min(val_loss, best_loss)
            patience_left = config.patience
        else:
            patience_left -= 1
            if patience_left <= 0:
                break
    if kept is None:  # cannot happen after one epoch with finite loss; guard for max_epochs = 0
        raise TrainingDivergedError(f"{config.name} on {data.name}: no checkpoint was kept (max_epochs={config.max_epochs})")
    logits, hidden, val_acc, val_loss, best_epoch = kept
    if not (torch.isfinite(logits).all() and torch.isfinite(hidden).all()):
        raise TrainingDivergedError(f"{config.name} on {data.name} produced non-finite outputs; lower the learning rate")
    return BackboneOutput(
        logits=logits.float().cpu(),
        hidden=hidden.float().cpu(),
        val_accuracy=val_acc,
        val_nll=val_loss,
        best_epoch=best_epoch,
        epochs=epoch + 1,
        train_seconds=time.perf_counter() - start,
    )
