"""The examples of docs/api.md run as written: every ```python block, in order, in one
namespace, in a fresh directory."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "api.md"
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)


def _blocks() -> list[str]:
    return BLOCK.findall(DOC.read_text(encoding="utf-8"))


def test_the_doc_has_examples() -> None:
    blocks = _blocks()
    assert len(blocks) >= 4
    text = "\n".join(blocks)
    for used in ("reveal.analyze(", ".anomalies", "to_html(", "DetectorOutlier", "Pipeline"):
        assert used in text or used.lower() in text.lower(), used


def test_the_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "docs_api"}
    for number, block in enumerate(_blocks(), 1):
        code = compile(block, f"{DOC.name}, python block {number}", "exec")
        exec(code, namespace)  # the project's own documentation
    out = capsys.readouterr().out
    assert "anomalies found" in out and "not in time order" in out
    assert (tmp_path / "report.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html")
    assert (tmp_path / "report.json").stat().st_size > 0
    assert (tmp_path / "host.model").exists()
