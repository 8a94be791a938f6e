"""Argument helpers shared by several sub-commands."""

from __future__ import annotations

import argparse
import contextlib
import signal


def csv_list(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def count_or_list(value: str) -> list[int]:
    """``5`` means 0..4; ``0,2`` (or ``=3``) means exactly those indices."""
    try:
        if "," in value or value.startswith("="):
            return [int(v) for v in value.lstrip("=").split(",") if v.strip()]
        count = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a count (e.g. 5) or a comma list of indices (e.g. 0,2), got {value!r}") from None
    if count < 1:  # "--splits 0" meant as "split 0" would otherwise select nothing
        raise argparse.ArgumentTypeError(f"a count must be at least 1, got {value!r}; to name index 0 alone write =0")
    return list(range(count))


def add_data_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-root", help="torch_geometric data root (default: $SIMCALIB_DATA_ROOT or ./data)")
    parser.add_argument("--data-mirror", help="offline mirror in torch_geometric's raw layout (default: $SIMCALIB_DATA_MIRROR)")


def add_attention_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--attention", choices=["pyg", "csr"], default=None,
                        help="GAT's attention kernel: pyg (torch_geometric's GATConv, the default) or csr (the same "
                             "equations and random draws without per-edge feature tensors, faster on large graphs on "
                             "CPU; cached as another backbone, recorded in the rows' backbone_options)")


def _default_attention() -> str:
    from simcalib.backbones.models import DEFAULT_ATTENTION  # here, so parsing arguments does not load torch

    return DEFAULT_ATTENTION


def attention_overrides(args: argparse.Namespace) -> tuple[tuple[str, object], ...]:
    """The backbone override of ``--attention``; none for the default, which adds nothing to a run's identity."""
    attention = getattr(args, "attention", None)
    return (("attention", attention),) if attention is not None and attention != _default_attention() else ()


def protocol_settings(args: argparse.Namespace, fold_rate: float = 0.05, study_backbone: dict | None = None):
    """The :class:`~simcalib.experiment.protocol.ProtocolSettings` of a command's protocol options (seed, data, splits,
    cache, device, ``--max-epochs``, ``--attention``). ``study_backbone``: a study file's ``backbone:``
    overrides, which the command line's win over (``--attention pyg`` included)."""
    from simcalib.experiment.protocol import ProtocolSettings

    command_line = {"max_epochs": args.max_epochs or None, "attention": getattr(args, "attention", None)}
    merged = {**(study_backbone or {}), **{k: v for k, v in command_line.items() if v is not None}}
    if merged.get("attention") == _default_attention():  # the default adds nothing to a run's settings
        del merged["attention"]
    overrides = tuple(sorted(merged.items()))
    return ProtocolSettings(study_seed=args.seed, fold_rate=fold_rate, data_root=args.data_root,
                            mirror=args.data_mirror, splits_dir=args.splits_dir, cache_dir=args.cache_dir,
                            device=args.device, backbone_overrides=overrides,
                            generated_splits=getattr(args, "generated_splits", False))


@contextlib.contextmanager
def sigterm_as_interrupt():
    """Inside the block SIGTERM (a scheduler, `timeout`, `kill`) raises KeyboardInterrupt, so a command stops
    as on Ctrl-C, keeping what it finished; the previous handler is back afterwards."""

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
