"""GCN and GAT backbones with the GATS training protocol and an on-disk output cache."""

from simcalib.backbones.cache import BackboneCache, cache_key
from simcalib.backbones.models import BACKBONES, GAT, GCN
from simcalib.backbones.training import (
    BackboneConfig,
    BackboneOutput,
    backbone_name,
    resolve_device,
    train_backbone,
)

__all__ = [
    "BACKBONES", "GAT", "GCN", "BackboneCache", "BackboneConfig", "BackboneOutput", "backbone_name",
    "cache_key", "resolve_device", "train_backbone",
]
