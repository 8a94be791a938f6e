"""The installed package: ``simcalib --version``, the lean install's one-line answer to a study command without
the study extra, and the wheel's top-level packages (no generically named ``flows``)."""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from simcalib.cli import main
from simcalib.commands.orchestration import STUDY_MODULES, orchestration_package

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parent.parent


def test_version_is_the_installed_metadata(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"simcalib {importlib.metadata.version('simcalib')}"


def test_pyproject_version_is_the_installed_one():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["version"] == importlib.metadata.version("simcalib")


def test_citation_and_changelog_name_the_release():
    import yaml

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert citation["cff-version"] == "1.2.0" and citation["version"] == version
    paper = citation["preferred-citation"]
    assert paper["title"] == "SimCalib: Graph Neural Network Calibration based on Similarity between Nodes"
    assert [a["family-names"] for a in paper["authors"]] == ["Tang", "Wu", "Wu", "Huang", "Chen", "Lei", "Meng"]
    assert "AAAI-24" in paper["conference"]["name"] and paper["year"] == 2024
    releases = re.findall(r"^## \[([^\]]+)\]", (ROOT / "CHANGELOG.md").read_text(), re.M)
    releases = [r for r in releases if r != "Unreleased"]  # Keep a Changelog: changes since the release on top
    assert releases and releases[0] == version


def test_license_file_is_mit():
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "The SimCalib study system authors" in text


# One fresh interpreter in which the named packages are absent (sys.modules[name] = None: importing them raises
# ImportError and importlib.util.find_spec answers None) runs each command line of the CLI in turn and reports its
# exit code, what it printed, and a traceback if one escaped.
WITHOUT = textwrap.dedent("""
    import contextlib, io, json, sys, traceback
    for name in {blocked!r}:
        sys.modules[name] = None
    from simcalib.cli import main
    results = []
    for argv in {commands!r}:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:
                code = exc.code
            except BaseException:
                code, err = "raised", io.StringIO(traceback.format_exc())
        results.append({{"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}})
    print(json.dumps(results))
""")


def run_without(blocked, commands: list[list[str]]) -> list[dict]:
    done = subprocess.run([sys.executable, "-c", WITHOUT.format(blocked=list(blocked), commands=commands)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


STUDY_COMMANDS = {
    "study run": ["study", "run", "study/quick.yaml"],
    "tune": ["tune", "--dataset", "Cora", "--backbone", "GCN", "--calibrator", "TS"],
    "track": ["track", "reports/offline"],
    "ui": ["ui"],
    "report --flow": ["report", "reports/offline", "--flow"],
}


def test_study_commands_without_the_extra_name_it_in_one_line():
    results = run_without(("prefect", "mlflow", "optuna", "dask"),
                          [*STUDY_COMMANDS.values(), ["study", "run", "study/quick.yaml", "--set", "seed=3"],
                           ["data", "--help"]])
    for command, result in zip(STUDY_COMMANDS, results):
        assert result["code"] == 2, (command, result)
        lines = result["stderr"].strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in result["stderr"], (command, result)
        assert lines[0].startswith(f"error: `simcalib {command}` needs the study extra"), lines
        assert 'pip install "simcalib[study]"' in lines[0]
        assert all(name in lines[0] for name in ("prefect", "mlflow", "optuna", "dask")), lines
        assert result["stdout"] == "", (command, result)  # refused before any work
    assert results[-1]["code"] == 0, results[-1]  # a library command needs no extra


def test_one_missing_package_is_enough():
    (result,) = run_without(("prefect_dask",), [STUDY_COMMANDS["study run"]])
    assert result["code"] == 2 and "(not installed: prefect_dask)" in result["stderr"], result


def test_study_modules_are_the_study_extra():
    """Every package of the study extra is checked (by its import name)."""
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["study"]
    distributions = {re.split(r"[<>=\[;]", entry)[0].strip().lower() for entry in extra}
    checked = {name.replace("_", "-") for name in STUDY_MODULES}
    assert checked == distributions - {"fastapi", "sqlalchemy"}  # bounds on the extra's own dependencies


def test_a_checkout_uses_its_flows_package():
    assert orchestration_package() == "flows"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from a copy of the sources (pip wheel --no-deps, no build isolation: offline)."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        (source / name).write_bytes((ROOT / name).read_bytes())
    for package in ("simcalib", "flows"):
        for path in (ROOT / package).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                target = source / path.relative_to(ROOT)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(path.read_bytes())
    out = tmp / "dist"
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(out), str(source)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (built,) = out.glob("simcalib-*.whl")
    return built


def test_the_wheel_installs_no_generic_top_level_package(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    top = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top == {"simcalib", "simcalib_flows"}
    assert "simcalib_flows/study.py" in names and "simcalib/data/pinned_sha256.json" in names
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names)


def test_the_wheels_study_commands_find_simcalib_flows(wheel, tmp_path):
    """Unpacked outside the checkout, the wheel's commands import the orchestration layer as simcalib_flows
    (its modules import one another relatively)."""
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(tmp_path / "site")
    code = textwrap.dedent("""
        import json, sys
        from simcalib.commands.orchestration import flows_module, orchestration_package
        study = flows_module("study")
        print(json.dumps({"package": orchestration_package(), "study": study.__name__,
                          "flow": study.study_flow.name, "flows_loaded": "flows" in sys.modules}))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path / "site"),
                               "PREFECT_HOME": str(tmp_path / "prefect"), "DO_NOT_TRACK": "true"})
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"package": "simcalib_flows", "study": "simcalib_flows.study", "flow": "study",
                      "flows_loaded": False}
