"""SimCalib's feature-similarity branch must give node-wise temperatures that follow the distance to the
class prototypes (PROTOCOL section 5: a constant T_feat is temperature scaling, not the method)."""

from __future__ import annotations

import pytest
import torch
from graph_fixtures import single_thread  # noqa: F401

from simcalib.analysis.feature_signal import MIN_NODEWISE_CV, distance_groups, fit_temperature_map
from simcalib.calibrators import CalibrationGraph, build_calibrator
from simcalib.calibrators.ts import nll_temperature
from simcalib.similarity import nearest_prototype_distance, spearman


def distance_dependent_problem(seed: int = 0, per_class: int = 300, num_classes: int = 3):
    """A graph whose right temperature grows with the distance to the class prototypes.

    Every node has the same logit margin, so one temperature cannot fit it: nodes near their class mean in
    the hidden space are predicted right, far ones are right about as often as chance. Edges join nodes of
    similar distance (so a GNN's smoothing keeps the signal) and of the same predicted class.
    """
    g = torch.Generator().manual_seed(seed)
    n = per_class * num_classes
    y = torch.arange(n) % num_classes
    radius = torch.rand(n, generator=g) * 3.0  # 0 (at the prototype) .. 3 (far)
    means = 4.0 * torch.eye(num_classes, 8)
    direction = torch.nn.functional.normalize(torch.randn(n, 8, generator=g), dim=1)
    hidden = torch.relu(means[y] + radius[:, None] * direction) + 0.05 * torch.rand(n, 8, generator=g)
    p_right = torch.clamp(1.0 - radius / 3.5, min=1.0 / num_classes)  # far nodes: near chance
    right = torch.rand(n, generator=g) < p_right
    wrong = (y + 1 + torch.randint(0, num_classes - 1, (n,), generator=g)) % num_classes
    predicted = torch.where(right, y, wrong)
    logits = 3.0 * torch.nn.functional.one_hot(predicted, num_classes).float()
    order = torch.argsort(radius)  # a chain of neighbours along the distance, plus a few random edges
    src = torch.cat([order[:-1], torch.randint(0, n, (n // 4,), generator=g)])
    dst = torch.cat([order[1:], torch.randint(0, n, (n // 4,), generator=g)])
    edge_index = torch.cat([torch.stack([src, dst]), torch.stack([dst, src])], dim=1)
    perm = torch.randperm(n, generator=g)
    train_idx, cal_idx, test_idx = perm[: n // 5], perm[n // 5: 2 * n // 5], perm[2 * n // 5:]
    graph = CalibrationGraph.from_run(logits, hidden, edge_index, y, train_idx, cal_idx)
    return graph, test_idx


def fitted_feature_temperature(name: str, **options):
    graph, test_idx = distance_dependent_problem()
    torch.manual_seed(0)
    model = build_calibrator(name, graph.num_classes, w=0.9, t=0.5, **options).fit(graph)
    t_feat = model.feature_temperature(graph)[test_idx].flatten().detach()
    distance = nearest_prototype_distance(graph.hidden, graph.labels, graph.train_idx, graph.num_classes, test_idx)
    return t_feat, distance


@pytest.mark.usefixtures("single_thread")
def test_the_feature_branch_gives_hotter_temperatures_to_nodes_far_from_the_prototypes():
    t_feat, distance = fitted_feature_temperature("SimCalib")
    cv = float(t_feat.std() / t_feat.mean())
    assert cv > MIN_NODEWISE_CV, f"T_feat is nearly one constant (CV {cv:.4f})"
    assert float(t_feat.mean()) > 0.2, "T_feat collapsed towards 0"
    rho = spearman(t_feat, distance)
    assert rho is not None and rho > 0.3, f"T_feat does not follow the distance (Spearman {rho})"


@pytest.mark.usefixtures("single_thread")
def test_the_decay_all_variant_is_the_constant_branch_the_default_replaces():
    t_feat, _ = fitted_feature_temperature("SimCalib_decay_all")
    assert float(t_feat.std() / t_feat.mean()) < MIN_NODEWISE_CV


def test_spearman_matches_a_hand_computed_rank_correlation():
    assert spearman(torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([10.0, 20.0, 30.0, 40.0])) == pytest.approx(1.0)
    assert spearman(torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([4.0, 3.0, 2.0, 1.0])) == pytest.approx(-1.0)
    # ties share their mean rank: ranks (0.5, 0.5, 2, 3) against (0, 1, 2, 3)
    a, b = torch.tensor([0.5, 0.5, 2.0, 3.0]), torch.tensor([0.0, 1.0, 2.0, 3.0])
    a, b = a - a.mean(), b - b.mean()
    expected = float(a @ b / (a.norm() * b.norm()))
    assert spearman(torch.tensor([5.0, 5.0, 6.0, 7.0]), torch.tensor([1.0, 2.0, 3.0, 4.0])) == pytest.approx(expected)
    assert spearman(torch.ones(5), torch.arange(5.0)) is None


@pytest.mark.slow  # a full Cora backbone, ~35 s of CPU; the mechanism on a generated graph runs by default
def test_on_a_cora_gcn_run_the_default_branch_is_nodewise_and_the_decay_all_one_constant(mirror_dir, splits_dir,
                                                                                        tmp_path):
    """One real run (Cora GCN, split 1, init 0, fold 2, the paper's fixed split): T_feat's coefficient of
    variation over test nodes clears MIN_NODEWISE_CV under the default (committed row: 0.44) and is 0 under
    SimCalib_decay_all (committed row: 0.0000), as in 73-100% / 0-33% of the re-measured runs."""
    from simcalib.experiment.protocol import ProtocolSettings, Run, evaluate_calibrator

    settings = ProtocolSettings(mirror=str(mirror_dir), splits_dir=str(splits_dir), cache_dir=str(tmp_path),
                                data_root=str(tmp_path / "data"))
    run = Run("Cora", "GCN", 1, 0, 2)
    rows = {name: evaluate_calibrator(run, settings, name) for name in ("SimCalib", "SimCalib_decay_all")}
    cv = {name: row["t_feat_std"] / row["t_feat_mean"] for name, row in rows.items()}
    assert cv["SimCalib"] > MIN_NODEWISE_CV > cv["SimCalib_decay_all"], cv
    assert rows["SimCalib"]["t_feat_mean"] > 0.1  # not collapsed towards 0


def test_the_oracles_global_map_is_temperature_scalings_optimum():
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(500, 5, generator=g) * 3
    labels = torch.multinomial(torch.softmax(logits / 1.7, -1), 1, generator=g).squeeze(1)
    distance = torch.rand(500, generator=g, dtype=torch.float64)
    log_d = distance.log() - distance.log().mean()
    params = fit_temperature_map("global", logits, labels, distance_groups(distance), log_d)
    assert float(params[0].exp()) == pytest.approx(nll_temperature(logits, labels), rel=1e-9)
    slope = fit_temperature_map("loglinear", logits, labels, distance_groups(distance), log_d)[1]
    assert abs(float(slope)) < 0.1  # labels drawn at one temperature: no trend with the distance
