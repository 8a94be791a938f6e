"""Before/after: the test metrics of a calibrator with its default options and with its tuned options.

Both sides run the ordinary protocol (:func:`simcalib.experiment.executor.run_benchmark`) on the same runs and
backbones, into ``OUT/default`` and ``OUT/tuned`` (resumable like any benchmark). The per-run pairs are
compared with a paired Wilcoxon signed-rank test on ECE. Runs used by the search are reported apart
from the others: the search never saw test labels, but the held-out runs are the cleaner check that the
tuned options generalise beyond the runs they were chosen on.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import wilcoxon

from simcalib.experiment.executor import BenchmarkRequest, run_benchmark
from simcalib.experiment.protocol import ProtocolSettings, Run

RUN_COLUMNS = ["dataset", "backbone", "split", "init", "fold"]
COMPARED_METRICS = ("ece", "ace", "classwise_ece", "kde_ece", "nll", "brier", "accuracy")


def compare_tuned(
    dataset: str,
    backbone: str,
    calibrator: str,
    tuned_options: dict,
    settings: ProtocolSettings,
    out_dir: str | os.PathLike,
    splits: Sequence[int] = range(5),
    inits: Sequence[int] = range(5),
    folds: Sequence[int] = range(3),
    tuning_runs: Iterable[Run] = (),
    progress: Callable[[Iterable], Iterable] | None = None,
) -> pd.DataFrame:
    """One row per run: ``<metric>_default``, ``<metric>_tuned`` and ``tuning_run`` (used by the search)."""
    out_dir = Path(out_dir)
    sides = {}
    for side, options in (("default", {}), ("tuned", dict(tuned_options))):
        request = BenchmarkRequest(dataset, backbone, [calibrator], list(splits), list(inits), list(folds),
                                   calibrator_options={calibrator: options} if options else {})
        sides[side] = run_benchmark(request, settings, out_dir / side, progress=progress)
    keep = [*RUN_COLUMNS, *COMPARED_METRICS]
    paired = sides["default"][keep].merge(sides["tuned"][keep], on=RUN_COLUMNS, suffixes=("_default", "_tuned"),
                                          validate="one_to_one")
    used = {(r.split, r.init, r.fold) for r in tuning_runs}
    paired["tuning_run"] = [(s, i, f) in used for s, i, f in zip(paired["split"], paired["init"], paired["fold"])]
    return paired.sort_values(["split", "init", "fold"]).reset_index(drop=True)


def summarize_comparison(paired: pd.DataFrame, metrics: Sequence[str] = ("ece", "nll")) -> pd.DataFrame:
    """Mean and population std per side, the mean paired change, tuned wins and the Wilcoxon p-value,
    over all runs, the search's runs and the held-out runs."""
    rows = []
    groups = [("all runs", paired), ("runs used by the search", paired[paired["tuning_run"]]),
              ("held-out runs", paired[~paired["tuning_run"]])]
    for label, frame in groups:
        if frame.empty:
            continue
        for metric in metrics:
            before, after = frame[f"{metric}_default"].to_numpy(), frame[f"{metric}_tuned"].to_numpy()
            diff = after - before
            p_value = float(wilcoxon(after, before).pvalue) if len(frame) > 1 and np.any(diff != 0) else float("nan")
            rows.append({
                "runs": label, "n": len(frame), "metric": metric,
                "default_mean": before.mean(), "default_std": before.std(ddof=0),
                "tuned_mean": after.mean(), "tuned_std": after.std(ddof=0),
                "change_mean": diff.mean(), "tuned_better": int((diff < 0).sum()), "wilcoxon_p": p_value,
            })
    return pd.DataFrame(rows)


def write_report(path: str | os.PathLike, paired: pd.DataFrame, summary: pd.DataFrame, context: dict) -> tuple[Path, Path]:
    """``path`` (markdown) and the per-run pairs beside it as CSV; ``context`` holds the search facts."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    csv_path = path.with_suffix(".csv")
    paired.to_csv(csv_path, index=False, float_format="%.6g")
    lines = [f"# {context['title']}", ""]
    lines += context.get("intro", [])
    lines += ["", "## Test metrics before and after tuning", "",
              "ECE in percent, NLL in nats; mean ± population std over runs; change = tuned − default "
              "(negative is better); p: paired Wilcoxon signed-rank test.", "",
              "| runs | n | metric | default | tuned | change | tuned better | p |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in summary.itertuples(index=False):
        digits = 4 if row.metric in ("nll", "brier") else 2
        lines.append(f"| {row.runs} | {row.n} | {row.metric} | {row.default_mean:.{digits}f} ± {row.default_std:.{digits}f} "
                     f"| {row.tuned_mean:.{digits}f} ± {row.tuned_std:.{digits}f} | {row.change_mean:+.{digits}f} "
                     f"| {row.tuned_better}/{row.n} | {row.wilcoxon_p:.3g} |")
    for title, body in context.get("sections", []):
        lines += ["", f"## {title}", "", *body]
    lines += ["", f"Per-run pairs: `{csv_path.name}`.", ""]
    path.write_text("\n".join(lines))
    return path, csv_path


__all__ = ["COMPARED_METRICS", "compare_tuned", "summarize_comparison", "write_report"]
