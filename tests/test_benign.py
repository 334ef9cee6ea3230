"""Each benign activity does what it says, leaves nothing behind, and ends twice safely;
the registry, the CLI and a re-analysis of a tiny recorded suite. Real git, gcc, pip, su,
ip, cgroups and clocks; no mocks."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest

from reveal.cli import main
from reveal.inject.benign import BENIGN, QUICK, leftovers
from reveal.inject.benign.base import benign_ifname, benign_name
from reveal.inject.benign.suite import BenignOptions
from reveal.inject.cleanup import make_temp_dir, netns_names, tagged_processes
from reveal.inject.faults import FAULTS, Fault, FaultContext, make_fault, run_episode
from reveal.inject.groundtruth import EventLog, load_episodes
from reveal.inject.naming import pid_alive

pytestmark = pytest.mark.root

MB = 1 << 20


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = make_temp_dir("test")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _state() -> dict[str, Any]:
    """Everything benign this process made (named with its pid: another pytest-xdist
    worker's activities make their own beside it), and its tagged children."""
    mine = sorted(p for p, owner in tagged_processes().items() if owner == os.getpid())
    return {**leftovers.snapshot(owners=(os.getpid(),)), "processes": mine}


def _begin(kind: str, workdir: Path, wait_s: float = 60.0) -> Fault:
    """``kind`` begun (skipped with its reason where it cannot run here); a self-ending
    kind is waited for until it has done its work."""
    fault = make_fault(kind, "default", FaultContext(workdir))
    reason = fault.check()
    if reason:
        pytest.skip(reason)
    fault.begin()
    if fault.self_ending:
        deadline = time.monotonic() + wait_s
        while not fault.finished() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fault.finished(), f"{kind} did not finish within {wait_s:g} s"
    return fault


def _end_twice(fault: Fault, before: dict[str, Any]) -> None:
    fault.end()
    fault.end()
    assert not fault.scratch.exists()  # type: ignore[attr-defined]
    assert _state() == before


def _exit_codes(fault: Fault) -> list[int | None]:
    return [p.poll() for p in fault.procs]


def _log(fault: Fault) -> str:
    path = fault.scratch / "activity.log"  # type: ignore[attr-defined]
    return path.read_text(errors="replace") if path.exists() else ""


def _meminfo(field: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def _vmstat() -> dict[str, int]:
    return {k: int(v) for k, v in (line.split() for line in
                                   Path("/proc/vmstat").read_text().splitlines())}


def _forks() -> int:
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("processes "):
            return int(line.split()[1])
    raise KeyError("processes")


def _link(name: str) -> str:
    return subprocess.run(["ip", "-o", "link", "show", name], capture_output=True,
                          text=True, check=False).stdout


# ----------------------------------------------------------------------------- registry

def test_registry_lists_benign_kinds_with_descriptions() -> None:
    assert len(BENIGN) >= 12
    assert not set(BENIGN) & set(FAULTS)
    assert set(QUICK) <= set(BENIGN) and len(QUICK) == 3
    for kind, cls in BENIGN.items():
        assert cls.kind == kind and cls.benign is True  # type: ignore[attr-defined]
        assert cls.description and "default" in cls.INTENSITIES
        assert cls.subsystem in ("cpu", "memory", "storage", "network", "software")
        assert isinstance(cls.informational, bool)  # type: ignore[attr-defined]
    informational = {k for k, c in BENIGN.items() if c.informational}  # type: ignore[attr-defined]
    assert informational == {"container_start_stop", "new_interface"}
    assert not any(getattr(c, "benign", False) for c in FAULTS.values())


def test_the_watch_restart_needs_a_live_watch_and_restarts_it_once(tmp_path: Path) -> None:
    from reveal.inject.benign import BATCH_KINDS, LIVE_ONLY

    assert "watch_restart" in LIVE_ONLY and "watch_restart" not in BATCH_KINDS
    assert BenignOptions().kinds == BATCH_KINDS
    alone = make_fault("watch_restart", "default", FaultContext(tmp_path))
    assert "live" in (alone.check() or "")
    calls: list[int] = []
    fault = make_fault("watch_restart", "default",
                       FaultContext(tmp_path, restart_watch=lambda: calls.append(1)))
    assert fault.check() is None
    fault.begin()
    fault.end()
    assert calls == [1]


def test_interface_names_fit_the_kernel_limit_and_name_their_owner() -> None:
    for pid in (1, 4242, 4_194_304):
        name = benign_ifname("d", pid)
        assert len(name) == 15 and leftovers.owner_of(name) == pid
    assert leftovers.owner_of(benign_name("ctr", 77)) == 77
    assert leftovers.owner_of("eth0") is None and leftovers.owner_of("rvinj-5-a") is None


# ----------------------------------------------------------------------------- each kind

def test_page_cache_drop_frees_the_page_cache(workdir: Path) -> None:
    before = _state()
    cached = workdir / "cached.dat"
    cached.write_bytes(os.urandom(64 * MB))
    cached.read_bytes()
    cache_before = _meminfo("Cached")
    fault = _begin("page_cache_drop", workdir)
    assert _exit_codes(fault) == [0]
    assert _meminfo("Cached") < cache_before - 32 * MB
    _end_twice(fault, before)


def test_thp_compact_runs_the_kernels_compaction(workdir: Path) -> None:
    before = _state()
    scanned = ("compact_migrate_scanned", "compact_free_scanned")
    counters = _vmstat()
    fault = _begin("thp_compact", workdir)
    assert _exit_codes(fault) == [0]
    after = _vmstat()
    if all(k in counters for k in scanned):
        assert sum(after[k] - counters[k] for k in scanned) > 0
    _end_twice(fault, before)


def test_git_commit_commits_small_files(workdir: Path) -> None:
    before = _state()
    fault = _begin("git_commit", workdir)
    assert _exit_codes(fault) == [0], _log(fault)
    repo = fault.scratch / "repo"  # type: ignore[attr-defined]
    files = subprocess.run(["git", "-C", str(repo), "ls-files"], capture_output=True,
                           text=True, check=True).stdout.split()
    commits = subprocess.run(["git", "-C", str(repo), "rev-list", "--count", "HEAD"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert len(files) == 200 and commits == "1"
    _end_twice(fault, before)


def test_short_compile_builds_a_working_binary(workdir: Path) -> None:
    before = _state()
    fault = _begin("short_compile", workdir)
    assert _exit_codes(fault) == [0], _log(fault)
    binary = fault.scratch / "prog"  # type: ignore[attr-defined]
    assert binary.is_file() and os.access(binary, os.X_OK)
    assert subprocess.run([str(binary), "10"], capture_output=True, check=True).stdout
    _end_twice(fault, before)


def test_package_install_installs_a_local_wheel_offline(workdir: Path) -> None:
    before = _state()
    fault = _begin("package_install", workdir)
    assert _exit_codes(fault) == [0], _log(fault)
    site = fault.scratch / "site"  # type: ignore[attr-defined]
    assert (site / "rvbenign_pkg" / "util.py").is_file()
    assert (site / "rvbenign_pkg-1.0.dist-info" / "METADATA").is_file()
    _end_twice(fault, before)


def test_log_rotation_fills_renames_and_compresses_the_log(workdir: Path) -> None:
    before = _state()
    fault = _begin("log_rotation", workdir)
    assert _exit_codes(fault) == [0], _log(fault)
    scratch = fault.scratch  # type: ignore[attr-defined]
    assert (scratch / "app.log").stat().st_size == 0
    assert not (scratch / "app.log.1").exists()
    with gzip.open(scratch / "app.log.1.gz") as handle:
        size = len(handle.read())
    assert 19 * MB < size <= 20 * MB
    _end_twice(fault, before)


def test_cron_burst_starts_a_hundred_short_processes_in_seconds(workdir: Path) -> None:
    before = _state()
    forks = _forks()
    started = time.monotonic()
    fault = _begin("cron_burst", workdir)
    took = time.monotonic() - started
    assert _exit_codes(fault) == [0], _log(fault)
    assert _forks() - forks >= 100
    assert 1.5 < took < 8.0
    _end_twice(fault, before)


def test_ssh_login_runs_a_login_shell_as_nobody(workdir: Path) -> None:
    before = _state()
    fault = _begin("ssh_login", workdir)
    assert _exit_codes(fault) == [0], _log(fault)
    assert "uid=65534" in _log(fault)
    _end_twice(fault, before)


def test_container_start_stop_makes_and_removes_cgroup_netns_and_veth(workdir: Path) -> None:
    before = _state()
    fault = make_fault("container_start_stop", "default", FaultContext(workdir))
    if fault.check():
        pytest.skip(fault.check())
    fault.begin()
    try:
        netns, (host_if, _) = fault.params["netns"], fault.params["interfaces"]
        assert netns in netns_names()
        assert "UP" in _link(host_if).split(">")[0]
        cgroups = fault.cgroup.paths  # type: ignore[attr-defined]
        assert cgroups and all(p.name.startswith("rvbenign-") for p in cgroups)
        sleeper = fault.procs[0].pid
        assert all(str(sleeper) in (p / "cgroup.procs").read_text().split() for p in cgroups)
        inside = subprocess.run(["ip", "netns", "pids", netns], capture_output=True,
                                text=True, check=True).stdout.split()
        assert str(sleeper) in inside
        assert not fault.finished()
    finally:
        fault.end()
    assert netns not in netns_names() and not _link(host_if)
    assert not any(p.exists() for p in cgroups)
    _end_twice(fault, before)


def test_new_interface_appears_then_goes(workdir: Path) -> None:
    before = _state()
    fault = make_fault("new_interface", "default", FaultContext(workdir))
    if fault.check():
        pytest.skip(fault.check())
    fault.begin()
    try:
        name = fault.params["interface"]
        assert name.startswith("rvbenign") and "UP" in _link(name).split(">")[0]
        assert fault.params["type"] in ("dummy", "bridge", "veth")
        assert not fault.finished()
    finally:
        fault.end()
    assert not _link(name)
    _end_twice(fault, before)


def test_clock_step_moves_the_wall_clock_and_restores_it(workdir: Path) -> None:
    def offset() -> float:
        return time.clock_gettime(time.CLOCK_REALTIME) - time.monotonic()

    before = _state()
    was = offset()
    fault = make_fault("clock_step", "default", FaultContext(workdir))
    if fault.check():
        pytest.skip(fault.check())
    fault.begin()
    try:
        assert abs(offset() - was - 0.5) < 0.2
        assert fault.state.exists()  # type: ignore[attr-defined]
    finally:
        fault.end()
    assert abs(offset() - was) < 0.2
    fault.end()
    assert abs(offset() - was) < 0.2
    _end_twice(fault, before)


def test_checkpoint_writes_and_syncs_a_file_removed_at_the_end(workdir: Path) -> None:
    before = _state()
    fault = _begin("checkpoint", workdir)
    assert _exit_codes(fault) == [0], _log(fault)
    path = fault.scratch / "checkpoint.pt"  # type: ignore[attr-defined]
    assert path.stat().st_size == 150 * MB
    _end_twice(fault, before)
    assert not path.exists()


def test_epoch_boundary_stages_and_reads_its_shards(workdir: Path) -> None:
    before = _state()
    fault = _begin("epoch_boundary", workdir)
    assert _exit_codes(fault) == [0], _log(fault)
    shards = sorted((fault.scratch / "shards").glob("shard-*.bin"))  # type: ignore[attr-defined]
    assert len(shards) == 50 and sum(p.stat().st_size for p in shards) == 200 * MB
    _end_twice(fault, before)


def test_load_change_keeps_about_five_percent_of_a_cpu_busy(workdir: Path) -> None:
    before = _state()
    fault = _begin("load_change", workdir)
    proc = psutil.Process(fault.procs[0].pid)
    time.sleep(1.0)  # interpreter start-up
    cpu = proc.cpu_times()
    time.sleep(3.0)
    later = proc.cpu_times()
    busy = (later.user + later.system - cpu.user - cpu.system) / 3.0
    assert 0.02 < busy < 0.25, busy
    assert not fault.finished()
    _end_twice(fault, before)
    assert not pid_alive(proc.pid) or proc.status() == psutil.STATUS_ZOMBIE


def test_run_episode_records_a_benign_activity_as_ground_truth(workdir: Path) -> None:
    before = _state()
    fault = make_fault("new_interface", "default", FaultContext(workdir))
    if fault.check():
        pytest.skip(fault.check())
    episode = run_episode(fault, 20.0, EventLog(workdir))
    assert 3.5 < episode.duration_s < 10.0  # self-ending: held 4 s, not 20
    [recorded] = load_episodes(workdir)
    assert recorded.kind == "new_interface" and recorded.subsystem == "network"
    assert recorded.detail["interface"].startswith("rvbenign")
    assert _state() == before


# ----------------------------------------------------------------------------- leftovers

def test_cleanup_removes_a_dead_owners_benign_leftovers() -> None:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2")
    dead = 4_000_000
    while pid_alive(dead):
        dead -= 1
    netns, host_if, peer = benign_name("ctr", dead), benign_ifname("h", dead), \
        benign_ifname("c", dead)
    directory = Path("/tmp") / f"{benign_name('x', dead)}-scratch"
    directory.mkdir()
    subprocess.run(["ip", "netns", "add", netns], check=True)
    subprocess.run(["ip", "link", "add", host_if, "type", "veth", "peer", "name", peer],
                   check=True)
    try:
        assert main(["validate", "--cleanup"]) == 0
        assert netns not in netns_names() and not _link(host_if) and not directory.exists()
    finally:
        subprocess.run(["ip", "netns", "delete", netns], check=False, capture_output=True)
        subprocess.run(["ip", "link", "delete", host_if], check=False, capture_output=True)
        shutil.rmtree(directory, ignore_errors=True)


# ----------------------------------------------------------------------------- CLI

def test_validate_help_mentions_the_benign_suite(capsys) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit) as stop:
        main(["validate", "--benign", "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert "--benign" in out and "--run-seconds" in out and "--activity-at" in out


def test_benign_option_errors_are_one_line(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["validate", "--benign", "--faults", "git_commit,meteor", "--out",
                 str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "meteor" in err and "\n" not in err
    assert main(["validate", "--benign", "--live", "--reanalyse", str(tmp_path),
                 "--out", str(tmp_path)]) == 2
    assert "--reanalyse" in capsys.readouterr().err
    assert main(["validate", "--activity-at", "5", "--out", str(tmp_path)]) == 2
    assert not (tmp_path / "benign.json").exists()


@pytest.mark.slow
def test_reanalyse_scores_a_tiny_recorded_benign_suite(workdir: Path, tmp_path: Path,
                                                       capsys) -> None:  # type: ignore[no-untyped-def]
    """A real recording (collector at 100 ms, no workload, to stay under a minute): a
    25 s baseline and a 20 s run with a burst of processes 8 s in, scored again."""
    from reveal.inject.scenario import EpisodePlan, record

    suite = tmp_path / "suite"
    runs = suite / "runs" / "benign"
    context = FaultContext(workdir)
    record(runs / "baseline1", 25.0, 0.1, [], context, lambda m: None)
    recorded = record(runs / "run1", 20.0, 0.1, [EpisodePlan("cron_burst", "default", 8.0,
                                                              10.0)], context, lambda m: None)
    assert [e.kind for e in recorded.episodes] == ["cron_burst"]
    out = tmp_path / "out"
    assert main(["validate", "--benign", "--reanalyse", str(suite), "--out", str(out),
                 "--quiet"]) == 0
    result = json.loads((out / "benign.json").read_text())
    assert result["schema"] == "reveal-validate-benign"
    [row] = result["rows"]
    assert row["kind"] == "cron_burst" and row["windows"] > 10
    assert 0 < row["windows_since"] < row["windows"]
    # the figures are the written report's, counted again here
    report = json.loads((out / "reports" / "run1.report.json").read_text())
    flagged = np.asarray(report["windows"]["flagged"], dtype=bool)
    since = np.asarray(report["windows"]["end_ns"]) > recorded.episodes[0].start_ns
    assert row["windows"] == flagged.size and row["flagged"] == int(flagged.sum())
    assert (row["windows_since"], row["flagged_since"]) == (int(since.sum()),
                                                            int((since & flagged).sum()))
    assert row["windows_before"] + row["windows_since"] == row["windows"]
    assert row["flagged_before"] + row["flagged_since"] == row["flagged"]
    assert row["report_episodes"] == len(report["episodes"])
    total = result["total"]
    assert total["runs"] == 1 and total["windows"] == row["windows"]
    assert total["flag_share"] == round(row["flagged"] / row["windows"], 4)
    assert result["met"]["flag_share"] == (total["flag_share"] <= result["targets"]["flag_share"])
    assert "cron_burst" in (out / "benign.md").read_text()
    assert not (runs / "run1.report.json").exists()  # the recorded suite is left alone
    capsys.readouterr()
