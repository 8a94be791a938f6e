"""``simcalib feature-signal``: how much a distance-aware temperature can gain on a benchmark
(:mod:`simcalib.analysis.feature_signal`), measured on the protocol's runs with their cached backbones."""

from __future__ import annotations

import argparse
from pathlib import Path

from simcalib.commands.common import (
    add_attention_option,
    add_data_options,
    attention_overrides,
    count_or_list,
)

SCORE_COLUMNS = ["train_nll", "train_ece", "crossfit_nll", "crossfit_ece", "test_nll", "test_ece", "t_ratio"]


COMMANDS = ("feature-signal",)  # the sub-commands register() adds


def register(sub) -> None:
    parser = sub.add_parser("feature-signal", help="temperature-scaling oracles on the distance to the class prototypes",
                            description="Fit one temperature, one per distance quintile and log T linear in log "
                                        "distance on each run's calibration fold; score them on held-out labelled "
                                        "nodes (training folds, calibration cross-fit) and, as hindsight, test nodes.")
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--backbone", required=True)
    parser.add_argument("--splits", type=count_or_list, default=list(range(5)), help="count or =list (default 5)")
    parser.add_argument("--inits", type=count_or_list, default=[0], help="count or =list (default =0)")
    parser.add_argument("--folds", type=count_or_list, default=list(range(3)), help="count or =list (default 3)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (part of a backbone's cache identity; 1 as `benchmark --workers`)")
    parser.add_argument("--out", default=None, help="write the per-run scores to OUT/<Dataset>_<Backbone>.csv")
    add_attention_option(parser)
    add_data_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import pandas as pd
    import torch

    from simcalib.analysis.feature_signal import oracle_scores
    from simcalib.experiment.protocol import (
        ProtocolSettings,
        backbone_options,
        calibration_graph,
        load_graph,
        make_runs,
        train_run_backbone,
    )
    from simcalib.similarity import nearest_prototype_distance
    from simcalib.store.integrity import BACKBONE_OPTIONS_COLUMN

    torch.set_num_threads(args.threads)
    settings = ProtocolSettings(data_root=args.data_root, mirror=args.data_mirror,
                                backbone_overrides=attention_overrides(args))
    rows = []
    for run in make_runs(args.dataset, args.backbone, args.splits, args.inits, args.folds):
        output = train_run_backbone(run, settings)
        graph, test_idx = calibration_graph(run, settings, output)
        labels = load_graph(run.dataset, settings).y
        distance = nearest_prototype_distance(graph.hidden, graph.labels, graph.train_idx, graph.num_classes,
                                              torch.arange(graph.num_nodes))
        for score in oracle_scores(output.logits, labels, distance, graph.train_idx, graph.cal_idx,
                                   torch.from_numpy(test_idx)):
            rows.append({"dataset": run.dataset, "backbone": run.backbone, "split": run.split, "init": run.init,
                         "fold": run.fold, **score, BACKBONE_OPTIONS_COLUMN: backbone_options(run, settings)})
    frame = pd.DataFrame(rows)
    summary = frame.groupby("map", sort=False)[SCORE_COLUMNS].mean()
    print(f"{run.dataset} {run.backbone}: mean over {len(frame) // summary.shape[0]} runs (ECE in %)")
    print(summary.assign(**{c: summary[c] * 100 for c in SCORE_COLUMNS if c.endswith("ece")}).round(4).to_string())
    if args.out:
        path = Path(args.out) / f"{run.dataset}_{run.backbone}.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        frame.to_csv(path, index=False)
        print(f"per-run scores: {path}")
    return 0
