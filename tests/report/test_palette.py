"""One colour and marker per calibrator, the same in every figure of a report."""

from __future__ import annotations

import pandas as pd
import pytest
from matplotlib.colors import to_hex

from simcalib.analysis import palette
from simcalib.analysis.homophily import ISOLATED, group_names
from simcalib.calibrators import calibrator_names
from simcalib.report import figures
from simcalib.report.homophily_groups import FIGURE_METHODS, homophily_figure
from simcalib.report.results import load_study_results

from .synthetic import write_benchmark

CALIBRATORS = {*calibrator_names(include_tuned=True), "MyCal"}
SHOWN = ["UnCal", "TS", "GATS", "SimCalib", "SimCalib_decay_all", "MyCal"]  # MyCal: a name outside the registry


def test_every_registered_calibrator_has_a_colour_and_marker_of_its_own():
    names = calibrator_names(include_tuned=True)
    assert set(names) <= set(palette.STYLES)
    colours = [s.color for s in palette.STYLES.values()]
    assert len(set(colours)) == len(colours)
    assert not set(palette.RESERVE) & set(colours)  # a name outside the table never takes a registered colour
    assert len({(s.color, s.marker) for s in palette.styles(names).values()}) == len(names)


def test_a_name_outside_the_table_has_a_colour_from_its_name_and_never_one_another_name_of_the_figure_holds():
    alone = palette.styles(["MyCal"])["MyCal"]
    assert alone == palette.styles(["TS", "MyCal", "GATS"])["MyCal"]  # registered names hold no reserve colour
    assert alone.color == palette.RESERVE[palette._reserve_index("MyCal")]  # from a checksum of the name
    many = [f"external_{i}" for i in range(len(palette.RESERVE))]
    styles = palette.styles([*many, "TS"])
    assert len({s.color for s in styles.values()}) == len(many) + 1
    assert list(styles) == [*many, "TS"]  # in the order asked
    with pytest.raises(ValueError, match="add their styles to STYLES"):
        palette.styles([*many, "one_more"])


def _colour(handle) -> str:
    """The colour of a legend handle: a line's, a patch's face, an error bar's lines'."""
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D

    if isinstance(handle, Line2D):
        return to_hex(handle.get_color(), keep_alpha=False)
    if isinstance(handle, LineCollection):  # the legend's mark of an error bar
        return to_hex(handle.get_colors()[0], keep_alpha=False)
    return to_hex(handle.get_facecolor(), keep_alpha=False)


def _legend_colours(fig) -> dict[str, str]:
    """Calibrator -> colour over every legend of ``fig`` (the figure's and its axes')."""
    out: dict[str, list[str]] = {}
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]
    for legend in legends:
        for handle, text in zip(legend.legend_handles, legend.get_texts()):
            label = text.get_text()
            for prefix in ("accuracy (",):
                if label.startswith(prefix):
                    label = label[len(prefix):-1]
            name = label.split(" (")[0].removesuffix(" improvement")
            if name not in CALIBRATORS:  # the marks that are no calibrator (intervals, the diagonal)
                continue
            out.setdefault(name, []).append(_colour(handle))
    assert all(len(set(c)) == 1 for c in out.values()), out  # one colour per calibrator within the figure
    return {name: c[0] for name, c in out.items()}


def _reliability_colours(fig) -> dict[str, str]:
    """Calibrator -> colour of the accuracy bars of each reliability panel (named in its title)."""
    out: dict[str, set[str]] = {}
    for ax in fig.axes:
        if ax.get_visible() and ax.containers:
            name = ax.get_title().split(": ", 1)[1].split(" (")[0]
            out.setdefault(name, set()).add(to_hex(ax.containers[0].patches[0].get_facecolor(), keep_alpha=False))
    assert all(len(c) == 1 for c in out.values()), out
    return {name: next(iter(c)) for name, c in out.items()}


@pytest.fixture
def drawn(tmp_path):
    """Every per-calibrator figure drawn on synthetic rows: name -> {calibrator: colour}."""
    root = tmp_path / "study"
    cost_methods = ["UnCal", "TS", "VS", "GATS", "GETS", "WATS", "SimCalib", "SimCalib_decay_all", "Dirichlet",
                    "MyCal"]
    write_benchmark(root / "Cora_GCN", "Cora", "GCN", sorted(set(SHOWN + cost_methods)), seed=1)
    for k, rate in enumerate((0.03, 0.06)):
        write_benchmark(root / f"sweep/Cora_GCN_lr{rate}", "Cora", "GCN", ["UnCal", "GATS", "SimCalib", "MyCal"],
                        label_rate=rate, splits=(0,), folds=(0,), seed=10 + k, predictions=False)
    study = load_study_results(root)
    bins = figures.figure_bins_frame(study.main_predictions(), methods=[*SHOWN, *figures.SIMILARITY_METHODS])
    similarity = ["UnCal", "GATS", "SimCalib", "MyCal"]
    summary = figures.similarity_summary(figures.similarity_groups(bins, similarity))
    cost = figures.cost_frame(study.main_rows(), cost_methods)
    groups = [g for g in group_names() if g != ISOLATED]
    means = pd.DataFrame([{"dataset": "Actor", "backbone": "GCN", "group": g, "calibrator": m, "runs": 3,
                           "nodes": 10.0, "ece": 5.0 + i + j, "ci_low": 4.0 + i, "ci_high": 6.0 + i + j}
                          for i, m in enumerate([*FIGURE_METHODS, "MyCal"]) for j, g in enumerate(groups)])
    out = {
        "reliability": _reliability_colours(figures.reliability_grid(bins, SHOWN)),
        "reliability legend": _legend_colours(figures.reliability_grid(bins, SHOWN)),
        "confidence": _legend_colours(figures.confidence_grid(bins, SHOWN)),
        "data efficiency": _legend_colours(figures.data_efficiency_figure(study.rows, ["UnCal", "GATS", "SimCalib",
                                                                                      "MyCal"])),
        "feature similarity": _legend_colours(figures.feature_similarity_figure(summary, similarity)),
        "cost": _legend_colours(figures.cost_figure(cost, cost_methods)),
        "cost (default calibrators)": _legend_colours(figures.cost_figure(cost)),
        "homophily": _legend_colours(homophily_figure(means, [*FIGURE_METHODS, "MyCal"])),
    }
    return out


def test_each_calibrator_has_one_colour_in_every_figure_and_no_two_share_one(drawn):
    seen: dict[str, set[str]] = {}
    for name, colours in drawn.items():
        assert colours, name
        assert len(set(colours.values())) == len(colours), (name, colours)  # distinct calibrators, distinct colours
        for calibrator, colour in colours.items():
            seen.setdefault(calibrator, set()).add(colour)
    assert all(len(c) == 1 for c in seen.values()), {k: v for k, v in seen.items() if len(v) > 1}
    assert {c: next(iter(v)) for c, v in seen.items()} == palette.colors(seen)  # the palette's own colours
    assert "MyCal" in seen and all("MyCal" in drawn[f] for f in ("reliability", "confidence", "cost", "homophily"))


def test_the_figures_show_the_calibrators_a_reader_compares(drawn):
    assert set(SHOWN) <= set(drawn["reliability"]) and set(SHOWN) <= set(drawn["confidence"])
    cost = drawn["cost (default calibrators)"]
    assert "SimCalib_decay_all" in cost and "UnCal" not in cost
    assert cost["TS"] != cost["GETS"] and cost["VS"] != cost["WATS"]
    assert {"Dirichlet", "IRM"} <= set(drawn["homophily"])
