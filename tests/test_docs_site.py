"""The documentation site (mkdocs.yml, `make docs`): it builds with warnings as errors, its API reference carries
the calibrators' equations as MathML, every calibrator module has a page, and reports/ pages can join the nav."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
pytest.importorskip("mkdocs", reason="the docs extra is not installed (pip install -e '.[docs]')")
pytest.importorskip("mkdocstrings", reason="the docs extra is not installed (pip install -e '.[docs]')")


def build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
                           "--site-dir", str(site)], capture_output=True, text=True, timeout=300, cwd=config.parent,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("site")
    done = build(ROOT / "mkdocs.yml", site)
    assert done.returncode == 0, done.stderr[-4000:]
    return site


def block_equations(page: Path) -> list[str]:
    return re.findall(r'<div class="arithmatex">(<math[^>]*display="block".*?</math>)</div>', page.read_text(), re.S)


def test_ts_page_shows_its_equation_as_mathml(site):
    """TS's docstring: p_i = softmax(z_i / T), T > 0 (a ``.. math::`` block) as one MathML block."""
    equations = block_equations(site / "api/calibrators/ts.html")
    assert equations, "no block equation on the TS page"
    first = equations[0]
    assert '<mover accent="true"><mi>p</mi><mo>&#x0005E;</mo></mover>' in first  # \hat p
    assert "<mi>z</mi><mi>i</mi></msub><mo>&#x0002F;</mo><mi>T</mi>" in first  # z_i / T
    softmax = "".join(f'<mi mathvariant="normal">{c}</mi>' for c in "softmax")  # \mathrm{softmax}
    assert softmax in first
    assert "<mo>&#x0003E;</mo><mn>0</mn>" in first  # T > 0


def test_gats_page_shows_attention_and_inline_math(site):
    page = (site / "api/calibrators/gats.html").read_text()
    equations = block_equations(site / "api/calibrators/gats.html")
    assert len(equations) >= 2 and "<mi>&#x003B1;</mi>" in equations[0]  # \alpha_{ij}
    assert re.search(r'<span class="arithmatex"><math[^>]*display="inline"', page)  # :math:`\tilde z_j`


def test_no_docstring_markup_is_left_as_text(site):
    for page in (site / "api").rglob("*.html"):
        text = page.read_text()
        for leftover in (".. math::", ":math:`", ":class:`", ":func:`", ":meth:`", r"\(", r"\["):
            assert leftover not in text, f"{page.relative_to(site)} shows {leftover!r}"


def test_every_calibrator_module_has_an_api_page():
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    text = yaml.safe_dump(nav)
    for module in sorted((ROOT / "simcalib/calibrators").glob("*.py")):
        page = "index" if module.stem == "__init__" else module.stem
        assert f"api/calibrators/{page}.md" in text, f"{module.name} has no page in mkdocs.yml's nav"
        assert f"::: simcalib.calibrators{'' if page == 'index' else '.' + page}" in (
            ROOT / f"docs/api/calibrators/{page}.md").read_text()


def test_a_reports_page_joins_the_nav(tmp_path):
    """A nav entry reports/<folder>/<page>.md (outside docs/) is added with the figure it links to; a reports page
    that does not exist fails the strict build."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs/index.md").write_text("# Home\n\nSee [the leaderboard](reports/board/leaderboard.md).\n")
    board = tmp_path / "reports/board"
    (board / "figures").mkdir(parents=True)
    (board / "leaderboard.md").write_text("# Leaderboard\n\n![ECE](figures/ece.png)\n\n| a | b |\n| --- | --- |\n")
    (board / "figures/ece.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text(textwrap.dedent(f"""
        site_name: probe
        docs_dir: docs
        use_directory_urls: false
        theme: {{name: material, font: false}}
        hooks: [{ROOT / "docs/hooks/site.py"}]
        markdown_extensions: [tables]
        nav:
          - Home: index.md
          - Leaderboard: reports/board/leaderboard.md
    """))
    done = build(config, tmp_path / "site")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "<h1" in (tmp_path / "site/reports/board/leaderboard.html").read_text()
    assert (tmp_path / "site/reports/board/figures/ece.png").is_file()
    config.write_text(config.read_text().replace("reports/board/leaderboard.md", "reports/board/missing.md"))
    done = build(config, tmp_path / "site2")
    assert done.returncode != 0 and "reports/board/missing.md" in done.stderr


def test_browser_finds_the_leaderboard_table_on_the_site(site, chromium, artifacts_dir):
    """The leaderboard page of the built site, opened in headless Chromium: its first table lists the calibrators
    of the homophilous family with the calibrator reports/recommendation.csv recommends among them, and the
    site's navigation reaches the headline report."""
    import csv

    page = site / "reports" / "leaderboard.html"
    assert page.is_file(), "mkdocs.yml's nav has no reports/leaderboard.md"
    dom = chromium.dom(page.as_uri(), wait_ms=3000)
    tables = re.findall(r"<table.*?</table>", dom, re.S)
    assert tables, "the rendered leaderboard page has no table"
    first = tables[0]
    headers = [re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<th[^>]*>.*?</th>", first, re.S)]
    assert headers[:2] == ["Calibrator", "ECE rank [95% CI]"], headers
    with open(ROOT / "reports" / "recommendation.csv", newline="") as handle:
        recommended = {row["family"]: row["calibrator"] for row in csv.DictReader(handle)}
    cells = [re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td[^>]*>.*?</td>", first, re.S)]
    assert recommended["homophilous"] in cells
    assert "offline/report.html" in dom  # the navigation reaches the headline report
    chromium.screenshot(page.as_uri(), artifacts_dir / "leaderboard_page.png")
