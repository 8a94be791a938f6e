"""Post-hoc calibrators behind one interface, and the registry that names them.

A registered name maps to a class and preset options, so variants (e.g. SimCalib's ablations) are
configurations of one implementation, not copies. Names are matched case-insensitively.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simcalib.calibrators.base import HIDDEN_LABEL, CalibrationGraph, Calibrator, TemperatureCalibrator
from simcalib.calibrators.defaults import default_weight_decay
from simcalib.calibrators.ets import ETS
from simcalib.calibrators.ts import TS
from simcalib.calibrators.uncal import UnCal
from simcalib.calibrators.vs import VS
from simcalib.errors import ConfigError, resolve_name


@dataclass(frozen=True)
class CalibratorEntry:
    name: str  # canonical name, as used in results and tables
    cls: type[Calibrator]
    preset: dict = field(default_factory=dict)  # options fixed by this name
    description: str = ""


CALIBRATORS: dict[str, CalibratorEntry] = {}


def register_calibrator(name: str, cls: type[Calibrator], description: str = "", **preset) -> None:
    CALIBRATORS[name] = CalibratorEntry(name, cls, dict(preset), description or (cls.__doc__ or "").strip().split("\n")[0])


def calibrator_names() -> list[str]:
    return list(CALIBRATORS)


def canonical_calibrator(name: str) -> str:
    return resolve_name(name, CALIBRATORS, "calibrator")


def build_calibrator(name: str, num_classes: int, dataset: str | None = None, backbone: str | None = None,
                     **options) -> Calibrator:
    """Instantiate a registered calibrator with the protocol defaults for (dataset, backbone).

    ``options`` override the preset and the default weight decay; unknown options raise a ConfigError
    naming the calibrator.
    """
    entry = CALIBRATORS[canonical_calibrator(name)]
    kwargs = {"weight_decay": default_weight_decay(entry.cls.name, dataset, backbone), **entry.preset, **options}
    try:
        return entry.cls(num_classes, **kwargs)
    except TypeError as exc:
        raise ConfigError(f"invalid options for calibrator {entry.name}: {exc}") from None


register_calibrator("UnCal", UnCal)
register_calibrator("TS", TS)
register_calibrator("VS", VS)
register_calibrator("ETS", ETS)

__all__ = [
    "CALIBRATORS", "ETS", "HIDDEN_LABEL", "TS", "VS", "CalibrationGraph", "Calibrator", "CalibratorEntry",
    "TemperatureCalibrator", "UnCal", "build_calibrator", "calibrator_names", "canonical_calibrator",
    "default_weight_decay", "register_calibrator",
]
