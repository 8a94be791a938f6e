"""Griffe extension of the docs site (mkdocs.yml): the library's docstrings are written in reStructuredText, as
torch_geometric's are; the API reference renders Markdown. Before a docstring is parsed this rewrites the
reStructuredText it uses into what the site's Markdown reads:

* ``.. math::`` blocks into ``\\[ ... \\]`` and ``:math:`...``` roles into ``\\( ... \\)``, which
  ``pymdownx.arithmatex`` keeps as math (``docs/hooks/site.py`` renders it as MathML);
* cross-reference roles (``:class:`~simcalib.graph.CalibrationGraph```, ``:func:``, ``:meth:``...) into code
  spans of the name (its last part with ``~``).

Double-backtick literals, emphasis and lists read the same in both.
"""

from __future__ import annotations

import re
import textwrap

import griffe

MATH_ROLE = re.compile(r":math:`([^`]+)`")
XREF_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|obj|exc|const|ref):`(~?)([^`]+)`")


def _math_blocks(text: str) -> str:
    lines, out, i = text.splitlines(), [], 0
    while i < len(lines):
        line = lines[i]
        stripped = line.lstrip()
        if not stripped.startswith(".. math::"):
            out.append(line)
            i += 1
            continue
        indent = line[: len(line) - len(stripped)]
        body = [stripped[len(".. math::"):].strip()]
        i += 1
        while i < len(lines) and (not lines[i].strip() or lines[i].startswith(indent + " ")):
            body.append(lines[i])
            i += 1
        latex = textwrap.dedent("\n".join(body)).strip()
        out.extend(["", f"{indent}\\[", *(f"{indent}{part}" for part in latex.splitlines()), f"{indent}\\]", ""])
    return "\n".join(out)


def _xref(match: re.Match) -> str:
    short, target = match.groups()
    target = target.strip()
    if "<" in target and target.endswith(">"):  # :class:`title <target>`
        target = target.split("<", 1)[0].strip()
    elif short:
        target = target.split(".")[-1]
    return f"`{target}`"


def rst_to_markdown(text: str) -> str:
    """The docstring ``text`` with its reStructuredText math and cross-reference roles in the site's Markdown."""
    text = _math_blocks(text)
    text = MATH_ROLE.sub(lambda m: f"\\({m.group(1).strip()}\\)", text)
    return XREF_ROLE.sub(_xref, text)


class RstDocstrings(griffe.Extension):
    """Rewrites each loaded object's docstring (:func:`rst_to_markdown`)."""

    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if not isinstance(obj, griffe.Alias) and obj.docstring is not None:
            obj.docstring.value = rst_to_markdown(obj.docstring.value)
