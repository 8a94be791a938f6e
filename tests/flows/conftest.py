"""Fixtures of the study-flow tests: one Prefect test server per pytest session and one tiny reference study.

The tiny study is Cora x GCN, 1 split x 1 init x 3 folds, four classical calibrators, backbones capped at 20
epochs and single-threaded torch (so runs in this process, in subprocesses and on Dask workers give
bit-identical numbers). Its reference run (threads runner) is computed once; other tests compare with it.
"""

from __future__ import annotations

import os

import pandas as pd
import pytest
from shared_paths import PROJECT_ROOT
from study_helpers import Reference, StudyEnv

# Quiet Prefect (one log line per task run is noise here) and keep its home inside the project.
os.environ.setdefault("PREFECT_LOGGING_LOGGERS_PREFECT_TASK_RUNS_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_HOME", str(PROJECT_ROOT / ".prefect"))


@pytest.fixture(scope="session")
def prefect_api():
    """One Prefect test server for the pytest session (it takes ~11 s to start); yields its API URL."""
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield PREFECT_API_URL.value()


@pytest.fixture(scope="session")
def study_env(tmp_path_factory, mirror_dir, splits_dir) -> StudyEnv:
    root = tmp_path_factory.mktemp("studies")
    return StudyEnv(root, mirror_dir, splits_dir, root / "backbones")


@pytest.fixture(scope="session")
def reference(prefect_api, study_env) -> Reference:
    import torch

    from flows.study import study_flow

    threads = torch.get_num_threads()
    path = study_env.write("reference")
    try:
        result = study_flow(str(path))
    finally:
        torch.set_num_threads(threads)  # the study's torch_threads must not leak into other tests
    return Reference(path, result, pd.read_csv(result["benchmarks"][0]["results"]))
