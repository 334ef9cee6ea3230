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
    # worth loading only when used (pandas, torch, a command's work behind `reveal --help`)
    # or would make a cycle; never for the standard library or reveal's leaf modules.
    leaves = {"reveal.errors", "reveal.paths", "reveal._version"}
    package = ROOT / "src" / "reveal"
    offenders = [f"{path.relative_to(package)}:{line}: {module}"
                 for path in sorted(package.rglob("*.py"))
                 for line, module in _late_imports(path)
                 if module.split(".")[0] in sys.stdlib_module_names or module in leaves]
    assert offenders == []
