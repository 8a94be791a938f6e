"""One colour and one marker per calibrator, the same in every figure.

Every registered calibrator has a fixed :class:`Style` in :data:`STYLES` (the paper's seven first, with the
most distinct colours; SimCalib's variants in shades of its red and orange). A name outside the table (a
calibrator of another package, a row name of an older pass) takes a colour of :data:`RESERVE` chosen by a
checksum of the name (``zlib.crc32``, the same in every process), moving on to the next reserve colour while
another name of the same figure holds it; so two calibrators drawn together never share a colour.

Shapes: ``styles(names)`` maps each of ``names`` to its :class:`Style` (colour as ``#rrggbb``, a matplotlib
marker); ``colors(names)`` keeps the colours only.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Style:
    color: str  # "#rrggbb"
    marker: str  # a matplotlib marker


STYLES: dict[str, Style] = {
    # the paper's seven
    "UnCal": Style("#8c8c8c", "x"),  # light enough for the reliability diagram's black hatching
    "TS": Style("#1f77b4", "o"),
    "VS": Style("#17becf", "v"),
    "ETS": Style("#bcbd22", "<"),
    "CaGCN": Style("#8c564b", ">"),
    "GATS": Style("#2ca02c", "s"),
    "SimCalib": Style("#d62728", "D"),
    # the calibrators beyond the paper's
    "Dirichlet": Style("#9467bd", "P"),
    "IRM": Style("#e377c2", "X"),
    "Spline": Style("#7f7f00", "h"),
    "OrderInvariant": Style("#393b79", "8"),
    "GETS": Style("#ff7f0e", "^"),
    "GETS_ap": Style("#ffbb78", "^"),
    "GETS_holdout": Style("#bd9e39", "^"),
    "WATS": Style("#000080", "*"),
    "AutoCal": Style("#00a087", "p"),
    # SimCalib's variants and ablations
    "SimCalib_decay_all": Style("#ff9896", "d"),
    "SimCalib_l": Style("#843c39", "H"),
    "SimCalib_m": Style("#ad494a", "p"),
    "SimCalib_h": Style("#e7969c", "H"),
    "SimCalib_r": Style("#7b4173", "p"),
    "SimCalib_n": Style("#a55194", "H"),
    "SimCalib_w0.5": Style("#fdd0a2", "1"),
    "SimCalib_w0.6": Style("#fdae6b", "2"),
    "SimCalib_w0.8": Style("#e6550d", "3"),
    "SimCalib_w0.9": Style("#a63603", "4"),
    "SimCalib_tuned": Style("#ce6dbd", "D"),
    "GATS_tuned": Style("#98df8a", "s"),
    # row names of older passes (archive/)
    "SimCalib_stop_nll": Style("#de9ed6", "d"),
    "SimCalib_separate": Style("#637939", "d"),
}

# colours for names outside STYLES (none of them is in STYLES)
RESERVE: tuple[str, ...] = ("#31a354", "#3182bd", "#756bb1", "#636363", "#e6ab02", "#66a61e", "#a6761d",
                            "#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#6baed6", "#74c476", "#9e9ac8")
RESERVE_MARKERS: tuple[str, ...] = ("o", "s", "D", "^", "v", "P", "X", "*")


def _reserve_index(name: str) -> int:
    return zlib.crc32(name.encode("utf-8")) % len(RESERVE)


def styles(names: Iterable[str]) -> dict[str, Style]:
    """Each name's :class:`Style`: its own where registered, else a reserve colour (see the module docstring)."""
    names = list(dict.fromkeys(str(n) for n in names))
    out = {n: STYLES[n] for n in names if n in STYLES}
    taken = {s.color for s in out.values()}
    for name in sorted(n for n in names if n not in STYLES):
        start = _reserve_index(name)
        for step in range(len(RESERVE)):
            color = RESERVE[(start + step) % len(RESERVE)]
            if color not in taken:
                break
        else:
            raise ValueError(f"more than {len(RESERVE)} calibrators outside simcalib.analysis.palette.STYLES in "
                             "one figure; add their styles to STYLES")
        taken.add(color)
        out[name] = Style(color, RESERVE_MARKERS[start % len(RESERVE_MARKERS)])
    return {n: out[n] for n in names}


def colors(names: Iterable[str]) -> dict[str, str]:
    """Each name's colour (:func:`styles`)."""
    return {n: s.color for n, s in styles(names).items()}


__all__ = ["RESERVE", "STYLES", "Style", "colors", "styles"]
