"""The faults that hold or hide: the job hung (stopped), a slow memory leak, OOM kills.
Each runs for real on this host (root, cgroups) and is checked by what the kernel says."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from reveal.inject.faults import FaultContext, make_fault, run_episode
from reveal.inject.groundtruth import EventLog, load_episodes
from reveal.inject.jobcgroup import JobCgroup

pytestmark = pytest.mark.root
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (cgroups, signals)")


def _vmstat(name: str) -> int:
    for line in Path("/proc/vmstat").read_text().splitlines():
        key, _, value = line.partition(" ")
        if key == name:
            return int(value)
    raise KeyError(name)


def _cpu_seconds(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


@needs_root
@pytest.mark.parametrize(("intensity", "least", "most"), [("high", 0.0, 0.15),
                                                          ("low", 0.2, 0.8)])
def test_a_hung_job_stops_using_cpu_and_runs_again_after(
        workdir: Path, intensity: str, least: float, most: float) -> None:
    """High: the job's busy process gets no CPU while it is stopped; low: about half of
    each second; after the fault it runs again (continued, not left stopped). The share is
    the job's CPU time over that of a like busy process outside the fault in the same span,
    so that other work on the host slows both alike (each in a cgroup of its own, as the
    scheduler shares CPU time between groups first)."""
    cgroup, aside = JobCgroup().create(), JobCgroup("aside").create()
    busy = [sys.executable, "-c", "while True: pass"]
    proc = subprocess.Popen(busy)
    reference = subprocess.Popen(busy)
    try:
        cgroup.add(proc.pid)
        aside.add(reference.pid)
        job, beside = psutil.Process(proc.pid), psutil.Process(reference.pid)
        fault = make_fault("job_hang", intensity, FaultContext(workdir))
        if fault.check():
            pytest.skip(fault.check())
        time.sleep(0.3)
        before, beside_before = _cpu_seconds(job), _cpu_seconds(beside)
        run_episode(fault, 3.0, EventLog(workdir))
        used = _cpu_seconds(job) - before
        could = _cpu_seconds(beside) - beside_before
        assert job.status() != psutil.STATUS_STOPPED
        after = _cpu_seconds(job)
        time.sleep(1.0)
        assert _cpu_seconds(job) - after > 0.1  # running again (on a shared host)
        assert could > 0.3, could  # the reference ran: the span says something
        # the share the job got while the fault held, of what a like process got beside it
        assert least <= used / could <= most, (used, could)
        [episode] = load_episodes(workdir)
        assert episode.kind == "job_hang" and episode.subsystem == "cpu"
        assert episode.detail["processes"] == 1
        assert episode.detail["where"] == [cgroup.name]
    finally:
        for child in (proc, reference):
            child.kill()
            child.wait()
        cgroup.close()
        aside.close()


def test_a_memory_leak_grows_at_its_rate_and_is_freed_after(workdir: Path) -> None:
    fault = make_fault("memory_leak", "high", FaultContext(workdir))
    result: dict[str, object] = {}
    thread = threading.Thread(target=lambda: result.update(
        episode=run_episode(fault, 4.0, EventLog(workdir))))
    thread.start()
    time.sleep(1.0)
    [leaker] = [psutil.Process(p.pid) for p in fault.procs]
    first = leaker.memory_info().rss
    time.sleep(2.0)
    grown = leaker.memory_info().rss - first
    thread.join()
    rate = fault.params["rate_bytes_per_s"]
    # two seconds at 15 MB/s, judged loosely on a shared host (a late step, a slow start)
    assert 0.8 * rate <= grown <= 3.0 * rate, grown
    assert not leaker.is_running()
    assert result["episode"].detail["max_bytes_used"] <= 4 << 30  # type: ignore[attr-defined]


@needs_root
def test_oom_kills_are_real_kernel_kills_and_leave_no_cgroup(workdir: Path) -> None:
    fault = make_fault("oom_kill", "high", FaultContext(workdir))
    if fault.check():
        pytest.skip(fault.check())
    before = _vmstat("oom_kill")
    episode = run_episode(fault, 12.0, EventLog(workdir))
    assert episode.detail["killed"] == 3
    assert _vmstat("oom_kill") - before >= 3  # another process on the host may be killed too
    where = episode.detail["where"][0]
    assert where.startswith(f"rvinj-{os.getpid()}-")
    assert not list(Path("/sys/fs/cgroup").glob(f"*/{where}"))
    assert not list(Path("/sys/fs/cgroup").glob(where))


@needs_root
def test_a_swap_thrash_swaps_the_jobs_pages_and_leaves_no_swap_or_cgroup(
        workdir: Path) -> None:
    """The job's process, held below its working set, is swapped out and in, pass after
    pass (the kernel's swap counters say so: its overflow went out, and pages still came
    back in the second half of the fault, however slowly a busy host let it start); after
    the fault no swap area, file or cgroup of this process is left, and a host with no swap
    has none again."""
    from reveal.inject.cleanup import active_swaps

    fault = make_fault("swap_thrash", "low", FaultContext(workdir))
    if fault.check():
        pytest.skip(fault.check())
    had = active_swaps()
    seconds = 10.0
    result: dict[str, object] = {}
    thread = threading.Thread(target=lambda: result.update(
        episode=run_episode(fault, seconds, EventLog(workdir))))
    began = time.monotonic()
    samples = [(0.0, _vmstat("pswpin"), _vmstat("pswpout"), active_swaps())]
    thread.start()
    while thread.is_alive():
        time.sleep(0.25)
        samples.append((time.monotonic() - began, _vmstat("pswpin"), _vmstat("pswpout"),
                        active_swaps()))
    thread.join()
    episode = result["episode"]
    assert episode.kind == "swap_thrash" and episode.subsystem == "memory"  # type: ignore[attr-defined]
    detail = episode.detail  # type: ignore[attr-defined]
    made = detail["swap_file"]
    assert (made is None) == bool(had)
    if made is not None:
        assert Path(made).name.startswith(f"rvinj-{os.getpid()}-")
        assert any(made in swaps for *_, swaps in samples)
    # the working set's overflow went out, and pages kept coming back in late in the fault
    overflow = (detail["working_bytes"] - detail["limit_bytes"]) // 4096
    during = [s for s in samples if s[0] <= seconds]
    assert during[-1][2] - samples[0][2] >= overflow, (overflow, during[-1], samples[0])
    half = next(s for s in during if s[0] >= seconds / 2)
    assert during[-1][1] > half[1], (half, during[-1])
    assert active_swaps() == had
    assert made is None or not Path(made).exists()
    where = detail["where"][0]
    assert not list(Path("/sys/fs/cgroup").glob(f"*/{where}"))
    assert not list(Path("/sys/fs/cgroup").glob(where))


@needs_root
def test_a_swap_file_left_by_a_killed_suite_is_switched_off_and_deleted() -> None:
    from reveal.inject.cleanup import SWAPFILE_SUFFIX, active_swaps, remove_leftovers
    from reveal.inject.naming import owned_name, temp_root

    gone = subprocess.Popen(["true"])
    gone.wait()  # a suite process that is no more
    path = temp_root() / (owned_name("swap", pid=gone.pid) + SWAPFILE_SUFFIX)
    with open(path, "wb") as handle:
        os.posix_fallocate(handle.fileno(), 0, 16 << 20)
    path.chmod(0o600)
    try:
        subprocess.run(["mkswap", str(path)], check=True, capture_output=True)
        subprocess.run(["swapon", str(path)], check=True, capture_output=True)
        assert str(path) in active_swaps()
        removed = remove_leftovers()
        assert f"swap file {path} switched off" in removed and f"file {path}" in removed
        assert str(path) not in active_swaps() and not path.exists()
    finally:
        if str(path) in active_swaps():
            subprocess.run(["swapoff", str(path)], check=False)
        path.unlink(missing_ok=True)
