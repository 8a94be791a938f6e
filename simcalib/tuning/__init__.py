"""Hyperparameter search, the library side: search spaces as data, the labelled-node objective, the
naming and storage conventions of searches, and the before/after evaluation of tuned options.

Optuna itself lives in ``flows/optuna_search.py``; nothing here imports it. One Optuna study holds the search of
one calibrator on one benchmark, named by :func:`study_name` (e.g. ``Cora_GCN_SimCalib``), in the storage
given by :func:`optuna_storage` (``sqlite:///optuna.db`` in the working folder unless
``$SIMCALIB_OPTUNA_STORAGE`` or an explicit SQLAlchemy URL says otherwise). ``simcalib ui`` opens the
Optuna dashboard on the same storage.
"""

from __future__ import annotations

import os

from simcalib.backbones import backbone_name
from simcalib.calibrators import canonical_calibrator
from simcalib.data import get_spec
from simcalib.tuning.objective import (
    EVALUATIONS,
    METRICS,
    CalibrationObjective,
    ObjectiveSettings,
    tuning_order,
)
from simcalib.tuning.spaces import (
    DEFAULT_SPACE,
    DEFAULT_SPACES_FILE,
    ParamSpec,
    SearchSpace,
    calibrator_option_names,
    get_search_space,
    load_search_spaces,
)

DEFAULT_OPTUNA_STORAGE = "sqlite:///optuna.db"
OPTUNA_STORAGE_ENV = "SIMCALIB_OPTUNA_STORAGE"


def optuna_storage(url: str | None = None) -> str:
    """The SQLAlchemy URL of the Optuna storage: ``url``, else $SIMCALIB_OPTUNA_STORAGE, else the default."""
    return url or os.environ.get(OPTUNA_STORAGE_ENV) or DEFAULT_OPTUNA_STORAGE


def study_name(dataset: str, backbone: str, calibrator: str, space: str = DEFAULT_SPACE) -> str:
    """``<Dataset>_<Backbone>_<Calibrator>`` for the default space, ``..._<space>`` for another one (a
    study must keep one space: Optuna rejects an option whose choices change within a study)."""
    name = f"{get_spec(dataset).name}_{backbone_name(backbone)}_{canonical_calibrator(calibrator)}"
    return name if space == DEFAULT_SPACE else f"{name}_{space}"


__all__ = [
    "DEFAULT_OPTUNA_STORAGE", "DEFAULT_SPACE", "DEFAULT_SPACES_FILE", "EVALUATIONS", "METRICS", "OPTUNA_STORAGE_ENV",
    "CalibrationObjective", "ObjectiveSettings", "ParamSpec", "SearchSpace", "calibrator_option_names",
    "get_search_space", "load_search_spaces", "optuna_storage", "study_name", "tuning_order",
]
