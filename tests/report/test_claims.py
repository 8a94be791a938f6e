"""Quoted numbers checked against their tables: the rounding rule, the tokenizer, stale and missing passages, the
claims files committed under reports/claims, and the CLI's exit status."""

import textwrap

import pytest
from shared_paths import PROJECT_ROOT

from simcalib.cli import main
from simcalib.errors import ConfigError
from simcalib.report.claims import check_claims, quoted_bounds, quoted_numbers, rounds_to

TABLE = """\
dataset,backbone,method,reference,pairs,method_mean,mean_diff,wins,pvalue_holm
Cora,GCN,Spline,GATS,75,1.6112,-0.599,63,5.93e-08
Cora,GAT,Spline,GATS,75,2.0849,0.12,30,0.41
Citeseer,GCN,Spline,GATS,75,2.0751,-0.05,40,1
"""

DOCUMENT = """\
# Findings

Spline is lower on Cora GCN (1.61, 63 of 75 runs,
Holm p 5.9e-8) and level on Cora GAT and Citeseer GCN (2.08 on both); lower on 2 of 3.
"""


def write_claims(tmp_path, claims: str, table: str = TABLE):
    (tmp_path / "findings.md").write_text(DOCUMENT)
    (tmp_path / "pairs.csv").write_text(table)
    path = tmp_path / "claims.yaml"
    path.write_text("document: findings.md\nsources:\n  pairs: pairs.csv\nclaims:\n" + textwrap.indent(
        textwrap.dedent(claims), "  "))
    return path


CLAIMS = """\
- text: "Spline is lower on Cora GCN (1.61, 63 of 75 runs, Holm p 5.9e-8)"
  from: pairs
  where: {dataset: Cora, backbone: GCN, method: Spline}
  numbers: [method_mean, wins, pairs, pvalue_holm]
- text: "(2.08 on both); lower on 2 of 3."
  from: pairs
  numbers:
    - {column: method_mean, where: {dataset: [Cora, Citeseer], backbone: [GAT, GCN]}, within: {wins: [null, 50]}, agg: each}
    - {column: mean_diff, within: {mean_diff: [null, 0]}, agg: count}
    - {column: mean_diff, agg: count}
"""


@pytest.mark.parametrize("value, quoted, holds", [
    (1.7787, "1.78", True), (1.7749, "1.78", False), (1.785, "1.78", True), (0.196, "0.2", True),
    (0.0016652, "0.0017", True), (5.93e-8, "5.9e-8", True), (5.96e-8, "5.9e-8", False), (51, "51", True),
    (50.6, "51", True), (-0.4315, "-0.43", True), (0.4315, "-0.43", False), (0.647, "+0.65", True),
    (-17.38, "-17.4%", True), (float("nan"), "1.0", False), (1.0, "1", True),
])
def test_a_value_holds_when_it_rounds_to_the_quote_at_its_precision(value, quoted, holds):
    assert rounds_to(value, quoted) is holds


@pytest.mark.parametrize("value, quoted, bound, holds", [
    (1.81e-5, "1.9e-5", "<=", True), (1.9e-5, "1.9e-5", "<=", True), (1.53e-3, "0.0019", "<=", False),
    (1.91e-5, "1.9e-5", "<=", False), (3e-12, "1e-9", "<", True), (1e-9, "1e-9", "<", False),
    (0.35, "0.3", ">=", True), (0.29, "0.3", ">=", False), (0.5, "0.3", ">", True),
])
def test_a_bound_must_hold_and_a_non_strict_one_must_be_tight(value, quoted, bound, holds):
    assert rounds_to(value, quoted, bound) is holds


def test_the_comparison_before_a_number_makes_it_a_bound():
    text = "Holm p <= 1.9e-5, each p < 1e-9, p 0.04, h >= 0.8, p ≤ 0.01, ROC-AUC 70.32 -> 75.28"
    assert quoted_bounds(text) == ["<=", "<", "", ">=", "<=", "", ""]


def test_numbers_are_tokens_but_digits_inside_identifiers_are_not():
    text = "SimCalib_w0.5 on 6 of 12 (1.27 vs 2.21, +0.65 [-0.61, -0.23], p 5.9e-8, -17.4%) GETS2 p(y = 1)"
    assert quoted_numbers(text) == ["6", "12", "1.27", "2.21", "+0.65", "-0.61", "-0.23", "5.9e-8", "-17.4%", "1"]


def test_claims_that_match_their_tables_hold_across_line_breaks(tmp_path):
    result = check_claims(write_claims(tmp_path, CLAIMS), root=tmp_path)
    assert (result.claims, result.numbers_checked, result.numbers_unchecked, result.stale) == (2, 7, 0, ())


def test_a_table_that_moved_makes_its_claim_stale_and_names_the_new_value(tmp_path):
    moved = TABLE.replace("1.6112", "1.6312").replace("2.0849", "2.1049")
    result = check_claims(write_claims(tmp_path, CLAIMS, moved), root=tmp_path)
    problems = [claim.problem for claim in result.stale]
    assert problems == ["quotes 1.61, the table now has 1.6312", "quotes 2.08, the table now has 2.1049"]


def test_means_medians_and_quartiles_over_rows_are_checked_as_pandas_computes_them(tmp_path):
    import io

    import pandas as pd

    means = pd.read_csv(io.StringIO(TABLE))["method_mean"]
    mean, median, q1, q3 = means.mean(), means.median(), means.quantile(0.25), means.quantile(0.75)

    def sentence(low: float) -> str:
        return f"Over the three rows: mean {mean:.2f}, median {median:.2f}, quartiles {low:.3f}-{q3:.3f}."

    path = write_claims(tmp_path, f"""\
- text: "{sentence(q1)}"
  from: pairs
  numbers:
    - {{column: method_mean, agg: mean}}
    - {{column: method_mean, agg: median}}
    - {{column: method_mean, agg: q1}}
    - {{column: method_mean, agg: q3}}
""")
    (tmp_path / "findings.md").write_text(sentence(q1))
    result = check_claims(path, root=tmp_path)
    assert (result.numbers_checked, result.stale) == (4, ())
    (tmp_path / "findings.md").write_text(sentence(q1 + 0.01))
    path.write_text(path.read_text().replace(sentence(q1), sentence(q1 + 0.01)))
    assert [c.problem for c in check_claims(path, root=tmp_path).stale] == [
        f"quotes {q1 + 0.01:.3f}, the table now has {q1:g}"]


def test_a_sum_over_rows_is_checked(tmp_path):
    claims = """\
- text: "lower on 2 of 3."
  from: pairs
  numbers:
    - {column: mean_diff, within: {mean_diff: [null, 0]}, agg: count}
    - {column: pvalue_holm, where: {backbone: GAT}, agg: count}
"""
    holds = claims.replace("{column: pvalue_holm, where: {backbone: GAT}, agg: count}",
                           "{column: wins, where: {backbone: GAT}, agg: sum, scale: 0.1}")  # 30 x 0.1
    assert check_claims(write_claims(tmp_path, holds), root=tmp_path).stale == ()
    (stale,) = check_claims(write_claims(tmp_path, holds.replace("backbone: GAT", "backbone: GCN")), root=tmp_path).stale
    assert stale.problem == "quotes 3, the table now has 10.3"  # 63 + 40 wins on GCN, x 0.1


def test_a_passage_reworded_in_the_document_is_reported_not_skipped(tmp_path):
    result = check_claims(write_claims(tmp_path, CLAIMS.replace("Holm p 5.9e-8", "Holm p = 5.9e-8")), root=tmp_path)
    assert len(result.stale) == 1 and "passage not found" in result.stale[0].problem


def test_a_selection_that_is_ambiguous_or_empty_is_stale_with_the_reason(tmp_path):
    claims = CLAIMS.replace("where: {dataset: Cora, backbone: GCN, method: Spline}", "where: {dataset: Cora}")
    result = check_claims(write_claims(tmp_path, claims), root=tmp_path)
    assert result.stale and "2 rows of pairs" in result.stale[0].problem
    claims = CLAIMS.replace("backbone: GCN, method: Spline", "backbone: GIN, method: Spline")
    result = check_claims(write_claims(tmp_path, claims), root=tmp_path)
    assert result.stale and "no row of pairs" in result.stale[0].problem


@pytest.mark.parametrize("claims, message", [
    (CLAIMS.replace("numbers: [method_mean, wins, pairs, pvalue_holm]", "numbers: [method_mean, wins]"),
     "quotes 4 numbers"),
    (CLAIMS.replace("from: pairs\n  where: {dataset: Cora", "from: tables\n  where: {dataset: Cora"),
     "not one of `sources:`"),
    (CLAIMS.replace("agg: count}", "agg: mode}", 1), "agg 'mode'"),
    (CLAIMS.replace("from: pairs\n  numbers:", "form: pairs\n  numbers:"), "each claim is a mapping"),
])
def test_a_malformed_claims_file_is_a_config_error_naming_the_fix(tmp_path, claims, message):
    with pytest.raises(ConfigError, match=message):
        check_claims(write_claims(tmp_path, claims), root=tmp_path)


def test_the_committed_findings_quote_their_tables_current_numbers():
    result = check_claims(PROJECT_ROOT / "reports" / "claims", root=PROJECT_ROOT)
    assert result.numbers_checked > 200
    assert not result.stale, "\n".join(map(str, result.stale))


def test_the_cli_exits_non_zero_naming_each_stale_claim(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write_claims(tmp_path, CLAIMS)
    assert main(["report", "--check-claims", str(path)]) == 0
    assert "7 numbers checked against their tables, 0 not from a table, 0 stale" in capsys.readouterr().out
    (tmp_path / "pairs.csv").write_text(TABLE.replace("5.93e-08", "7.1e-08"))
    assert main(["report", "--check-claims", str(path)]) == 1
    assert "stale: findings.md: 'Spline is lower on Cora GCN" in capsys.readouterr().out
