"""``reveal collect``, ``reveal probes`` and ``reveal profile`` as real processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from reveal.store.run_reader import read_run


def _reveal(*args: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reveal.cli", *args], capture_output=True,
                          text=True, timeout=timeout, check=False, **kw)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    run = tmp_path_factory.mktemp("collect") / "run"
    done = _reveal("collect", "--duration", "1.5", "--out", str(run), "--self-channels")
    return run, done


def test_collect_writes_a_closed_run_with_host_and_probe_metadata(recorded):
    run, done = recorded
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(run)
    assert "Traceback" not in done.stderr
    assert "samples" in done.stderr  # progress/summary lines go to stderr
    meta = json.loads((run / "meta.json").read_text())
    for key in ("host", "kernel", "cpu_model", "n_cpus", "gpus", "interval_s",
                "start_mono_ns", "wall_offset_ns", "probes", "unsupported_events", "stats"):
        assert key in meta, key
    assert meta["closed"] is True and meta["source"] == "reveal collect"
    assert meta["n_cpus"] == len(os.sched_getaffinity(0)) or meta["n_cpus"] >= 1
    # the wall clock's offset from the monotonic clock is the machine's, as this process
    # reads it too (the same within a second unless the clock was stepped meanwhile), and
    # the recording started on this boot's monotonic clock, before now
    assert abs(meta["wall_offset_ns"] - (time.time_ns() - time.monotonic_ns())) < 1e9
    assert 0 < meta["start_mono_ns"] < time.monotonic_ns()
    tel = read_run(run)
    assert 12 <= tel.n_samples <= 16
    recorded_channels = sum(p["channels"] for p in meta["probes"].values())
    assert tel.n_channels == recorded_channels + 3  # + the collector's own channels
    assert meta["probes"]["perf"]["status"] in ("ok", "degraded", "unavailable")
    if meta["probes"]["perf"]["status"] != "unavailable":
        assert any(c.startswith("perf.context_switches{cpu=") for c in tel.channels)
    for probe in meta["probes"].values():
        assert probe["status"] in ("ok", "degraded", "unavailable", "disabled")
        if probe["status"] in ("degraded", "unavailable"):
            assert probe["reason"]
    stats = meta["stats"]
    assert stats["samples"] == tel.n_samples
    assert stats["latency_ms_p99"] >= stats["latency_ms_p50"] > 0
    assert stats["dropped_samples"] == 0


def test_probe_selection_and_exclusion(tmp_path):
    only = _reveal("collect", "--duration", "0.5", "--out", str(tmp_path / "a"), "--quiet",
                   "--probes", "cpu")
    assert only.returncode == 0, only.stderr
    tel = read_run(tmp_path / "a")
    meta = tel.meta
    assert meta["probes"]["cpu"]["status"] == "ok"
    assert meta["probes"]["perf"]["status"] == "disabled"
    assert tel.n_channels == meta["probes"]["cpu"]["channels"]
    without = _reveal("collect", "--duration", "0.5", "--out", str(tmp_path / "b"),
                      "--quiet", "--exclude", "perf")
    assert without.returncode == 0, without.stderr
    assert not any(c.startswith("perf.") for c in read_run(tmp_path / "b").channels)


def test_bad_options_are_one_line_errors(tmp_path):
    unknown = _reveal("collect", "--duration", "0.5", "--out", str(tmp_path / "x"),
                      "--probes", "cpu,nosuchprobe")
    assert unknown.returncode == 2
    assert "nosuchprobe" in unknown.stderr and "Traceback" not in unknown.stderr
    assert len(unknown.stderr.strip().splitlines()) == 1
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "meta.json").write_text("{}")
    busy = _reveal("collect", "--duration", "0.5", "--out", str(tmp_path / "busy"))
    assert busy.returncode == 2 and "already holds a run" in busy.stderr
    bad = _reveal("collect", "--interval", "0", "--out", str(tmp_path / "y"))
    assert bad.returncode == 2 and "interval" in bad.stderr


def test_probes_lists_every_registered_probe(tmp_path):
    done = _reveal("probes", "--json")
    assert done.returncode == 0, done.stderr
    rows = {row["name"]: row for row in json.loads(done.stdout)}
    assert "perf" in rows and "cpu" in rows
    for row in rows.values():
        assert row["status"] in ("ok", "degraded", "unavailable")
        assert (row["status"] == "unavailable") == (row["channels"] == 0) or row["channels"] == 0
        if row["status"] != "ok":
            assert row["reason"]
    if rows["perf"]["status"] == "degraded":
        assert rows["perf"]["unsupported_events"]
    from reveal.commands.probes import render

    table = render(list(rows.values()))
    assert "perf" in table and "channels" in table
    # file probes are read in C where the extension is built; the table says who ticks
    from reveal.collect.sampler import ticker_available

    assert rows["cpu"]["read_in_c"] is ticker_available()
    needs_python = [r["name"] for r in rows.values() if r["default"] and r["channels"]
                    and r["status"] != "unavailable" and not r.get("read_in_c")]
    last = table.splitlines()[-1]
    assert last.startswith("ticks: ")
    if not ticker_available():
        assert "Python" in last
    elif needs_python:
        assert "Python" in last and all(name in last for name in needs_python)
    else:
        assert "C thread" in last
    unavailable = [name for name, row in rows.items() if row["status"] == "unavailable"]
    if unavailable:  # recording only probes that cannot run here is refused, with reasons
        done = _reveal("collect", "--duration", "0.5", "--probes", unavailable[0],
                       "--out", str(tmp_path / "none"))
        assert done.returncode == 2 and "anything to record" in done.stderr
        assert rows[unavailable[0]]["reason"].split(":")[0] in done.stderr


def test_profile_records_the_command_and_returns_its_status(tmp_path):
    run = tmp_path / "prof"
    done = _reveal("profile", "--quiet", "--no-analyze", "--out", str(run), "--",
                   sys.executable, "-c", "import time, sys; time.sleep(1.2); sys.exit(7)")
    assert done.returncode == 7, done.stderr
    assert done.stdout.strip().splitlines()[-1] == str(run)
    tel = read_run(run)
    assert tel.meta["command"][-1].endswith("sys.exit(7)")
    assert tel.meta["source"] == "reveal profile" and tel.meta["closed"] is True
    assert 1.0 <= (tel.timestamps_ns[-1] - tel.timestamps_ns[0]) / 1e9 <= 3.0
    missing = _reveal("profile", "--quiet", "--out", str(tmp_path / "p2"), "--",
                      "/nonexistent/command")
    assert missing.returncode == 2 and "cannot run" in missing.stderr
    nothing = _reveal("profile", "--quiet", "--out", str(tmp_path / "p3"))
    assert nothing.returncode == 2 and "no command" in nothing.stderr


def test_profile_analyses_the_run_or_says_why_not(tmp_path):
    run = tmp_path / "prof"
    done = _reveal("profile", "--quiet", "--out", str(run), "--", "sleep", "4", timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout.strip().splitlines()[-1] == str(run)
    analysed = len(done.stdout.strip().splitlines()) > 1
    assert analysed or "analysis" in done.stderr


_AS_NOBODY = """
import os, sys
from reveal.cli import build_parser, load_command
parser = build_parser()  # every command's arguments
warm = parser.parse_args(["collect", "--duration", "0.3", "--quiet", "--out", sys.argv[1]])
load_command("collect").run(warm)  # a short run as root: every lazy import is loaded now
args = parser.parse_args(sys.argv[2:])
os.setgroups([])
os.setgid(65534)
os.setuid(65534)  # an ordinary user now: no capabilities left
sys.exit(load_command(args.command).run(args))
"""


def test_non_root_records_what_it_can_and_names_degraded_probes():
    if os.geteuid() != 0:
        pytest.skip("needs root to become an unprivileged user")
    # The interpreter lives under root's home here, so drop privileges inside the process
    # after the imports; the output directory must be reachable by that user.
    base = Path(tempfile.mkdtemp(prefix="reveal-nobody-", dir="/tmp"))
    try:
        base.chmod(0o777)
        run = base / "run"
        done = subprocess.run(
            [sys.executable, "-c", _AS_NOBODY, str(base / "warm"),
             "collect", "--duration", "1", "--out", str(run)],
            capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        assert run.stat().st_uid == 65534
        meta = json.loads((run / "meta.json").read_text())
        paranoid = int(Path("/proc/sys/kernel/perf_event_paranoid").read_text())
        if paranoid >= 1:
            perf = meta["probes"]["perf"]
            assert perf["status"] == "unavailable" and "perf_event_paranoid" in perf["reason"]
            assert "probe perf" in done.stderr  # said on the terminal too
        assert read_run(run).n_channels > 50  # the procfs probes still work
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_each_probe_reason_is_printed_once(recorded):
    run, done = recorded
    assert done.returncode == 0, done.stderr
    meta = json.loads((run / "meta.json").read_text())
    partial = {name: p for name, p in meta["probes"].items()
               if p["status"] in ("degraded", "unavailable")}
    for name, probe in partial.items():
        reason = probe["reason"].removeprefix(f"{name}: ")
        assert done.stderr.count(reason) == sum(  # probes may share a reason (no NVML)
            p["reason"].removeprefix(f"{n}: ") == reason for n, p in partial.items())
        assert done.stderr.count(f"probe {name} {probe['status']}: {reason}") == 1
        assert f"{name}: {name}:" not in done.stderr  # the probe is named once
    if partial:
        summary = [line for line in done.stderr.splitlines() if "not fully recorded" in line]
        assert len(summary) == 1 and all(name in summary[0] for name in partial)


def test_sizes_in_progress_and_summary_say_the_same_thing(recorded):
    run, done = recorded
    stats = json.loads((run / "meta.json").read_text())["stats"]
    (summary,) = [line for line in done.stderr.splitlines() if " samples of " in line]
    assert "written" not in done.stderr  # progress and summary both speak of bytes on disk
    if stats["journal_bytes_written"] > stats["bytes_on_disk"]:
        assert "journal compacted into Parquet" in summary
