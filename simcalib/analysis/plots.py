"""Single-panel calibration plots on a matplotlib Axes (no pyplot state, so they work headless).

``reliability_diagram`` draws, for the 15 equal-width confidence bins of :func:`simcalib.metrics.reliability_bins`,
the accuracy of each bin as a bar, the gap to its mean confidence as a hatched bar, and the diagonal of
perfect calibration (accuracy = confidence). ``confidence_histogram`` draws the density of top-1 confidence
for one or several prediction sets.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from simcalib.analysis import palette
from simcalib.metrics import N_BINS, ece, reliability_bins


def _new_axes(figsize: tuple[float, float] = (4.0, 4.0)) -> Axes:
    return Figure(figsize=figsize, layout="constrained").add_subplot()


def reliability_diagram(probs, labels, ax: Axes | None = None, title: str | None = None,
                        n_bins: int = N_BINS, color: str = "tab:blue", legend: bool = True) -> Axes:
    """Reliability diagram of predictions ``probs`` [N, K] with ``labels`` [N]; returns the Axes.

    Bars: accuracy per bin (empty bins are blank); black hatching: the gap between a bin's accuracy and its
    mean confidence (above the bar when overconfident, inside it when underconfident); dashed line:
    perfect calibration. The ECE (%) is in the legend, or appended to the title when ``legend=False``.
    """
    bins = reliability_bins(probs, labels, n_bins)
    count = bins.count.astype(float)
    return reliability_diagram_from_bins(count, np.nan_to_num(bins.confidence) * count,
                                         np.nan_to_num(bins.accuracy) * count, ax, title, color, legend,
                                         ece_pct=100 * ece(probs, labels, n_bins))


def reliability_diagram_from_bins(count, confidence_sum, correct_sum, ax: Axes | None = None,
                                  title: str | None = None, color: str = "tab:blue", legend: bool = True,
                                  ece_pct: float | None = None) -> Axes:
    """The same diagram from per-bin node counts, confidence sums and correct counts (equal-width bins over
    [0, 1], e.g. pooled :mod:`simcalib.analysis.figure_bins`); the ECE is computed from them unless given."""
    ax = ax if ax is not None else _new_axes()
    count, confidence_sum, correct_sum = (np.asarray(a, dtype=float) for a in (count, confidence_sum, correct_sum))
    n_bins = len(count)
    width = 1.0 / n_bins
    centers = np.arange(n_bins) * width + width / 2
    filled = count > 0
    accuracy = np.divide(correct_sum, count, out=np.zeros(n_bins), where=filled)
    confidence = np.divide(confidence_sum, count, out=np.zeros(n_bins), where=filled)
    if ece_pct is None:
        ece_pct = 100 * np.abs(correct_sum - confidence_sum).sum() / max(count.sum(), 1)
    ax.bar(centers, accuracy, width=width, color=color, edgecolor="black", linewidth=0.5, label="accuracy")
    low, high = np.minimum(accuracy, confidence)[filled], np.maximum(accuracy, confidence)[filled]
    ax.bar(centers[filled], high - low, bottom=low, width=width, fill=False, hatch="////", edgecolor="black",
           linewidth=0.0, label="gap to mean confidence")
    ax.plot([0, 1], [0, 1], linestyle="--", color="gray", linewidth=1, label="perfect calibration")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("confidence")
    ax.set_ylabel("accuracy")
    ax.set_aspect("equal")
    if legend:
        ax.plot([], [], " ", label=f"ECE = {ece_pct:.2f}%")
        ax.legend(loc="upper left", fontsize="x-small", frameon=False)
    if title or not legend:
        ax.set_title(f"{title}\nECE {ece_pct:.2f}%" if not legend and title else (title or f"ECE {ece_pct:.2f}%"))
    return ax


def confidence_histogram(confidences: Mapping[str, np.ndarray], ax: Axes | None = None,
                         title: str | None = None, n_bins: int = 30) -> Axes:
    """Density of the top-1 confidence of each named prediction set (e.g. {"UnCal": c1, "SimCalib": c2})."""
    counts = {name: np.histogram(np.asarray(values, dtype=float), bins=n_bins, range=(0.0, 1.0))[0]
              for name, values in confidences.items()}
    return confidence_histogram_from_counts(counts, ax, title)


def confidence_histogram_from_counts(counts: Mapping[str, np.ndarray], ax: Axes | None = None,
                                     title: str | None = None, colors: Mapping[str, str] | None = None) -> Axes:
    """The same densities from counts in equal-width bins over [0, 1] (e.g. pooled :mod:`simcalib.analysis.figure_bins`);
    ``colors``: each name's colour (default: each calibrator's own, :mod:`simcalib.analysis.palette`)."""
    ax = ax if ax is not None else _new_axes((5.0, 3.5))
    colors = dict(colors) if colors is not None else palette.colors(counts)
    for name, values in counts.items():
        color = colors[name]
        values = np.asarray(values, dtype=float)
        edges = np.linspace(0.0, 1.0, len(values) + 1)
        density = values / max(values.sum(), 1) / np.diff(edges)
        ax.stairs(density, edges, fill=True, alpha=0.3, color=color, label=name)
        ax.stairs(density, edges, color=color)
    ax.set_xlim(0, 1)
    ax.set_xlabel("top-1 confidence")
    ax.set_ylabel("density")
    if counts:
        ax.legend(fontsize="small", frameon=False)
    if title:
        ax.set_title(title)
    return ax


__all__ = ["confidence_histogram", "confidence_histogram_from_counts", "reliability_diagram",
           "reliability_diagram_from_bins"]
