"""The documentation stays true: its commands parse, its leaderboard excerpt matches the CSVs, no CPU model names.

The command rule, for every shell block (```bash, ```sh, ```console, ```shell or unlabelled) of README.md,
reports/README.md, reports/*/README.md and docs/*.md, one command per line (backslash continuations joined, ``# comments`` and a leading
``$ `` or ``.venv/bin/`` dropped):

- ``simcalib ...``: the whole command line is parsed by the ``simcalib`` parser (every sub-command, option and
  choice must exist; nothing runs, so the check costs no study time), and every argument naming a file or folder of
  the repository (``study/``, ``reports/``, ``docs/``, ``benchmarks/``, ``examples/``, ``tests/``) must exist;
- ``make TARGET [VAR=value ...]``: TARGET must be a target of the Makefile;
- ``python benchmarks/SCRIPT.py ...`` (also ``.venv/bin/python``): the script must exist and name every ``--option``
  the line passes.

Lines holding a placeholder (``<...>``) are checked for their sub-command only. Other lines (pip, prefect, git,
shell built-ins) are not checked here.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pandas as pd
import pytest

from simcalib.cli import build_parser
from simcalib.report.leaderboard import leaderboard_excerpt, read_families
from simcalib.report.summary import BEGIN, END

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", ROOT / "reports" / "README.md", *sorted((ROOT / "reports").glob("*/README.md")),
             *sorted((ROOT / "docs").glob("*.md"))]
SHELL_LANGUAGES = {"bash", "sh", "console", "shell", ""}
REPO_PATH = re.compile(r"^(study|reports|docs|benchmarks|examples|tests)/")
MACHINE_NAMES = re.compile(r"Intel|Xeon|AMD|EPYC")


def shell_blocks(text: str) -> list[str]:
    """The bodies of the shell blocks of a Markdown text (fences read in order, so a closing fence opens nothing)."""
    blocks, body, language = [], None, None
    for line in text.splitlines():
        fence = re.match(r"^\s*```\s*(\S*)", line)
        if fence and body is None:
            body, language = [], fence.group(1)
        elif fence:
            if language in SHELL_LANGUAGES:
                blocks.append("\n".join(body))
            body = None
        elif body is not None:
            body.append(line)
    return blocks


def shell_lines(path: Path) -> list[str]:
    """The command lines of ``path``'s shell blocks, continuations joined, comments and prompts dropped."""
    lines = []
    for block in shell_blocks(path.read_text()):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.strip()
            line = line[2:] if line.startswith("$ ") else line
            line = re.sub(r"(^|\s)#.*$", "", line).strip()
            line = re.sub(r"^(\S+=\S+\s+)+", "", line)  # VAR=value prefixes
            line = re.sub(r"\s+", " ", line.removeprefix(".venv/bin/"))
            if line:
                lines.append(line)
    return lines


def commands():
    """(line, files the document's earlier lines write) of every checked command line."""
    found = []
    for path in DOCUMENTS:
        written: set[str] = set()
        for line in shell_lines(path):
            written |= set(re.findall(r">\s*([\w./-]+)", line))  # cat > study/mine.yaml <<'YAML'
            if re.match(r"(simcalib|make|(\.venv/bin/)?python) ", line):
                found.append(pytest.param(line, frozenset(written), id=f"{path.relative_to(ROOT)}: {line[:60]}"))
    return found


def make_targets() -> set[str]:
    return set(re.findall(r"^([A-Za-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))


def check_command(line: str, root: Path = ROOT, written: frozenset[str] = frozenset()) -> None:
    """Raise AssertionError naming what is wrong with one documented command line (the module docstring's rule)."""
    words = shlex.split(line)
    if words[0] == "simcalib":
        argv = words[1:]
        if any("<" in w or w == "..." for w in argv):  # a placeholder: the sub-command only
            argv = argv[:next(i for i, w in enumerate(argv) if "<" in w or w == "..." or w.startswith("-"))] + ["--help"]
        try:
            build_parser().parse_args(argv)
        except SystemExit as exc:
            assert exc.code == 0, f"`{line}` does not parse (exit {exc.code})"
        for word in argv:
            value = word.split("=", 1)[-1]
            if REPO_PATH.match(value) and not any(c in value for c in "*?<{"):
                assert (root / value).exists() or value in written, f"`{line}` names {value}, which does not exist"
    elif words[0] == "make":
        targets = [w for w in words[1:] if "=" not in w and not w.startswith("-")]
        missing = [t for t in targets if t not in make_targets()]
        assert not missing, f"`{line}`: no Makefile target {', '.join(missing)}"
    else:
        script = next((w for w in words[1:] if w.endswith(".py")), None)
        if script is None or not REPO_PATH.match(script):
            return  # python -m ..., python -c ...: not a script of the repository
        assert (root / script).is_file(), f"`{line}`: {script} does not exist"
        source = (root / script).read_text()
        unknown = [w.split("=")[0] for w in words if w.startswith("--") and f'"{w.split("=")[0]}"' not in source]
        assert not unknown, f"`{line}`: {script} has no option {', '.join(unknown)}"


@pytest.mark.parametrize(("line", "written"), commands())
def test_documented_command(line, written):
    check_command(line, written=written)


def test_commands_are_found():
    lines = [p.values[0] for p in commands()]
    assert "make study" in lines and "make test" in lines  # the README's two commands
    assert any(line.startswith("simcalib report --leaderboard") for line in lines)
    assert any(line.startswith("python benchmarks/") for line in lines)  # reports/performance/README.md's


def test_the_check_fails_on_a_stale_command():
    with pytest.raises(AssertionError, match="does not parse"):
        check_command("simcalib report --no-such-option")
    with pytest.raises(AssertionError, match="does not exist"):
        check_command("simcalib study check study/no_such_study.yaml")
    with pytest.raises(AssertionError, match="no Makefile target"):
        check_command("make no-such-target")
    with pytest.raises(AssertionError, match="has no option"):
        check_command("python benchmarks/speed/gat_attention_speed.py --no-such-flag 1")


def test_shell_lines_join_continuations_and_drop_comments(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("text\n```bash\n$ .venv/bin/simcalib report \\\n    --leaderboard x.yaml  # note\n# only a comment\n"
                   "OMP_NUM_THREADS=1 make test\n```\n```python\nsimcalib = 1\n```\n")
    assert shell_lines(doc) == ["simcalib report --leaderboard x.yaml", "make test"]
    with pytest.raises(AssertionError, match="does not exist"):
        check_command("simcalib study run study/mine.yaml")
    check_command("simcalib study run study/mine.yaml", written=frozenset({"study/mine.yaml"}))


def machine_name_files() -> list[Path]:
    reports = ROOT / "reports"
    return [ROOT / "README.md", *sorted(reports.glob("*.md")), *sorted(reports.glob("*/README.md")),
            *sorted((ROOT / "docs").glob("*.md"))]


def test_no_cpu_model_names_in_prose():
    """Which machine computed what is provenance: data in the provenance.yaml files, not prose."""
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()[:80]}"
             for path in machine_name_files()
             for number, line in enumerate(path.read_text().splitlines(), 1) if MACHINE_NAMES.search(line)]
    assert not found, "CPU model names in prose (move them to provenance.yaml):\n" + "\n".join(found)


def test_machine_name_rule_sees_the_files():
    names = {str(p.relative_to(ROOT)) for p in machine_name_files()}
    assert {"README.md", "reports/README.md", "reports/leaderboard.md", "reports/offline/README.md",
            "docs/decisions.md"} <= names
    assert MACHINE_NAMES.search("computed on an AMD EPYC") and not MACHINE_NAMES.search("computed on machine A")


def readme_block(text: str, out: str = "reports/leaderboard.md") -> str:
    begin = BEGIN.format(out=out)
    assert begin in text and END in text, "README.md has no leaderboard block"
    return text.split(begin, 1)[1].split(END, 1)[0].strip()


def test_readme_leaderboard_matches_the_committed_csvs():
    families = read_families(ROOT / "reports" / "leaderboard.yaml")
    expected = leaderboard_excerpt(pd.read_csv(ROOT / "reports" / "leaderboard.csv"),
                                   pd.read_csv(ROOT / "reports" / "recommendation.csv"), families)
    assert readme_block((ROOT / "README.md").read_text()) == expected.strip(), (
        "README.md's leaderboard block is stale: run `make report` (simcalib report --leaderboard "
        "reports/leaderboard.yaml --summary-in README.md)")


def test_readme_first_table_within_60_lines():
    lines = (ROOT / "README.md").read_text().splitlines()
    first = next(i for i, line in enumerate(lines, 1) if line.startswith("| "))
    assert first <= 60


def test_recommendation_csv_has_the_columns_other_code_reads():
    recommendation = pd.read_csv(ROOT / "reports" / "recommendation.csv")
    assert {"family", "calibrator", "ece_rank", "rule"} <= set(recommendation.columns)
    assert set(recommendation["family"]) == {"homophilous", "heterophilous", "binary"}
