"""The public GATS code (hans66hsu/GATS) and this project timed on the same run, one after the other.

For each benchmark (dataset x backbone) the run is split 0, init 0, fold 0 of the GATS protocol: the fixed
GATS split files of ``$SIMCALIB_SPLITS_DIR`` (``gats_original``, checked against ``gats_5_3f_85/SOURCE.sha256``),
calibration fold 0, training folds 1 and 2, the 85% test nodes. Both sides train the backbone from scratch
and fit each calibrator both have (TS, VS, ETS, CaGCN, GATS, Dirichlet, IRM, Spline, OrderInvariant) on the
same node sets, with one torch thread; wall seconds (``time.perf_counter``) and CPU seconds of the process
(``time.process_time``) are recorded around

* the backbone: the GATS code's ``src.train.main(split=0, init=0, args)`` (its training loop with its
  per-epoch evaluation; arguments as its ``reproduce_train.sh``) and this project's
  :func:`~simcalib.experiment.protocol.train_run_backbone` on an empty cache;
* each calibrator's fit: the GATS code's ``<Calibrator>.fit`` (called by its ``src.calibration.main``, with
  ``--config`` as its ``reproduce_cal.sh``) and this project's
  :func:`~simcalib.experiment.protocol.fit_calibrator` (the fit the study's rows time as ``fit_seconds``,
  plus the calibration graph it builds); and each side's whole calibration step (the GATS code's
  ``calibration.main``: data, model, fit and its metrics; ours: ``fit_calibrator`` plus ``evaluate_calibrator``).

The ECE (15 equal-width bins, test nodes, percent) is each side's own metric on its own predictions, and for
the GATS side also :func:`simcalib.metrics.ece` of its saved predictions (the two metrics agree).

The GATS code runs in a child process (its own interpreter, ``cwd`` a scratch folder) from an unmodified
checkout given with ``--gats-repo``; nothing of it is copied into the project. What the child changes, all of
it paths and instrumentation, none of it numerics:

* the scratch folder links ``src`` and ``config`` to the checkout, ``data/<Name>/raw`` to the dataset mirror
  (``$SIMCALIB_DATA_MIRROR``: the code's ``Planetoid``/``Amazon`` loaders read the raw files offline and write
  their processed files in the scratch folder), ``data/split/<Name>/5_1f_85`` to the GATS split files and
  ``data/dist_to_train/<Name>/5_1f_85`` to the checkout's distance files: the split type ``5_1f_85`` makes the
  code's fold loop (``range(int("1f"[:-1]))``) stop after fold 0, which reads fold 0 of the 3-fold files exactly
  as ``5_3f_85`` does;
* ``torch_geometric.io.planetoid.index_to_mask`` is given the code's numpy index arrays as tensors (the
  code targets torch_geometric 2.0.1, whose function takes either; 2.8 takes tensors only);
* ``KDEpy`` (the code's KDE metric, outside every timed fit) is imported from ``--gats-deps`` when given;
* the timers are wrappers around the calibrator class's ``fit`` and a forward hook that counts the backbone's
  training epochs; ``--save_prediction`` keeps its calibrated log-probabilities for the ECE cross-check.

    python benchmarks/reference/gats_side_by_side.py --gats-repo /tmp/gats --gats-deps /tmp/gats_deps \\
        --benchmarks Cora_GCN Cora_GAT Citeseer_GCN Citeseer_GAT Computers_GCN \\
        --out reports/performance/gats_side_by_side
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

CALIBRATORS = ["TS", "VS", "ETS", "CaGCN", "GATS", "Dirichlet", "IRM", "Spline", "OrderInvariant"]
SPLIT, INIT, FOLD = 0, 0, 0
ONE_FOLD = "5_1f_85"  # the GATS code's split type that runs fold 0 only (see the module docstring)
GATS_SEED = 10  # the GATS code's default --seed (its scripts run with it)
CODE_NAMES = {"Cora": "Cora", "Citeseer": "Citeseer", "Pubmed": "Pubmed", "Computers": "Computers",
              "Photo": "Photo", "CS": "CS", "Physics": "Physics"}
MIRROR_NAMES = {"Cora": "Cora", "Citeseer": "CiteSeer", "Pubmed": "PubMed", "Computers": "Computers",
                "Photo": "Photo", "CS": "CS", "Physics": "Physics"}


# ------------------------------------------------------------------------------------------ the GATS side
# The child's program: it imports the GATS code from its working folder and calls its own functions.
CHILD = r'''
import json, sys, time, warnings
warnings.filterwarnings("ignore")
import torch
torch.set_num_threads(1)
job = json.loads(sys.argv[1])
import torch_geometric.io.planetoid as planetoid
index_to_mask = planetoid.index_to_mask  # torch_geometric 2.8 takes a tensor where 2.0.1 took any index
planetoid.index_to_mask = lambda index, size=None: index_to_mask(torch.as_tensor(index), size)
import src.train as train
import src.calibration as calibration
import src.calibrator.calibrator as calibrators
from src.data.data_utils import load_data
from src.utils import arg_parse, set_global_seeds

def parsed(extra):
    sys.argv = ["gats", "--dataset", job["dataset"], "--model", job["model"], "--wdecay", str(job["wdecay"]),
                "--split_type", job["split_type"], "--seed", str(job["seed"])] + extra
    return arg_parse()

def emit(**row):
    print("ROW " + json.dumps(row), flush=True)

w, c = time.perf_counter(), time.process_time()
dataset = load_data(job["dataset"], job["split_type"], job["split"], 0)
data = dataset.data
emit(part="load", wall=time.perf_counter() - w, cpu=time.process_time() - c, nodes=int(data.num_nodes),
     edges=int(data.edge_index.shape[1]), train=int(data.train_mask.sum()), val=int(data.val_mask.sum()),
     test=int(data.test_mask.sum()))

epochs = [0]
made = train.create_model
def counted_model(*a, **k):
    model = made(*a, **k)
    model.register_forward_hook(lambda m, i, o: epochs.__setitem__(0, epochs[0] + m.training))
    return model
train.create_model = counted_model
args = parsed([])
set_global_seeds(args.seed)
w, c = time.perf_counter(), time.process_time()
_, test_result = train.main(job["split"], job["init"], args)
emit(part="backbone", wall=time.perf_counter() - w, cpu=time.process_time() - c, epochs=epochs[0],
     ece=100 * test_result["ece"][0])

steps = [0]  # optimiser steps of the timed fit: its epochs (one Adam step each in the code's fit loops)
adam_step = torch.optim.Adam.step
def counted_step(self, *a, **k):
    steps[0] += 1
    return adam_step(self, *a, **k)
torch.optim.Adam.step = counted_step

for name in job["calibrators"]:
    cls = {"Spline": calibrators.SplineCalib, "OrderInvariant": calibrators.OrderInvariantCalib}.get(
        name, getattr(calibrators, name, None))
    timed = {}
    fit = cls.fit
    def timed_fit(self, *a, __fit=fit, **k):
        steps[0] = 0
        w, c = time.perf_counter(), time.process_time()
        out = __fit(self, *a, **k)
        timed.update(wall=time.perf_counter() - w, cpu=time.process_time() - c, epochs=steps[0] or None)
        return out
    cls.fit = timed_fit
    args = parsed(["--calibration", name, "--config", "--save_prediction"])
    set_global_seeds(args.seed)
    w, c = time.perf_counter(), time.process_time()
    uncal, _, cal = calibration.main(job["split"], job["init"], ["Nodewise"], args)
    step_wall, step_cpu = time.perf_counter() - w, time.process_time() - c
    cls.fit = fit
    emit(part=name, wall=timed["wall"], cpu=timed["cpu"], epochs=timed["epochs"], step_wall=step_wall, step_cpu=step_cpu,
         ece=100 * cal["Nodewise"]["ece"][0], uncal_ece=100 * uncal["Nodewise"]["ece"][0],
         cal_wdecay=args.cal_wdecay)
'''


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def original_split_file(splits_dir: Path, dataset: str) -> Path:
    """The GATS split file of ``dataset``, split 0, as published, after its SHA-256 matches SOURCE.sha256."""
    relative = f"data/split/{dataset}/5_3f_85/{dataset.lower()}_split_{SPLIT}.npz"
    path = splits_dir / "gats_original" / relative
    source = splits_dir / "gats_5_3f_85" / "SOURCE.sha256"
    if not path.is_file() or not source.is_file():
        raise SystemExit(f"{path} or {source} missing: set SIMCALIB_SPLITS_DIR to the shared splits folder")
    known = dict(reversed(line.split()) for line in source.read_text().splitlines()
                 if line.strip() and not line.startswith("#"))
    if known.get(relative) != sha256(path):
        raise SystemExit(f"{path}: SHA-256 differs from {source}; the split file is not the published one")
    return path


def scratch_folder(work: Path, repo: Path, mirror: Path, splits_dir: Path, datasets: list[str]) -> None:
    """The GATS code's working folder: links to the checkout, the data mirror and the split files."""
    work.mkdir(parents=True, exist_ok=True)
    for name in ("src", "config"):
        if not (work / name).exists():
            (work / name).symlink_to(repo / name)
    for dataset in datasets:
        code = CODE_NAMES[dataset]
        links = {
            work / "data" / code / "raw": mirror / MIRROR_NAMES[dataset] / "raw",
            work / "data" / "split" / code / ONE_FOLD: original_split_file(splits_dir, code).parent,
            work / "data" / "dist_to_train" / code / ONE_FOLD: repo / "data" / "dist_to_train" / code / "5_3f_85",
        }
        for link, target in links.items():
            if not target.exists():
                raise SystemExit(f"{target} missing (needed for the GATS code's {dataset})")
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.exists():
                link.symlink_to(target)


def gats_side(work: Path, deps: Path | None, dataset: str, backbone: str, calibrators: list[str]) -> list[dict]:
    job = {"dataset": CODE_NAMES[dataset], "model": backbone, "split_type": ONE_FOLD, "split": SPLIT, "init": INIT,
           "seed": GATS_SEED, "calibrators": calibrators,
           "wdecay": 5e-4 if dataset in ("Cora", "Citeseer", "Pubmed") else 0}  # its reproduce_train.sh
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": os.pathsep.join([str(work)] + ([str(deps)] if deps else []))}
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(job)], cwd=work, env=env, capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise SystemExit(f"the GATS code failed on {dataset} {backbone}:\n{proc.stderr[-3000:]}")
    rows = [json.loads(line[4:]) for line in proc.stdout.splitlines() if line.startswith("ROW ")]
    for row in rows:  # our metric on its saved predictions (the same test nodes)
        if row["part"] in calibrators:
            row["ece_simcalib_metric"] = ece_of_saved(work, dataset, backbone, row["part"])
    return rows


def ece_of_saved(work: Path, dataset: str, backbone: str, calibrator: str) -> float:
    from simcalib.metrics import ece  # noqa: PLC0415

    code = CODE_NAMES[dataset]
    log_prob = np.load(work / "predictions" / backbone / code / calibrator.lower() / ONE_FOLD /
                       f"split{SPLIT}init{INIT}fold{FOLD}.npy")
    split = np.load(work / "data" / "split" / code / ONE_FOLD / f"{code.lower()}_split_{SPLIT}.npz",
                    allow_pickle=True)  # checked against SOURCE.sha256 before
    test = np.asarray(split["test_indices"], dtype=np.int64)
    labels = np.load(work / "labels" / f"{dataset}.npy")
    probs = np.exp(log_prob[test].astype(np.float64))
    return 100 * ece(probs / probs.sum(axis=1, keepdims=True), labels[test])


# -------------------------------------------------------------------------------------------- our side
def our_side(dataset: str, backbone: str, calibrators: list[str], cache: Path, labels_dir: Path) -> list[dict]:
    """This project's rows of the run: ``cache`` an empty folder, so the backbone is trained here."""
    import torch  # noqa: PLC0415

    from simcalib.experiment.protocol import (  # noqa: PLC0415
        ProtocolSettings,
        evaluate_calibrator,
        fit_calibrator,
        load_graph,
        make_runs,
        prepare_run,
        run_split,
        train_run_backbone,
    )

    torch.set_num_threads(1)
    # the study's backbone settings (study/offline.yaml: GAT with the csr attention kernel)
    settings = ProtocolSettings(cache_dir=str(cache / "study"), backbone_overrides=(("attention", "csr"),))
    run = make_runs(dataset, backbone, [SPLIT], [INIT], [FOLD])[0]
    w, c = time.perf_counter(), time.process_time()
    graph = load_graph(run.dataset, settings)
    train_idx, cal_idx, test_idx = run_split(run, settings, graph).fold_indices(run.fold)
    rows = [{"part": "load", "wall": time.perf_counter() - w, "cpu": time.process_time() - c,
             "nodes": int(graph.num_nodes), "edges": int(graph.edge_index.shape[1]), "train": len(train_idx),
             "val": len(cal_idx), "test": len(test_idx)}]
    labels_dir.mkdir(parents=True, exist_ok=True)
    np.save(labels_dir / f"{dataset}.npy", graph.y.numpy())
    w, c = time.perf_counter(), time.process_time()
    output = train_run_backbone(run, settings)
    rows.append({"part": "backbone", "wall": time.perf_counter() - w, "cpu": time.process_time() - c,
                 "epochs": int(output.epochs)})
    if backbone == "GAT":  # torch_geometric's GATConv, the kernel the GATS code uses, for a same-kernel ratio
        w, c = time.perf_counter(), time.process_time()
        pyg = train_run_backbone(run, ProtocolSettings(cache_dir=str(cache / "pyg")))
        rows.append({"part": "backbone_pyg_attention", "wall": time.perf_counter() - w, "cpu": time.process_time() - c,
                     "epochs": int(pyg.epochs)})
    context = prepare_run(run, settings, output)
    rows[1]["ece"] = evaluate_calibrator(run, settings, "UnCal", context=context)["ece"]
    for name in calibrators:
        w, c = time.perf_counter(), time.process_time()
        fitted = fit_calibrator(run, settings, name, context=context)
        fit_wall, fit_cpu = time.perf_counter() - w, time.process_time() - c
        row = evaluate_calibrator(run, settings, name, fitted=fitted, context=context)
        rows.append({"part": name, "wall": fit_wall, "cpu": fit_cpu, "step_wall": time.perf_counter() - w,
                     "step_cpu": time.process_time() - c, "fit_seconds": fitted.fit_seconds, "ece": row["ece"],
                     "epochs": fitted.model.fit_info.get("epochs"),
                     "uncal_ece": rows[1]["ece"]})
    return rows


def node_sets_match(splits_dir: Path, dataset: str) -> bool:
    """Whether this project's run has the GATS code's node sets (fold 0 calibration, folds 1-2 training, test)."""
    from simcalib.experiment.protocol import ProtocolSettings, make_runs, run_split  # noqa: PLC0415

    run = make_runs(dataset, "GCN", [SPLIT], [INIT], [FOLD])[0]
    ours = run_split(run, ProtocolSettings()).fold_indices(FOLD)
    split = np.load(original_split_file(splits_dir, CODE_NAMES[dataset]), allow_pickle=True)
    folds = [np.asarray(f, dtype=np.int64) for f in split["k_fold_indices"]]
    theirs = (np.concatenate(folds[1:]), folds[0], np.asarray(split["test_indices"], dtype=np.int64))
    return all(np.array_equal(np.sort(a), np.sort(b)) for a, b in zip(ours, theirs))


# ---------------------------------------------------------------------------------------------- output
def table(frame: pd.DataFrame) -> pd.DataFrame:
    """One line per benchmark and part: both sides' seconds, the ratios GATS code / ours (per run; per epoch from
    the CPU seconds), both ECEs."""
    key = ["benchmark", "part"]
    pyg = frame[(frame.side == "simcalib") & (frame.part == "backbone_pyg_attention")].benchmark
    twin = frame[(frame.side == "gats_code") & (frame.part == "backbone") & frame.benchmark.isin(pyg)]
    frame = pd.concat([frame, twin.assign(part="backbone_pyg_attention", ece=np.nan)])  # its backbone, same kernel
    fits = frame[frame.part.isin(CALIBRATORS + ["backbone"])].groupby(["benchmark", "side"])[["wall", "cpu"]].sum()
    frame = pd.concat([frame, fits.reset_index().assign(part="run: backbone + every fit")])
    gats = frame[frame.side == "gats_code"].set_index(key)
    ours = frame[frame.side == "simcalib"].set_index(key)
    out = pd.DataFrame({
        "gats_wall_s": gats["wall"], "ours_wall_s": ours["wall"],
        "wall_ratio": gats["wall"] / ours["wall"],
        "gats_cpu_s": gats["cpu"], "ours_cpu_s": ours["cpu"], "cpu_ratio": gats["cpu"] / ours["cpu"],
        "gats_epochs": gats.get("epochs"), "ours_epochs": ours.get("epochs"),
        "gats_ece": gats.get("ece"), "ours_ece": ours.get("ece"),
        "gats_ece_simcalib_metric": gats.get("ece_simcalib_metric"),
    }).reset_index()
    per_epoch = (out.gats_cpu_s / out.gats_epochs) / (out.ours_cpu_s / out.ours_epochs)
    out.insert(out.columns.get_loc("ours_epochs") + 1, "per_epoch_cpu_ratio", per_epoch)
    order = {p: i for i, p in enumerate(["load", "backbone", "backbone_pyg_attention", *CALIBRATORS,
                                         "run: backbone + every fit"])}
    out["_o"] = out.part.map(order)
    out["_b"] = out.benchmark.map({b: i for i, b in enumerate(dict.fromkeys(frame.benchmark))})  # as run
    return out.sort_values(["_b", "_o"], kind="stable").drop(columns=["_o", "_b"])


def markdown(frame: pd.DataFrame) -> str:
    def cell(v, fmt):
        return "" if pd.isna(v) else format(v, fmt)

    lines = ["| benchmark | part | GATS code wall s | ours wall s | wall ratio | GATS code CPU s | ours CPU s | "
             "CPU ratio | epochs (GATS code / ours) | CPU per epoch ratio | ECE GATS code | ECE ours |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in frame.itertuples():
        epochs = "" if pd.isna(r.gats_epochs) or pd.isna(r.ours_epochs) else f"{int(r.gats_epochs)} / {int(r.ours_epochs)}"
        lines.append(f"| {r.benchmark} | {r.part} | {cell(r.gats_wall_s, '.2f')} | {cell(r.ours_wall_s, '.2f')} | "
                     f"{cell(r.wall_ratio, '.1f')} | {cell(r.gats_cpu_s, '.2f')} | {cell(r.ours_cpu_s, '.2f')} | "
                     f"{cell(r.cpu_ratio, '.1f')} | {epochs} | {cell(r.per_epoch_cpu_ratio, '.1f')} | "
                     f"{cell(r.gats_ece, '.2f')} | {cell(r.ours_ece, '.2f')} |")
    return "\n".join(lines)


def write_tables(frame: pd.DataFrame, out: Path) -> pd.DataFrame:
    summary = table(frame[frame.side != "both"])
    summary.to_csv(out / "results.csv", index=False, float_format="%.6g")
    (out / "table.md").write_text(markdown(summary) + "\n")
    return summary


def git_commit(git_dir: Path | None, work_tree: Path | None = None) -> str | None:
    try:
        cmd = ["git"] + ([f"--git-dir={git_dir}"] if git_dir else []) + ["rev-parse", "HEAD"]
        return subprocess.run(cmd, cwd=work_tree, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gats-repo", type=Path, help="a checkout of hans66hsu/GATS (unmodified)")
    parser.add_argument("--gats-git-dir", type=Path, help="its git folder, to record the commit")
    parser.add_argument("--gats-deps", type=Path, help="a folder with KDEpy (the code's KDE metric), put on its path")
    parser.add_argument("--benchmarks", nargs="+", default=["Cora_GCN", "Cora_GAT", "Citeseer_GCN", "Citeseer_GAT"])
    parser.add_argument("--calibrators", nargs="+", default=CALIBRATORS)
    parser.add_argument("--work", type=Path, help="scratch folder for the GATS code (default: a temporary one)")
    parser.add_argument("--out", type=Path, default=Path("reports/performance/gats_side_by_side"))
    parser.add_argument("--tables-only", action="store_true",
                        help="run nothing: rewrite --out's results.csv and table.md from its runs.csv")
    parser.add_argument("--append", action="store_true",
                        help="keep the rows of --out's runs.csv for the other benchmarks (this invocation's "
                             "benchmarks replace theirs) and add this invocation to its provenance")
    args = parser.parse_args(argv)
    if args.tables_only:
        write_tables(pd.read_csv(args.out / "runs.csv"), args.out)
        return
    if args.gats_repo is None or not (args.gats_repo / "src" / "calibration.py").is_file():
        raise SystemExit(f"--gats-repo {args.gats_repo}: no src/calibration.py; give a checkout of hans66hsu/GATS")
    unknown = sorted(set(args.calibrators) - set(CALIBRATORS))
    if unknown:
        raise SystemExit(f"--calibrators: {unknown} not in both codes; choose from {CALIBRATORS}")
    benchmarks = [tuple(b.split("_")) for b in args.benchmarks]
    if any(len(b) != 2 or b[0] not in CODE_NAMES or b[1] not in ("GCN", "GAT") for b in benchmarks):
        raise SystemExit(f"--benchmarks: give Dataset_Backbone with a dataset of {sorted(CODE_NAMES)} and GCN or GAT")
    mirror = Path(os.environ.get("SIMCALIB_DATA_MIRROR", ""))
    splits_dir = Path(os.environ.get("SIMCALIB_SPLITS_DIR", ""))
    if not mirror.is_dir() or not splits_dir.is_dir():
        raise SystemExit("set SIMCALIB_DATA_MIRROR and SIMCALIB_SPLITS_DIR (source /work/wt/env.sh or the Makefile's)")
    if os.environ.get("OMP_NUM_THREADS") != "1":
        raise SystemExit("run with OMP_NUM_THREADS=1 (both sides on one thread)")
    started = datetime.datetime.now(datetime.timezone.utc)
    project_commit = git_commit(None, Path(__file__).resolve().parent)  # the code that runs, read before it runs
    work = args.work or Path(tempfile.mkdtemp(prefix="gats_side_by_side_"))
    scratch_folder(work, args.gats_repo.resolve(), mirror, splits_dir, sorted({d for d, _ in benchmarks}))
    rows = []
    for dataset, backbone in benchmarks:
        bench = f"{dataset}_{backbone}"
        print(f"{bench}: this project", flush=True)
        for row in our_side(dataset, backbone, args.calibrators, Path(tempfile.mkdtemp(dir=work)),
                            work / "labels"):
            rows.append({"benchmark": bench, "side": "simcalib", **row})
        print(f"{bench}: the GATS code", flush=True)
        for row in gats_side(work, args.gats_deps, dataset, backbone, args.calibrators):
            rows.append({"benchmark": bench, "side": "gats_code", **row})
        rows.append({"benchmark": bench, "side": "both", "part": "node_sets_equal",
                     "value": node_sets_match(splits_dir, dataset)})
    frame = pd.DataFrame(rows)
    invocations = []
    if args.append and (args.out / "runs.csv").is_file():
        kept = pd.read_csv(args.out / "runs.csv")
        kept = kept[~kept.benchmark.isin(frame.benchmark)]
        frame = pd.concat([kept, frame], ignore_index=True)
        import yaml  # noqa: PLC0415

        old = yaml.safe_load((args.out / "provenance.yaml").read_text()) if (args.out / "provenance.yaml").is_file() else {}
        invocations = old.get("invocations") or ([old] if old else [])
    args.out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(args.out / "runs.csv", index=False)
    summary = write_tables(frame, args.out)
    import torch  # noqa: PLC0415
    import torch_geometric  # noqa: PLC0415

    invocations.append({
        "command": " ".join(["python", *sys.argv]),
        "benchmarks": sorted({r["benchmark"] for r in rows}),
        "environment": {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"), "torch_threads": 1},
        "gats_code": {"repository": "hans66hsu/GATS", "commit": git_commit(args.gats_git_dir),
                      "checkout": str(args.gats_repo), "split_type_run": ONE_FOLD, "seed": GATS_SEED},
        "project_commit": project_commit,
        "node_sets_equal": {r["benchmark"]: bool(r["value"]) for r in rows if r["part"] == "node_sets_equal"},
        "started_utc": started.isoformat(timespec="seconds"),
        "finished_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"processor": platform.processor() or platform.machine(), "cpus_visible": os.cpu_count(),
                    "python": platform.python_version(), "torch": str(torch.__version__),
                    "torch_geometric": str(torch_geometric.__version__),
                    "load_average_at_end": [round(v, 2) for v in os.getloadavg()]},
    })
    provenance = {"what": "the public GATS code and this project on the same runs, one after the other "
                          "(benchmarks/reference/gats_side_by_side.py)", "invocations": invocations}
    import yaml  # noqa: PLC0415

    (args.out / "provenance.yaml").write_text(yaml.safe_dump(provenance, sort_keys=False))
    print(markdown(summary))


if __name__ == "__main__":
    main()
