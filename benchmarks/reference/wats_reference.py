"""WATS side by side with the public WATS code (lxy1134/WATS), outside the project.

The public code is imported from ``--wats-repo`` (a checkout; nothing of it is copied here). It needs DGL, which
this environment lacks: a minimal stand-in module ``dgl`` is installed in ``sys.modules`` before the import, and
the graph is handed to the code as an object with the four methods its wavelet and fit paths call
(``adj_external``, ``num_nodes``, ``in_degrees``, ``out_degrees``), built from our edge_index as the code's
loader builds it (DGL's ``AddSelfLoop`` on the Planetoid graphs: every node one self-loop).

1. Features: the code's ``compute_graph_wavelet`` against :func:`simcalib.calibrators.wats.wavelet_features`
   on the same graph (max abs difference). The version is read from the code: the logged one integrates the
   heat kernel's Chebyshev coefficients (K = 2, s = 1.2 as its ``FeatureExtractor``), the later one uses
   ``exp(-s k)`` (K = 4, s = 0.4).
2. Fits (``--runs``): on the protocol's runs of Cora GCN (backbones trained or read from the backbone cache),
   the code's ``WATS`` model and ``fit_calibration`` routine and ours on the same logits and node sets, each
   seeded with the same torch seed before its MLP is built (both draw their initial weights and dropout masks
   in the same order), for every seed in ``--seeds``. Test ECE, NLL, accuracy per run and seed to
   ``--out/side_by_side.csv``.

    python benchmarks/reference/wats_reference.py --wats-repo /root/ref/wats_logged --datasets Cora Citeseer \
        --runs 15 --seeds 0 1 2 --out reports/wats_reference
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import importlib
import io
import sys
import types
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

DGL_SELF_LOOP = {"Cora": True, "Citeseer": True, "Pubmed": True, "CoraFull": True}


def install_dgl_stand_in() -> None:
    """A ``dgl`` module whose names exist (the code's imports and annotations need them) but do nothing."""

    class _Anything:
        def __init__(self, *args, **kwargs):
            raise RuntimeError("the DGL stand-in cannot build DGL layers")

    def module(name: str) -> types.ModuleType:
        mod = types.ModuleType(name)
        def anything(attr: str):
            if attr.startswith("__"):
                raise AttributeError(attr)
            return _Anything

        mod.__getattr__ = anything  # type: ignore[attr-defined]
        sys.modules[name] = mod
        return mod

    dgl = module("dgl")
    dgl.nn = module("dgl.nn")
    dgl.nn.pytorch = module("dgl.nn.pytorch")
    dgl.function = module("dgl.function")
    dgl.DGLGraph = type("DGLGraph", (), {})


class GraphView:
    """What the code's wavelet and fit paths read of a DGL graph, from an edge_index [2, E]."""

    def __init__(self, edge_index: torch.Tensor, num_nodes: int, self_loops: bool):
        src, dst = edge_index.cpu().numpy()
        keep = src != dst  # DGL's AddSelfLoop drops existing self-loops, then adds one per node
        src, dst = src[keep], dst[keep]
        if self_loops:
            src = np.concatenate([src, np.arange(num_nodes)])
            dst = np.concatenate([dst, np.arange(num_nodes)])
        self.src, self.dst, self.n = src, dst, num_nodes
        self.ndata: dict = {}

    def adj_external(self, scipy_fmt: str = "csr", transpose: bool = False):
        row, col = (self.dst, self.src) if transpose else (self.src, self.dst)
        return sp.coo_matrix((np.ones(len(row)), (row, col)), shape=(self.n, self.n)).asformat(scipy_fmt)

    def num_nodes(self) -> int:
        return self.n

    def in_degrees(self) -> torch.Tensor:
        return torch.from_numpy(np.bincount(self.dst, minlength=self.n))

    def out_degrees(self) -> torch.Tensor:
        return torch.from_numpy(np.bincount(self.src, minlength=self.n))

    def cpu(self) -> GraphView:
        return self


def import_reference(repo: str):
    install_dgl_stand_in()
    sys.path.insert(0, str(Path(repo).resolve()))
    with contextlib.redirect_stdout(io.StringIO()):
        return importlib.import_module("model.calibrator")


def reference_version(ref) -> tuple[str, int, float]:
    """(kernel, K, s) of the code's FeatureExtractor."""
    return ("heat", 2, 1.2) if hasattr(ref, "compute_formal_chebyshev_coeffs") else ("exp", 4, 0.4)


def compare_features(ref, datasets: list[str]) -> list[dict]:
    from simcalib.calibrators.wats import wavelet_features
    from simcalib.experiment.protocol import ProtocolSettings, load_graph

    kernel, order, scale = reference_version(ref)
    rows = []
    for dataset in datasets:
        graph = load_graph(dataset, ProtocolSettings())
        loops = DGL_SELF_LOOP.get(dataset, False)
        view = GraphView(graph.edge_index, graph.num_nodes, loops)
        with contextlib.redirect_stdout(io.StringIO()):
            theirs = ref.compute_graph_wavelet(view, torch.device("cpu"), k=order, s=scale).double()
        ours = wavelet_features(graph.edge_index, graph.num_nodes, order, scale, kernel, loops).double()
        isolated = torch.from_numpy(np.bincount(graph.edge_index[1].numpy(), minlength=graph.num_nodes) == 0)
        rows.append({"dataset": dataset, "kernel": kernel, "order": order, "scale": scale, "degree_self_loop": loops,
                     "nodes": graph.num_nodes, "isolated": int(isolated.sum()),
                     "max_abs_diff": float((theirs - ours).abs().max()),
                     "max_abs_feature": float(ours.abs().max())})
        print(rows[-1], flush=True)
    return rows


class FrozenLogits(torch.nn.Module):
    """The ``model`` the code's calibrator wraps: returns the frozen backbone's logits."""

    def __init__(self, logits: torch.Tensor):
        super().__init__()
        self.register_buffer("logits", logits)

    def forward(self, g, features):
        return self.logits


def fit_reference(ref, view, logits, y, train_idx, cal_idx, hidden, dropout, seed) -> torch.Tensor:
    conf = types.SimpleNamespace(calibration={"cal_hidden_dim": hidden, "cal_dropout": dropout, "cal_lr": 0.01,
                                              "cal_weight_decay": 0, "epochs": 1000, "patience": 50})
    model = ref.WATS(FrozenLogits(logits), torch.device("cpu"), conf)
    torch.manual_seed(seed)  # the code builds its MLP inside fit, after the (random-free) features
    with contextlib.redirect_stdout(io.StringIO()):
        model.fit(view, None, y, [train_idx, cal_idx, None])  # masks: [train, val (= calibration), test]
    model.eval()
    with torch.no_grad():
        return torch.softmax(model(view, None), dim=1)


def fit_ours(graph, dataset: str, seed: int) -> torch.Tensor:
    from simcalib.calibrators import build_calibrator

    torch.manual_seed(seed)
    model = build_calibrator("WATS", graph.num_classes, dataset, "GCN").fit(graph)
    return model.predict_proba(graph)


def compare_fits(ref, runs: int, seeds: list[int]) -> list[dict]:
    from simcalib.calibrators import CalibrationGraph
    from simcalib.calibrators.wats import WATS
    from simcalib.experiment.protocol import (
        ProtocolSettings,
        load_graph,
        make_runs,
        run_split,
        train_run_backbone,
    )
    from simcalib.metrics import compute_metrics

    settings = ProtocolSettings()
    dataset = "Cora"
    graph = load_graph(dataset, settings)
    defaults = WATS.benchmark_defaults(dataset, "GCN")
    view = GraphView(graph.edge_index, graph.num_nodes, defaults["degree_self_loop"])
    rows = []
    for run in make_runs(dataset, "GCN", range(5), [0], range(3))[:runs]:
        output = train_run_backbone(run, settings)
        train_idx, cal_idx, test_idx = run_split(run, settings, graph).fold_indices(run.fold)
        train_idx, cal_idx = torch.from_numpy(train_idx), torch.from_numpy(cal_idx)
        cg = CalibrationGraph.from_run(output.logits, output.hidden, graph.edge_index, graph.y, train_idx, cal_idx)
        for seed in seeds:
            for implementation in ("public code", "simcalib"):
                if implementation == "public code":
                    probs = fit_reference(ref, view, output.logits.float(), graph.y, train_idx, cal_idx,
                                          defaults["hidden"], defaults["dropout"], seed)
                else:
                    probs = fit_ours(cg, dataset, seed)
                m = compute_metrics(probs[test_idx], graph.y[test_idx])
                rows.append({"dataset": dataset, "backbone": "GCN", "split": run.split, "init": run.init,
                             "fold": run.fold, "seed": seed, "implementation": implementation,
                             "ece": round(m["ece"], 6), "nll": round(m["nll"], 6), "accuracy": round(m["accuracy"], 6)})
            print(rows[-2], rows[-1], flush=True)
    return rows


def write_csv(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wats-repo", required=True, help="a checkout of lxy1134/WATS (its model/calibrator.py)")
    parser.add_argument("--datasets", nargs="+", default=["Cora", "Citeseer"])
    parser.add_argument("--runs", type=int, default=0, help="Cora GCN runs to fit both ways (0: features only)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--out", default=None, help="folder for features.csv and side_by_side.csv")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    ref = import_reference(args.wats_repo)
    features = compare_features(ref, args.datasets)
    fits = compare_fits(ref, args.runs, args.seeds) if args.runs else []
    if args.out:
        kernel = reference_version(ref)[0]
        write_csv(Path(args.out) / f"features_{kernel}.csv", features)
        if fits:
            write_csv(Path(args.out) / "side_by_side.csv", fits)


if __name__ == "__main__":
    main()
