"""Helpers shared by the study-flow tests (fixtures are in conftest.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

TINY_CALIBRATORS = ["UnCal", "TS", "VS", "ETS"]
TASKS_LINE = re.compile(r"tasks: pretrain (\d+) computed; calibrate (\d+) computed; (\d+) rows already in results.csv")


@dataclass
class StudyEnv:
    root: Path
    mirror: Path
    splits: Path
    cache_dir: Path  # backbones, shared by every tiny study of the pytest session

    def write(self, name: str, runner: dict | None = None, **changes) -> Path:
        """A tiny study file in its own folder (output and MLflow database inside it)."""
        folder = self.root / name
        folder.mkdir(parents=True, exist_ok=True)
        study = {
            "name": name,
            "benchmarks": {"datasets": ["Cora"], "backbones": ["GCN"]},
            "calibrators": list(TINY_CALIBRATORS),
            "runs": {"splits": 1, "inits": 1, "folds": 3},
            "backbone": {"max_epochs": 20},
            "data": {"mirror": str(self.mirror), "splits_dir": str(self.splits), "cache_dir": str(self.cache_dir)},
            "output": str(folder / "out"),
            "tracking_uri": f"sqlite:///{folder / 'mlflow.db'}",
            "task_runner": {"kind": "threads", "workers": 2, "torch_threads": 1, **(runner or {})},
            "device": "cpu",
            "report": False,
            **changes,
        }
        path = folder / "study.yaml"
        path.write_text(yaml.safe_dump(study, sort_keys=False))
        return path


@dataclass
class Reference:
    study_file: Path
    result: dict
    results: pd.DataFrame  # the benchmark's results.csv

    @property
    def output(self) -> Path:
        return Path(self.result["output"])


def numbers(frame: pd.DataFrame) -> pd.DataFrame:
    """A results table without its timing column (wall-clock time is the one thing that may differ)."""
    return frame.drop(columns=["fit_seconds"]).reset_index(drop=True)
