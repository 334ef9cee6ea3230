"""pyproject.toml declares only the runtime dependencies the package imports."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# declared ahead of the code that uses them (terminal tables)
PENDING = {"rich"}


def _norm(dist: str) -> str:
    return re.sub(r"[-_.]+", "-", dist).lower()


def _imported_top_modules() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "src" / "reveal").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def test_every_declared_dependency_is_imported() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {_norm(re.split(r"[<>=!~;\[ ]", spec, maxsplit=1)[0])
                for spec in project["dependencies"]}
    # installed distributions' own metadata says which import names each one provides
    providers = importlib.metadata.packages_distributions()
    used = {_norm(dist) for mod in _imported_top_modules() for dist in providers.get(mod, ())}
    assert "numpy" in used and "scikit-learn" in used  # the scan sees real imports
    assert declared - used - PENDING == set()
