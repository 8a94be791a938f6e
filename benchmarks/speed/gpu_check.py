"""GPU readiness: the study's CUDA paths against their CPU counterparts, and one epoch's time on CUDA.

Four checks, run on a machine with a CUDA device (``make gpu-check``; not part of the test suite):

1. **Calibration on CUDA** (``calibration``). The quick study's smallest configuration: its first benchmark (Cora x GCN), its
   first run (split 0, init 0, fold 0) and every calibrator with the options ``study/quick.yaml`` gives them.
   The backbone is trained once on CPU; each calibrator is then fitted and evaluated on it twice, with
   ``device: cpu`` and ``device: cuda``, and the two rows are compared (:func:`compare_rows`):

   - ``accuracy`` of an accuracy-preserving calibrator (``accuracy_preserving``: its argmax is the logits'
     argmax) must be equal: both rows take the argmax of the same backbone logits.
   - ``accuracy`` of VS and Dirichlet, and the binned calibration metrics (ECE, ACE, classwise ECE, KDE-ECE,
     in %) may differ by at most ``BINNED_TOLERANCE_PP`` = 0.5 percentage points. A calibrator's fit sums in
     another order on CUDA (float32 reductions, atomics), so its parameters differ by float32 rounding
     (relative ~1e-6) amplified by the optimiser's iterations; the probabilities then move by ~1e-5, which
     changes a binned metric only through the test nodes whose confidence sits at a bin edge (or, for VS and
     Dirichlet, at a tie of the two top classes). One such node changes ECE by at most 2/N_test: on this
     run's 1,957 test nodes 0.1 pp, so 0.5 pp allows five of them and flags anything systematic (a wrong
     device or a mis-seeded fit moves ECE by whole points).
   - ``nll`` and ``brier`` are smooth in the probabilities: relative ``SMOOTH_RTOL`` = 1e-3, three orders
     above float32 rounding through an iterative fit, far below the differences between calibrators.
   - ``mce`` (the maximum over bins, where one node in a sparse bin moves it by tens of points) is printed,
     not compared.
   - A calibrator whose fit draws dropout masks (:func:`fit_draws_dropout`: CaGCN, GETS, WATS, SimCalib's
     feature branch) draws them on CUDA from CUDA's generator, so its CUDA fit is another random draw, as a
     backbone trained on CUDA is (check 2): only its ECE and accuracy are compared, flagged beyond
     ``DROPOUT_FLAG_PP`` = 5 points (the ECE of these calibrators spreads by 1.0-1.9 points, GETS_holdout's
     by 3.7, across the 75 runs of Cora GCN in reports/offline).
   - A calibrator that fails on either device is reported with the exception and where it was raised; the
     others still run.

2. **Backbone training on CUDA** (``training``). The same run trained on CUDA and evaluated with UnCal, printed beside the
   CPU row. Not compared for equality: CUDA draws dropout masks from its own generator (Philox), not the CPU's
   (mt19937), so a backbone trained on CUDA from the same seed is another random draw of the protocol, as a
   different init would be. Flagged only when its test accuracy is more than ``TRAINING_FLAG_PP`` = 5 points
   from the CPU backbone's, about three times the spread of Cora GCN accuracy between inits.
3. **GAT attention kernels on CUDA** (``kernels``): ``tests/backbones/test_gat_attention.py`` with
   ``SIMCALIB_TEST_DEVICE=cuda`` (its layer and model equality tests run on that device; the dropout-mask
   tests are CPU-only and skip).
4. **Epoch times** (``timing``): one training epoch (training step and evaluation forward, as in ``train_backbone``) of
   GCN and GAT on Computers, Photo, CS and Physics on CUDA, median of ``--repeats`` after warm-up.

    python benchmarks/speed/gpu_check.py [--out reports/performance/gpu_check.txt] [--repeats 20] [--skip-timing]
                                   [--checks timing,kernels,training,calibration]

Without a CUDA device it prints one line (``gpu-check: no CUDA device ...``) and exits with status 2, so
that ``make gpu-check`` on a CPU-only machine fails instead of passing with nothing checked. Exit status 1:
a check failed; 0: all passed. Uses $SIMCALIB_DATA_MIRROR and $SIMCALIB_SPLITS_DIR like the CLI.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
QUICK_STUDY = PROJECT_ROOT / "study" / "quick.yaml"
NO_CUDA_EXIT = 2

BINNED_TOLERANCE_PP = 0.5
BINNED_METRICS = ("ece", "ace", "classwise_ece", "kde_ece")
SMOOTH_RTOL = 1e-3
SMOOTH_METRICS = ("nll", "brier")
TRAINING_FLAG_PP = 5.0
DROPOUT_FLAG_PP = 5.0
TIMED_DATASETS = ("Computers", "Photo", "CS", "Physics")
TIMED_BACKBONES = ("GCN", "GAT")
CHECK_NAMES = ("calibration", "training", "kernels", "timing")  # the default order


def cuda_unavailable_reason() -> str | None:
    """None when a CUDA device can be used; else the one-line reason."""
    import torch

    if torch.version.cuda is None:
        return f"gpu-check: no CUDA device (torch {torch.__version__} is a CPU-only build); run it on a machine " \
               "with an NVIDIA GPU and a CUDA build of torch"
    if not torch.cuda.is_available():
        return f"gpu-check: no CUDA device visible to torch {torch.__version__} (CUDA {torch.version.cuda}); " \
               "check nvidia-smi and CUDA_VISIBLE_DEVICES"
    return None


def raised_at(exc: BaseException) -> str:
    """``path:line`` of the innermost frame of ``exc`` inside the project (else the innermost frame)."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "no traceback"
    ours = [f for f in frames if Path(f.filename).resolve().is_relative_to(PROJECT_ROOT)]
    frame = (ours or frames)[-1]
    path = Path(frame.filename).resolve()
    return f"{path.relative_to(PROJECT_ROOT) if path.is_relative_to(PROJECT_ROOT) else path}:{frame.lineno}"


def fit_draws_dropout(model) -> bool:
    """Whether fitting ``model`` draws dropout masks: some submodule holds a positive ``dropout`` rate or is an
    ``nn.Dropout`` with p > 0. Such a fit on CUDA draws its masks from CUDA's generator, another stream."""
    import torch

    return any((isinstance(m, torch.nn.Dropout) and m.p > 0)
               or (isinstance(getattr(m, "dropout", None), float) and m.dropout > 0)
               for m in model.modules())


def compare_rows(cpu: list[dict], gpu: list[dict], accuracy_preserving: dict[str, bool],
                 dropout: frozenset[str] = frozenset()) -> list[str]:
    """Differences between the CPU and CUDA rows of the same runs beyond the tolerances of the module
    docstring, one line each (empty: they agree). Rows are matched on (calibrator, split, init, fold).
    Calibrators in ``dropout`` (fits that draw dropout masks) are another random draw on CUDA: only their ECE
    and accuracy are compared, flagged beyond ``DROPOUT_FLAG_PP``."""
    key = lambda row: (row["calibrator"], row["split"], row["init"], row["fold"])  # noqa: E731
    by_key = {key(row): row for row in gpu}
    problems = []
    if sorted(map(key, cpu)) != sorted(by_key):
        problems.append(f"the CPU and CUDA rows are of different runs: {sorted(map(key, cpu))} vs {sorted(by_key)}")
    for row in cpu:
        other = by_key.get(key(row))
        if other is None:
            continue
        name = row["calibrator"]
        where = f"{name} s{row['split']} i{row['init']} f{row['fold']}"
        metrics = ("ece", "accuracy") if name in dropout else (*BINNED_METRICS, *SMOOTH_METRICS, "accuracy")
        for metric in metrics:
            a, b = float(row[metric]), float(other[metric])
            if not (math.isfinite(a) and math.isfinite(b)):
                problems.append(f"{where}: {metric} is not finite (CPU {a}, CUDA {b})")
                continue
            if name in dropout:
                bound, what = DROPOUT_FLAG_PP, f"{DROPOUT_FLAG_PP} pp (dropout: another random draw)"
            elif metric == "accuracy" and accuracy_preserving.get(name, False):
                bound, what = 0.0, "equal (accuracy-preserving)"
            elif metric in SMOOTH_METRICS:
                bound, what = SMOOTH_RTOL * max(abs(a), abs(b)), f"relative {SMOOTH_RTOL:g}"
            else:
                bound, what = BINNED_TOLERANCE_PP, f"{BINNED_TOLERANCE_PP} pp"
            if abs(a - b) > bound:
                problems.append(f"{where}: {metric} CPU {a:.6g} vs CUDA {b:.6g} (|diff| {abs(a - b):.3g}; "
                                f"allowed {what})")
    return problems


def _quick_run():
    """(run, settings, calibrators) of the quick study's first benchmark's first run."""
    from simcalib.experiment.plan import plan_one_benchmark

    plan = plan_one_benchmark(QUICK_STUDY)
    return plan.runs[0], plan.settings, [(c.name, c.options_dict) for c in plan.calibrators]


def check_calibration(lines: list[str], device: str = "cuda") -> list[str]:
    import dataclasses
    import tempfile

    from simcalib.calibrators import CALIBRATORS, build_calibrator
    from simcalib.data import get_spec
    from simcalib.experiment.protocol import evaluate_calibrator, train_run_backbone

    run, settings, calibrators = _quick_run()
    lines.append(f"1. calibration on CUDA: {run.tag()} (backbone trained on CPU), {len(calibrators)} calibrators")
    lines.append(f"   {'calibrator':<20}{'ECE cpu':>10}{'ECE cuda':>10}{'NLL cpu':>10}{'NLL cuda':>10}"
                 f"{'acc cpu':>9}{'acc cuda':>9}{'MCE cpu':>9}{'MCE cuda':>9}")
    rows, failures = {"cpu": [], "cuda": []}, []
    with tempfile.TemporaryDirectory() as cache:
        cpu_settings = dataclasses.replace(settings, device="cpu", cache_dir=cache)
        gpu_settings = dataclasses.replace(settings, device=device, cache_dir=cache)
        output = train_run_backbone(run, cpu_settings)
        for name, options in calibrators:
            pair = {}
            for label, device_settings in (("cpu", cpu_settings), ("cuda", gpu_settings)):
                try:
                    pair[label] = evaluate_calibrator(run, device_settings, name, options, output)
                except Exception as exc:  # reported with where it was raised, and the other calibrators still run
                    failures.append(f"{name} on {label}: {type(exc).__name__}: {exc} ({raised_at(exc)})")
            if len(pair) < 2:
                line = f"   {name:<20}failed: {failures[-1]}"
            else:
                a, b = pair["cpu"], pair["cuda"]
                rows["cpu"].append(a)
                rows["cuda"].append(b)
                line = (f"   {name:<20}{a['ece']:>10.4f}{b['ece']:>10.4f}{a['nll']:>10.5f}{b['nll']:>10.5f}"
                        f"{a['accuracy']:>9.3f}{b['accuracy']:>9.3f}{a['mce']:>9.2f}{b['mce']:>9.2f}")
            lines.append(line)
            print(line, file=sys.stderr, flush=True)  # progress: a long check cut short still shows its rows
    preserving = {name: CALIBRATORS[name].cls.accuracy_preserving for name, _ in calibrators}
    dropout = frozenset(name for name, options in calibrators if fit_draws_dropout(
        build_calibrator(name, get_spec(run.dataset).num_classes, run.dataset, run.backbone, **options)))
    lines.append(f"   fits that draw dropout masks (another random draw on CUDA; ECE and accuracy flagged beyond "
                 f"{DROPOUT_FLAG_PP} pp): {', '.join(sorted(dropout)) or 'none'}")
    return failures + compare_rows(rows["cpu"], rows["cuda"], preserving, dropout)


def check_training(lines: list[str], device: str = "cuda") -> list[str]:
    import dataclasses
    import tempfile

    from simcalib.experiment.protocol import evaluate_calibrator, train_run_backbone

    run, settings, _ = _quick_run()
    rows = {}
    for label, name in (("cpu", "cpu"), ("cuda", device)):
        with tempfile.TemporaryDirectory() as cache:
            device_settings = dataclasses.replace(settings, device=name, cache_dir=cache)
            output = train_run_backbone(run, device_settings)
            rows[label] = (output, evaluate_calibrator(run, device_settings, "UnCal", {}, output))
    lines.append(f"2. backbone training on CUDA: {run.tag()}, UnCal (another dropout stream: not compared for equality)")
    for label, (output, row) in rows.items():
        lines.append(f"   {label:<5} best epoch {output.best_epoch:4d} of {output.epochs:4d}, {output.train_seconds:7.2f} s; "
                     f"test accuracy {row['accuracy']:.2f}%, ECE {row['ece']:.2f}%, NLL {row['nll']:.4f}")
    gap = abs(rows["cpu"][1]["accuracy"] - rows["cuda"][1]["accuracy"])
    if gap > TRAINING_FLAG_PP:
        return [f"backbone trained on CUDA: test accuracy {gap:.2f} points from the CPU backbone's "
                f"(flagged above {TRAINING_FLAG_PP})"]
    return []


def check_gat_kernels(lines: list[str]) -> list[str]:
    env = {**os.environ, "SIMCALIB_TEST_DEVICE": "cuda"}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/backbones/test_gat_attention.py"]
    done = subprocess.run(command, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True)
    summary = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
    lines.append(f"3. GAT attention kernels on CUDA: SIMCALIB_TEST_DEVICE=cuda {' '.join(command[1:])}: {summary}")
    if done.returncode != 0:
        lines.extend("   " + line for line in done.stdout.splitlines()[-40:])
        return [f"the GAT attention tests failed on CUDA ({summary})"]
    return []


def epoch_seconds(dataset: str, backbone: str, repeats: int, warmup: int = 3, device: str = "cuda") -> list[float]:
    """Seconds of one epoch of ``train_backbone`` (training step, then evaluation forward) on ``device``: the
    epoch of ``benchmarks/speed/gat_attention_speed.py``, with the device synchronised around each part."""
    import torch
    from gat_attention_speed import eval_forward, setup_backbone, train_step  # same folder: run as a script

    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    model, optimizer, x, graph, y, train_idx = setup_backbone(dataset, backbone=backbone, device=device)
    times = []
    for step in range(warmup + repeats):
        seconds = train_step(model, optimizer, x, graph, y, train_idx, sync) + eval_forward(model, x, graph, sync)
        if step >= warmup:
            times.append(seconds)
    return times


def time_epochs(lines: list[str], repeats: int) -> list[str]:
    import torch

    lines.append(f"4. one training epoch on CUDA ({torch.cuda.get_device_name()}), median [min-max] of {repeats}, ms")
    for dataset in TIMED_DATASETS:
        for backbone in TIMED_BACKBONES:
            ms = [s * 1e3 for s in epoch_seconds(dataset, backbone, repeats)]
            lines.append(f"   {dataset:<10}{backbone:<4}{statistics.median(ms):9.2f} [{min(ms):.2f}-{max(ms):.2f}]")
    return []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="also write the report to this file (e.g. reports/performance/gpu_check.txt)")
    parser.add_argument("--repeats", type=int, default=20, help="timed epochs per backbone (after 3 warm-up epochs)")
    parser.add_argument("--skip-timing", action="store_true", help="only the CPU/CUDA comparisons and the kernel tests")
    parser.add_argument("--checks", default=",".join(CHECK_NAMES),
                        help=f"comma-separated checks to run, in this order (default: {','.join(CHECK_NAMES)}); "
                             "on a lease of limited time, the short ones first")
    args = parser.parse_args(argv)
    names = [name.strip() for name in args.checks.split(",") if name.strip()]
    unknown = sorted(set(names) - set(CHECK_NAMES))
    if unknown or not names:
        parser.error(f"--checks: unknown check(s) {', '.join(unknown) or '(none given)'}; "
                     f"choose from {', '.join(CHECK_NAMES)}")
    if args.skip_timing:
        names = [name for name in names if name != "timing"]

    reason = cuda_unavailable_reason()
    if reason:
        print(reason)
        return NO_CUDA_EXIT

    import torch

    lines = [f"gpu-check: {torch.cuda.get_device_name()}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
             f"{platform.node()}, {time.strftime('%Y-%m-%d %H:%M:%S')}"]
    problems: list[str] = []
    checks = {"calibration": check_calibration, "training": check_training, "kernels": check_gat_kernels,
              "timing": lambda out: time_epochs(out, args.repeats)}
    for name in names:
        start = len(lines)
        try:
            problems += checks[name](lines)
        except Exception as exc:  # one broken check must not hide the others' results
            problems.append(f"check {name} stopped: {type(exc).__name__}: {exc}")
            lines.append(f"   check {name} stopped: {type(exc).__name__}: {exc}")
        print("\n".join(lines[start:]), flush=True)
    lines.append("gpu-check: " + ("all checks passed" if not problems else f"{len(problems)} problem(s):"))
    lines.extend(f"   {p}" for p in problems)
    print("\n".join(lines[-1 - len(problems):]))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")
        print(f"written to {args.out}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
