"""MkDocs hooks of the docs site (mkdocs.yml, ``hooks:``).

* **Math as MathML.** ``pymdownx.arithmatex`` (generic mode) keeps each equation of the pages and docstrings as
  LaTeX in ``<span class="arithmatex">\\(...\\)</span>`` or ``<div class="arithmatex">\\[...\\]</div>``; here each
  is converted to MathML (``latex2mathml``, pure Python), which browsers render without a script or a font
  download, so the site needs nothing from outside at build or view time. An equation the converter cannot
  read fails a strict build with a warning naming the page and the LaTeX.
* **Pages from reports/.** A nav entry ``reports/<folder>/<page>.md`` (or ``reports/<page>.md``) names a file of
  the repository's ``reports/`` folder, outside ``docs/``: it is added to the site under that path, with the
  images and files it links to.
"""

from __future__ import annotations

import html
import logging
import re
from pathlib import Path

from mkdocs.structure.files import File

log = logging.getLogger("mkdocs.hooks.site")

ARITHMATEX = re.compile(r'<(span|div) class="arithmatex">(.*?)</\1>', re.S)
DELIMITERS = {"span": (r"\(", r"\)"), "div": (r"\[", r"\]")}
# LaTeX the converter does not know, written with what it does
SPELLINGS = {r"\arg\min": r"\mathrm{arg\,min}", r"\arg\max": r"\mathrm{arg\,max}", r"\arg": r"\mathrm{arg}"}
UNCONVERTED = re.compile(r">[^<]*\\[A-Za-z]+[^<]*<")
LINK = re.compile(r"""(?:\]\(|src=["'])([^)"'#\s]+)""")
REPORTS = "reports/"


def to_mathml(latex: str, display: str) -> str:
    from latex2mathml.converter import convert

    for spelling, known in SPELLINGS.items():
        latex = latex.replace(spelling, known)
    return convert(latex, display=display)


def _render(match: re.Match, page) -> str:
    tag, body = match.groups()
    opening, closing = DELIMITERS[tag]
    latex = html.unescape(body).strip()
    if latex.startswith(opening) and latex.endswith(closing):
        latex = latex[len(opening):-len(closing)].strip()
    try:
        mathml = to_mathml(latex, "block" if tag == "div" else "inline")
    except Exception as exc:  # the converter's errors have no common base
        log.warning(f"{page.file.src_uri}: cannot render the equation {latex!r} as MathML ({type(exc).__name__}: {exc})")
        return match.group(0)
    if UNCONVERTED.search(mathml):
        log.warning(f"{page.file.src_uri}: the equation {latex!r} keeps LaTeX commands MathML cannot show: {mathml}")
    return f'<{tag} class="arithmatex">{mathml}</{tag}>'


def on_page_content(html_text: str, page, config, files) -> str:
    return ARITHMATEX.sub(lambda match: _render(match, page), html_text)


def _nav_paths(nav) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [path for item in nav for path in _nav_paths(item)]
    if isinstance(nav, dict):
        return [path for value in nav.values() for path in _nav_paths(value)]
    return []


def on_files(files, config):
    root = Path(config.config_file_path).parent
    for uri in _nav_paths(config.nav or []):
        if not uri.startswith(REPORTS) or files.get_file_from_path(uri) is not None:
            continue
        page = root / uri
        if not page.is_file():
            log.warning(f"mkdocs.yml names {uri}, which is not in the repository")
            continue
        wanted = {uri}
        for target in LINK.findall(page.read_text()):
            linked = (page.parent / target).resolve()
            if "://" not in target and linked.is_file() and linked.suffix != ".md" and root in linked.parents:
                wanted.add(linked.relative_to(root).as_posix())
        for path in sorted(wanted):
            files.append(File(path, src_dir=str(root), dest_dir=config.site_dir,
                              use_directory_urls=config.use_directory_urls))
    return files
