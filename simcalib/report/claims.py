"""Numbers quoted in hand-written prose, checked against the committed tables they come from.

The READMEs' findings are written by hand, and the numbers they quote (means, paired differences, Holm p-values,
win counts) shift whenever a benchmark gains runs. A claims file ties each quoted passage to its sources so that
a re-rendered report cannot leave a stale number behind unnoticed::

    document: README.md                  # the Markdown file that quotes the numbers
    sources:                             # short names of the CSV tables the numbers are read from
      pairs: reports/offline/significance/paired_runs_all.csv
    claims:
      - text: "Spline 1.61, Holm p 5.9e-8"                  # found in the document (whitespace-insensitive)
        from: pairs                                         # default source of this claim's numbers
        where: {dataset: Computers, backbone: GCN, method: Spline, reference: GATS}
        numbers: [method_mean, pvalue_holm]                 # one entry per number in `text`, in order

Each number of ``text`` (a token such as ``1.61``, ``+0.65``, ``5.9e-8``, ``-17.4%``, ``51``; digits inside an
identifier such as ``SimCalib_w0.5`` are not numbers) is matched, in order, by one entry of ``numbers``:

- a column name: that column of the one row of ``from`` selected by ``where``;
- a mapping ``{column, from, where, within, scale, agg}``: ``where`` is merged over the claim's, a list value in
  ``where`` selects any of its values, ``within: {column: [low, high]}`` keeps the rows whose value in each
  named column lies in that closed range (a null bound is open; an empty value is in no range), ``scale`` multiplies the value (100 for a fraction quoted as a percent),
  ``agg`` (``min``, ``max``, ``max_abs``, ``count``, ``sum``, ``mean``, ``median``, ``q1``, ``q3``) reduces several
  selected rows (``count``: how many; ``sum``: e.g. the runs of several benchmarks; the quartiles interpolate linearly between rows, as pandas does), and
  ``agg: each`` requires every selected row to round to the one quoted number ("2.08 on both");
- ``null``: a number that is not read from a table (a count of benchmarks, a threshold); left unchecked.

A quoted number holds when the table's value rounds to it at the quoted precision (``1.78`` covers
[1.775, 1.785], ``5.9e-8`` covers [5.85e-8, 5.95e-8], ``51`` is exact), with the quoted sign. A number written
as a bound is checked as one: after ``<=`` it must be the value rounded up at its precision (``p <= 1.9e-5``
covers (1.8e-5, 1.9e-5]), after ``>=`` the value rounded down, so a bound is true and tight; after ``<`` or ``>``
it only has to be true (``each Holm p < 1e-9``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from simcalib.errors import ConfigError, DataMissingError

# A quoted number: optional sign, digits, optional decimals and exponent, optional percent sign; not part of an
# identifier (SimCalib_w0.5, GETS2) or of a longer number.
NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?%?(?![\w])")
BOUND = re.compile(r"(<=|>=|≤|≥|<(?!-)|(?<!-)>)\s*$")  # "->" and "<-" are arrows, not bounds
BOUND_SPELLINGS = {"≤": "<=", "≥": ">="}


def _quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile with linear interpolation between order statistics (pandas' and numpy's default)."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


AGGREGATES = {"min": min, "max": max, "max_abs": lambda values: max(abs(v) for v in values), "count": len,
              "sum": math.fsum,
              "mean": lambda values: math.fsum(values) / len(values), "median": lambda values: _quantile(values, 0.5),
              "q1": lambda values: _quantile(values, 0.25), "q3": lambda values: _quantile(values, 0.75)}
CLAIM_KEYS = {"text", "from", "where", "numbers"}
NUMBER_KEYS = {"column", "from", "where", "within", "scale", "agg"}


@dataclass(frozen=True)
class StaleClaim:
    """A quoted passage whose text is missing from its document or whose number no longer matches its table."""

    document: str
    text: str
    problem: str

    def __str__(self) -> str:
        return f"{self.document}: {self.text!r}: {self.problem}"


@dataclass(frozen=True)
class ClaimsCheck:
    """The outcome of checking claims files: how many numbers were compared, how many were left unchecked, and
    the stale claims."""

    claims: int
    numbers_checked: int
    numbers_unchecked: int
    stale: tuple[StaleClaim, ...]


def _squash(text: str) -> str:
    """Whitespace runs as one space, so that a quoted passage matches across Markdown line breaks."""
    return " ".join(text.split())


def quoted_numbers(text: str) -> list[str]:
    """The number tokens of a passage, in order."""
    return NUMBER.findall(text)


def quoted_bounds(text: str) -> list[str]:
    """For each number token of a passage, the comparison written before it (``<=``, ``<``, ``>=``, ``>``) or
    ``""``."""
    operators = []
    for match in NUMBER.finditer(text):
        before = BOUND.search(text[:match.start()])
        operators.append(BOUND_SPELLINGS.get(before.group(1), before.group(1)) if before else "")
    return operators


def rounds_to(value: float, quoted: str, bound: str = "") -> bool:
    """Whether ``value`` rounds to the quoted number at its precision (its last written digit), same sign; with
    a ``bound`` (the comparison written before the number), whether the bound holds, tightly for ``<=``/``>=``."""
    token = quoted.rstrip("%")
    mantissa, _, exponent = token.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    step = 10.0 ** (int(exponent or 0) - decimals)
    target = float(token)
    slack = step * 1e-9
    if not math.isfinite(value):
        return False
    if bound == "<":
        return value < target
    if bound == ">":
        return value > target
    if bound == "<=":
        return target - step + slack < value <= target + slack
    if bound == ">=":
        return target - slack <= value < target + step - slack
    if token.startswith(("+", "-")) and value != 0 and (value > 0) != (target > 0):
        return False
    return abs(value - target) <= step / 2 + slack


def _load_table(path: Path) -> list[dict[str, str]]:
    import csv

    if not path.is_file():
        raise DataMissingError(f"claims source {path} does not exist; render the report first (`make report`) or "
                               f"fix the path under `sources:`")
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def _matches(row: dict[str, str], where: dict) -> bool:
    for key, wanted in where.items():
        options = wanted if isinstance(wanted, list) else [wanted]
        if row.get(key) not in {str(option) for option in options}:
            return False
    return True


def _float(text: str) -> float:
    return float(text) if text != "" else math.nan


def _in_range(text: str, bounds: list) -> bool:
    low = -math.inf if bounds[0] is None else float(bounds[0])
    high = math.inf if bounds[1] is None else float(bounds[1])
    return low <= _float(text) <= high


def _value(spec, claim: dict, tables: dict[str, list[dict[str, str]]], where_file: str) -> float | list[float]:
    """The table value one ``numbers`` entry names (a column name or a mapping); a list of them for ``each``."""
    if isinstance(spec, str):
        spec = {"column": spec}
    if not isinstance(spec, dict) or "column" not in spec or set(spec) - NUMBER_KEYS:
        raise ConfigError(f"{where_file}: a `numbers` entry is a column name, null, or a mapping with the keys "
                          f"{sorted(NUMBER_KEYS)} (column required), got {spec!r}")
    source = spec.get("from", claim.get("from"))
    if source not in tables:
        raise ConfigError(f"{where_file}: claim {claim.get('text')!r} reads from {source!r}, which is not one of "
                          f"`sources:` ({', '.join(tables)})")
    where = {**(claim.get("where") or {}), **(spec.get("where") or {})}
    rows = [row for row in tables[source] if _matches(row, where)]
    column, agg = spec["column"], spec.get("agg")
    if agg is not None and agg not in {*AGGREGATES, "each"}:
        raise ConfigError(f"{where_file}: agg {agg!r} is not one of {', '.join(AGGREGATES)}, each")
    within = spec.get("within") or {}
    if not isinstance(within, dict) or not all(isinstance(b, list) and len(b) == 2 for b in within.values()):
        raise ConfigError(f"{where_file}: within is a mapping {{column: [low, high]}} (a bound may be null), got "
                          f"{within!r}")
    for name in [column, *within]:
        if rows and name not in rows[0]:
            raise LookupError(f"{source} has no column {name!r}")
    rows = [row for row in rows if all(_in_range(row[name], bounds) for name, bounds in within.items())]
    values = [_float(row[column]) for row in rows]
    if agg == "count":
        return float(len(values))
    if not values:
        raise LookupError(f"no row of {source} has {where}" + (f" within {within}" if within else ""))
    if len(values) > 1 and agg is None:
        raise LookupError(f"{len(values)} rows of {source} have {where}; narrow `where` or name an `agg`")
    scale = float(spec.get("scale", 1))
    if agg == "each":
        return [value * scale for value in values]
    return (values[0] if agg is None else AGGREGATES[agg](values)) * scale


def check_claims_file(path: str | Path, root: str | Path = ".") -> ClaimsCheck:
    """Check every claim of one claims file; paths in it are relative to ``root`` (the project root)."""
    import yaml

    path, root = Path(path), Path(root)
    try:
        spec = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"claims file {path} cannot be read as YAML: {error}") from None
    if not isinstance(spec, dict) or not {"document", "sources", "claims"} <= set(spec):
        raise ConfigError(f"{path}: a claims file is a mapping with the keys document, sources and claims")
    document_path = root / spec["document"]
    if not document_path.is_file():
        raise DataMissingError(f"{path}: document {spec['document']} does not exist")
    document = _squash(document_path.read_text())
    tables = {name: _load_table(root / source) for name, source in (spec["sources"] or {}).items()}
    stale: list[StaleClaim] = []
    checked = unchecked = 0
    for claim in spec["claims"] or []:
        if (not isinstance(claim, dict) or not isinstance(claim.get("text"), str) or "numbers" not in claim
                or set(claim) - CLAIM_KEYS):
            raise ConfigError(f"{path}: each claim is a mapping with `text` and `numbers` (and optionally `from` and "
                              f"`where`), got {claim!r}")
        text = _squash(claim["text"])
        tokens = quoted_numbers(text)
        numbers = claim["numbers"] or []
        if len(tokens) != len(numbers):
            raise ConfigError(f"{path}: claim {text!r} quotes {len(tokens)} numbers ({', '.join(tokens)}) but "
                              f"lists {len(numbers)} under `numbers`; give one entry (or null) per number")
        if text not in document:
            stale.append(StaleClaim(spec["document"], text, "passage not found in the document; update the claims "
                                                              "file to the document's wording"))
            continue
        for token, bound, number in zip(tokens, quoted_bounds(text), numbers):
            if number is None:
                unchecked += 1
                continue
            checked += 1
            try:
                value = _value(number, claim, tables, str(path))
            except LookupError as error:
                stale.append(StaleClaim(spec["document"], text, f"{token}: {error}"))
                continue
            wrong = [v for v in (value if isinstance(value, list) else [value]) if not rounds_to(v, token, bound)]
            if wrong:
                found = ", ".join(f"{v:.6g}" for v in wrong)
                stale.append(StaleClaim(spec["document"], text, f"quotes {bound}{token}, the table now has {found}"))
    return ClaimsCheck(len(spec["claims"] or []), checked, unchecked, tuple(stale))


def check_claims(path: str | Path, root: str | Path = ".") -> ClaimsCheck:
    """Check a claims file, or every ``*.yaml`` of a folder of them, as one result."""
    path = Path(path)
    files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
    if not files or not all(file.is_file() for file in files):
        raise DataMissingError(f"no claims file at {path}; name a claims YAML file or a folder of them")
    results = [check_claims_file(file, root) for file in files]
    return ClaimsCheck(sum(r.claims for r in results), sum(r.numbers_checked for r in results),
                       sum(r.numbers_unchecked for r in results), tuple(s for r in results for s in r.stale))
