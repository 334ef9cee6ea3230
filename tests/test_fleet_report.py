"""The fleet report (JSON, text, Markdown, figures) and the ``reveal fleet`` command."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fleet_hosts import GIB, Fault, fleet
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
