"""Shared test set-up: offline/quiet environment, paths to ../shared, small synthetic graphs."""

from __future__ import annotations

import os
import subprocess
import warnings
from pathlib import Path

import pytest

# One thread per test process, set before numpy and torch load their thread pools: with pytest-xdist each core
# runs its own worker, and a second BLAS/OpenMP thread per worker (or per command a test starts) would only
# oversubscribe the cores. SIMCALIB_TEST_THREADS overrides it.
TEST_THREADS = os.environ.get("SIMCALIB_TEST_THREADS", "1")
for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, TEST_THREADS)

import torch  # noqa: E402
from shared_paths import MIRROR, PAPER, PROJECT_ROOT, SPLITS  # noqa: E402
from synthetic_graphs import make_sbm_graph  # noqa: E402

# Each pytest-xdist worker ("gw0", "gw1", ...) keeps Prefect's home (profiles, a Prefect server's files) in a
# folder of its own, set before anything imports Prefect. Temporary folders are per worker already (tmp_path).
WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if WORKER:
    os.environ["PREFECT_HOME"] = str(Path(os.environ.get("PREFECT_HOME") or PROJECT_ROOT / ".prefect") / WORKER)
    Path(os.environ["PREFECT_HOME"]).mkdir(parents=True, exist_ok=True)  # Prefect makes one level only (a clean clone)

# Offline and quiet (../shared/STACK.md); test runs keep Prefect's home inside the project.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "true")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ.setdefault("MPLCONFIGDIR", str(PROJECT_ROOT / ".cache" / "matplotlib"))
os.environ.setdefault("SIMCALIB_OFFLINE", "1")  # never wait on a download in tests

# One torch thread for the whole suite: the tests run tiny ops where a second thread only adds
# synchronisation (on a loaded 2-core machine, many times slower), and a pinned count keeps numbers
# identical between runs (the thread count changes floating-point reduction order).
torch.set_num_threads(int(TEST_THREADS))

requires_mirror = pytest.mark.skipif(not MIRROR.is_dir(), reason=f"dataset mirror {MIRROR} not present")
requires_splits = pytest.mark.skipif(not SPLITS.is_dir(), reason=f"fixed splits {SPLITS} not present")


@pytest.fixture(scope="session")
def mirror_dir() -> Path:
    if not MIRROR.is_dir():
        pytest.skip(f"dataset mirror {MIRROR} not present")
    return MIRROR


@pytest.fixture(scope="session")
def splits_dir() -> Path:
    if not SPLITS.is_dir():
        pytest.skip(f"fixed splits {SPLITS} not present")
    return SPLITS


@pytest.fixture(scope="session")
def paper_dir() -> Path:
    """The paper's tables (``table1_ece.csv``...), under SIMCALIB_SHARED_DIR like the mirror and the splits."""
    if not (PAPER / "table1_ece.csv").is_file():
        pytest.skip(f"paper tables not found in {PAPER} (set SIMCALIB_SHARED_DIR)")
    return PAPER


@pytest.fixture
def sbm_graph():
    return make_sbm_graph()


@pytest.fixture(scope="session")
def tiny_protocol(tmp_path_factory, mirror_dir, splits_dir):
    """Protocol settings for fast real-data checks: Cora with the fixed splits, backbones capped at 20
    epochs and cached in a pytest-session folder (shared by the tests that use it). Single-threaded torch: on
    small graphs and shared cores, a second intra-op thread makes each step many times slower."""
    from simcalib.experiment.protocol import ProtocolSettings

    torch.set_num_threads(1)

    return ProtocolSettings(mirror=str(mirror_dir), splits_dir=str(splits_dir),
                            cache_dir=str(tmp_path_factory.mktemp("backbones")), device="cpu",
                            backbone_overrides=(("max_epochs", 20),))


# ---------------------------------------------------------------------------------------------------------
# Headless Chromium, for checks that a web UI (MLflow, Optuna dashboard) really renders in a browser.
# Needs the `chromium` package (Debian: apt-get install -y chromium); tests using it are skipped without it.

ARTIFACTS = PROJECT_ROOT / "test-artifacts"  # screenshots and other files a person may want to look at


class HeadlessChromium:
    """Runs Chromium's own headless mode (no driver needed): the rendered DOM or a PNG of a page, after
    ``wait_ms`` of virtual time so single-page apps can fetch and render their data."""

    def __init__(self, binary: str, profile_root: Path):
        self.binary = binary
        self.profile_root = profile_root

    def _run(self, url: str, *flags: str, wait_ms: int, timeout: float) -> subprocess.CompletedProcess:
        import tempfile

        with tempfile.TemporaryDirectory(dir=self.profile_root) as profile:  # one profile per call: no lock clashes
            command = [self.binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                       "--no-first-run", "--hide-scrollbars", f"--user-data-dir={profile}",
                       f"--virtual-time-budget={wait_ms}", *flags, url]
            return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=True)

    def dom(self, url: str, wait_ms: int = 15000, timeout: float = 120, size: tuple[int, int] | None = None) -> str:
        """The rendered DOM; ``size`` (width, height) for pages that render only what fits (virtualised tables)."""
        flags = ("--dump-dom",) + ((f"--window-size={size[0]},{size[1]}",) if size else ())
        return self._run(url, *flags, wait_ms=wait_ms, timeout=timeout).stdout

    def screenshot(self, url: str, path: Path, size: tuple[int, int] = (1400, 1000), wait_ms: int = 15000,
                   timeout: float = 120) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._run(url, f"--screenshot={path}", f"--window-size={size[0]},{size[1]}", wait_ms=wait_ms, timeout=timeout)
        return path


@pytest.fixture(scope="session")
def chromium(tmp_path_factory) -> HeadlessChromium:
    import shutil

    binary = next((found for name in ("chromium", "chromium-browser", "google-chrome")
                   if (found := shutil.which(name))), None)
    if binary is None:
        pytest.skip("headless Chromium is not installed (Debian: apt-get install -y chromium)")
    return HeadlessChromium(binary, tmp_path_factory.mktemp("chromium"))


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


# ---------------------------------------------------------------------------------------------------------
# pytest-xdist (`make test` runs `pytest -n 4 --dist loadgroup`): the tests that share an expensive session-scoped
# fixture run on one worker, so it is built once, and the largest groups start first. Here: the Prefect test server
# (tests/flows/conftest.py, ~20 s of CPU to start) and the tiny reference study run on it (~1 CPU-minute); their
# users (the fixture's closure: every user of the reference study) run one after another while the other workers
# take the rest of the suite.

SHARED_SESSION_FIXTURES = {"prefect_api": "prefect-server"}  # fixture -> xdist group


@pytest.hookimpl(wrapper=True)  # around xdist's own hook, which writes each test's group into its id
def pytest_collection_modifyitems(config, items):
    grouped = []
    for item in items:
        for fixture, group in SHARED_SESSION_FIXTURES.items():
            if fixture in item.fixturenames:  # the fixture closure: also the fixtures built on it
                item.add_marker(pytest.mark.xdist_group(group))
                grouped.append(item)
                break
    result = yield
    if getattr(config.option, "loadgroup", False) and any("@" not in item.nodeid for item in grouped):
        # pytest-xdist 3.8 cannot write the group into pytest 9.2's test ids (pytest-xdist issue 1386)
        warnings.warn(pytest.PytestWarning(
            "--dist loadgroup ignores the xdist_group marks with this pytest; each worker builds its own "
            "reference study. Install pytest<9.2 (the dev extra's range) to share one."), stacklevel=1)
    return result
