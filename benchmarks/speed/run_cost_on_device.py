"""Seconds of one study run on one device: its backbone trained, then every calibrator of the study fitted.

What a run of the headline study (``study/offline.yaml``) costs on a GPU, beside the CPU costs of
``reports/performance/``: the run's backbone is trained on ``--device`` (no backbone cache), then each calibrator
the study resolves for that benchmark is fitted and evaluated there, with its ``fit_seconds`` (the fit alone, as
in ``results.csv``) and the wall time of fit and evaluation. The first calibrator's time includes building the
calibration graph; ``--warmup`` fits one calibrator first (not reported) so CUDA's start-up is not charged to it.

    python benchmarks/speed/run_cost_on_device.py --dataset Physics --backbone GAT --device cuda [--study study/offline.yaml]

Uses $SIMCALIB_DATA_MIRROR and $SIMCALIB_SPLITS_DIR like the CLI.
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import tempfile
import time
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def plan_run(study_path: Path, dataset: str, backbone: str, device: str, calibrators: list[str] | None):
    """(run, settings, [(calibrator, options)]) of the benchmark's first run as the study resolves it."""
    from simcalib.experiment.plan import plan_one_benchmark

    plan = plan_one_benchmark(study_path, dataset, backbone, overrides={"device": device})
    unknown = sorted(set(calibrators or ()) - set(plan.calibrator_names))
    if unknown:
        raise SystemExit(f"--calibrators: {', '.join(unknown)} not in {study_path.name}; "
                         f"choose from {', '.join(plan.calibrator_names)}")
    chosen = [(c.name, c.options_dict) for c in plan.calibrators if calibrators is None or c.name in calibrators]
    return plan.runs[0], plan.settings, chosen


def measure(study_path: Path, dataset: str, backbone: str, device: str, calibrators: list[str] | None = None,
            warmup: str | None = "TS") -> list[str]:
    import torch

    from simcalib.experiment.protocol import evaluate_calibrator, train_run_backbone

    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    run, settings, chosen = plan_run(study_path, dataset, backbone, device, calibrators)
    lines = [f"run cost on {device}: {run.tag()} of {study_path.name}, torch {torch.__version__}, {platform.node()}, "
             f"{time.strftime('%Y-%m-%d %H:%M:%S')}"]
    with tempfile.TemporaryDirectory() as cache:  # a fresh backbone cache: the backbone is trained here
        settings = dataclasses.replace(settings, cache_dir=cache)
        start = time.perf_counter()
        output = train_run_backbone(run, settings)
        sync()
        backbone_seconds = time.perf_counter() - start
        lines.append(f"backbone: {backbone_seconds:.2f} s wall ({output.epochs} epochs, best {output.best_epoch}; "
                     f"train_seconds {output.train_seconds:.2f})")
        if warmup:
            evaluate_calibrator(run, settings, warmup, {}, output)
        lines.append(f"{'calibrator':<22}{'fit s':>9}{'fit+eval s':>12}{'ECE':>8}")
        total_fit = 0.0
        for name, options in chosen:
            start = time.perf_counter()
            row = evaluate_calibrator(run, settings, name, options, output)
            sync()
            wall = time.perf_counter() - start
            total_fit += row["fit_seconds"]
            lines.append(f"{name:<22}{row['fit_seconds']:>9.2f}{wall:>12.2f}{row['ece']:>8.2f}")
        lines.append(f"{len(chosen)} calibrators: {total_fit:.1f} s of fits; the run: {backbone_seconds + total_fit:.1f} s")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--backbone", required=True, choices=["GCN", "GAT"])
    parser.add_argument("--device", default="cuda", help="cuda (default), cpu, cuda:1, ...")
    parser.add_argument("--study", type=Path, default=PROJECT_ROOT / "study" / "offline.yaml")
    parser.add_argument("--calibrators", help="comma-separated subset of the study's calibrators (default: all)")
    parser.add_argument("--out", type=Path, help="also write the lines to this file")
    args = parser.parse_args(argv)
    calibrators = [c.strip() for c in args.calibrators.split(",")] if args.calibrators else None
    lines = measure(args.study, args.dataset, args.backbone, args.device, calibrators)
    print("\n".join(lines))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
