"""Trace SimCalib's feature branch through a fit: why T_feat is (or is not) node-wise.

For each run and SimCalib variant, the fit of one grid point (w = 0.8, t = 0.5) is followed epoch by epoch:
the share of G_feat's hidden ReLU units active over all nodes, the norms of its weights and biases, its output
bias, T_feat's mean and std over all nodes, and the early-stopping NLL. Printed at a few epochs and at the
kept one.

    python benchmarks/feature_branch_trace.py --dataset cora --backbone gcn --folds 3 \
        --variants SimCalib_decay_all SimCalib 'SimCalib:decay=weights,weight_decay=0.05' 'SimCalib:weight_decay=0'

Backbones come from the cache (one torch thread, as `simcalib benchmark --workers N`).
"""

from __future__ import annotations

import argparse

import torch
import yaml

from simcalib.experiment.protocol import (
    ProtocolSettings,
    Run,
    _built_calibrator,
    make_runs,
    train_run_backbone,
)


def parse_variant(text: str) -> tuple[str, dict]:
    """``NAME`` or ``NAME:key=value,key=value`` (values read as YAML scalars)."""
    name, _, options = text.partition(":")
    pairs = [item.split("=", 1) for item in options.split(",") if item]
    return name, {key: yaml.safe_load(value) for key, value in pairs}


def trace_fit(run: Run, settings: ProtocolSettings, name: str, options: dict) -> tuple[list[tuple], object, object]:
    output = train_run_backbone(run, settings)
    model, graph, test_idx = _built_calibrator(run, settings, name, {**options, "w": 0.8, "t": 0.5}, output)
    trace = []
    unit_losses = model.unit_losses

    def recorded(g, nodes, labels, points=None):
        losses = unit_losses(g, nodes, labels, points)
        if not model.training:  # the early-stopping evaluation of this epoch
            gnn = model.feature_gnn
            x, _ = model.graph_inputs(g).feature
            hidden = torch.relu(x @ gnn.weight1[0] + gnn.bias1[0])
            t_feat = model.grid_feature_temperature(g)[0, :, 0]
            trace.append((float((hidden > 0).float().mean()), float(gnn.weight1.norm()), float(gnn.weight2.norm()),
                          float(gnn.bias1.norm()), float(gnn.bias2.flatten()[0]), float(t_feat.mean()),
                          float(t_feat.std()), float(losses.flatten()[0])))
        return losses

    model.unit_losses = recorded
    model.fit(graph)
    return trace, model, torch.from_numpy(test_idx)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="cora")
    parser.add_argument("--backbone", default="gcn")
    parser.add_argument("--split", type=int, default=0)
    parser.add_argument("--init", type=int, default=0)
    parser.add_argument("--folds", type=int, default=3)
    parser.add_argument("--variants", nargs="+", default=["SimCalib_decay_all", "SimCalib"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    settings = ProtocolSettings()
    for fold in range(args.folds):
        run = make_runs(args.dataset, args.backbone, [args.split], [args.init], [fold])[0]
        for text in args.variants:
            name, options = parse_variant(text)
            trace, model, test_idx = trace_fit(run, settings, name, options)
            t_feat = model.feature_temperature(model._inputs_graph)[test_idx].flatten()
            best = model.fit_info["best_epoch"]
            print(f"{run.tag()} {text}: epochs {model.fit_info['epochs']}, kept {best}; "
                  f"T_feat over test nodes {float(t_feat.mean()):.3f} +- {float(t_feat.std()):.4f}")
            for epoch in sorted({0, 10, 50, 100, 200, best, len(trace) - 1}):
                if 0 <= epoch < len(trace):
                    alive, w1, w2, b1, b2, mean, std, stop = trace[epoch]
                    print(f"  epoch {epoch:4d}{'*' if epoch == best else ' '} ReLU active {alive:.2f}  |W1| {w1:.3f}  "
                          f"|W2| {w2:.3f}  |b1| {b1:.3f}  b2 {b2:+.3f}  T_feat {mean:.3f} +- {std:.4f}  stop NLL {stop:.4f}")


if __name__ == "__main__":
    main()
