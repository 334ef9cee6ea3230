"""Where a benchmark result came from: ``bench/provenance.py`` writes a result with its
revision, date, host, command and full settings, whole or not at all; every JSON result
under ``bench/results`` carries such a block (or one marking it as written before they were
kept); every benchmark writes its result through it."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import datetime as dt
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
RESULTS = BENCH / "results"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

import provenance  # noqa: E402

#: JSON a benchmark writes outside bench/results, by (script, function): the recording's
#: manifest beside its runs, and the per-run cache of ``--cache``
OWN_JSON_WRITES = {("bench_alarms.py", "record"), ("bench_evaluate.py", "evaluate_all")}


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


def _leaves(config: object) -> int:
    """Settings of a dataclass tree, counted field by field (nested dataclasses opened)."""
    return sum(_leaves(getattr(config, f.name))
               if dataclasses.is_dataclass(getattr(config, f.name)) else 1
               for f in dataclasses.fields(config))


# --- write_result --------------------------------------------------------------------


def test_write_result_records_revision_host_command_and_full_settings(tmp_path: Path) -> None:
    from reveal.analysis.presets import TELEMETRY

    argv = ["bench/bench_example.py", "--seconds", "5", "--out", str(tmp_path / "r.json")]
    args = argparse.Namespace(seconds=5.0, out=tmp_path / "r.json")
    settings = {**provenance.arguments(args),
                "analysis": provenance.analysis_settings({"window.size_s": 5.0})}
    target = provenance.write_result(tmp_path / "r.json", {"benchmark": "example", "n": 3},
                                     settings, argv=argv, started=time.monotonic() - 2.0)
    text = target.read_text(encoding="utf-8")
    assert text.endswith("}\n")
    data = json.loads(text)
    assert list(data) == ["benchmark", "n", "provenance"]
    block = data["provenance"]
    assert block["revision"]["commit"] == _git("rev-parse", "HEAD")
    assert isinstance(block["revision"]["dirty"], bool)
    assert block["host"]["kernel"] == os.uname().release
    assert block["host"]["cpus"] == os.cpu_count()
    assert block["host"]["python"] and "numpy" in block["host"]["libraries"]
    assert shlex.split(block["command"])[1:] == argv
    assert block["duration_s"] >= 2.0
    written = dt.datetime.fromisoformat(block["date"])
    assert abs((dt.datetime.now(dt.UTC) - written).total_seconds()) < 600
    # options in full, paths as strings; the whole analysis tree, the override applied
    assert block["settings"]["seconds"] == 5.0
    assert block["settings"]["out"] == str(tmp_path / "r.json")
    analysis = block["settings"]["analysis"]
    assert len(analysis) == _leaves(TELEMETRY) > 40
    assert analysis["window.size_s"] == 5.0 != TELEMETRY.window.size_s
    assert analysis["detect.detectors"] == list(TELEMETRY.detect.detectors)
    assert analysis["preset"] == "telemetry"


def test_a_result_names_the_code_of_the_clone_it_ran(tmp_path: Path) -> None:
    """A benchmark that runs another checkout (``bench_suite.py --clone``) names that
    checkout's commit, not the one of the tree it was started from."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--no-local", str(ROOT), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "-q", "--allow-empty", "-m", "another commit"], check=True)
    head = subprocess.run(["git", "-C", str(clone), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert head != _git("rev-parse", "HEAD")
    target = provenance.write_result(tmp_path / "r.json", {"benchmark": "example"}, {},
                                     argv=["bench/bench_example.py"], repo=clone)
    revision = json.loads(target.read_text())["provenance"]["revision"]
    assert revision["commit"] == head and revision["dirty"] is False


def test_fleet_and_dataclass_settings_are_whole_trees() -> None:
    from reveal.fleet.config import FleetConfig
    from reveal.inject.validation import SuiteOptions

    fleet = provenance.fleet_settings()
    assert len(fleet) == _leaves(FleetConfig()) and "window.size_s" in fleet
    chosen = provenance.fleet_settings(dataclasses.replace(FleetConfig(), min_score=8.0))
    assert chosen["min_score"] == 8.0
    suite = provenance.dataclass_settings(SuiteOptions.quick_suite())
    assert suite["quick"] is True and suite["faults"] == ["cpu_contention", "disk_burst"]
    with pytest.raises(TypeError):
        provenance.dataclass_settings({"not": "a dataclass"})


def test_a_result_that_cannot_be_written_leaves_the_earlier_file(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    provenance.write_result(path, {"figure": 1.0}, {"n": 1}, argv=["bench/x.py"])
    before = path.read_bytes()
    with pytest.raises(TypeError):
        provenance.write_result(path, {"figure": 2.0, "odd": object()}, {"n": 2},
                                argv=["bench/x.py"])
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]  # no temporary left
    # what has one plain form is written; ``default`` converts the rest, as json takes it
    provenance.write_result(path, {"p": Path("/a/b"), "x": np.float32(0.5),
                                   "v": np.arange(3)}, {"n": 3}, argv=["bench/x.py"])
    data = json.loads(path.read_text())
    assert (data["p"], data["x"], data["v"]) == ("/a/b", 0.5, [0, 1, 2])
    provenance.write_result(path, {"odd": object()}, {}, argv=["bench/x.py"], default=str)
    assert json.loads(path.read_text())["odd"].startswith("<object")


def test_status_paths_are_kept_whole_and_results_left_out() -> None:
    status = (" M bench/bench_alarms.py\nM  src/reveal/model.py\n"
              " M bench/results/alarms.json\nR  docs/a.md -> docs/b.md\n")
    assert provenance.changed_paths(status) == ["bench/bench_alarms.py", "src/reveal/model.py",
                                                "docs/a.md -> docs/b.md"]
    assert provenance.changed_paths("") == []


def test_script_argv_names_the_script_from_the_repository_root() -> None:
    script = str(BENCH / "bench_alarms.py")
    assert provenance.script_argv(script, None) is None
    assert provenance.script_argv(script, ["analyse", "D"]) == ["bench/bench_alarms.py",
                                                                "analyse", "D"]


# --- the results kept ----------------------------------------------------------------

HEX40 = re.compile(r"[0-9a-f]{40}")


def _results() -> list[Path]:
    return sorted(RESULTS.rglob("*.json"))


def test_every_result_says_where_it_came_from() -> None:
    results = _results()
    assert results
    legacy_commits = set()
    for path in results:
        name = str(path.relative_to(ROOT))
        data = json.loads(path.read_text(encoding="utf-8"))
        assert isinstance(data, dict), name
        block = data.get("provenance")
        assert isinstance(block, dict), f"{name}: no provenance block"
        if block.get("recorded_before_provenance"):
            revision = block["revision"]
            assert revision["commit"] is None, name
            assert HEX40.fullmatch(revision["committed_in"] or ""), name
            assert HEX40.fullmatch(revision["last_changed_in"] or ""), name
            legacy_commits |= {revision["committed_in"], revision["last_changed_in"]}
            dt.datetime.fromisoformat(block["committed_at"])
            assert block["date"] is None and block["host"] is None, name
            assert block["command"] is None and block["note"], name
        else:
            assert HEX40.fullmatch(block["revision"]["commit"] or ""), name
            dt.datetime.fromisoformat(block["date"])
            assert block["host"]["kernel"], name
            assert block["command"], name
            assert block["settings"], f"{name}: no settings"
    for commit in sorted(legacy_commits):
        found = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"],
                               capture_output=True, check=False)
        assert found.returncode == 0, f"{commit} is no commit of this repository"


# --- the benchmarks ------------------------------------------------------------------


def _scripts() -> list[Path]:
    return sorted(BENCH.glob("bench_*.py"))


def _json_writes(tree: ast.Module) -> set[str]:
    """The innermost functions of ``tree`` (``<module>`` outside any) that write JSON
    themselves: ``json.dump(...)``, or a ``write_text``, ``write`` or ``write_bytes`` call
    given ``json.dumps(...)``."""
    def is_json(node: ast.AST, name: str) -> bool:
        return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == name and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "json")

    def writes_json(node: ast.AST) -> bool:
        return is_json(node, "dump") or (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("write_text", "write", "write_bytes")
            and any(is_json(sub, "dumps") for arg in node.args for sub in ast.walk(arg)))

    found: set[str] = set()

    def visit(node: ast.AST, where: str) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            where = node.name
        if writes_json(node):
            found.add(where)
        for child in ast.iter_child_nodes(node):
            visit(child, where)

    visit(tree, "<module>")
    return found


@pytest.mark.parametrize("script", _scripts(), ids=lambda p: p.name)
def test_every_benchmark_writes_its_result_through_write_result(script: Path) -> None:
    source = script.read_text(encoding="utf-8")
    tree = ast.parse(source)
    assert "results" in source, f"{script.name} names no result under bench/results"
    imported = {alias.asname or alias.name for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module == "provenance"
                for alias in node.names if alias.name == "write_result"}
    assert imported == {"write_result"}, f"{script.name}: write_result not imported"
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
             and isinstance(node.func, ast.Name) and node.func.id == "write_result"]
    assert calls, f"{script.name} never calls write_result"
    for call in calls:  # a result, its path and its settings, every time
        assert len(call.args) + len(call.keywords) >= 3, f"{script.name}: {ast.unparse(call)}"
    own = {(script.name, name) for name in _json_writes(tree)}
    assert own <= OWN_JSON_WRITES, f"{script.name} writes JSON itself in {sorted(own)}"


def test_the_allowed_json_writes_are_still_there() -> None:
    seen = {(script.name, name) for script in _scripts()
            for name in _json_writes(ast.parse(script.read_text(encoding="utf-8")))}
    assert seen == OWN_JSON_WRITES


def test_the_suite_benchmark_sums_each_modules_time_from_real_junit_xml(tmp_path: Path) -> None:
    """``bench_suite.junit_figures`` on the JUnit XML of a real pytest run of two modules:
    every test counted by its outcome, each module's time summed, slowest module first."""
    import bench_suite

    (tmp_path / "test_slow.py").write_text(
        "import time\nimport pytest\n"
        "def test_a():\n    time.sleep(0.3)\n"
        "def test_b():\n    time.sleep(0.3)\n"
        "def test_c():\n    pytest.skip('no')\n")
    (tmp_path / "test_fast.py").write_text("def test_d():\n    assert 1 + 1 == 3\n")
    xml = tmp_path / "part.xml"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--junitxml", str(xml),
                           str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, check=False)
    assert done.returncode == 1, done.stdout[-2000:]
    figures = bench_suite.junit_figures(xml)
    assert (figures["passed"], figures["failed"], figures["skipped"]) == (2, 1, 1)
    slow, fast = figures["modules"]
    assert slow["module"].endswith("test_slow") and slow["tests"] == 3 and slow["s"] >= 0.6
    assert fast["module"].endswith("test_fast") and fast["tests"] == 1
    assert slow["s"] + fast["s"] == pytest.approx(figures["test_seconds"], abs=0.2)
    [failure] = figures["failures"]  # what the failed test said is kept, to be read again
    assert failure["test"].endswith("test_fast::test_d") and "assert (1 + 1) == 3" in \
        failure["said"]
    assert not bench_suite.junit_figures(tmp_path / "absent.xml")["present"]


def test_the_suite_benchmark_reads_the_hosts_idle_share_from_proc_stat() -> None:
    """``bench_suite.cpu_ticks`` reads this host's real /proc/stat: its ticks grow, idle is
    part of all, and a busy loop here lowers the idle share between two readings below
    what the host's other CPUs can give (one CPU of ``os.cpu_count()`` kept busy)."""
    import bench_suite

    before = bench_suite.cpu_ticks()
    end = time.monotonic() + 0.5
    while time.monotonic() < end:
        pass
    after = bench_suite.cpu_ticks()
    assert 0 <= before[0] <= before[1] and after[1] > before[1] and after[0] >= before[0]
    share = bench_suite.idle_between(before, after)
    assert share is not None and 0.0 <= share < 1.0 - 0.5 / (os.cpu_count() or 1)
    assert bench_suite.idle_between(after, after) is None  # no time between: no share
