"""User-facing errors.

Every error a user can cause (a bad name, missing or corrupt data, a malformed study file, a diverging fit)
is a :class:`SimCalibError` whose message names the problem and the fix. The CLI prints these without a
traceback and exits non-zero; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class SimCalibError(Exception):
    """Base class of errors caused by input, data or configuration (not by a bug)."""


class UnknownNameError(SimCalibError, KeyError):
    """A dataset, backbone, calibrator or metric name that is not registered."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class DataMissingError(SimCalibError):
    """A dataset is in neither the data root nor the mirror and could not be downloaded."""


class DataCorruptError(SimCalibError):
    """A raw or processed data file exists but cannot be read or has the wrong content."""


class TrainingDivergedError(SimCalibError):
    """Training produced NaN or infinite values."""


class ConfigError(SimCalibError):
    """A configuration value (option, study file entry) is invalid."""


class MissingExtraError(SimCalibError):
    """A command needs an optional group of packages (a pip extra such as ``simcalib[study]``) that is not
    installed."""


class WorkerProcessLost(BaseException):
    """A worker process of a study's process pool ended while the study ran, not by SIGINT (killed: out of memory,
    SIGKILL), so the pool cannot run the study's tasks. A ``BaseException``, as ``KeyboardInterrupt`` is: Prefect
    records the flow runs crashed and logs no traceback; ``simcalib study run`` prints it in one line."""


class DefaultsTakenWarning(UserWarning):
    """A per-benchmark default (a weight decay, GATS's bias...) applied to a graph that is not a benchmark graph."""


def did_you_mean(name: str, valid: Iterable[str]) -> str:
    """``" (did you mean 'X'?)"`` for the closest of ``valid`` to ``name`` (difflib, case-insensitive), or ''."""
    by_lower = {str(v).lower(): v for v in valid}
    close = difflib.get_close_matches(str(name).strip().lower(), list(by_lower), n=1, cutoff=0.75)
    return f" (did you mean {by_lower[close[0]]!r}?)" if close else ""


def resolve_name(name: str, valid: Iterable[str], kind: str) -> str:
    """Return the canonical spelling of ``name`` among ``valid``, matched case-insensitively.

    Raises :class:`UnknownNameError` listing every valid name.
    """
    valid = list(valid)
    by_lower = {v.lower(): v for v in valid}
    key = str(name).strip().lower()
    if key in by_lower:
        return by_lower[key]
    raise UnknownNameError(
        f"unknown {kind} {name!r}{did_you_mean(name, valid)}; valid {kind}s are: {', '.join(valid)}"
    )
