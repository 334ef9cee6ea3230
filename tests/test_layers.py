"""The layers hold: analysis returns numbers (analyze/ imports neither the collector, the
store nor report/), reports word analyses, the fleet compares analyses without the
collector or the commands, the collector knows nothing of the analysis.
The contracts are in pyproject.toml ([tool.importlinter]) and checked by import-linter."""

from __future__ import annotations

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
def test_a_report_import_in_analyze_breaks_the_contract(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "src" / "reveal", tmp_path / "src" / "reveal",
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    windows = tmp_path / "src" / "reveal" / "analyze" / "windows.py"
    windows.write_text(windows.read_text() + "\nimport reveal.report.text  # noqa\n")
    result = _lint(tmp_path, tmp_path / "src")
    assert result.returncode != 0
    assert "BROKEN" in result.stdout and "reveal.analyze.windows" in result.stdout
