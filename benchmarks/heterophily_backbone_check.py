"""Backbone sanity check on the heterophilous graphs: GCN and GAT (the GATS protocol's backbones and training
rule, weight decay 0, GAT with the csr attention kernel as in study/heterophily.yaml) trained on each
dataset's OWN fixed split (train / validation / test masks of the files; Actor 48/32/20, the others 50/25/25),
test accuracy and, on the binary graphs, test ROC-AUC of p(y = 1) (simcalib.metrics.roc_auc), beside the
share of the majority class and whether the backbone predicts one class only.

    python benchmarks/heterophily_backbone_check.py [--datasets Actor,minesweeper] [--backbones GCN,GAT]
        [--split 0] [--seed 0] [--threads 1] [--max-epochs N] [--only GAT:tolokers] [--out FILE.jsonl]

One line of JSON per (dataset, backbone): the numbers, epochs trained, best epoch and seconds. Uses
$SIMCALIB_DATA_MIRROR like the CLI.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from simcalib.backbones import BackboneConfig, train_backbone
from simcalib.data import get_spec, load_dataset
from simcalib.metrics import accuracy, roc_auc

DATASETS = ["Actor", "chameleon_filtered", "squirrel_filtered", "minesweeper", "tolokers"]


def check(dataset: str, backbone: str, split: int, seed: int, max_epochs: int | None) -> dict:
    graph = load_dataset(dataset)
    if graph.fixed_masks is None:
        raise SystemExit(f"{dataset} ships no fixed splits")
    train, val, test = (mask[:, split].nonzero().view(-1) for mask in graph.fixed_masks)
    options = {"weight_decay": get_spec(dataset).backbone_weight_decay}
    if backbone == "GAT":
        options["attention"] = "csr"
    if max_epochs is not None:
        options["max_epochs"] = max_epochs
    config = BackboneConfig(backbone, **options)
    start = time.perf_counter()
    output = train_backbone(graph, train, val, config, seed, "cpu")
    seconds = time.perf_counter() - start
    probs = torch.softmax(output.logits[test], dim=1).numpy()
    y = graph.y[test].numpy()
    row = {"dataset": dataset, "backbone": backbone, "split": split, "seed": seed,
           "train": len(train), "val": len(val), "test": len(test),
           "accuracy": round(100 * accuracy(probs, y), 2),
           "roc_auc": round(100 * roc_auc(probs, y), 2) if graph.num_classes == 2 else None,
           "majority_share": round(100 * float(np.bincount(y).max() / len(y)), 2),
           "one_class": bool(len(np.unique(probs.argmax(1))) == 1),
           "epochs": output.epochs, "best_epoch": output.best_epoch, "max_epochs": config.max_epochs,
           "seconds": round(seconds, 1), "seconds_per_epoch": round(seconds / max(output.epochs, 1), 4)}
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--backbones", default="GCN,GAT")
    parser.add_argument("--split", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-epochs", type=int, default=None, help="cap (default: the protocol's 2000)")
    parser.add_argument("--skip", default="", help="backbone:dataset pairs to leave out, comma-separated")
    parser.add_argument("--out", default=None, help="append the JSON lines to this file too")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    skip = {tuple(item.split(":")) for item in args.skip.split(",") if item}
    for dataset in args.datasets.split(","):
        for backbone in args.backbones.split(","):
            if (backbone, dataset) in skip:
                continue
            line = json.dumps(check(dataset, backbone, args.split, args.seed, args.max_epochs))
            print(line, flush=True)
            if args.out:
                with open(args.out, "a") as fh:
                    fh.write(line + "\n")


if __name__ == "__main__":
    main()
