"""The perf probe against the real perf_event_open system call."""

from __future__ import annotations

import errno
import mmap
import os
import threading
from pathlib import Path

import numpy as np
import pytest

from reveal.collect.perf import (
    HARDWARE_GROUPS,
    PERF_TYPE_SOFTWARE,
    PerfEvent,
    PerfProbe,
    perf_event_open,
    scale_counts,
)
from reveal.collect.probe import ProbeUnavailable


@pytest.fixture
def probe():
    p = PerfProbe()
    try:
        p.open()
    except ProbeUnavailable as exc:
        pytest.skip(f"perf_event_open not permitted here: {exc}")
    yield p
    p.close()


def _sum(probe: PerfProbe, values: np.ndarray, metric: str) -> float:
    idx = [i for i, c in enumerate(probe.channels) if c.startswith(metric + "{")]
    assert idx, f"no {metric} channel in {probe.channels}"
    return float(values[idx].sum())


def _read(probe: PerfProbe) -> np.ndarray:
    out = np.full(len(probe.channels), -1.0)
    probe.read(out)
    return out


def test_software_events_count_real_context_switches_and_faults(probe):
    before = _read(probe)
    # Two threads handing a token back and forth through pipes: every hand-over blocks
    # one thread and wakes the other, i.e. at least one context switch each way.
    rounds = 300
    a_r, a_w = os.pipe()
    b_r, b_w = os.pipe()

    def echo() -> None:
        for _ in range(rounds):
            os.write(b_w, os.read(a_r, 1))

    thread = threading.Thread(target=echo)
    thread.start()
    for _ in range(rounds):
        os.write(a_w, b"x")
        os.read(b_r, 1)
    thread.join()
    for fd in (a_r, a_w, b_r, b_w):
        os.close(fd)
    # Touch 32 MiB of fresh anonymous memory: one minor fault per 4 KiB page at least
    # (huge pages may fold them, so ask for a fraction).
    pages = 8192
    with mmap.mmap(-1, pages * mmap.PAGESIZE) as region:
        for i in range(0, pages * mmap.PAGESIZE, mmap.PAGESIZE):
            region[i] = 1
    after = _read(probe)
    delta = after - before
    assert np.isfinite(after).all()
    assert _sum(probe, delta, "perf.context_switches") >= rounds
    assert _sum(probe, delta, "perf.minor_faults") >= pages // 8
    assert _sum(probe, delta, "perf.page_faults") >= _sum(probe, delta, "perf.minor_faults")
    # The task clock of each CPU advances with wall time (system-wide counting).
    assert _sum(probe, delta, "perf.task_clock") > 0
    assert (delta >= 0).all()


def test_channels_are_per_cpu_counters(probe):
    cpus = {c.split("cpu=")[1].rstrip("}") for c in probe.channels}
    assert cpus == {str(c) for c in range(len(cpus))} or len(cpus) >= 1
    assert len(probe.channels) == len(set(probe.channels))
    for metric in ("perf.context_switches", "perf.cpu_migrations", "perf.page_faults",
                   "perf.minor_faults", "perf.major_faults", "perf.task_clock"):
        assert sum(c.startswith(metric + "{") for c in probe.channels) == len(cpus)


def test_hardware_events_degrade_with_a_listed_reason(probe):
    hardware = [e.metric.removeprefix("perf.") for group in HARDWARE_GROUPS for e in group]
    unsupported = probe.info["unsupported_events"]
    assert len(unsupported) == len(set(unsupported))  # listed once, not per CPU
    if not Path("/sys/bus/event_source/devices/cpu").exists():
        # No core PMU (this VM): every hardware event refused, the probe says so and why.
        assert set(hardware) <= set(unsupported)
        assert probe.status == "degraded"
        assert "PMU" in probe.reason and "cycles" in probe.reason
        assert not any(c.startswith("perf.cycles") for c in probe.channels)
    else:
        assert any(c.startswith("perf.cycles") for c in probe.channels)
        assert (probe.status == "degraded") == bool(unsupported)
    for name in unsupported:
        assert not any(c.startswith(f"perf.{name}{{") for c in probe.channels)


def test_refused_event_raises_oserror():
    bogus = PerfEvent("perf.bogus", PERF_TYPE_SOFTWARE, 0xFFFF)
    with pytest.raises(OSError) as info:
        perf_event_open(bogus, 0)
    assert info.value.errno in (errno.ENOENT, errno.EINVAL, errno.EOPNOTSUPP, errno.EACCES)


def test_refresh_without_hotplug_keeps_channels(probe):
    channels = list(probe.channels)
    assert probe.refresh() is False
    assert probe.channels == channels


def test_multiplexed_counts_are_scaled_and_unscheduled_are_nan():
    values = np.array([100.0, 100.0, 7.0, 0.0])
    enabled = np.array([1000.0, 1000.0, 1000.0, 1000.0])
    running = np.array([1000.0, 250.0, 333.0, 0.0])
    scaled = scale_counts(values, enabled, running)
    assert scaled[0] == 100.0  # ran the whole time: the count as read
    assert scaled[1] == 400.0  # ran a quarter of the time: ×4
    assert scaled[2] == np.rint(7.0 * 1000.0 / 333.0)  # estimates are whole counts
    assert np.isnan(scaled[3])  # never scheduled: unknown, not zero


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def test_counters_read_on_their_own_cpu_match_direct_reads(probe):
    """On the sampler's grid, pinned threads read each CPU's group on that CPU: the values
    agree with direct reads taken around them, keep counting, and the threads go away on
    close."""
    import time

    pytest.importorskip("reveal.collect._procread")
    direct_before = _read(probe)
    threads = _threads()
    interval = 50_000_000
    start = time.monotonic_ns()
    probe.schedule(start, interval)
    if not probe.info.get("read_on_cpu"):
        pytest.skip("no CPU accepted a pinned thread here")
    assert set(probe.info["read_on_cpu"]) <= set(probe._cpus)
    assert _threads() == threads + len(probe.info["read_on_cpu"])
    series = []
    for k in range(1, 6):
        time.sleep(max(0, start + k * interval + 2_000_000 - time.monotonic_ns()) / 1e9)
        series.append(_read(probe))
    direct_after = _read(probe)
    probe._stop_local()  # direct reads from here on
    direct_last = _read(probe)
    assert _threads() == threads
    values = np.array(series)
    clock = [i for i, c in enumerate(probe.channels) if c.startswith("perf.task_clock{")]
    assert np.isfinite(values).all()
    assert (np.diff(values, axis=0) >= 0).all()  # cumulative counts never go back
    assert (values[0] >= direct_before).all() and (values[-1] <= direct_last).all()
    # each tick's task clock advanced by about one interval per CPU (read at the tick)
    steps = np.diff(values[:, clock], axis=0)
    assert np.median(steps) == pytest.approx(interval, rel=0.2)
    assert (direct_after[clock] >= values[-1][clock]).all()


def test_local_reads_fall_back_to_direct_reads_when_a_tick_is_not_posted(probe):
    """Asked for a tick the threads have not reached (the grid starts in the future),
    every group is read directly: values are fresh, not stale copies."""
    import time

    pytest.importorskip("reveal.collect._procread")
    probe.schedule(time.monotonic_ns() + 10 * 10**9, 10**9)
    first = _read(probe)
    second = _read(probe)
    clock = [i for i, c in enumerate(probe.channels) if c.startswith("perf.task_clock{")]
    assert np.isfinite(first).all()
    assert (second[clock] > first[clock]).all()
    probe.close()
