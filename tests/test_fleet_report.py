"""The fleet report (JSON, text, Markdown, figures) and the ``reveal fleet`` command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleet_hosts import GIB, Fault, fleet
from reveal.cli import main
from reveal.fleet import report
from reveal.fleet.engine import compare_fleet, host_features
from reveal.store.run_writer import write_run

HOSTILE = "evil\x1b[31m|*$x$*\u202e"


@pytest.fixture(scope="module")
def result():
    names = ("a", "b", "c", HOSTILE, "e", "f")
    tels = fleet(6, 120, seed=0, names=names, ifaces=("eth0", "ens5"),
                 faults=(Fault(3, memory_drop=GIB, span_s=(60.0, 90.0)),
                         Fault(2, hugepages=512), Fault(4, clock_s=7.0)))
    return compare_fleet([host_features(t) for t in tels])


def test_claims_speak_units_against_the_peers(result):
    lines = report.claims(result)
    assert any(line.startswith("c: huge pages in pool 512 pages, peers 0 pages") for line in lines)
    assert any(line.startswith("e: clock about 7 s ahead of its peers") for line in lines)
    memory = [line for line in lines if "memory" in line and "peer median" in line]
    assert memory and all("\x1b" not in line and "\u202e" not in line for line in memory)
    reasons = [report.reason_claim(r) for r in result.episodes[0].reasons]
    assert any("available memory 1.0" in r and "GB below the peer median" in r for r in reasons)


def test_text_and_markdown_escape_host_names(result):
    text = report.render_text(result)
    markdown = report.render_markdown(result)
    for out in (text, markdown):
        assert "\x1b" not in out and "\u202e" not in out
    assert "evil?[31m|*$x$*?" in text
    assert r"evil?\[31m\|\*$x$\*?" in markdown
    assert "Verdict: 3 hosts stand apart" in text


def test_json_is_versioned_and_strict(result, tmp_path):
    path = report.write_json(result, tmp_path / "fleet.json")
    payload = json.loads(path.read_text())
    assert (payload["schema"], payload["version"]) == ("reveal-fleet-report", 1)
    assert payload["summary"]["flagged_hosts"] == ["c", HOSTILE, "e"]
    assert payload["episodes"][0]["host"] == HOSTILE
    assert payload["episodes"][0]["subsystem"] == "memory"
    assert len(payload["windows"]["scores"]) == 6
    assert len(payload["windows"]["scores"][0]) == payload["grid"]["windows"]


def test_report_directory_has_figures(result, tmp_path):
    out = report.write_report_dir(result, tmp_path / "rep")
    heat = (out / "heatmap.png").read_bytes()
    trace = (out / "episode-1.png").read_bytes()
    assert heat[:8] == b"\x89PNG\r\n\x1a\n" and len(heat) > 5000
    assert trace[:8] == b"\x89PNG\r\n\x1a\n" and len(trace) > 5000
    md = (out / "report.md").read_text()
    assert "](heatmap.png)" in md and "](episode-1.png)" in md


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("fleet-runs")
    tels = fleet(5, 120, seed=3, ifaces=("eth0", "ens5"),
                 faults=(Fault(1, memory_drop=8 * GIB, span_s=(50.0, 90.0)),))
    paths = [str(write_run(t, root / t.host)) for t in tels]
    clean = fleet(5, 120, seed=21, ifaces=("eth0", "ens5"))[1]  # host-1 on another day
    write_run(clean, root / "baselines" / "host-1")
    return root, paths


def _reveal(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "reveal", "fleet", *args], text=True,
                          capture_output=True, timeout=300)


def test_command_on_runs_in_process(runs, tmp_path):
    root, paths = runs
    out = tmp_path / "report"
    proc = _reveal(*paths, "--workers", "0", "--json", str(tmp_path / "f.json"), "--out",
                   str(out), "--baseline-dir", str(root / "baselines"), "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert "host-1: memory from" in proc.stdout
    payload = json.loads((tmp_path / "f.json").read_text())
    assert payload["summary"]["flagged_hosts"] == ["host-1"]
    episode = payload["episodes"][0]
    # the host's own baseline (a clean run of it) sees the drop too: until the new level
    # has held for detect.settle_s (20 s of the 40 s drop) and is named a steady state
    assert episode["own_share"] is not None and episode["own_share"] > 0.3
    assert "its own baseline agrees" in episode["claim"]
    assert any("no own baseline" in w for w in payload["warnings"])
    assert (out / "heatmap.png").exists() and (out / "report.md").exists()


def test_command_bad_input_is_one_line(runs, tmp_path):
    _root, paths = runs
    proc = _reveal(*paths, str(tmp_path / "missing-run"), "--workers", "0")
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "missing-run" in proc.stderr and "no such run" in proc.stderr
    proc = _reveal(*paths[:2], "--workers", "0", "--quiet")
    assert proc.returncode == 2
    assert "at least 3 hosts" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_command_goes_on_without_an_unreadable_run(runs, tmp_path):
    _root, paths = runs
    broken = tmp_path / "broken-run"
    broken.mkdir()
    (broken / "meta.json").write_text("{not json")
    proc = _reveal(*paths, str(broken), "--workers", "0", "--format", "json", "--quiet")
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(proc.stdout)
    assert payload["hosts"] == [f"host-{i}" for i in range(5)]
    assert any("broken-run" in w and "not compared" in w for w in payload["warnings"])


def test_command_channels_choose_what_is_compared(runs, tmp_path):
    _root, paths = runs
    found = {}
    for channels in ("all", "gpu.,net.", "mem.MemAvailable"):
        proc = _reveal(*paths, "--workers", "0", "--format", "json", "--quiet",
                       "--channels", channels)
        assert proc.returncode == 0, proc.stderr
        found[channels] = json.loads(proc.stdout)["summary"]["flagged_hosts"]
    # host-1's memory drop: seen where memory is compared, not where only GPUs and links are
    assert found == {"all": ["host-1"], "gpu.,net.": [], "mem.MemAvailable": ["host-1"]}


#: The fleet's figures on the two recordings above, stored from the code: hosts, grid,
#: verdict, episodes with their reasons and own-baseline share, configuration and clock
#: outliers, and every window's score and cut. ``REVEAL_WRITE_EXPECTED=1`` writes them
#: again (then look at the diff: every changed figure is a changed fleet output).
EXPECTED = Path(__file__).parent / "fixtures" / "fleet" / "expected.json"


def _figures(payload: dict) -> dict:
    """A fleet report's payload without what names this machine (run paths)."""
    return {k: v for k, v in payload.items() if k != "sources"} | {
        "sources": {h: {k: v for k, v in s.items() if k != "path"}
                    for h, s in payload["sources"].items()}}


def _same(actual, expected, where: str = "") -> list[str]:
    """Where ``actual`` differs from ``expected``: numbers to 1e-4 relative (1e-6 absolute),
    everything else exactly."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        if set(actual) != set(expected):
            return [f"{where}: keys {sorted(set(actual) ^ set(expected))} differ"]
        return [d for k in expected for d in _same(actual[k], expected[k], f"{where}.{k}")]
    if isinstance(expected, list) and isinstance(actual, list):
        if len(actual) != len(expected):
            return [f"{where}: {len(actual)} items, expected {len(expected)}"]
        return [d for i, (a, e) in enumerate(zip(actual, expected, strict=True))
                for d in _same(a, e, f"{where}[{i}]")]
    if (isinstance(expected, float) and isinstance(actual, int | float)
            and not isinstance(actual, bool)):
        return [] if actual == pytest.approx(expected, rel=1e-4, abs=1e-6) else [
            f"{where}: {actual!r}, expected {expected!r}"]
    return [] if actual == expected and type(actual) is type(expected) else [
        f"{where}: {actual!r}, expected {expected!r}"]


def test_fleet_output_is_unchanged_on_fixed_recordings(result, runs, tmp_path):
    """Both recordings are generated from fixed seeds: the engine on six hosts (a memory
    drop, huge pages, a clock ahead) and ``reveal fleet`` on five recorded runs with host-1's
    own baseline (its own_share is the figure the episode's claim quotes)."""
    root, paths = runs
    assert main(["fleet", *paths, "--workers", "0", "--json", str(tmp_path / "f.json"),
                 "--baseline-dir", str(root / "baselines"), "--quiet"]) == 0
    figures = {"engine": _figures(json.loads(report.write_json(
                   result, tmp_path / "engine.json").read_text())),
               "command": _figures(json.loads((tmp_path / "f.json").read_text()))}
    if os.environ.get("REVEAL_WRITE_EXPECTED"):
        EXPECTED.parent.mkdir(exist_ok=True)
        EXPECTED.write_text(json.dumps(figures, indent=1, ensure_ascii=False) + "\n")
    expected = json.loads(EXPECTED.read_text())
    differ = _same(figures, expected)
    assert not differ, "\n".join(differ[:20])
    own = figures["command"]["episodes"][0]
    assert (own["host"], own["subsystem"]) == ("host-1", "memory")
    # 39 of its 42 windows: the memory drop holds, and its own baseline keeps flagging it
    # (it flagged 18 when a held level was adopted as the new normal after 20 s)
    assert own["own_share"] == pytest.approx(0.9286, abs=1e-4)
