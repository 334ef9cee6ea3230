"""The perf probe against the real perf_event_open system call."""

from __future__ import annotations

import errno
import mmap
import os
import struct
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from reveal.analysis.derive import derive
from reveal.catalog import (
    TIME_ENABLED_METRIC,
    TIME_RUNNING_METRIC,
    Catalog,
    MetricInfo,
    default_catalog,
)
from reveal.collect.perf import (
    HARDWARE_GROUPS,
    PERF_TYPE_SOFTWARE,
    SOFTWARE_GROUP,
    TASK_CLOCK,
    PerfEvent,
    PerfProbe,
    perf_event_open,
)
from reveal.collect.probe import ProbeUnavailable
from reveal.frame import Telemetry, parse_channel


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
    cpus = {parse_channel(c)[1]["cpu"] for c in probe.channels}
    assert cpus == {str(c) for c in probe._cpus}
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


def _columns(probe: PerfProbe, metric: str) -> list[int]:
    return [i for i, c in enumerate(probe.channels) if c.startswith(metric + "{")]


def test_counts_are_stored_raw_beside_each_groups_enabled_and_running_times(probe):
    """Raw counts never decrease; every opened group has its time enabled and time running
    per CPU, both advancing with wall time (system-wide software groups are never
    multiplexed here: running equals enabled)."""
    rows = []
    for _ in range(6):
        rows.append(_read(probe))
        os.sched_yield()
        time.sleep(0.03)
    values = np.array(rows)
    assert np.isfinite(values).all()
    assert (values == np.rint(values)).all()  # whole counts and nanoseconds, as read
    assert (np.diff(values, axis=0) >= 0).all()
    enabled, running = _columns(probe, TIME_ENABLED_METRIC), _columns(probe, TIME_RUNNING_METRIC)
    cpus = {parse_channel(c)[1]["cpu"] for c in probe.channels}
    groups = {(parse_channel(probe.channels[i])[1]["cpu"],
               parse_channel(probe.channels[i])[1]["group"]) for i in enabled}
    assert groups == {(cpu, "software") for cpu in cpus} | {
        (str(g.cpu), g.name) for g in probe._groups}
    assert [probe.channels[i].replace("enabled", "running") for i in enabled] == \
        [probe.channels[i] for i in running]
    steps = np.diff(values[:, enabled], axis=0)
    assert (steps > 0).all() and np.median(steps) > 10_000_000  # ≥ 10 ms of 30 ms sleeps
    assert np.array_equal(values[:, running], values[:, enabled])
    # the task clock is the software group's time enabled, per CPU
    clock = _columns(probe, TASK_CLOCK.metric)
    software = [i for i in enabled if "group=software" in probe.channels[i]]
    assert np.array_equal(values[:, clock], values[:, software])


def test_catalog_names_each_event_group_and_knows_every_channel(probe):
    catalog = default_catalog()
    for group in (SOFTWARE_GROUP, *HARDWARE_GROUPS):
        for event in group:
            assert catalog.lookup(event.metric).multiplex_group == group.name
    for channel in probe.channels:
        metric = parse_channel(channel)[0]
        assert metric in catalog and catalog.lookup(metric).kind == "counter"
    assert catalog.lookup(TIME_ENABLED_METRIC).unit == "ns"
    assert catalog.lookup(TIME_RUNNING_METRIC).unit == "ns"


def test_a_failed_group_read_is_nan_for_that_group_only(probe):
    """A group whose read comes back short is NaN (counts and times), in Python and in C;
    the other groups keep their values."""
    with open(os.devnull, "rb") as empty:  # reads 0 bytes
        victim = probe._groups[0]
        leader, victim.fd = victim.fd, empty.fileno()
        try:
            out = _read(probe)
            parts = probe.native_parts()
            by_c = np.full(len(probe.channels), -1.0)
            if parts:
                parts[0].reader.read(by_c)
        finally:
            victim.fd = leader
    cpu = str(victim.cpu)
    mine = np.array([parse_channel(c)[1]["cpu"] == cpu
                     and parse_channel(c)[1].get("group", victim.name) == victim.name
                     and (parse_channel(c)[0] in {e.metric for e in victim.events}
                          | {TIME_ENABLED_METRIC, TIME_RUNNING_METRIC, TASK_CLOCK.metric})
                     for c in probe.channels])
    assert mine.any() and (~mine).any()
    assert np.isnan(out[mine]).all() and np.isfinite(out[~mine]).all()
    if parts:
        assert np.array_equal(np.isnan(by_c), mine)
    assert np.isfinite(_read(probe)).all()  # the next tick reads it again


def _read_group(fd: int, members: int) -> tuple[int, int, list[int]]:
    words = struct.unpack(f"{3 + members}Q", os.read(fd, 8 * (3 + members)))
    return words[1], words[2], list(words[3:])


def _spin(cpu: int, seconds: float) -> None:
    os.sched_setaffinity(0, {cpu})
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_real_running_below_enabled_is_scaled_to_the_true_rate_at_analysis():
    """Software events never multiplex, but the kernel's time running falls below time
    enabled the same way for this thread's task clock counted only on CPU 0: while the
    thread runs on CPU 1 the group is enabled and not counting. Stored raw, derive scales
    each interval back to the thread's CPU time (CLOCK_THREAD_CPUTIME_ID); an interval
    spent wholly on CPU 1 is NaN, and nothing reads as a reset."""
    allowed = os.sched_getaffinity(0)
    if not {0, 1} <= allowed:
        pytest.skip("needs CPUs 0 and 1")
    try:
        leader = perf_event_open(TASK_CLOCK, 0, pid=0)
    except OSError as exc:
        pytest.skip(f"perf_event_open refused a per-thread event: {exc}")
    # share of each 60 ms interval spent on CPU 0 (the rest on CPU 1), twice over
    shares = [1.0, 0.5, 0.0, 0.25, 0.75, 0.0, 1.0] * 2
    rows, ts, cpu_time = [], [], []
    try:
        def sample() -> None:
            ts.append(time.monotonic_ns())
            cpu_time.append(time.thread_time_ns())
            enabled, running, (count,) = _read_group(leader, 1)
            rows.append([count, enabled, running])

        _spin(0, 0.01)
        sample()
        for share in shares:
            if share:
                _spin(0, 0.06 * share)
            if share < 1:
                _spin(1, 0.06 * (1 - share))
            sample()
    finally:
        os.sched_setaffinity(0, allowed)
        os.close(leader)
    raw = np.array(rows, dtype=np.float64)
    assert (raw[:, 2] < raw[:, 1]).any()  # the kernel reported running < enabled
    channels = ["perf.thread_clock{cpu=0}", f"{TIME_ENABLED_METRIC}{{cpu=0,group=own}}",
                f"{TIME_RUNNING_METRIC}{{cpu=0,group=own}}"]
    catalog = Catalog([MetricInfo("perf.thread_clock", "cpu", "counter", "ns",
                                  multiplex_group="own"),
                       MetricInfo("perf.time_*", "cpu", "counter", "ns")])
    tel = Telemetry("h", np.array(ts, dtype=np.int64), raw, channels)
    rated, report = derive(tel, catalog)
    rate = rated.column(channels[0])
    truth = np.diff(cpu_time) / (np.diff(ts) / 1e9)  # this thread's CPU ns per second
    # judged by counts: on a busy host another task may hold CPU 0 through a short slice
    counted = np.array(shares) > 0
    assert np.isnan(rate[~counted]).mean() >= 0.75  # wholly on CPU 1: not counted
    close = np.isclose(rate[counted], truth[counted], rtol=0.1)
    assert close.mean() >= 0.75, (rate[counted], truth[counted])
    assert not report.resets
    assert report.not_counted == {channels[0]: int(np.isnan(rate).sum())}
    assert report.multiplexed.get(channels[0], 0) >= 2  # the split intervals were scaled up


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
