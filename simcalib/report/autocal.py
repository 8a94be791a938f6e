r"""The AutoCal report (``reports/autocal/``): what choosing a calibrator per run by cross-fitting
(:class:`simcalib.calibrators.autocal.AutoCal`) costs against the best fixed choice, run by run.

A benchmark here is (dataset, backbone) with AutoCal rows below the report's results folder. Each AutoCal row is
paired with the headline's rows of the same run: the rows of the same (split, init, fold) in the benchmark's
folder of a family's results (``reports/leaderboard.yaml``: the headline and heterophily studies), or of the same
calibrators in AutoCal's own results folder (:func:`with_local_references`), **and** the same
``backbone_digest``, so both calibrated the same trained backbone. An AutoCal row without such a pair (no headline
row of that run, or one on another backbone) is left out and counted in the report, not refused: the other runs
still pair, and the count says how many did not.

Per benchmark and metric m (test ECE in percent, NLL), over the paired runs R:

* the best calibrator :math:`b_m = \arg\min_c \frac{1}{|R|}\sum_{r\in R} m_c(r)` among the calibrators other
  than UnCal that the family's study plans on the benchmark (the headline's) and that have a row on every run of R (the best fixed choice in hindsight, on the same runs);
* the regret of a choice :math:`a` (AutoCal, or a fixed calibrator), run by run :math:`m_a(r) - m_{b_m}(r)`, and
  its mean over R with the 95% interval of :func:`simcalib.report.bootstrap.mean_interval` (whole splits resampled,
  the leaderboard's resampling unit). The fixed choices: always TS, always GATS, and the family's recommended
  calibrator (``recommendation.csv`` beside the families file; where it is TS or GATS, that row is marked
  "recommended" rather than repeated). The best calibrator's own regret is 0;
* AutoCal minus each fixed choice, paired the same way: a fixed choice "does as well" on a benchmark and metric
  when this interval does not lie wholly below 0.

The answer (:func:`answer_table`), per family and choice: the mean regret over the benchmarks, and on how many
benchmark-metric cells AutoCal is lower or higher than the choice (the interval of AutoCal minus it wholly below or
above 0); a fixed choice does as well as AutoCal on a family when AutoCal is lower on none of its cells.

Also per family: how often AutoCal selected each candidate (the rows' ``selected``), and per benchmark the median
``fit_seconds`` of AutoCal beside its candidates' on the same runs.

With ``study``, only the benchmarks complete by that study file's plan enter (:mod:`simcalib.report.completeness`);
the others are named in one line.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from simcalib.calibrators.autocal import DEFAULT_CANDIDATES
from simcalib.errors import DataMissingError
from simcalib.report.bootstrap import mean_interval
from simcalib.report.render import Heading, Paragraph, table_block, write_report
from simcalib.report.summary import write_summary

AUTOCAL = "AutoCal"
UNCALIBRATED = "UnCal"
FIXED = ("TS", "GATS")  # the fixed choices beside the family's recommended calibrator
METRICS = ("ece", "nll")
LABELS = {"ece": "ECE (%)", "nll": "NLL"}
DIGITS = {"ece": 2, "nll": 3}
RUN_KEYS = ["split", "init", "fold"]
FAMILIES = "reports/leaderboard.yaml"
REGRET_COLUMNS = ["dataset", "backbone", "family", "metric", "runs", "best", "choice", "calibrator", "regret",
                  "regret_low", "regret_high", "vs_autocal", "vs_autocal_low", "vs_autocal_high"]


def pair_rows(autocal: pd.DataFrame, headline: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """The headline rows of the runs that ``autocal`` (one benchmark's AutoCal rows) pairs with, and AutoCal's rows
    among them: one frame of every calibrator's rows on the paired runs, and the number of AutoCal rows left out
    (no headline row of the same split, init and fold with the same ``backbone_digest``)."""
    for name, frame in (("AutoCal", autocal), ("headline", headline)):
        missing = [c for c in [*RUN_KEYS, "backbone_digest"] if c not in frame.columns]
        if missing:
            raise DataMissingError(f"{name} rows lack column(s) {', '.join(missing)}; the pairing needs the run "
                                   "(split, init, fold) and backbone_digest of every row")
    keys = headline[[*RUN_KEYS, "backbone_digest"]].drop_duplicates()
    own = autocal.merge(keys, on=[*RUN_KEYS, "backbone_digest"], how="inner")
    runs = own[RUN_KEYS].drop_duplicates()
    others = headline[headline["calibrator"] != AUTOCAL].merge(own[[*RUN_KEYS, "backbone_digest"]],
                                                               on=[*RUN_KEYS, "backbone_digest"], how="inner")
    rows = pd.concat([own, others], ignore_index=True)
    return rows.merge(runs, on=RUN_KEYS), len(autocal) - len(own)


def per_run(rows: pd.DataFrame, metric: str) -> pd.DataFrame:
    """``metric`` per run (index: split, init, fold) and calibrator (columns), the calibrators with a value on every
    run only."""
    wide = rows.pivot_table(index=RUN_KEYS, columns="calibrator", values=metric, aggfunc="first")
    return wide.dropna(axis=1, how="any")


def best_calibrator(wide: pd.DataFrame) -> str:
    """The calibrator other than UnCal and AutoCal with the lowest mean over the runs of ``wide`` (ties: the first
    name in sorted order)."""
    means = wide.drop(columns=[c for c in (UNCALIBRATED, AUTOCAL) if c in wide.columns]).mean().sort_index()
    if means.empty:
        raise DataMissingError("no headline calibrator has a row on every paired run; the regret needs one")
    return str(means.idxmin())


def _mean_and_interval(values: pd.Series, splits: np.ndarray) -> tuple[float, float, float]:
    interval = mean_interval(values.to_numpy(float), splits)
    return (float(values.mean()), np.nan if interval is None else interval.low,
            np.nan if interval is None else interval.high)


def regret_table(rows: pd.DataFrame, family: str, recommended: str | None) -> pd.DataFrame:
    """One benchmark's regret rows (:data:`REGRET_COLUMNS`): per metric, AutoCal, TS, GATS and ``recommended``
    (the family's calibrator) against the best calibrator on the paired runs ``rows`` (:func:`pair_rows`). A
    recommendation that is one of the fixed choices is that choice's row, labelled ``always GATS (recommended)``,
    not a second row with the same numbers."""
    records = []
    choices = [("AutoCal", AUTOCAL),
               *((f"always {c}" + (" (recommended)" if c == recommended else ""), c) for c in FIXED)]
    if recommended and recommended not in FIXED:
        choices.append((f"recommended ({family})", recommended))
    for metric in METRICS:
        wide = per_run(rows, metric)
        if AUTOCAL not in wide.columns:
            continue
        best = best_calibrator(wide)
        splits = wide.index.get_level_values("split").to_numpy()
        for choice, calibrator in choices:
            if calibrator not in wide.columns:
                continue
            regret = _mean_and_interval(wide[calibrator] - wide[best], splits)
            versus = _mean_and_interval(wide[AUTOCAL] - wide[calibrator], splits) if calibrator != AUTOCAL else \
                (np.nan, np.nan, np.nan)
            records.append({"dataset": rows["dataset"].iloc[0], "backbone": rows["backbone"].iloc[0],
                            "family": family, "metric": metric, "runs": len(wide), "best": best, "choice": choice,
                            "calibrator": calibrator, "regret": regret[0], "regret_low": regret[1],
                            "regret_high": regret[2], "vs_autocal": versus[0], "vs_autocal_low": versus[1],
                            "vs_autocal_high": versus[2]})
    return pd.DataFrame(records, columns=REGRET_COLUMNS)


def selection_counts(autocal: pd.DataFrame, families: dict[tuple[str, str], str],
                     candidates: Sequence[str] = DEFAULT_CANDIDATES) -> pd.DataFrame:
    """Per family (rows) and candidate (columns): how many AutoCal rows selected it; a selection outside
    ``candidates`` gets its own column."""
    family = [families[(d, b)] for d, b in zip(autocal["dataset"], autocal["backbone"])]
    counts = pd.crosstab(np.asarray(family, dtype=object), autocal["selected"].astype(str).to_numpy(),
                         rownames=["family"], colnames=["selected"])
    columns = [*candidates, *sorted(set(counts.columns) - set(candidates))]
    return counts.reindex(columns=columns, fill_value=0)


def cost_table(rows: pd.DataFrame, candidates: Sequence[str] = DEFAULT_CANDIDATES) -> pd.DataFrame:
    """Median ``fit_seconds`` per benchmark (rows) of AutoCal and each candidate (columns) on the paired runs, and
    the sum of the candidates' medians (``candidates summed``: one fit of each)."""
    names = [AUTOCAL, *candidates]
    picked = rows[rows["calibrator"].isin(names)]
    table = picked.groupby(["dataset", "backbone", "calibrator"])["fit_seconds"].median().unstack("calibrator")
    table = table.reindex(columns=[n for n in names if n in table.columns])
    return table.assign(**{"candidates summed": table.drop(columns=[AUTOCAL], errors="ignore").sum(axis=1)})


ANSWER_COLUMNS = ["family", "choice", "calibrator", "benchmarks", "ece_regret", "nll_regret", "cells",
                  "autocal_lower", "autocal_higher"]


def answer_table(table: pd.DataFrame) -> pd.DataFrame:
    """One row per family and choice (:data:`ANSWER_COLUMNS`) over the regret rows ``table`` (:func:`regret_table`):
    the benchmarks, the mean over them of the choice's mean regret per metric (``ece_regret``, ``nll_regret``), and
    of the benchmark-metric ``cells``, on how many the interval of AutoCal minus the choice lies wholly below 0
    (``autocal_lower``) or wholly above 0 (``autocal_higher``); NaN for AutoCal's own row."""
    records = []
    for (family, choice), group in table.groupby(["family", "choice"], sort=False):
        mean = group.groupby("metric")["regret"].mean()
        own = bool((group["calibrator"] == AUTOCAL).all())
        records.append({"family": family, "choice": choice, "calibrator": group["calibrator"].iloc[0],
                        "benchmarks": group[["dataset", "backbone"]].drop_duplicates().shape[0],
                        "ece_regret": mean.get("ece", np.nan), "nll_regret": mean.get("nll", np.nan),
                        "cells": len(group),
                        "autocal_lower": np.nan if own else int((group["vs_autocal_high"] < 0).sum()),
                        "autocal_higher": np.nan if own else int((group["vs_autocal_low"] > 0).sum())})
    return pd.DataFrame(records, columns=ANSWER_COLUMNS)


def answer_sentence(answer: pd.DataFrame) -> str:
    """Whether a fixed choice does at least as well as AutoCal, one clause per family of graphs, from the counts of
    the answer table ``answer`` (:func:`answer_table`): a fixed choice does as well when AutoCal is lower on none of
    the family's benchmark-metric cells. When AutoCal beats every fixed choice somewhere, the sentence names the
    fixed choices that beat AutoCal somewhere. "Beats" is defined once, at the end."""
    families = " ".join(_family_answer(family, part) for family, part in answer.groupby("family", sort=False))
    return (f"Does a fixed choice do as well as AutoCal? {families} (\"Beats\": the 95% interval of AutoCal minus the "
            "fixed choice, paired by run, lies wholly on one side of 0.)")


def _family_answer(family: str, answer: pd.DataFrame) -> str:
    fixed = answer[answer["calibrator"] != AUTOCAL]
    named = [_choice_label(c, k) for c, k in zip(fixed["choice"], fixed["calibrator"])]
    as_well = [n for n, lower in zip(named, fixed["autocal_lower"]) if lower == 0]
    beats = [n for n, higher in zip(named, fixed["autocal_higher"]) if higher > 0]
    if as_well:
        verdict = f"yes, {_listed(as_well)} {'does' if len(as_well) == 1 else 'do'} at least as well as AutoCal"
    elif beats:
        verdict = (f"no single choice does: AutoCal beats each fixed choice somewhere, and {_listed(beats)} "
                   f"{'beats' if len(beats) == 1 else 'beat'} AutoCal somewhere")
    else:
        verdict = "no: AutoCal beats each fixed choice somewhere and none beats it anywhere"
    cells = int(fixed["cells"].max()) if len(fixed) else 0
    benchmarks = int(answer["benchmarks"].max())
    return f"{family.capitalize()} graphs ({benchmarks} benchmarks, {cells} benchmark-metric cells): {verdict}."


def _listed(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _choice_label(choice: str, calibrator: str) -> str:
    """``always TS``, ``always GATS (recommended)``, or with the calibrator a label does not name:
    ``recommended (binary): Dirichlet``."""
    return choice if calibrator in choice.replace("(", " ").replace(")", " ").split() else f"{choice}: {calibrator}"


def _answer_rows(answer: pd.DataFrame) -> list[list[str]]:
    def number(value: float, digits: int) -> str:
        return f"{value:+.{digits}f}" if np.isfinite(value) else ""

    def count(value: float) -> str:
        return str(int(value)) if np.isfinite(value) else ""

    return [[r["family"], _choice_label(r["choice"], r["calibrator"]),
             str(r["benchmarks"]), number(r["ece_regret"], DIGITS["ece"]), number(r["nll_regret"], DIGITS["nll"]),
             count(r["autocal_lower"]), count(r["autocal_higher"]), str(r["cells"])]
            for r in answer.to_dict("records")]


def _cell(mean: float, low: float, high: float, digits: int) -> str:
    if not np.isfinite(mean):
        return ""
    text = f"{mean:+.{digits}f}"
    return text + (f" [{low:+.{digits}f}, {high:+.{digits}f}]" if np.isfinite(low) and np.isfinite(high) else "")


def _answer_body(table: pd.DataFrame) -> list[list[str]]:
    body = []
    # the table's order (the families file's, then by name), not the names' alone
    for (dataset, backbone, metric), group in table.groupby(["dataset", "backbone", "metric"], sort=False):
        digits = DIGITS[metric]
        for r in group.to_dict("records"):
            body.append([f"{dataset} {backbone}", LABELS[metric], str(r["runs"]), r["best"],
                         _choice_label(r["choice"], r["calibrator"]),
                         _cell(r["regret"], r["regret_low"], r["regret_high"], digits),
                         _cell(r["vs_autocal"], r["vs_autocal_low"], r["vs_autocal_high"], digits)])
    return body


def planned_calibrators(study: str | os.PathLike) -> dict[tuple[str, str], tuple[str, ...]]:
    """The calibrators that the study file ``study`` plans on each (dataset, backbone), at any label rate."""
    from simcalib.experiment.plan import plan_study
    from simcalib.experiment.study import load_study

    planned: dict[tuple[str, str], dict[str, None]] = {}
    for b in plan_study(load_study(study), data=False).benchmarks:
        if b.kind == "protocol":
            planned.setdefault((b.dataset, b.backbone), {}).update(dict.fromkeys(b.calibrator_names))
    return {key: tuple(names) for key, names in planned.items()}


class References:
    """The headline rows AutoCal's rows pair with, from the families of ``families_file``: the families, their
    recommendation (``recommendation.csv`` beside the file) and the calibrators each family's ``study`` plans, read
    once for every benchmark."""

    def __init__(self, families_file: str | os.PathLike):
        from simcalib.report.leaderboard import read_families

        self.families_file = families_file
        self.families = read_families(families_file)
        recommendation_file = Path(families_file).parent / "recommendation.csv"
        self.recommendation = pd.read_csv(recommendation_file) if recommendation_file.is_file() else pd.DataFrame(
            columns=["family", "calibrator"])
        self.planned = {f.study: planned_calibrators(f.study) for f in self.families if f.study is not None}

    def of(self, dataset: str, backbone: str) -> tuple[str, pd.DataFrame, str | None]:
        """The family of (dataset, backbone), its headline rows and the family's recommended calibrator: the first
        family whose results hold the benchmark's folder (after its ``classes`` selection), the rows of the
        calibrators its ``study`` plans where it names one (the headline's calibrators, not a side pass such as
        Table 4's w sweep in the same folder)."""
        from simcalib.report.leaderboard import select_classes
        from simcalib.report.results import load_study_results

        for family in self.families:
            for folder in family.results:
                path = Path(folder) / f"{dataset}_{backbone}"
                if not (path / "results.csv").is_file():
                    continue
                rows = select_classes(load_study_results(path).main_rows(), family.classes)
                if family.study is not None:  # the calibrators the family's study plans (not its side passes)
                    rows = rows[rows["calibrator"].isin(self.planned[family.study].get((dataset, backbone), ()))]
                if rows.empty:
                    continue
                picked = self.recommendation.loc[self.recommendation["family"] == family.name, "calibrator"]
                return family.name, rows, (str(picked.iloc[0]) if len(picked) else None)
        raise DataMissingError(f"{dataset} {backbone}: no family of {self.families_file} holds its headline rows; "
                               "AutoCal's rows pair with the headline's of the same run (add the benchmark's results "
                               "folder there)")


def read_reference(dataset: str, backbone: str, families_file: str | os.PathLike) -> tuple[str, pd.DataFrame, str | None]:
    """:meth:`References.of` for one benchmark."""
    return References(families_file).of(dataset, backbone)


def with_local_references(headline: pd.DataFrame, rows: pd.DataFrame, dataset: str, backbone: str) -> pd.DataFrame:
    """The headline rows of (dataset, backbone) and the rows of the same calibrators in AutoCal's own results
    (``rows``), the headline's first where both hold a calibrator's row of the same run and backbone: a study that
    fits the headline's calibrators beside AutoCal on its own backbones (trained on another CPU model, whose last
    bits differ) pairs with those."""
    local = rows[(rows["dataset"] == dataset) & (rows["backbone"] == backbone)
                 & rows["calibrator"].isin(headline["calibrator"].unique())]
    if local.empty:
        return headline
    both = pd.concat([headline, local], ignore_index=True)
    return both.drop_duplicates([*RUN_KEYS, "backbone_digest", "calibrator"], keep="first").reset_index(drop=True)


def build_autocal_report(results: str | os.PathLike, out: str | os.PathLike, title: str,
                         study: str | os.PathLike | None = None, regenerate: str | None = None,
                         families: str | os.PathLike | None = None) -> Path | None:
    """``report.md``, ``report.html``, ``summary.md`` and the CSVs ``answer.csv``, ``regret.csv``, ``selection.csv``,
    ``cost.csv`` under ``out`` from the AutoCal rows below ``results``, paired with the headline rows of the families of
    ``families`` (None: :data:`FAMILIES`); None (nothing written) when there are no AutoCal rows."""
    families = FAMILIES if families is None else families
    from simcalib.report.completeness import complete_only
    from simcalib.report.results import load_study_results

    if not Path(results).is_dir():
        return None
    loaded = complete_only(load_study_results(results), study, keep_unplanned=False)  # slices write one folder
    all_rows = loaded.main_rows()
    autocal_rows = all_rows[all_rows["calibrator"] == AUTOCAL]
    if autocal_rows.empty:
        return None
    if "selected" not in autocal_rows.columns:
        raise DataMissingError(f"{results}: AutoCal rows without the column `selected`; they come from an AutoCal "
                               "that does not record its choice (rerun the study to recompute them)")
    references = References(families)
    tables, paired, family_of, left_out, headline_run_counts = [], [], {}, [], {}
    for (dataset, backbone), own in autocal_rows.groupby(["dataset", "backbone"], sort=True):
        family, headline, recommended = references.of(dataset, backbone)
        headline = with_local_references(headline, all_rows, dataset, backbone)
        rows, unpaired = pair_rows(own, headline)
        family_of[(dataset, backbone)] = family
        headline_run_counts[(dataset, backbone)] = len(headline[RUN_KEYS].drop_duplicates())
        if unpaired:
            left_out.append(f"{dataset} {backbone}: {unpaired} of {len(own)} AutoCal rows")
        if rows.empty:
            continue
        paired.append(rows)
        tables.append(regret_table(rows, family, recommended))
    if not tables:
        raise DataMissingError(f"{results}: no AutoCal row pairs with a headline row of the same run and "
                               "backbone_digest; the AutoCal study must use the headline's seed and settings")
    order = {family.name: i for i, family in enumerate(references.families)}

    def rank(family: str) -> int:  # the families file's order
        return order.get(family, len(order))

    table = pd.concat(tables, ignore_index=True)
    table = table.iloc[np.argsort([rank(f) for f in table["family"]], kind="stable")].reset_index(drop=True)
    rows = pd.concat(paired, ignore_index=True)
    own = rows[rows["calibrator"] == AUTOCAL]
    selection = selection_counts(own, family_of)
    selection = selection.loc[sorted(selection.index, key=rank)]
    cost = cost_table(rows).loc[list(dict.fromkeys(zip(table["dataset"], table["backbone"])))]  # the table's order
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "regret.csv", index=False, float_format="%.6g")
    selection.to_csv(out / "selection.csv")
    cost.to_csv(out / "cost.csv", float_format="%.6g")

    scope = "; ".join(f"{d} {b}: {len(group)} runs, init(s) {', '.join(map(str, sorted(group['init'].unique())))} of "
                      f"the headline's {headline_run_counts[(d, b)]}"
                      for (d, b), group in own.groupby(["dataset", "backbone"]))
    pool = "; ".join(f"{d} {b}: {len(per_run(g, 'ece').columns) - 2}" for (d, b), g in
                     rows.groupby(["dataset", "backbone"], sort=True))
    answer = answer_table(table)
    answer.to_csv(out / "answer.csv", index=False, float_format="%.6g")
    summary_blocks = [
        Paragraph(answer_sentence(answer)),
        table_block(["Family", "Choice", "Benchmarks", "Mean ECE regret (points)", "Mean NLL regret",
                     "AutoCal lower (cells)", "AutoCal higher (cells)", "Cells"], _answer_rows(answer),
                    numeric_from=2),
        Paragraph("Regret: a choice's test metric minus that of the benchmark's best calibrator in hindsight on the "
                  "same runs, averaged over the runs, then over the benchmarks (0: the best on every benchmark). "
                  "Cells: benchmark x metric (ECE, NLL); AutoCal lower or higher: the 95% interval of AutoCal minus "
                  "the choice lies wholly below or above 0. Per benchmark, with intervals: the report's table."),
    ]
    blocks = [Heading(1, title)]
    if regenerate:
        blocks.append(Paragraph(f"Rendered from the committed rows by {regenerate} (provenance: `provenance.yaml`)."))
    if loaded.left_out:
        summary_blocks.append(Paragraph(loaded.left_out))
    answer_header = ["Benchmark", "Metric", "Runs", "Best (hindsight)", "Choice", "Regret [95%]",
                     "AutoCal - choice [95%]"]
    blocks += [Heading(2, "Answer"), *summary_blocks,
               Heading(2, "Per benchmark"), table_block(answer_header, _answer_body(table), numeric_from=5)]
    blocks += [
        Paragraph(f"Runs: {scope}. Regret of a choice: its metric minus the best calibrator's on the same run, "
                  "averaged over the paired runs; the best calibrator is, of the headline study's calibrators other "
                  f"than UnCal ({pool}), the one with the lowest mean over those same runs (a choice in hindsight: "
                  "its own regret is 0 and no headline calibrator's mean regret is below 0; AutoCal's can be, as it "
                  "may pick another candidate on each run). ECE in percent. Intervals: 95%, whole splits resampled "
                  "(simcalib.report.bootstrap.mean_interval). The last column is AutoCal's metric minus the "
                  "choice's, paired by run: below 0, AutoCal is better."),
        Heading(2, "What AutoCal selects"),
        Paragraph("AutoCal rows per family that selected each candidate (the rows' `selected`):"),
        table_block(["Family", *selection.columns],
                    [[f, *(str(int(v)) for v in selection.loc[f])] for f in selection.index], numeric_from=1),
        Heading(2, "Cost"),
        Paragraph("Median fit_seconds per run on the paired runs, AutoCal beside its candidates (each candidate's "
                  "from the headline's rows, fitted once; AutoCal fits every candidate on each of its parts and "
                  "refits the chosen one). The rows come from different machines and loads "
                  "(provenance.yaml of each results folder), so the ratio is indicative only; AutoCal against its "
                  "candidates on the same backbone in one process: `reports/performance/autocal_cost.txt` "
                  "(`benchmarks/speed/autocal_cost.py`)."),
        table_block(["Benchmark", *cost.columns],
                    [[f"{d} {b}", *(f"{v:.3g}" if np.isfinite(v) else "" for v in cost.loc[(d, b)])]
                     for d, b in cost.index], numeric_from=1),
        Heading(2, "What the rows show and what they cannot"),
        Paragraph("Every AutoCal row is paired with the headline's rows of the same run and backbone_digest (the "
                  "same trained backbone), or, where the headline's backbones were trained on another CPU model, "
                  "with the rows of the headline's calibrators fitted beside AutoCal on its own backbones (the same "
                  "results folder); AutoCal rows without such a pair are left out"
                  + (f": {'; '.join(left_out)}." if left_out else "; none here.")
                  + " The best calibrator is chosen on the test metric of the very runs it is compared on, so "
                  "the regret is the distance to a fixed choice made after seeing the test labels, which no real "
                  "choice (AutoCal or a fixed one) can make. "
                  "With 5 splits the intervals are wide; a fixed choice that \"does as well\" here is not shown to "
                  "do as well elsewhere, and a benchmark is one graph and one backbone."),
    ]
    write_report(blocks, out, title)
    write_summary(summary_blocks, out)
    return out / "report.md"


__all__ = ["ANSWER_COLUMNS", "AUTOCAL", "FAMILIES", "REGRET_COLUMNS", "References", "answer_sentence", "answer_table", "best_calibrator", "build_autocal_report",
           "cost_table", "pair_rows", "per_run", "planned_calibrators", "read_reference", "regret_table", "selection_counts",
           "with_local_references"]
