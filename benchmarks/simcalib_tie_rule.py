"""What the early-stopping tie rule costs SimCalib's batched grid, and what changing it would change.

Under the common calibrator rule (the GATS code's `<=`), an epoch whose early-stopping NLL *equals* the best so
far resets the patience counter. A grid unit whose NLL stops changing at all then trains to the 2000-epoch cap,
and a batched grid costs the epochs of its longest unit. For every run of a benchmark (backbones from the
cache) this fits GATS and SimCalib under both rules (``tie_resets_patience`` True, the GATS code's, and False),
each seeded as the protocol seeds it, and records per fit: seconds, the epochs of the longest unit (GATS: its
epochs), the chosen (w, t) and the test ECE. Epoch counts do not depend on the machine's load; seconds do.

    python benchmarks/simcalib_tie_rule.py --dataset Cora --backbone GCN --out reports/simcalib_joint/tie_rule
"""

from __future__ import annotations

import argparse
import os
import warnings
from pathlib import Path

import pandas as pd

VARIANTS = {"GATS": ("GATS", {}), "SimCalib_ties_reset": ("SimCalib", {"tie_resets_patience": True}),
            "SimCalib_strict_ties": ("SimCalib", {"tie_resets_patience": False})}


def fit_row(run, settings, output, label: str) -> dict:
    """One fit of ``label`` (see VARIANTS) on ``run``: seconds, longest unit's epochs, (w, t), test metrics."""
    import torch

    from simcalib.metrics import compute_metrics
    from simcalib.protocol import fit_calibrator, load_graph

    name, options = VARIANTS[label]
    fitted = fit_calibrator(run, settings, name, options, output)  # seeded as the protocol seeds this calibrator
    model, graph, test_idx, seconds = fitted.model, fitted.graph, fitted.test_idx, fitted.fit_seconds
    info = model.fit_info
    epochs = (max(max(p["epochs"]) for p in info["grid"]) if "grid" in info else info["epochs"])
    with torch.no_grad():
        probs = model.predict_proba(graph).cpu()[test_idx]
    metrics = compute_metrics(probs, load_graph(run.dataset, settings).y[test_idx])
    return {"variant": label, "split": run.split, "init": run.init, "fold": run.fold, "seconds": seconds,
            "longest_unit_epochs": epochs, "w": info.get("w"), "t": info.get("t"),
            "grid_score": info.get("score"),  # the chosen point's labelled-node criterion (SimCalib only)
            "ece": metrics["ece"], "nll": metrics["nll"], "load1": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="Cora")
    parser.add_argument("--backbone", default="GCN")
    parser.add_argument("--splits", type=int, default=5)
    parser.add_argument("--inits", type=int, default=5)
    parser.add_argument("--out", default="results/tie_rule")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=UserWarning)

    import torch

    from simcalib.protocol import ProtocolSettings, Run, train_run_backbone

    torch.set_num_threads(1)
    settings = ProtocolSettings()
    out = Path(args.out) / f"{args.dataset}_{args.backbone}.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    done = pd.read_csv(out) if out.is_file() else pd.DataFrame(columns=["split", "init", "fold"])
    finished = {tuple(r) for r in done[["split", "init", "fold"]].itertuples(index=False)}
    for split in range(args.splits):
        for init in range(args.inits):
            for fold in range(3):
                if (split, init, fold) in finished:
                    continue
                run = Run(args.dataset, args.backbone, split, init, fold)
                output = train_run_backbone(run, settings)
                rows = pd.DataFrame([fit_row(run, settings, output, label) for label in VARIANTS])
                rows.to_csv(out, mode="a", header=not out.is_file(), index=False)  # a run at a time: resumable
    summarize(pd.read_csv(out))


def summarize(frame: pd.DataFrame) -> None:
    from scipy.stats import wilcoxon

    wide = frame.pivot_table(index=["split", "init", "fold"], columns="variant",
                             values=["seconds", "longest_unit_epochs", "ece"])
    runs = len(wide)
    for label in ("SimCalib_ties_reset", "SimCalib_strict_ties"):
        epochs = wide["longest_unit_epochs"][label]
        ratio = wide["seconds"][label] / wide["seconds"]["GATS"]
        print(f"{label:<21} runs {runs}: longest unit median {epochs.median():.0f} epochs (at the 2000 cap: "
              f"{int((epochs >= 2000).sum())}), GATS median {wide['longest_unit_epochs']['GATS'].median():.0f}; "
              f"fit seconds / GATS's per run: median {ratio.median():.2f}x, runs <= 2x: {int((ratio <= 2).sum())}/{runs}; "
              f"ECE {wide['ece'][label].mean():.3f}")
    simcalib = frame[frame["variant"] != "GATS"].pivot_table(index=["split", "init", "fold"], columns="variant",
                                                           values=["w", "t", "grid_score"])
    same_point = ((simcalib["w"]["SimCalib_ties_reset"] == simcalib["w"]["SimCalib_strict_ties"])
                  & (simcalib["t"]["SimCalib_ties_reset"] == simcalib["t"]["SimCalib_strict_ties"]))
    score_diff = (simcalib["grid_score"]["SimCalib_strict_ties"] - simcalib["grid_score"]["SimCalib_ties_reset"]).abs()
    print(f"labelled nodes: same chosen (w, t) in {int(same_point.sum())}/{runs} runs; |chosen score difference| "
          f"max {score_diff.max():.2e}, runs above 1e-4: {int((score_diff > 1e-4).sum())}")
    diff = wide["ece"]["SimCalib_strict_ties"] - wide["ece"]["SimCalib_ties_reset"]
    changed = int((diff.abs() > 1e-9).sum())
    p = wilcoxon(diff[diff.abs() > 1e-9]).pvalue if changed >= 5 else float("nan")
    print(f"strict - ties reset ECE: mean {diff.mean():+.2e}, max |diff| {diff.abs().max():.2e}, runs changed {changed}/{runs}"
          f", Wilcoxon p {p:.3g} (changed runs)")


if __name__ == "__main__":
    main()
