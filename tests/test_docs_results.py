"""The figures in docs/ can be traced to the results under bench/results/.

- every ``bench/results/...`` path a document names exists (a ``*`` pattern matches a file);
- every JSON result docs/validation.md cites loads, with its ``provenance`` block;
- in docs/validation.md, a section (from one markdown heading to the next) whose tables hold
  a figure cites a result file, or says that no result file was kept for it.

The last is a heuristic: it looks at table rows only, and a section that describes what the
suite does rather than what it measured (its workloads, its faults) is left out.
"""

from __future__ import annotations

import glob
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RESULTS = ROOT / "bench" / "results"
VALIDATION = DOCS / "validation.md"

#: a path under bench/results/ as written in a document (a bare folder is not one)
RESULT_PATH = re.compile(r"bench/results/[A-Za-z0-9_.*/-]*[A-Za-z0-9_*]")
#: a file name as a citation may give it without its folder
FILE_NAME = re.compile(r"(?<![A-Za-z0-9_/.-])([A-Za-z0-9_-]+\.(?:json|md))\b")
NO_FILE = "no result file"
#: sections that describe the suite's set-up, not results (their tables hold settings)
SET_UP_SECTIONS = ("Reference workloads", "Faults (")


def result_names() -> set[str]:
    return {p.name for p in RESULTS.iterdir() if p.is_file()}


def cited_results(text: str, names: set[str]) -> set[str]:
    """The files under bench/results/ that ``text`` names, with or without their folder."""
    cited = {Path(p).name for p in RESULT_PATH.findall(text) if "*" not in p}
    cited |= {n for n in FILE_NAME.findall(text) if n in names}
    return cited & names


def sections(text: str) -> list[tuple[str, str]]:
    """(heading, body) for each stretch from one markdown heading to the next; lines inside
    code fences are never headings."""
    out: list[tuple[str, list[str]]] = [("", [])]
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if not fenced and re.match(r"#{1,6} ", line):
            out.append((line.lstrip("#").strip(), []))
        else:
            out[-1][1].append(line)
    return [(heading, "\n".join(body)) for heading, body in out]


def figure_rows(body: str) -> list[str]:
    """Table rows with a digit in them (separator rows have none)."""
    return [line for line in body.splitlines()
            if line.lstrip().startswith("|") and re.search(r"\d", line)]


def uncited_sections(text: str, names: set[str]) -> list[str]:
    """Headings of the sections whose tables hold figures while the section cites no result
    file and does not say that none was kept."""
    bad = []
    for heading, body in sections(text):
        if heading.startswith(SET_UP_SECTIONS) or not figure_rows(body):
            continue
        flat = " ".join(body.split()).lower()
        if not cited_results(body, names) and NO_FILE not in flat:
            bad.append(heading)
    return bad


def test_every_result_path_in_the_docs_exists() -> None:
    missing = []
    for doc in sorted(DOCS.glob("*.md")):
        for path in RESULT_PATH.findall(doc.read_text()):
            if not glob.glob(str(ROOT / path)):
                missing.append(f"{doc.name}: {path}")
    assert not missing, missing


def test_every_cited_json_loads_with_its_provenance() -> None:
    cited = sorted(n for n in cited_results(VALIDATION.read_text(), result_names())
                   if n.endswith(".json"))
    assert len(cited) > 50  # the document cites most of the suite's results
    for name in cited:
        data = json.loads((RESULTS / name).read_text())
        assert isinstance(data, dict) and "provenance" in data, name


def test_every_table_of_figures_cites_its_result() -> None:
    assert uncited_sections(VALIDATION.read_text(), result_names()) == []


def test_a_table_without_its_citation_is_found() -> None:
    """The check above fails when a section's citations are taken out."""
    text = VALIDATION.read_text()
    names = result_names()
    heading = "Against one 10-minute reference run (`--one-baseline`)"
    body = dict(sections(text))[heading]
    assert figure_rows(body) and cited_results(body, names)
    stripped = RESULT_PATH.sub("", body)
    for name in cited_results(body, names):
        stripped = stripped.replace(name, "")
    stripped = re.sub(r"no\s+result\s+file", "", stripped, flags=re.IGNORECASE)
    assert uncited_sections(text.replace(body, stripped), names) == [heading]
