"""Shared test set-up: offline/quiet environment, paths to ../shared, small synthetic graphs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import torch
from synthetic_graphs import make_sbm_graph

PROJECT_ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("SIMCALIB_SHARED_DIR", PROJECT_ROOT.parent / "shared"))
MIRROR = SHARED / "datasets" / "pyg"
SPLITS = SHARED / "datasets" / "splits"
PAPER = SHARED / "paper"

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
torch.set_num_threads(int(os.environ.get("SIMCALIB_TEST_THREADS", "1")))

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
    from simcalib.protocol import ProtocolSettings

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
