"""A report as a list of blocks, rendered to Markdown (``report.md``) and a self-contained HTML page.

Blocks carry light Markdown inline markup (``**bold**``, ``_italic_``, ``code`` in backticks) that the
HTML renderer translates; figures are referenced by relative path in Markdown and embedded as base64 PNG in
HTML, so the page can be opened (or served as an MLflow artifact) without its folder.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Heading:
    level: int
    text: str


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass(frozen=True)
class Bullets:
    items: tuple[str, ...]


@dataclass(frozen=True)
class Table:
    header: tuple[str, ...]
    body: tuple[tuple[str, ...], ...]
    numeric_from: int = 2  # columns from this index are right-aligned


@dataclass(frozen=True)
class Figure:
    path: str  # relative to the report folder (the PNG; a PDF sits beside it)
    caption: str


@dataclass(frozen=True)
class Code:
    text: str


@dataclass(frozen=True)
class Contents:
    """A table of contents: (level, heading text, anchor) per entry, nested by level."""
    entries: tuple[tuple[int, str, str], ...]


Block = Heading | Paragraph | Bullets | Table | Figure | Code | Contents

CONTENTS_TITLE = "Contents"
CONTENTS_LEVELS = (2, 3)


def counted(n: int, noun: str) -> str:
    """``1 benchmark`` or ``20 benchmarks`` (``noun`` singular, plural with an s)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def anchor(text: str) -> str:
    """A heading's link target as GitHub forms it: inline markup dropped, lower case, every character but
    letters, digits, ``_``, ``-`` and spaces removed, each space a ``-`` (no collapsing)."""
    plain = re.sub(r"[*`]", "", re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", text))
    return re.sub(r"[^\w\- ]", "", plain.lower()).replace(" ", "-")


def heading_anchors(blocks: Sequence[Block]) -> dict[int, str]:
    """Block index -> anchor of every heading, a repeated anchor suffixed ``-1``, ``-2``, ... in order."""
    seen: dict[str, int] = {}
    out = {}
    for i, block in enumerate(blocks):
        if isinstance(block, Heading):
            base = anchor(block.text)
            count = seen.get(base, 0)
            seen[base] = count + 1
            out[i] = base if count == 0 else f"{base}-{count}"
    return out


def contents_block(blocks: Sequence[Block], levels: Sequence[int] = CONTENTS_LEVELS) -> Contents:
    """The contents of ``blocks``, which will follow it: every heading of ``levels`` (default: sections and
    their subsections) with its anchor, counted as the rendered document will count them (the contents'
    own heading, level 2, comes first among the repeats of its text)."""
    whole = [Heading(2, CONTENTS_TITLE), *blocks]
    anchors = heading_anchors(whole)
    return Contents(tuple((b.level, b.text, anchors[i]) for i, b in enumerate(whole)
                          if isinstance(b, Heading) and b.level in levels and i > 0))


def table_block(header: Sequence[str], body: Sequence[Sequence[str]], numeric_from: int = 2) -> Table:
    return Table(tuple(map(str, header)), tuple(tuple(map(str, r)) for r in body), numeric_from)


# ---------------------------------------------------------------------------------------------------------
# Markdown


def _md_table(block: Table) -> str:
    align = ["---" if i < block.numeric_from else "---:" for i in range(len(block.header))]
    def row(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    lines = [row(block.header), "| " + " | ".join(align) + " |", *(row(r) for r in block.body)]
    return "\n".join(lines)


def to_markdown(blocks: Sequence[Block]) -> str:
    parts = []
    for block in blocks:
        if isinstance(block, Heading):
            parts.append("#" * block.level + " " + block.text)
        elif isinstance(block, Paragraph):
            parts.append(block.text)
        elif isinstance(block, Bullets):
            parts.append("\n".join(f"- {item}" for item in block.items))
        elif isinstance(block, Table):
            parts.append(_md_table(block))
        elif isinstance(block, Figure):
            pdf = str(Path(block.path).with_suffix(".pdf"))
            parts.append(f"![{block.caption}]({block.path})\n\n_{block.caption}_ ([PDF]({pdf}))")
        elif isinstance(block, Code):
            parts.append(f"```\n{block.text}\n```")
        elif isinstance(block, Contents):
            parts.append(f"## {CONTENTS_TITLE}")
            top = min((level for level, _, _ in block.entries), default=2)
            parts.append("\n".join(f"{'  ' * (level - top)}- [{_link_text(text)}](#{target})"
                                    for level, text, target in block.entries))
    return "\n\n".join(parts) + "\n"


def _link_text(text: str) -> str:
    """A heading as a link's text: its own links unwrapped, brackets escaped."""
    text = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", text)
    return text.replace("[", "\\[").replace("]", "\\]")


# ---------------------------------------------------------------------------------------------------------
# HTML

_INLINE = [
    (re.compile(r"\*\*(.+?)\*\*"), r"<strong>\1</strong>"),
    (re.compile(r"(?<![\w])_(.+?)_(?![\w])"), r"<em>\1</em>"),
    (re.compile(r"`(.+?)`"), r"<code>\1</code>"),
    (re.compile(r"\[([^\]]+)\]\(([^)]+)\)"), r'<a href="\2">\1</a>'),
]

_STYLE = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; max-width: 1400px; margin: 2em auto;
       padding: 0 1em; color: #222; line-height: 1.45; }
table { border-collapse: collapse; margin: 0.8em 0 1.4em; font-size: 0.88em; }
th, td { padding: 0.25em 0.6em; border-bottom: 1px solid #ddd; }
th { border-bottom: 2px solid #444; text-align: left; }
td.num, th.num { text-align: right; white-space: nowrap; }
figure { margin: 1em 0 2em; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: 0.9em; color: #555; }
pre { background: #f6f6f6; padding: 0.8em; overflow-x: auto; }
code { background: #f3f3f3; padding: 0 0.2em; }
"""


def _inline(text: str) -> str:
    out = html.escape(text, quote=False)
    for pattern, repl in _INLINE:
        out = pattern.sub(repl, out)
    return out


def _html_table(block: Table) -> str:
    def cls(i: int) -> str:
        return ' class="num"' if i >= block.numeric_from else ""

    head = "".join(f"<th{cls(i)}>{_inline(h)}</th>" for i, h in enumerate(block.header))
    rows = "".join("<tr>" + "".join(f"<td{cls(i)}>{_inline(c)}</td>" for i, c in enumerate(r)) + "</tr>"
                   for r in block.body)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def _html_figure(block: Figure, base: Path, inline_images: bool) -> str:
    path = base / block.path
    if inline_images and path.is_file():
        src = "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")
    else:
        src = html.escape(block.path)
    return (f'<figure><img src="{src}" alt="{html.escape(block.caption)}">'
            f"<figcaption>{_inline(block.caption)}</figcaption></figure>")


def _html_contents(block: Contents) -> str:
    """The contents as nested lists of links to the headings' ids."""
    out, depth = [], 0
    top = min((level for level, _, _ in block.entries), default=2)
    for level, text, target in block.entries:
        want = level - top + 1
        while depth < want:
            out.append("<ul>")
            depth += 1
        while depth > want:
            out.append("</ul>")
            depth -= 1
        out.append(f'<li><a href="#{target}">{_inline(text)}</a></li>')
    out.append("</ul>" * depth)
    return '<nav class="contents">' + "".join(out) + "</nav>"


def to_html(blocks: Sequence[Block], base: Path, title: str, inline_images: bool = True) -> str:
    parts = []
    expanded = []  # a Contents block is its heading and its list: anchors count that heading as Markdown does
    for block in blocks:
        expanded += [Heading(2, CONTENTS_TITLE), block] if isinstance(block, Contents) else [block]
    anchors = heading_anchors(expanded)
    for i, block in enumerate(expanded):
        if isinstance(block, Heading):
            parts.append(f'<h{block.level} id="{anchors[i]}">{_inline(block.text)}</h{block.level}>')
        elif isinstance(block, Paragraph):
            parts.append(f"<p>{_inline(block.text)}</p>")
        elif isinstance(block, Bullets):
            parts.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in block.items) + "</ul>")
        elif isinstance(block, Table):
            parts.append(_html_table(block))
        elif isinstance(block, Figure):
            parts.append(_html_figure(block, base, inline_images))
        elif isinstance(block, Code):
            parts.append(f"<pre>{html.escape(block.text)}</pre>")
        elif isinstance(block, Contents):
            parts.append(_html_contents(block))
    body = "\n".join(parts)
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style></head><body>\n{body}\n</body></html>\n")


def write_report(blocks: Sequence[Block], folder: Path, title: str) -> tuple[Path, Path]:
    """``report.md`` and ``report.html`` (figures inline) under ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    md, page = folder / "report.md", folder / "report.html"
    md.write_text(to_markdown(blocks))
    page.write_text(to_html(blocks, folder, title))
    return md, page


__all__ = ["Block", "Bullets", "Code", "Contents", "Figure", "Heading", "Paragraph", "Table", "anchor",
           "contents_block", "heading_anchors", "table_block", "to_html", "to_markdown", "write_report"]
