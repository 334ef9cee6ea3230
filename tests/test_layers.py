"""The layers hold: analysis returns numbers (analysis/ imports neither the collector, the
store nor report/), reports word analyses, the fleet compares analyses without the
collector or the commands, the collector knows nothing of the analysis, and no module
imports the package's front (``reveal/__init__``) for a name it defines.
The contracts are in pyproject.toml ([tool.importlinter]) and checked by import-linter."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = shutil.which("lint-imports", path=f"{Path(sys.executable).parent}{os.pathsep}"
                                            f"{os.environ.get('PATH', '')}")
needs_linter = pytest.mark.skipif(LINT is None, reason="import-linter is not installed")


def _lint(cwd: Path, pythonpath: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(pythonpath))
    return subprocess.run([LINT, "--no-cache"], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


@needs_linter
def test_the_import_contracts_are_kept() -> None:
    result = _lint(ROOT, ROOT / "src")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 kept, 0 broken" in result.stdout


@needs_linter
def test_a_report_import_in_the_analysis_breaks_the_contract(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "src" / "reveal", tmp_path / "src" / "reveal",
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    windows = tmp_path / "src" / "reveal" / "analysis" / "windows.py"
    windows.write_text(windows.read_text() + "\nimport reveal.report.text  # noqa\n")
    result = _lint(tmp_path, tmp_path / "src")
    assert result.returncode != 0
    assert "BROKEN" in result.stdout and "reveal.analysis.windows" in result.stdout


def test_the_core_never_imports_the_package_front() -> None:
    # ``reveal/__init__`` is the front for users (lazy names, ``load``); the modules behind it
    # import what they need from where it is defined (``__version__`` from reveal._version).
    package = ROOT / "src" / "reveal"
    submodules = {p.stem for p in package.glob("*.py")} | {
        p.parent.name for p in package.glob("*/__init__.py")}
    offenders = []
    for path in package.rglob("*.py"):
        if path == package / "__init__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "reveal":
                offenders += [f"{path.relative_to(package)}: from reveal import {a.name}"
                              for a in node.names if a.name not in submodules]
            elif isinstance(node, ast.Import):
                offenders += [f"{path.relative_to(package)}: import reveal"
                              for a in node.names if a.name == "reveal"]
    assert offenders == []


def _late_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import made inside a function of ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import):
                    found += [(inner.lineno, a.name) for a in inner.names]
                elif isinstance(inner, ast.ImportFrom) and inner.level == 0 and inner.module:
                    found.append((inner.lineno, inner.module))
    return found


def test_imports_inside_functions_are_only_for_what_is_loaded_late() -> None:
    # A module's imports show what it depends on. Imports inside a function are for what is
    # worth loading only when used (matplotlib, torch, Dask, the analysis stack where a path
    # works without it); never to break a cycle (there is none: below), never for the
    # standard library or reveal's leaf modules.
    leaves = {"reveal.errors", "reveal.paths", "reveal._version"}
    package = ROOT / "src" / "reveal"
    offenders = [f"{path.relative_to(package)}:{line}: {module}"
                 for path in sorted(package.rglob("*.py"))
                 for line, module in _late_imports(path)
                 if module.split(".")[0] in sys.stdlib_module_names or module in leaves]
    assert offenders == []


def test_a_command_imports_its_work_at_the_top() -> None:
    # reveal.commands.<name> is loaded only when that command runs (its arguments are in
    # reveal.commands.parsers), so its imports belong at the top; three wait on purpose.
    waits = {"watch.py": "sets the allocators before the heavy imports",
             "profile.py": "records even where the analysis stack cannot load",
             "analyze.py": "its HTML page needs the report extra, which the agent lacks"}
    commands = ROOT / "src" / "reveal" / "commands"
    offenders = [f"{path.name}:{line}: {module}"
                 for path in sorted(commands.glob("*.py")) if path.name not in waits
                 for line, module in _late_imports(path) if module.startswith("reveal.")]
    assert offenders == []
    assert all(any(m.startswith("reveal.") for _, m in _late_imports(commands / name))
               for name in waits)  # the list stays true


def _import_graph(package: Path) -> dict[str, set[str]]:
    """Module → the package's modules it imports when it runs: at the top or inside a
    function (an import deferred into a function still closes a cycle), not under
    ``if TYPE_CHECKING:`` (annotations only). ``from pkg import name`` is an edge to the
    submodule ``pkg.name`` unless ``pkg/__init__`` itself defines ``name`` (Python's rule;
    this also covers a compiled submodule, which has no ``.py``)."""
    modules: dict[str, Path] = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    trees = {name: ast.parse(path.read_text(), str(path)) for name, path in modules.items()}

    def defined(name: str) -> set[str]:
        names: set[str] = set()
        for node in trees[name].body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef):
                names.add(node.name)
            elif isinstance(node, ast.Import | ast.ImportFrom):
                names |= {(a.asname or a.name).split(".")[0] for a in node.names}
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        return names

    def owner(module: str) -> str | None:
        while module and module not in modules:
            module = module.rpartition(".")[0]
        return module or None

    graph: dict[str, set[str]] = {}
    for name, tree in trees.items():
        typing_only = {id(inner) for node in ast.walk(tree)
                       if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                       for inner in ast.walk(node)}
        edges: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import):
                edges |= {owner(a.name) or "" for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                base = node.module
                if node.level:
                    here = name if modules[name].name == "__init__.py" else name.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        here = here.rpartition(".")[0]
                    base = f"{here}.{node.module}"
                if base in modules and modules[base].name == "__init__.py":
                    known = defined(base)
                    edges |= {base if a.name in known else f"{base}.{a.name}"
                              for a in node.names}
                else:
                    edges.add(owner(base) or "")
        graph[name] = {e for e in edges if e in modules} - {name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_import_graph_has_no_cycle() -> None:
    # Counted with the imports made inside functions: deferring one half of a cycle into a
    # function hides it from Python at import time, not from the reader.
    assert _cycles(_import_graph(ROOT / "src" / "reveal")) == []


def test_the_cycle_check_sees_a_cycle_through_a_deferred_import(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from pkg.sub.a import A\n")
    (package / "sub" / "a.py").write_text("from pkg import b\nA = 1\n")
    (package / "b.py").write_text("def f():\n    from pkg.sub import A\n    return A\n")
    (package / "c.py").write_text("from typing import TYPE_CHECKING\n"
                                  "if TYPE_CHECKING:\n    from pkg import b\n")
    graph = _import_graph(package)
    assert graph["pkg.b"] == {"pkg.sub"} and graph["pkg.c"] == set()
    assert _cycles(graph) == [["pkg.b", "pkg.sub", "pkg.sub.a"]]
