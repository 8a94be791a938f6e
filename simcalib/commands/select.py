"""``simcalib select``: rank candidate calibrators on one graph's labelled nodes and save the fitted winner."""

from __future__ import annotations

import argparse
from pathlib import Path

from simcalib.commands.common import add_attention_option, add_data_options, csv_list, protocol_settings

# What a file of a model's outputs holds (docs/own-graph.md, "Choosing a calibrator for your model")
REQUIRED_KEYS = ("logits", "hidden", "edge_index", "y")


COMMANDS = ("select",)  # the sub-commands register() adds


def register(sub) -> None:
    from simcalib.calibrators.autocal import DEFAULT_CANDIDATES, SCORES

    parser = sub.add_parser(
        "select", help="rank calibrators by cross-fitted score on a graph's calibration nodes; save the winner",
        description="Cross-fit every candidate on stratified parts of the calibration fold, rank them by the "
                    "held-out score (with a t interval over the parts), refit the best on the whole fold and save "
                    "it. On a registered benchmark's run (--dataset, --backbone) or on a file of your model's "
                    "outputs (--outputs, format in docs/own-graph.md).")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--outputs", metavar="FILE.pt", help="torch.save'd dict: logits, hidden, edge_index, y and "
                                                            "train_mask/cal_mask (or train_idx/cal_idx), x optional")
    source.add_argument("--dataset", help="a registered dataset (with --backbone: that benchmark's run)")
    parser.add_argument("--backbone", help="GCN or GAT (with --dataset)")
    parser.add_argument("--split", type=int, default=0, help="the run's split (default 0)")
    parser.add_argument("--init", type=int, default=0, help="the run's backbone init (default 0)")
    parser.add_argument("--fold", type=int, default=0, help="the run's calibration fold (default 0)")
    parser.add_argument("--candidates", type=csv_list, default=list(DEFAULT_CANDIDATES),
                        help=f"comma list of registered calibrators (default: {','.join(DEFAULT_CANDIDATES)})")
    parser.add_argument("--score", choices=SCORES, default="nll", help="held-out score (default nll)")
    parser.add_argument("--parts", type=int, default=5, help="stratified parts of the calibration fold (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the parts and the candidates' fits (default 0)")
    parser.add_argument("--study-seed", type=int, default=10, help="with --dataset: the study seed of the run (10)")
    parser.add_argument("--save", default="selected_calibrator.pt", metavar="PATH",
                        help="where the fitted winner is saved (default selected_calibrator.pt; 'none': not saved)")
    parser.add_argument("--splits-dir", help="fixed GATS split files (default: $SIMCALIB_SPLITS_DIR, ...)")
    parser.add_argument("--generated-splits", action="store_true", help="allow splits drawn from the seed")
    parser.add_argument("--cache-dir", help="backbone cache (default: $SIMCALIB_CACHE_DIR or .cache/simcalib)")
    parser.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda")
    parser.add_argument("--max-epochs", type=int, default=None, help="cap backbone epochs (quick checks only)")
    add_attention_option(parser)
    add_data_options(parser)
    parser.set_defaults(func=run)


def _indices(record: dict, name: str, num_nodes: int, path: str):
    """The node indices of ``name`` ("train" or "cal") from ``<name>_idx`` or a boolean ``<name>_mask``."""
    import torch

    from simcalib.errors import ConfigError

    idx, mask = record.get(f"{name}_idx"), record.get(f"{name}_mask")
    if (idx is None) == (mask is None):
        raise ConfigError(f"{path}: give exactly one of {name}_idx and {name}_mask (docs/own-graph.md)")
    if mask is not None:
        mask = torch.as_tensor(mask)
        if mask.dtype != torch.bool or mask.shape != (num_nodes,):
            raise ConfigError(f"{path}: {name}_mask must be a bool tensor of shape [N] = [{num_nodes}], got "
                              f"{mask.dtype} {list(mask.shape)}")
        return mask.nonzero().flatten()
    idx = torch.as_tensor(idx)
    if idx.dtype.is_floating_point or idx.dim() != 1 or (idx.numel() and (idx.min() < 0 or idx.max() >= num_nodes)):
        raise ConfigError(f"{path}: {name}_idx must be integer node indices in 0..{num_nodes - 1}")
    return idx.long()


def graph_from_outputs(path: str):
    """The :class:`~simcalib.calibrators.base.CalibrationGraph` of a saved file of model outputs (labels outside
    the training and calibration nodes hidden); ConfigError naming the problem."""
    import torch

    from simcalib.calibrators import CalibrationGraph
    from simcalib.errors import ConfigError, DataMissingError

    if not Path(path).is_file():
        raise DataMissingError(f"{path}: no such file; give a torch.save'd dict of your model's outputs "
                               "(docs/own-graph.md)")
    try:
        record = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # any unreadable file: one line
        raise ConfigError(f"{path}: not a torch.save'd dict of tensors ({type(exc).__name__}); save one with "
                          "torch.save({'logits': ..., ...}, path) (docs/own-graph.md)") from None
    if not isinstance(record, dict):
        raise ConfigError(f"{path}: holds a {type(record).__name__}, not a dict of tensors (docs/own-graph.md)")
    missing = [key for key in REQUIRED_KEYS if key not in record]
    if missing:
        raise ConfigError(f"{path}: missing {', '.join(missing)}; the file needs {', '.join(REQUIRED_KEYS)} and "
                          "train_mask/cal_mask (docs/own-graph.md)")
    logits, hidden = torch.as_tensor(record["logits"]), torch.as_tensor(record["hidden"])
    edge_index, y = torch.as_tensor(record["edge_index"]), torch.as_tensor(record["y"]).flatten()
    if logits.dim() != 2 or logits.shape[1] < 2 or not logits.dtype.is_floating_point:
        raise ConfigError(f"{path}: logits must be a float tensor [N, K] with K >= 2, got {list(logits.shape)}")
    n = logits.shape[0]
    if not torch.isfinite(logits).all():
        raise ConfigError(f"{path}: logits hold NaN or infinite values")
    if hidden.dim() != 2 or hidden.shape[0] != n:
        raise ConfigError(f"{path}: hidden must be [N, h] with N = {n} (the logits' rows), got {list(hidden.shape)}")
    if edge_index.dim() != 2 or edge_index.shape[0] != 2 or edge_index.dtype.is_floating_point or (
            edge_index.numel() and (edge_index.min() < 0 or edge_index.max() >= n)):
        raise ConfigError(f"{path}: edge_index must be integer [2, E] with node indices in 0..{n - 1}")
    if y.shape != (n,) or y.dtype.is_floating_point:
        raise ConfigError(f"{path}: y must be integer labels [N] = [{n}], got {y.dtype} {list(y.shape)}")
    train_idx, cal_idx = _indices(record, "train", n, path), _indices(record, "cal", n, path)
    labelled = torch.cat([train_idx, cal_idx])
    if len(set(train_idx.tolist()) & set(cal_idx.tolist())):
        raise ConfigError(f"{path}: the training and calibration nodes overlap; give disjoint node sets")
    if ((y[labelled] < 0) | (y[labelled] >= logits.shape[1])).any():
        raise ConfigError(f"{path}: y on the training and calibration nodes must be classes 0..{logits.shape[1] - 1}")
    features = record.get("x")
    if features is not None and torch.as_tensor(features).shape[0] != n:
        raise ConfigError(f"{path}: x must have one row per node (N = {n})")
    y = y.clone()
    y[(y < 0) | (y >= logits.shape[1])] = 0  # unlabelled nodes: hidden by from_run in any case
    return CalibrationGraph.from_run(logits.float(), hidden.float(), edge_index.long(), y.long(), train_idx, cal_idx,
                                     features=None if features is None else torch.as_tensor(features))


def run(args: argparse.Namespace) -> int:
    from simcalib.calibrators.selection import select_calibrator
    from simcalib.errors import ConfigError

    dataset = backbone = None
    if args.outputs:
        graph, where = graph_from_outputs(args.outputs), args.outputs
    else:
        if not args.backbone:
            raise ConfigError("--dataset needs --backbone (GCN or GAT)")
        from simcalib.backbones import resolve_device
        from simcalib.experiment.protocol import Run, calibration_graph, make_runs, train_run_backbone

        settings = protocol_settings(argparse.Namespace(**{**vars(args), "seed": args.study_seed}))
        template = make_runs(args.dataset, args.backbone, [args.split], [args.init], [args.fold])[0]
        run_ = Run(template.dataset, template.backbone, args.split, args.init, args.fold)
        output = train_run_backbone(run_, settings)
        graph, _ = calibration_graph(run_, settings, output)  # test labels hidden
        graph = graph.to(resolve_device(settings.device))
        dataset, backbone, where = run_.dataset, run_.backbone, run_.tag()
    selection = select_calibrator(graph, candidates=args.candidates, score=args.score, parts=args.parts,
                                  seed=args.seed, dataset=dataset, backbone=backbone)
    print(f"AutoCal selection on {where}: {graph.num_nodes} nodes, {graph.num_classes} classes")
    print(selection.table())
    message = f"chosen: {selection.winner_name} (refitted on all {selection.num_nodes} calibration nodes)"
    if args.save.lower() != "none":
        selection.winner.save(args.save, metadata=selection.metadata())
        message += (f"; saved to {args.save} (simcalib.load_calibrator reads it, "
                    "simcalib.calibrators.saved_metadata the ranking)")
    print(message)
    return 0
