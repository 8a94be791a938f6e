"""Tuned calibrator hyperparameters, stored as data: ``study/tuned/<dataset>_<backbone>.yaml``.

Layout of one file (written by the search, read by the study when a calibrator says ``tuned``)::

    SimCalib:
      params: {lr: 0.01, w: 0.8, t: 0.5}
      objective: nll          # what the search minimised, on labelled nodes only
      value: 0.4321
      trials: 30
      optuna_study: Cora_GCN_SimCalib
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from simcalib.backbones import backbone_name
from simcalib.calibrators import canonical_calibrator
from simcalib.data import get_spec
from simcalib.errors import ConfigError

TUNED_ENV = "SIMCALIB_TUNED_DIR"
DEFAULT_TUNED_DIR = "study/tuned"


def tuned_dir(folder: str | os.PathLike | None = None) -> Path:
    return Path(folder or os.environ.get(TUNED_ENV) or DEFAULT_TUNED_DIR)


def tuned_path(dataset: str, backbone: str, folder: str | os.PathLike | None = None) -> Path:
    return tuned_dir(folder) / f"{get_spec(dataset).name}_{backbone_name(backbone)}.yaml"


def read_tuned_file(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        content = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"tuned hyperparameter file {path} is not valid YAML ({exc}); fix or delete it") from None
    if not isinstance(content, dict):
        raise ConfigError(f"tuned hyperparameter file {path} must map calibrator names to entries")
    return content


def load_tuned_params(dataset: str, backbone: str, calibrator: str, folder: str | os.PathLike | None = None) -> dict:
    """The tuned options of ``calibrator`` on (dataset, backbone); ConfigError naming the fix if none exist."""
    name = canonical_calibrator(calibrator)
    path = tuned_path(dataset, backbone, folder)
    entry = read_tuned_file(path).get(name)
    if not entry or "params" not in entry:
        raise ConfigError(
            f"no tuned hyperparameters for {name} on {get_spec(dataset).name}/{backbone} in {path}; run "
            f"`simcalib tune --dataset {dataset} --backbone {backbone} --calibrator {name}` first, or give explicit options"
        )
    return dict(entry["params"])


def save_tuned_params(dataset: str, backbone: str, calibrator: str, params: dict, folder: str | os.PathLike | None = None,
                      **metadata) -> Path:
    """Write (or replace) the entry of ``calibrator``; other calibrators' entries in the file are kept."""
    name = canonical_calibrator(calibrator)
    path = tuned_path(dataset, backbone, folder)
    content = read_tuned_file(path)
    content[name] = {"params": dict(params), **metadata}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(yaml.safe_dump(content, sort_keys=True))
    tmp.replace(path)
    return path
