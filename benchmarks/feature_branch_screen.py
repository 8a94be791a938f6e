"""Screen SimCalib variants on labelled nodes only: the calibration fold split per class in two halves, each
variant fitted on one half and scored (NLL, ECE, T_feat's coefficient of variation over all nodes) on the
other, both ways; test nodes are never read.

    python benchmarks/feature_branch_screen.py --benchmarks Cora:GCN Citeseer:GCN --splits 2 \
        --variants SimCalib_decay_all SimCalib 'SimCalib:feature_bound=0.5' 'SimCalib:stopping=train' \
        --out reports/feature_branch/screen/crossfit_cora_citeseer_gcn.csv

Backbones come from the cache (one torch thread, as `simcalib benchmark --workers N`).
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from feature_branch_trace import parse_variant

from simcalib.analysis.feature_signal import per_class_halves
from simcalib.experiment.protocol import ProtocolSettings, _built_calibrator, make_runs, train_run_backbone
from simcalib.metrics import ece


def crossfit(run, settings, name: str, options: dict) -> dict:
    output = train_run_backbone(run, settings)
    nll, calibration_error, cv = [], [], []
    for part in (0, 1):
        model, graph, _ = _built_calibrator(run, settings, name, options, output)
        first, second = per_class_halves(graph.labels[graph.cal_idx], 0)
        fit_nodes, score_nodes = (first, second) if part == 0 else (second, first)
        model.fit(graph, graph.cal_idx[fit_nodes])
        with torch.no_grad():
            probs = model.predict_proba(graph)[graph.cal_idx[score_nodes]]
            labels = graph.labels[graph.cal_idx[score_nodes]]
            nll.append(float(F.nll_loss(probs.clamp_min(1e-12).log(), labels)))
            calibration_error.append(100 * ece(probs.numpy(), labels.numpy()))
            t_feat = model.feature_temperature(graph).flatten()
            cv.append(float(t_feat.std() / t_feat.mean()))
    return {"crossfit_nll": np.mean(nll), "crossfit_ece": np.mean(calibration_error), "cv": np.mean(cv)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--benchmarks", nargs="+", default=["Cora:GCN", "Citeseer:GCN"])
    parser.add_argument("--splits", type=int, default=2)
    parser.add_argument("--variants", nargs="+", default=["SimCalib_decay_all", "SimCalib"])
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    settings = ProtocolSettings()
    rows = []
    for benchmark in args.benchmarks:
        dataset, backbone = benchmark.split(":")
        for run in make_runs(dataset, backbone, range(args.splits), range(1), range(3)):
            for text in args.variants:
                name, options = parse_variant(text)
                rows.append({"bench": benchmark, "label": text, "split": run.split, "fold": run.fold,
                             **crossfit(run, settings, name, options)})
    frame = pd.DataFrame(rows)
    if args.out:
        frame.to_csv(args.out, index=False)
    columns = ["crossfit_nll", "crossfit_ece", "cv"]
    print(frame.groupby(["bench", "label"], sort=False)[columns].mean().round(4).to_string())
    print(frame.groupby("label", sort=False)[columns].mean().round(4).to_string())


if __name__ == "__main__":
    main()
