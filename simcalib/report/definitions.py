"""Which definition of each calibrator a report's rows hold.

Every results row records the options its calibrator was built with (``calibrator_options``, canonical JSON)
and their digest (``calibrator_digest``; :func:`simcalib.calibrators.calibrator_definition`). A report lists,
per calibrator, the definitions its rows were computed under, so a reader knows which GETS (or which
SimCalib) a table holds; rows written before the columns existed are counted as not recorded.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from simcalib.report.render import Block, Heading, Paragraph, table_block
from simcalib.store.integrity import CALIBRATOR_DIGEST_COLUMN, CALIBRATOR_OPTIONS_COLUMN

NOT_RECORDED_DIGEST = "not recorded"
DEFINITIONS_CSV = "calibrator_definitions.csv"


def definitions_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """One line per (calibrator, dataset, backbone, digest): its row count and options; digests missing from
    the rows (written before the columns existed) are ``not recorded``."""
    columns = ["calibrator", "dataset", "backbone", CALIBRATOR_DIGEST_COLUMN, "rows", CALIBRATOR_OPTIONS_COLUMN]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    frame = rows.assign(**{c: rows[c] if c in rows.columns else None
                           for c in (CALIBRATOR_DIGEST_COLUMN, CALIBRATOR_OPTIONS_COLUMN)})
    frame[CALIBRATOR_DIGEST_COLUMN] = frame[CALIBRATOR_DIGEST_COLUMN].fillna(NOT_RECORDED_DIGEST).astype(str)
    frame[CALIBRATOR_OPTIONS_COLUMN] = frame[CALIBRATOR_OPTIONS_COLUMN].fillna("").astype(str)
    grouped = frame.groupby(["calibrator", "dataset", "backbone", CALIBRATOR_DIGEST_COLUMN], sort=True)
    out = grouped.agg(rows=("split", "size"), options=(CALIBRATOR_OPTIONS_COLUMN, "first")).reset_index()
    return out.rename(columns={"options": CALIBRATOR_OPTIONS_COLUMN})[columns]


def _varying_options(texts: list[str]) -> str:
    """The option names whose values differ between the JSON definitions ``texts`` (e.g. ``lr, dropout``)."""
    parsed = [json.loads(t) for t in texts if t]
    keys = sorted({k for p in parsed for k in p})
    varying = [k for k in keys if len({json.dumps(p.get(k), sort_keys=True) for p in parsed}) > 1]
    return ", ".join(varying) if varying else "none"


def definition_blocks(frame: pd.DataFrame) -> list[Block]:
    """The report's section: per calibrator, its benchmarks, definitions and the options that vary between
    benchmarks (per-dataset settings such as GETS's configs), and rows with no recorded definition."""
    if frame.empty:
        return []
    body = []
    for name, group in frame.groupby("calibrator", sort=True):
        recorded = group[group[CALIBRATOR_DIGEST_COLUMN] != NOT_RECORDED_DIGEST]
        missing = int(group.loc[group[CALIBRATOR_DIGEST_COLUMN] == NOT_RECORDED_DIGEST, "rows"].sum())
        benchmarks = recorded[["dataset", "backbone"]].drop_duplicates()
        body.append((name, str(len(benchmarks)), str(recorded[CALIBRATOR_DIGEST_COLUMN].nunique()),
                     _varying_options(list(recorded[CALIBRATOR_OPTIONS_COLUMN].drop_duplicates())) if len(recorded)
                     else "", str(int(recorded["rows"].sum())), str(missing)))
    return [Heading(2, "Calibrator definitions"), Paragraph(
        "Each row records every option its calibrator was built with (`calibrator_options`) and their digest "
        "(`calibrator_digest`); a results file never holds two definitions of one calibrator on one benchmark. "
        "Per calibrator: the benchmarks with a recorded definition, the number of distinct definitions over them "
        "(per-benchmark settings such as weight decays or the GETS and WATS configurations give one per "
        f"benchmark), the options that differ between them, and the rows whose definition is not recorded "
        f"(written before the columns existed). Every definition in full: `tables/{DEFINITIONS_CSV}`."),
        table_block(["calibrator", "benchmarks", "definitions", "options varying", "rows", "not recorded"], body, 1)]


def write_definitions(frame: pd.DataFrame, out_dir: Path) -> Path:
    path = Path(out_dir) / "tables" / DEFINITIONS_CSV
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=False)
    return path


__all__ = ["DEFINITIONS_CSV", "NOT_RECORDED_DIGEST", "definition_blocks", "definitions_frame", "write_definitions"]
