"""Diagnostic: GETS with the common training rule instead of the GETS authors' per-dataset config.

Options lr 0.01, 2000 epochs, patience 100, no weight decay and Cora's sizes (dropout 0.5, feature and degree
widths 16), on init 0 of every split and fold of one benchmark (15 runs); writes the results rows as CSV.

    python benchmarks/gets_training_rule_check.py Citeseer GCN out.csv
"""

import sys

import pandas as pd
import torch

from simcalib.protocol import ProtocolSettings, Run, evaluate_calibrator

COMMON_RULE = {"lr": 0.01, "weight_decay": 0.0, "dropout": 0.5, "feature_dim": 16, "degree_dim": 16,
               "max_epochs": 2000, "patience": 100}


def main() -> None:
    dataset, backbone, out = sys.argv[1:4]
    torch.set_num_threads(1)  # the backbone cache's key
    settings = ProtocolSettings()
    rows = []
    for split in range(5):
        for fold in range(3):
            row = evaluate_calibrator(Run(dataset, backbone, split, 0, fold), settings, "GETS", COMMON_RULE)
            rows.append({**row, "calibrator": "GETS_common_rule"})
            print(split, fold, round(row["ece"], 3), flush=True)
            pd.DataFrame(rows).to_csv(out, index=False)


if __name__ == "__main__":
    main()
