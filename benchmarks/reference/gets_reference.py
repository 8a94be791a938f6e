"""GETS side by side with its public code (ZhuangDingyi/GETS) on the same frozen backbones.

For each run (splits x init 0 x folds 0-2 of the headline's protocol: the fixed GATS splits of
$SIMCALIB_SPLITS_DIR, study seed 10), the backbone is trained (or loaded from the cache) as `simcalib
benchmark` trains it; the SAME logits, node features (the loader's row-normalised X, densified), graph and node
sets (fit: the calibration fold; early stopping: the training folds) go to

* the public code's ``CaGCN_GETS`` (model/calibrator.py: its GETS model and ``fit_calibration``) with its own
  config ``gets_config/<dataset>.yaml``, once per ``--code-seeds`` seed (torch's global seed before the model is
  built), on the code's graph: Cora and Citeseer with a self-loop per node (its loader's ``AddSelfLoop``),
  X through :class:`SparseFeatures` (the code's linear maps as sparse products);
* our registered calibrators (``--ours``; default GETS, GETS_ap, GETS_holdout), seeded as the protocol seeds them.

The repository is imported from ``--gets-repo`` (a checkout of the public code), never copied. It needs DGL,
which is not installed here: a stand-in ``dgl`` module is put in ``sys.modules`` before the import, with
``dgl.nn.GraphConv`` as DGL documents it for ``norm="both"`` (:math:`D_{in}^{-1/2} A D_{out}^{-1/2} X W + b`,
degrees clamped at 1, Xavier-uniform weight, zero bias; an error on a node without in-edges) and a graph object
with ``in_degrees()`` / ``out_degrees()``; these are the only DGL parts the GETS path uses.

Writes per run and method: test ECE, signed calibration error, NLL, accuracy, degree-binned ECE (our
simcalib.metrics), the best epoch (0-based; the code's: its last epoch marked as improved) and fit seconds.

    python benchmarks/reference/gets_reference.py --gets-repo /root/ref/GETS --benchmarks Cora Citeseer \
        --splits 5 --code-seeds 0 1 2 --spread-splits 2 --out reports/gets_reference/side_by_side.csv
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import sys
import time
import types
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from simcalib.backbones.sparse import SparseOperand
from simcalib.calibrators.gets import GETS_CONFIGS
from simcalib.calibrators.layers import edges_with_self_loops
from simcalib.experiment.protocol import (
    ProtocolSettings,
    calibration_graph,
    fit_calibrator,
    make_runs,
    train_run_backbone,
)
from simcalib.metrics import accuracy, degree_ece, ece, nll, signed_ce

CODE_CONFIG_NAMES = {"Cora": "cora", "Citeseer": "citeseer", "Computers": "computers", "Photo": "photo",
                     "CS": "cs", "Physics": "physics"}


# ------------------------------------------------------------------------------------- the DGL stand-in
class StandInGraph:
    """The part of a DGLGraph the GETS path reads: directed edges src -> dst and the two degree vectors."""

    def __init__(self, edge_index: torch.Tensor, num_nodes: int):
        self.src, self.dst = edge_index[0].long(), edge_index[1].long()
        self.num_nodes = num_nodes
        ones = torch.ones(self.src.numel())
        # A [dst, src] as CSR: the sum over in-edges as one sparse product (the same sum as DGL's copy_u/sum)
        self.adjacency = torch.sparse_coo_tensor(torch.stack([self.dst, self.src]), ones,
                                                 (num_nodes, num_nodes)).coalesce().to_sparse_csr()

    def in_degrees(self) -> torch.Tensor:
        return torch.bincount(self.dst, minlength=self.num_nodes)

    def out_degrees(self) -> torch.Tensor:
        return torch.bincount(self.src, minlength=self.num_nodes)


class StandInGraphConv(nn.Module):
    """DGL's ``GraphConv(in_feats, out_feats)`` with its defaults (norm="both", weight, bias)."""

    def __init__(self, in_feats: int, out_feats: int, norm: str = "both", weight: bool = True, bias: bool = True,
                 activation=None, allow_zero_in_degree: bool = False):
        super().__init__()
        if norm != "both" or not weight or not bias or activation is not None:
            raise NotImplementedError("the stand-in GraphConv covers GETS's use only: norm='both', weight, bias")
        self.in_feats, self.out_feats = in_feats, out_feats
        self.allow_zero_in_degree = allow_zero_in_degree
        self.weight = nn.Parameter(torch.empty(in_feats, out_feats))
        self.bias = nn.Parameter(torch.zeros(out_feats))
        nn.init.xavier_uniform_(self.weight)
        nn.init.zeros_(self.bias)

    def forward(self, graph: StandInGraph, feat: torch.Tensor) -> torch.Tensor:
        in_degree, out_degree = graph.in_degrees(), graph.out_degrees()
        if not self.allow_zero_in_degree and (in_degree == 0).any():
            raise RuntimeError("0-in-degree nodes in the graph (DGL's GraphConv refuses them)")
        feat = feat * out_degree.clamp(min=1).float().pow(-0.5).unsqueeze(1)

        def aggregate(h: torch.Tensor) -> torch.Tensor:
            return graph.adjacency @ h

        if self.in_feats > self.out_feats:  # DGL's order: multiply first when it shrinks the width
            rst = aggregate(feat @ self.weight)
        else:
            rst = aggregate(feat) @ self.weight
        return rst * in_degree.clamp(min=1).float().pow(-0.5).unsqueeze(1) + self.bias


class SparseFeatures:
    """X as the public code receives it: ``F.linear(X, W, b)`` (its ``proj_feature`` maps, the only use of X on the
    GETS path) computed as X W^T + b by a sparse product with a cached transpose (``__torch_function__``): the
    same sums as the dense product in another order, about 8x faster on CPU for the bag-of-words X."""

    def __init__(self, x: torch.Tensor):
        self.operand = SparseOperand.from_csr(x.to_sparse_csr() if x.layout != torch.sparse_csr else x)
        self.shape = x.shape

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is not F.linear:
            return NotImplemented
        kwargs = kwargs or {}
        x, weight = args[0], args[1]
        bias = args[2] if len(args) > 2 else kwargs.get("bias")
        out = x.operand.matmul(weight.t())  # [N, out]
        return out if bias is None else out + bias


def install_dgl_stand_in() -> None:
    dgl = types.ModuleType("dgl")
    dgl_nn = types.ModuleType("dgl.nn")
    dgl_nn.GraphConv = StandInGraphConv
    dgl.nn = dgl_nn
    sys.modules.setdefault("dgl", dgl)
    sys.modules.setdefault("dgl.nn", dgl_nn)


def import_code(repo: Path):
    """The public code's ``CaGCN_GETS`` (model/calibrator.py), imported from ``repo``."""
    if not (repo / "model" / "calibrator.py").is_file():
        raise SystemExit(f"--gets-repo {repo}: no model/calibrator.py; give a checkout of ZhuangDingyi/GETS")
    install_dgl_stand_in()
    sys.path.insert(0, str(repo))
    from model.calibrator import CaGCN_GETS  # noqa: PLC0415 (imported from the given checkout)
    return CaGCN_GETS


def load_code_config(repo: Path, dataset: str):
    from ruamel.yaml import YAML  # noqa: PLC0415

    path = repo / "gets_config" / f"{CODE_CONFIG_NAMES[dataset]}.yaml"
    conf = YAML(typ="safe").load(path.read_text())
    return types.SimpleNamespace(**conf)


class FrozenBackbone(nn.Module):
    """What the public code calls as ``model(g, features)``: the backbone's stored logits."""

    def __init__(self, logits: torch.Tensor):
        super().__init__()
        self.register_buffer("logits", logits)

    def forward(self, g, features):
        return self.logits


# ------------------------------------------------------------------------------------------------- rows
def test_scores(probs: torch.Tensor, labels: np.ndarray, degree: np.ndarray) -> dict:
    p = probs.detach().double().cpu().numpy()
    return {"ece": 100 * ece(p, labels), "signed_ce": 100 * signed_ce(p, labels), "nll": nll(p, labels),
            "accuracy": 100 * accuracy(p, labels), "degree_ece": 100 * degree_ece(p, labels, degree)}


def code_rows(CaGCN_GETS, repo: Path, run, settings, output, seeds) -> list[dict]:
    cg, test_idx = calibration_graph(run, settings, output)
    graph_x = SparseFeatures(cg.features)
    self_loops = GETS_CONFIGS.get(run.dataset, {}).get("self_loops", True)
    edges = edges_with_self_loops(cg.edge_index, cg.num_nodes, self_loops)
    g = StandInGraph(edges, cg.num_nodes)
    conf = load_code_config(repo, run.dataset)
    y_test = load_labels(run, settings)[test_idx]
    degree = cg.degree()[torch.from_numpy(test_idx)].numpy()
    rows = []
    for seed in seeds:
        torch.manual_seed(seed)
        model = CaGCN_GETS(FrozenBackbone(cg.logits), graph_x.shape[1], cg.num_classes, "cpu", conf)
        masks = [cg.train_idx.numpy(), cg.cal_idx.numpy(), test_idx]  # the code: fit on masks[1], stop on masks[0]
        log = io.StringIO()
        start = time.perf_counter()
        with contextlib.redirect_stdout(log):
            model.fit(g, graph_x, cg.labels, masks)
        seconds = time.perf_counter() - start
        improved = [int(m.group(1)) for m in re.finditer(r"Epoch (\d+) \|[^\n]*\|\*", log.getvalue())]
        epochs = len(re.findall(r"^Epoch ", log.getvalue(), flags=re.M))
        model.eval()
        with torch.no_grad():
            calibrated, _, _ = model(g, graph_x)
        probs = torch.softmax(calibrated, dim=1)[torch.from_numpy(test_idx)]
        rows.append({"method": "code", "seed": seed, **test_scores(probs, y_test, degree),
                     "best_epoch": improved[-1] - 1 if improved else None, "epochs": epochs, "fit_seconds": seconds})
    return rows


def load_labels(run, settings) -> np.ndarray:
    from simcalib.experiment.protocol import load_graph  # noqa: PLC0415

    return load_graph(run.dataset, settings).y.numpy()


def our_rows(run, settings, output, names) -> list[dict]:
    rows = []
    y = load_labels(run, settings)
    for name in names:
        fitted = fit_calibrator(run, settings, name, output=output)
        test = torch.from_numpy(fitted.test_idx)
        probs = fitted.model.predict_proba(fitted.graph)[test]
        degree = fitted.graph.degree()[test].numpy()
        rows.append({"method": name, "seed": run.seed(settings), **test_scores(probs, y[fitted.test_idx], degree),
                     "best_epoch": fitted.model.fit_info.get("best_epoch"),
                     "epochs": fitted.model.fit_info.get("epochs"), "fit_seconds": fitted.fit_seconds})
    return rows


def summary(frame: pd.DataFrame) -> str:
    """Markdown tables of the rows: means, seed spread against our gap, best epochs, per-run ECE."""
    frame = frame.copy()
    frame["label"] = np.where(frame.method == "code", "code seed " + frame.seed.astype(str), frame.method)
    first_seed = frame[frame.method == "code"].seed.min()
    lines = ["Means over runs (test nodes; ECE, signed error, degree-binned ECE and accuracy in %):", "",
             "| benchmark | method | runs | ECE | signed | NLL | accuracy | degree ECE |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for (dataset, label), rows in frame.groupby(["dataset", "label"], sort=False):
        m = rows[["ece", "signed_ce", "nll", "accuracy", "degree_ece"]].mean()
        lines.append(f"| {dataset} GCN | {label} | {len(rows)} | {m.ece:.2f} | {m.signed_ce:+.2f} | {m.nll:.3f} | "
                     f"{m.accuracy:.2f} | {m.degree_ece:.2f} |")
    lines += ["", "Our GETS against the code (seed " + str(first_seed) + ") per run, and the code against itself "
              "across seeds on the runs that have several:", "",
              "| benchmark | mean ECE gap (ours - code) | mean abs. gap, all runs | runs with seeds | mean abs. gap there "
              "| code seed vs seed: mean abs. difference | code: mean per-run std over seeds |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for dataset, rows in frame.groupby("dataset", sort=False):
        wide = rows.pivot_table(index=["split", "fold"], columns="label", values="ece")
        code0 = f"code seed {first_seed}"
        gap = wide["GETS"] - wide[code0]
        seeds = [c for c in wide.columns if c.startswith("code seed")]
        spread_runs = wide[seeds].dropna()
        pairs = [(a, b) for i, a in enumerate(seeds) for b in seeds[i + 1:]]
        pair_diff = np.mean([np.abs(spread_runs[a] - spread_runs[b]).mean() for a, b in pairs]) if pairs else np.nan
        lines.append(f"| {dataset} GCN | {gap.mean():+.2f} | {gap.abs().mean():.2f} | {len(spread_runs)} | "
                     f"{gap[spread_runs.index].abs().mean():.2f} | {pair_diff:.2f} | "
                     f"{spread_runs.std(axis=1, ddof=1).mean():.2f} |")
    lines += ["", "Best epoch (0-based; the code's: its last epoch marked as improved), over runs:", "",
              "| benchmark | method | median | quartiles | at epoch 0 | max |", "|---|---|---:|---:|---:|---:|"]
    for (dataset, label), rows in frame.groupby(["dataset", "label"], sort=False):
        e = rows.best_epoch.astype(float)
        lines.append(f"| {dataset} GCN | {label} | {e.median():.0f} | {e.quantile(0.25):.0f}-{e.quantile(0.75):.0f} | "
                     f"{int((e == 0).sum())}/{len(e)} | {e.max():.0f} |")
    lines += ["", "ECE (%) per run:", ""]
    labels = list(dict.fromkeys(frame.label))
    lines += ["| benchmark | split | fold | " + " | ".join(labels) + " |", "|---|---:|---:|" + "---:|" * len(labels)]
    for (dataset, split, fold), rows in frame.groupby(["dataset", "split", "fold"], sort=False):
        values = dict(zip(rows.label, rows.ece))
        cells = " | ".join(f"{values[label]:.2f}" if label in values else "" for label in labels)
        lines.append(f"| {dataset} GCN | {split} | {fold} | {cells} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gets-repo", type=Path, required=True, help="a checkout of ZhuangDingyi/GETS")
    parser.add_argument("--benchmarks", nargs="+", default=["Cora", "Citeseer"], help="datasets (GCN backbones)")
    parser.add_argument("--splits", type=int, default=5)
    parser.add_argument("--first-split", type=int, default=0, help="start at this split (one process per range)")
    parser.add_argument("--folds", type=int, default=3)
    parser.add_argument("--code-seeds", type=int, nargs="+", default=[0, 1, 2],
                        help="the public code's seeds: the first on every run, all of them on --spread-splits")
    parser.add_argument("--spread-splits", type=int, default=5,
                        help="splits 0..n-1 run the public code with every --code-seeds seed (the seed spread)")
    parser.add_argument("--ours", nargs="+", default=["GETS", "GETS_ap", "GETS_holdout"])
    parser.add_argument("--out", type=Path, default=Path("reports/gets_reference/side_by_side.csv"))
    parser.add_argument("--summary", action="store_true", help="print the markdown tables of --out's rows and exit")
    args = parser.parse_args()
    if args.summary:
        print(summary(pd.read_csv(args.out)), end="")
        return
    torch.set_num_threads(1)
    CaGCN_GETS = import_code(args.gets_repo.resolve())
    settings = ProtocolSettings()
    done = pd.read_csv(args.out) if args.out.is_file() else pd.DataFrame()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for dataset in args.benchmarks:
        for run in make_runs(dataset, "GCN", range(args.first_split, args.splits), range(1), range(args.folds)):
            mine = done[(done.dataset == run.dataset) & (done.split == run.split) & (done.fold == run.fold)] \
                if len(done) else pd.DataFrame(columns=["method", "seed"])
            ours = [name for name in args.ours if name not in set(mine.method)]  # resumed: rows written are kept
            wanted = args.code_seeds if run.split < args.spread_splits else args.code_seeds[:1]
            seeds = [seed for seed in wanted if seed not in set(mine[mine.method == "code"].seed.astype(int))]
            if not ours and not seeds:
                continue
            output = train_run_backbone(run, settings)
            rows = our_rows(run, settings, output, ours) + code_rows(CaGCN_GETS, args.gets_repo, run, settings,
                                                                     output, seeds)
            frame = pd.DataFrame([{"dataset": run.dataset, "backbone": run.backbone, "split": run.split,
                                   "init": run.init, "fold": run.fold, **row} for row in rows])
            frame.to_csv(args.out, mode="a", header=not args.out.is_file(), index=False, float_format="%.6g")
            done = pd.read_csv(args.out)
            print(run.tag(), frame[["method", "seed", "ece", "best_epoch", "fit_seconds"]].to_string(index=False),
                  flush=True)

if __name__ == "__main__":
    main()
