"""The import graph of ``simcalib``: no cycle among module-level imports, nor once function-local imports are
counted, so no local import exists only to avoid a cycle.

Read from the source with ``ast``, so the check needs no import side effects. A submodule importing from its
own package (``simcalib.calibrators.ts`` from ``simcalib.calibrators.base``) does not count as depending on
the package's ``__init__``: that package is already being imported when its submodules load.
"""

from __future__ import annotations

import ast
from pathlib import Path

import simcalib

PACKAGE_DIR = Path(simcalib.__file__).parent


def module_name(path: Path) -> str:
    parts = ("simcalib", *path.relative_to(PACKAGE_DIR).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, modules: set[str]) -> tuple[set[str], set[str]]:
    """(module-level, function-local) ``simcalib`` modules imported by the file at ``path``."""
    top, local = set(), set()

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            found = set()
            if isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                found = {child.module} | {f"{child.module}.{alias.name}" for alias in child.names}
            elif isinstance(child, ast.Import):
                found = {alias.name for alias in child.names}
            (local if in_function else top).update(found & modules)
            visit(child, inside)

    visit(ast.parse(path.read_text()), False)
    return top, local


def import_graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    paths = {module_name(p): p for p in PACKAGE_DIR.rglob("*.py")}
    modules = set(paths)
    graph, local = {}, {}
    for name, path in paths.items():
        graph[name], local[name] = imports(path, modules)
    return graph, local


def executed(importer: str, target: str, graph: dict[str, set[str]]) -> set[str]:
    """The modules that ``importer``'s import of ``target`` runs: ``target`` and the ``__init__`` of each package
    above it (``import simcalib.a.b`` runs ``simcalib/a/__init__.py`` first), but not the importer's own
    packages, which are already being imported when it loads."""
    parts = target.split(".")
    run = set()
    for i in range(2, len(parts) + 1):
        module = ".".join(parts[:i])
        if module != target and (importer + ".").startswith(module + "."):
            continue  # the importer's own package, already being imported
        if module in graph:
            run.add(module)
    return run


def reachable(start: str, graph: dict[str, set[str]]) -> set[str]:
    """Modules that importing ``start`` imports at module level (parent packages included)."""
    seen, stack = set(), [start]
    while stack:
        current = stack.pop()
        for target in graph.get(current, ()):
            for module in executed(current, target, graph) - seen:
                seen.add(module)
                stack.append(module)
    return seen


def test_module_level_imports_have_no_cycle():
    graph, _ = import_graph()
    assert len(graph) > 40  # the parse found the package
    cycles = sorted(m for m in graph if m in reachable(m, graph))
    assert not cycles, f"modules that import themselves through others: {cycles}"


def test_function_local_imports_close_no_cycle_either():
    """Local imports keep start-up light (torch only where needed); none may hide a cycle."""
    graph, local = import_graph()
    every = {module: graph[module] | local[module] for module in graph}
    cycles = sorted(m for m in every if m in reachable(m, every))
    assert not cycles, f"modules that import themselves through others, counting local imports: {cycles}"
