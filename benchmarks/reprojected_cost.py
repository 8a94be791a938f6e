"""The headline study's CPU cost per benchmark, measured before and re-projected after the adopted speed-ups.

Every number is read from committed files:

* **before**, the 12 benchmarks of the flow's pass (``reports/offline/provenance.yaml``, ``flow_pass``): per
  benchmark its ``backbone_train_seconds`` (the backbone cache's record of its 75 trainings) and
  ``calibrator_fit_seconds`` (the rows' ``fit_seconds``, less the recorded stops); their sum over the
  benchmarks is the pass's measured CPU cost (the provenance's ``cpu_hours`` summed: 81.3). The share of the
  GETS family (GETS, GETS_ap, GETS_holdout) in a benchmark's fit seconds is its share in the committed rows'
  ``fit_seconds`` of the study's calibrators.
* **Pubmed GCN** (``pubmed_pass``, stopped part way): its fits are the committed rows' mean fit seconds per
  calibrator per run; its backbone per run is the wall time of its passes (the first and each resumed one) over its
  finished runs less their fits (an upper bound: the pass also held the interrupted run, the flow's own work and, on a shared machine, waited
  for the cores).
* **Pubmed GAT** (no run yet): Pubmed GCN's backbone and fits times the median over the six other graphs of
  the GAT / GCN ratio of backbone seconds and of fit seconds: a projection, not a measurement.
* **after**: each benchmark's parts times the measured ratio (with / without) of each adopted exact speed-up:
  GETS's kept products and cached structures (``reports/performance/exact_speedups/fit_seconds_*.txt``; a
  ratio counts only where the repeats with and without the reuse do not overlap, else 1: not resolved). A
  ratio measured on one graph is applied to the graphs of its size class (Cora and Citeseer; the larger
  graphs), which is a projection beyond the measured run; and the GCN backbones' shared first layer
  (``reports/performance/exact_speedups/gcn_first_layer_epochs*.txt``: CPU seconds per epoch with / without, the
  median of interleaved repeats, counted only where the repeats do not overlap), by graph where resolved (the mean
  over that graph's files), else the mean of the resolved factors of its size class. The GAT backbones have no such reuse (input dropout comes before
  their first layer): factor 1.

The study's runs per benchmark and calibrators are those of ``--study`` (``study/offline.yaml``).

    python benchmarks/reprojected_cost.py --out reports/performance/reprojected_cost
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

GETS_FAMILY = ("GETS", "GETS_ap", "GETS_holdout")
SMALL_GRAPHS = ("Cora", "Citeseer")
TARGET_CPU_HOURS = 50.0


@dataclass(frozen=True)
class Ratio:
    """One measured speed-up: fit seconds with the reuse / without it, and whether the repeats separate."""

    calibrator: str
    dataset: str
    without_s: float
    with_s: float
    resolved: bool
    source: str

    @property
    def factor(self) -> float:
        return self.with_s / self.without_s if self.resolved else 1.0


LINE = re.compile(r"^(?P<name>\S+)\s+without\s+(?P<without>[\d.]+) s\s+with\s+(?P<with>[\d.]+) s.*?"
                  r"without \[(?P<wo>[^\]]*)\] with \[(?P<wi>[^\]]*)\]")


def read_ratios(path: Path) -> list[Ratio]:
    """The per-calibrator lines of a ``benchmarks/speed/exact_speedups.py`` output (first line: 'DATASET ...')."""
    lines = path.read_text().splitlines()
    if not lines:
        raise SystemExit(f"{path}: empty; give an exact_speedups.py output")
    dataset = lines[0].split()[0]
    out = []
    for line in lines[1:]:
        m = LINE.match(line)
        if not m:
            continue
        wo = [float(v.strip(" '")) for v in m["wo"].split(",")]
        wi = [float(v.strip(" '")) for v in m["wi"].split(",")]
        resolved = max(wi) < min(wo) or min(wi) > max(wo)
        out.append(Ratio(m["name"], dataset, float(m["without"]), float(m["with"]), resolved, path.name))
    return out


EPOCH_LINE = re.compile(r"^(?P<dataset>\S+)\s+reuse (?P<mode>on|off)\s+epochs.*?cpu/epoch\s+(?P<cpu>[\d.]+) ms")


def read_backbone_ratios(path: Path) -> list[Ratio]:
    """The per-graph CPU seconds per epoch of a ``benchmarks/speed/gcn_shared_first_layer.py`` output, as one
    :class:`Ratio` per graph (calibrator "GCN backbone"; the medians of the repeats; resolved when they do not
    overlap)."""
    seconds: dict[str, dict[str, list[float]]] = {}
    for line in path.read_text().splitlines():
        m = EPOCH_LINE.match(line)
        if m:
            seconds.setdefault(m["dataset"], {"on": [], "off": []})[m["mode"]].append(float(m["cpu"]))
    out = []
    for dataset, modes in seconds.items():
        if modes["on"] and modes["off"]:
            wo, wi = modes["off"], modes["on"]
            resolved = max(wi) < min(wo) or min(wi) > max(wo)
            out.append(Ratio("GCN backbone", dataset, float(np.median(wo)), float(np.median(wi)), resolved, path.name))
    return out


def study_calibrators(study: Path) -> tuple[list[str], list[str], list[str], int]:
    spec = yaml.safe_load(study.read_text())
    runs = spec["runs"]["splits"] * spec["runs"]["inits"] * spec["runs"]["folds"]
    return list(spec["calibrators"]), spec["benchmarks"]["datasets"], spec["benchmarks"]["backbones"], runs


def flow_pass_entries(provenance: dict) -> dict[str, dict]:
    flow = provenance["flow_pass"]
    entries = {}
    for group in ("large_benchmarks", "small_benchmarks"):
        entries.update(flow[group]["benchmarks"])
    return entries


def rows_fit_seconds(results: Path, benchmark: str, calibrators: list[str]) -> pd.DataFrame:
    """The committed rows' fit seconds of the study's calibrators: one row per run, one column per calibrator."""
    path = results / benchmark / "results.csv"
    rows = pd.read_csv(path, usecols=["calibrator", "split", "init", "fold", "fit_seconds"])
    rows = rows[rows.calibrator.isin(calibrators)]
    return rows.pivot_table(index=["split", "init", "fold"], columns="calibrator", values="fit_seconds")


def before_table(provenance: dict, results: Path, calibrators: list[str], datasets: list[str],
                 backbones: list[str], runs: int) -> pd.DataFrame:
    entries = flow_pass_entries(provenance)
    table = []
    for dataset in datasets:
        for backbone in backbones:
            name = f"{dataset}_{backbone}"
            entry = entries.get(name)
            if entry is not None:
                fits = rows_fit_seconds(results, name, calibrators)
                gets_share = fits[[c for c in GETS_FAMILY if c in fits]].sum().sum() / fits.sum().sum()
                n = int(entry["runs"])
                table.append({"benchmark": name, "dataset": dataset, "backbone": backbone, "runs_measured": n,
                              "source": "flow_pass (provenance.yaml)",
                              "backbone_s": entry["backbone_train_seconds"] / n,
                              "fits_s": entry["calibrator_fit_seconds"] / n, "gets_share": gets_share,
                              "recorded_cpu_hours": float(entry["cpu_hours"])})
    pubmed = provenance.get("pubmed_pass")
    if "Pubmed" in datasets and pubmed is not None and "GCN" in backbones:
        fits = rows_fit_seconds(results, "Pubmed_GCN", calibrators).dropna()  # runs with every calibrator's row
        passes = [pubmed, *pubmed.get("resumed", [])]  # the first pass and each resumed one
        wall = sum((_when(p["stopped"]) - _when(p["started"])).total_seconds() for p in passes)
        fits_s = float(fits.sum(axis=1).mean())
        table.append({"benchmark": "Pubmed_GCN", "dataset": "Pubmed", "backbone": "GCN", "runs_measured": len(fits),
                      "source": "pubmed_pass: fits from its rows; backbone = wall / runs - fits (upper bound)",
                      "backbone_s": wall / len(fits) - fits_s, "fits_s": fits_s,
                      "gets_share": float(fits[[c for c in GETS_FAMILY if c in fits]].sum().sum() / fits.sum().sum()),
                      "recorded_cpu_hours": np.nan})
    frame = pd.DataFrame(table)
    if "Pubmed" in datasets and "GAT" in backbones and "Pubmed_GCN" in set(frame.benchmark):
        pairs = frame[frame.dataset != "Pubmed"].pivot_table(index="dataset", columns="backbone",
                                                              values=["backbone_s", "fits_s", "gets_share"])
        ratio_backbone = float((pairs["backbone_s"]["GAT"] / pairs["backbone_s"]["GCN"]).median())
        ratio_fits = float((pairs["fits_s"]["GAT"] / pairs["fits_s"]["GCN"]).median())
        gcn = frame[frame.benchmark == "Pubmed_GCN"].iloc[0]
        frame = pd.concat([frame, pd.DataFrame([{
            "benchmark": "Pubmed_GAT", "dataset": "Pubmed", "backbone": "GAT", "runs_measured": 0,
            "source": f"projected: Pubmed GCN x median GAT/GCN of the other graphs (backbone {ratio_backbone:.2f}x, "
                      f"fits {ratio_fits:.2f}x)",
            "backbone_s": gcn.backbone_s * ratio_backbone, "fits_s": gcn.fits_s * ratio_fits,
            "gets_share": gcn.gets_share, "recorded_cpu_hours": np.nan}])], ignore_index=True)
    frame["runs"] = runs
    frame["before_cpu_hours"] = runs * (frame.backbone_s + frame.fits_s) / 3600
    return frame


def _when(value) -> dt.datetime:
    return value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def gets_factor(ratios: list[Ratio], dataset: str) -> tuple[float, str]:
    """The GETS family's measured factor for ``dataset``'s size class: the mean of the resolved factors of the
    GETS-family calibrators measured on a graph of that class (1 where none is resolved)."""
    small = dataset in SMALL_GRAPHS
    mine = [r for r in ratios if r.calibrator in GETS_FAMILY and (r.dataset in SMALL_GRAPHS) == small]
    if not mine:
        return 1.0, "not measured"
    resolved = [r for r in mine if r.resolved]
    if not resolved:
        return 1.0, "; ".join(f"{r.calibrator} on {r.dataset} {r.without_s:.1f} -> {r.with_s:.1f} s, repeats overlap: "
                              f"not resolved ({r.source})" for r in mine)
    factor = float(np.mean([r.factor for r in resolved]))
    measured_here = any(r.dataset == dataset for r in resolved)
    return factor, "; ".join(f"{r.calibrator} on {r.dataset} {r.without_s:.1f} -> {r.with_s:.1f} s ({r.source})"
                             for r in resolved) + ("" if measured_here else ", applied by size class")


def backbone_factor(ratios: list[Ratio], dataset: str, backbone: str) -> tuple[float, str]:
    """The GCN backbones' measured factor per epoch for ``dataset``: the mean of its own resolved measurements, else
    the mean of the resolved factors of the graphs of its size class (1 where none is resolved, and for GAT)."""
    if backbone != "GCN":
        return 1.0, "GAT: no shared first layer (input dropout before it)"
    mine = [r for r in ratios if r.dataset == dataset]
    described = "; ".join(f"GCN backbone on {dataset} {r.without_s:.2f} -> {r.with_s:.2f} ms CPU per epoch "
                          f"({r.source}{'' if r.resolved else ', repeats overlap: not resolved'})" for r in mine)
    if any(r.resolved for r in mine):
        return float(np.mean([r.factor for r in mine if r.resolved])), described
    small = dataset in SMALL_GRAPHS
    resolved = [r for r in ratios if r.resolved and (r.dataset in SMALL_GRAPHS) == small]
    prefix = (described + "; ") if described else f"GCN backbone on {dataset}: not measured; "
    if not resolved:
        return 1.0, prefix + "none resolved in its size class"
    factor = float(np.mean([r.factor for r in resolved]))
    return factor, prefix + "the mean of " + ", ".join(f"{r.dataset} {r.factor:.3f}" for r in resolved) + \
        " (applied by size class)"


def after_table(before: pd.DataFrame, ratios: list[Ratio], backbone_ratios: list[Ratio]) -> pd.DataFrame:
    frame = before.copy()
    factors = [gets_factor(ratios, d) for d in frame.dataset]
    frame["gets_factor"] = [f for f, _ in factors]
    frame["gets_factor_source"] = [s for _, s in factors]
    gets_s = frame.fits_s * frame.gets_share
    frame["after_fits_s"] = frame.fits_s - gets_s + gets_s * frame.gets_factor
    factors = [backbone_factor(backbone_ratios, d, b) for d, b in zip(frame.dataset, frame.backbone)]
    frame["backbone_factor"] = [f for f, _ in factors]
    frame["backbone_factor_source"] = [s for _, s in factors]
    frame["after_backbone_s"] = frame.backbone_s * frame.backbone_factor
    frame["after_cpu_hours"] = frame.runs * (frame.after_backbone_s + frame.after_fits_s) / 3600
    return frame


def markdown(frame: pd.DataFrame, recorded_total: float, command: str) -> str:
    headline = frame[frame.dataset != "Pubmed"]
    before, after = frame.before_cpu_hours.sum(), frame.after_cpu_hours.sum()
    lines = [
        "# The headline study's CPU cost, measured and re-projected",
        "",
        f"`{command}` (`benchmarks/reprojected_cost.py`: every number below is read from committed files).",
        "",
        f"**{len(frame)} benchmarks, {int(frame.runs.iloc[0])} runs each: {before:.1f} CPU-hours before, "
        f"{after:.1f} after the adopted exact speed-ups, against the target of {TARGET_CPU_HOURS:.0f}: "
        f"{after - TARGET_CPU_HOURS:+.1f} CPU-hours ({after / TARGET_CPU_HOURS:.2f}x the target).** The 12 benchmarks "
        f"of the flow's pass: {headline.before_cpu_hours.sum():.1f} before (the provenance's recorded "
        f"`cpu_hours` sum to {recorded_total:.1f}), {headline.after_cpu_hours.sum():.1f} after.",
        "",
        "| benchmark | runs measured | backbone s/run | fits s/run | GETS family share | before CPU-h | GETS factor "
        "| backbone factor | after CPU-h | source |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in frame.itertuples():
        lines.append(f"| {r.benchmark} | {r.runs_measured} | {r.backbone_s:.1f} | {r.fits_s:.1f} | {r.gets_share:.0%} | "
                     f"{r.before_cpu_hours:.2f} | {r.gets_factor:.2f} | {r.backbone_factor:.2f} | "
                     f"{r.after_cpu_hours:.2f} | {r.source} |")
    lines.append(f"| **total** | | | | | **{before:.1f}** | | | **{after:.1f}** | |")
    parts = {"backbones": (frame.runs * frame.backbone_s).sum() / 3600,
             "GETS family fits": (frame.runs * frame.fits_s * frame.gets_share).sum() / 3600,
             "other fits": (frame.runs * frame.fits_s * (1 - frame.gets_share)).sum() / 3600}
    gat_large = frame[(frame.backbone == "GAT") & ~frame.dataset.isin(SMALL_GRAPHS)]
    after_backbones = (frame.runs * frame.after_backbone_s).sum() / 3600
    lines += ["", f"The measured gap: {after - TARGET_CPU_HOURS:+.1f} CPU-hours after the adopted speed-ups "
              f"({before - after:.1f} saved of {before:.1f}); the backbones' {parts['backbones']:.1f} CPU-hours "
              f"become {after_backbones:.1f} with the GCN's shared first layer (the GAT backbones' stay as measured).",
              "", "Where the before hours go: " + ", ".join(f"{k} {v:.1f}" for k, v in parts.items()) +
              f"; the GAT backbones of the large graphs {(gat_large.runs * gat_large.backbone_s).sum() / 3600:.1f}.",
              "", "GETS factors applied to the fit seconds of GETS, GETS_ap and GETS_holdout alike (fit seconds "
              "without -> with the reuse; the factor is with / without):", ""]
    for source in sorted(set(frame.gets_factor_source)):
        lines.append(f"- {source}")
    lines += ["", "Backbone factors applied to the GCN backbones' seconds (CPU seconds per epoch without -> with the "
              "shared first layer, one torch thread; the factor is with / without):", ""]
    for source in sorted(set(frame.backbone_factor_source)):
        lines.append(f"- {source}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--provenance", type=Path, default=Path("reports/offline/provenance.yaml"))
    parser.add_argument("--results", type=Path, default=Path("reports/offline/results"))
    parser.add_argument("--study", type=Path, default=Path("study/offline.yaml"))
    parser.add_argument("--speedups", type=Path, nargs="+",
                        default=sorted(Path("reports/performance/exact_speedups").glob("fit_seconds_*.txt")))
    parser.add_argument("--backbone-speedups", type=Path, nargs="*",
                        default=sorted(Path("reports/performance/exact_speedups").glob("gcn_first_layer_epochs*.txt")))
    parser.add_argument("--out", type=Path, help="write OUT.md and OUT.csv (default: print only)")
    args = parser.parse_args(argv)
    for path in (args.provenance, args.results, args.study, *args.speedups, *args.backbone_speedups):
        if not path.exists():
            raise SystemExit(f"{path} not found; run from the project root or give the path")
    provenance = yaml.safe_load(args.provenance.read_text())
    calibrators, datasets, backbones, runs = study_calibrators(args.study)
    before = before_table(provenance, args.results, calibrators, datasets, backbones, runs)
    ratios = [r for path in args.speedups for r in read_ratios(path)]
    backbone_ratios = [r for path in args.backbone_speedups for r in read_backbone_ratios(path)]
    frame = after_table(before, ratios, backbone_ratios)
    recorded = float(frame.recorded_cpu_hours.sum())
    command = "python benchmarks/reprojected_cost.py" + ("" if args.out is None else f" --out {args.out}")
    text = markdown(frame, recorded, command)
    sys.stdout.write(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".md").write_text(text)
        frame.to_csv(args.out.with_suffix(".csv"), index=False, float_format="%.6g")


if __name__ == "__main__":
    main()
