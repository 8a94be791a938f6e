"""Hyperparameter search spaces, stored as data (``study/search_spaces.yaml``).

A file maps each calibrator to one or more named spaces; a space lists the options to search and,
optionally, options fixed for every trial::

    SimCalib:
      default:                    # searched by TPE
        params:
          w: {low: 0.5, high: 0.95}              # float range
          lr: {low: 1.0e-3, high: 0.1, log: true} # log-uniform float range
          heads: {low: 1, high: 8, type: int}     # integer range
          feat_gnn: [gcn, gat]                    # categorical choices
        fixed: {max_epochs: 2000}
      paper_grid:                 # only lists of choices: runnable as a grid (3 x 3 = 9 trials)
        params:
          w: [0.6, 0.8, 0.9]
          t: [0.3, 0.5, 1.0]

Every option name is checked against the calibrator's constructor, and every error names the file, the
line and the key to fix. The library knows nothing of Optuna: ``flows/optuna_search.py`` turns a
:class:`ParamSpec` into a ``trial.suggest_*`` call and a grid space into a ``GridSampler``.
"""

from __future__ import annotations

import inspect
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from simcalib.calibrators import calibrator_entry, canonical_calibrator
from simcalib.errors import ConfigError, UnknownNameError

DEFAULT_SPACES_FILE = "study/search_spaces.yaml"
SPACES_ENV = "SIMCALIB_SEARCH_SPACES"
DEFAULT_SPACE = "default"
_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")  # YAML 1.1 reads 1e-3 as text


@dataclass(frozen=True)
class ParamSpec:
    """One searched option: a float or int range (``low``..``high``, optionally log-scaled or stepped)
    or a list of categorical ``choices``."""

    name: str
    kind: str  # "float", "int" or "categorical"
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    choices: tuple = ()
    line: int = 0  # 1-based line in the spaces file, for messages

    def as_dict(self) -> dict:
        if self.kind == "categorical":
            return {"choices": list(self.choices)}
        spec = {"type": self.kind, "low": self.low, "high": self.high, "log": self.log}
        if self.step is not None:
            spec["step"] = self.step
        return spec


@dataclass(frozen=True)
class SearchSpace:
    """A named space of one calibrator: searched options plus options fixed in every trial."""

    calibrator: str  # canonical calibrator name
    name: str
    params: dict[str, ParamSpec]
    fixed: dict = field(default_factory=dict)
    source: str = ""  # "file:line" of the space's definition

    @property
    def is_grid(self) -> bool:
        """Whether every option is a list of choices, so the space is a finite grid."""
        return all(p.kind == "categorical" for p in self.params.values())

    def grid(self) -> dict[str, list]:
        """The grid {option: choices}; ConfigError if some option is a range."""
        ranges = [p for p in self.params.values() if p.kind != "categorical"]
        if ranges:
            where = ", ".join(f"{p.name} (line {p.line})" for p in ranges)
            raise ConfigError(
                f"search space {self.calibrator}.{self.name} ({self.source}) cannot run as a grid: {where} "
                f"{'is a range' if len(ranges) == 1 else 'are ranges'}; give a list of values instead, or use the TPE sampler"
            )
        return {name: list(p.choices) for name, p in self.params.items()}

    def grid_size(self) -> int:
        return math.prod(len(p.choices) for p in self.params.values()) if self.is_grid else 0

    def definition(self) -> dict:
        """A JSON-serialisable description (stored with the Optuna study to detect changed spaces)."""
        return {"calibrator": self.calibrator, "space": self.name,
                "params": {n: p.as_dict() for n, p in sorted(self.params.items())},
                "fixed": dict(sorted(self.fixed.items()))}


def spaces_path(path: str | os.PathLike | None = None) -> Path:
    return Path(path or os.environ.get(SPACES_ENV) or DEFAULT_SPACES_FILE)


def calibrator_option_names(calibrator: str) -> list[str]:
    """Keyword options the calibrator's constructor accepts (following ``**kwargs`` up to the base class)."""
    names: list[str] = []
    for cls in calibrator_entry(calibrator).cls.__mro__:
        if "__init__" not in cls.__dict__:
            continue
        parameters = list(inspect.signature(cls.__dict__["__init__"]).parameters.values())
        names += [p.name for p in parameters[1:]
                  if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "num_classes" and p.name not in names]
        if not any(p.kind == p.VAR_KEYWORD for p in parameters):
            break  # this constructor does not forward options further up
    return names


# ---------------------------------------------------------------------------------------------------------
# Loading with line numbers: the YAML is composed into nodes, so every message can name the line.


class _Reader:
    def __init__(self, path: Path):
        self.path = path
        try:
            self.loader = yaml.SafeLoader(path.read_text())
            self.root = self.loader.get_single_node()
        except OSError as exc:
            raise ConfigError(f"cannot read search spaces file {path}: {exc}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"search spaces file {path} is not valid YAML: {exc}") from None

    def where(self, node: yaml.Node) -> str:
        return f"{self.path}:{node.start_mark.line + 1}"

    def fail(self, node: yaml.Node, key: str, message: str) -> ConfigError:
        return ConfigError(f"{self.where(node)}: {key}: {message}")

    def mapping(self, node: yaml.Node, key: str) -> list[tuple[str, yaml.Node, yaml.Node]]:
        """[(key, key node, value node)] of a mapping node, rejecting duplicate keys (YAML keeps the last)."""
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, key, "expected a mapping (key: value lines)")
        items, seen = [], set()
        for key_node, value_node in node.value:
            name = str(self.loader.construct_object(key_node, deep=True))
            if name in seen:
                raise self.fail(key_node, f"{key}.{name}" if key else name, "defined twice")
            seen.add(name)
            items.append((name, key_node, value_node))
        return items

    def value(self, node: yaml.Node):
        return self.loader.construct_object(node, deep=True)


def _number(value, reader: _Reader, node: yaml.Node, key: str) -> float:
    if isinstance(value, str) and _NUMBER.match(value.strip()):
        value = float(value)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise reader.fail(node, key, f"expected a finite number, got {value!r}")
    return value


def _param(reader: _Reader, name: str, node: yaml.Node, key: str) -> ParamSpec:
    line = node.start_mark.line + 1
    if isinstance(node, yaml.SequenceNode):
        choices = [reader.value(n) for n in node.value]
        choices = [float(c) if isinstance(c, str) and _NUMBER.match(c.strip()) else c for c in choices]
        if not choices:
            raise reader.fail(node, key, "an empty list of choices")
        for choice in choices:
            if not (choice is None or isinstance(choice, str | int | float | bool)):
                raise reader.fail(node, key, f"choices must be numbers, strings or booleans, got {choice!r}")
        if len(set(map(repr, choices))) != len(choices):
            raise reader.fail(node, key, f"repeated choices in {choices}")
        return ParamSpec(name, "categorical", choices=tuple(choices), line=line)
    if not isinstance(node, yaml.MappingNode):
        raise reader.fail(node, key, "expected a list of choices or a range {low: .., high: .., log: true}")
    spec = {k: (v, kn) for k, kn, v in reader.mapping(node, key)}
    unknown = set(spec) - {"low", "high", "log", "step", "type"}
    if unknown:
        raise reader.fail(node, key, f"unknown field(s) {sorted(unknown)}; a range has low, high, log, step, type")
    for needed in ("low", "high"):
        if needed not in spec:
            raise reader.fail(node, key, f"a range needs '{needed}'")
    kind = str(reader.value(spec["type"][0])) if "type" in spec else "float"
    if kind not in ("float", "int"):
        raise reader.fail(spec["type"][0], f"{key}.type", f"must be float or int, got {kind!r}")
    low = _number(reader.value(spec["low"][0]), reader, spec["low"][0], f"{key}.low")
    high = _number(reader.value(spec["high"][0]), reader, spec["high"][0], f"{key}.high")
    log = reader.value(spec["log"][0]) if "log" in spec else False
    step = _number(reader.value(spec["step"][0]), reader, spec["step"][0], f"{key}.step") if "step" in spec else None
    if not isinstance(log, bool):
        raise reader.fail(spec["log"][0], f"{key}.log", f"must be true or false, got {log!r}")
    if not low < high:
        raise reader.fail(node, key, f"low ({low}) must be below high ({high})")
    if log and low <= 0:
        raise reader.fail(node, key, f"a log range needs low > 0, got {low}")
    if log and step is not None:
        raise reader.fail(node, key, "a range cannot be both log-scaled and stepped")
    if step is not None and step <= 0:
        raise reader.fail(node, key, f"step must be positive, got {step}")
    if kind == "int":
        if any(float(v) != int(v) for v in (low, high, step or 1)):
            raise reader.fail(node, key, "an int range needs integer low, high and step")
        low, high, step = int(low), int(high), (int(step) if step is not None else None)
    else:
        low, high = float(low), float(high)
    return ParamSpec(name, kind, low, high, log, step, line=line)


def _space(reader: _Reader, calibrator: str, name: str, node: yaml.Node, options: list[str]) -> SearchSpace:
    key = f"{calibrator}.{name}"
    sections = {k: (v, kn) for k, kn, v in reader.mapping(node, key)}
    unknown = set(sections) - {"params", "fixed"}
    if unknown:
        raise reader.fail(node, key, f"unknown section(s) {sorted(unknown)}; a space has 'params' and optionally 'fixed'")
    if "params" not in sections:
        raise reader.fail(node, key, "a space needs 'params' (the options to search)")
    params = {}
    for option, key_node, value_node in reader.mapping(sections["params"][0], f"{key}.params"):
        if option not in options:
            raise reader.fail(key_node, f"{key}.params.{option}",
                              f"not an option of {calibrator}; its options are: {', '.join(options)}")
        params[option] = _param(reader, option, value_node, f"{key}.params.{option}")
    if not params:
        raise reader.fail(sections["params"][0], f"{key}.params", "no options to search")
    fixed = {}
    if "fixed" in sections:
        for option, key_node, value_node in reader.mapping(sections["fixed"][0], f"{key}.fixed"):
            if option not in options:
                raise reader.fail(key_node, f"{key}.fixed.{option}",
                                  f"not an option of {calibrator}; its options are: {', '.join(options)}")
            if option in params:
                raise reader.fail(key_node, f"{key}.fixed.{option}", "is both searched (params) and fixed")
            fixed[option] = reader.value(value_node)
    return SearchSpace(calibrator, name, params, fixed, reader.where(node))


def load_search_spaces(path: str | os.PathLike | None = None) -> dict[str, dict[str, SearchSpace]]:
    """Every space in the file: {canonical calibrator: {space name: SearchSpace}}, fully validated."""
    path = spaces_path(path)
    if not path.is_file():
        raise ConfigError(f"search spaces file {path} not found; pass --spaces FILE or create it (see {DEFAULT_SPACES_FILE})")
    reader = _Reader(path)
    if reader.root is None:
        return {}
    spaces: dict[str, dict[str, SearchSpace]] = {}
    for calibrator, key_node, node in reader.mapping(reader.root, ""):
        try:
            name = canonical_calibrator(calibrator)
        except UnknownNameError as exc:
            raise reader.fail(key_node, calibrator, str(exc)) from None
        if name in spaces:
            raise reader.fail(key_node, calibrator, f"spaces of {name} are defined twice")
        options = calibrator_option_names(name)
        spaces[name] = {space: _space(reader, name, space, space_node, options)
                        for space, _, space_node in reader.mapping(node, name)}
    return spaces


def get_search_space(calibrator: str, space: str = DEFAULT_SPACE, path: str | os.PathLike | None = None) -> SearchSpace:
    """One validated space; ConfigError naming the available ones if it is missing."""
    name = canonical_calibrator(calibrator)
    spaces = load_search_spaces(path)
    if name not in spaces:
        listed = ", ".join(spaces) or "none"
        raise ConfigError(f"no search space for {name} in {spaces_path(path)} (calibrators with spaces: {listed}); "
                          f"add a '{name}:' section")
    if space not in spaces[name]:
        raise ConfigError(f"{name} has no search space {space!r} in {spaces_path(path)}; "
                          f"available: {', '.join(spaces[name])}")
    return spaces[name][space]


__all__ = [
    "DEFAULT_SPACE", "DEFAULT_SPACES_FILE", "ParamSpec", "SearchSpace", "calibrator_option_names", "get_search_space",
    "load_search_spaces", "spaces_path",
]
