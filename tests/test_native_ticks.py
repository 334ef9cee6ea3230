"""Ticks taken by the C thread (``_procread.Ticker``): same rows as the Python loop, on
the grid, missed ticks counted, plans that stop fitting re-discovered, refresh between
ticks, and the per-tick Python loop where a probe needs it.

Everything reads real files: /proc, perf_event_open software counters, and small files
the tests rewrite while the thread reads them.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from reveal.collect import _procfs
from reveal.collect._procfs import FileProbe, GroupSpec, Source, key_value_layout
from reveal.collect.cpu import CpuProbe
from reveal.collect.memory import MemoryProbe
from reveal.collect.perf import PerfProbe
from reveal.collect.probe import NativePart, ProbeUnavailable
from reveal.collect.sampler import DRAIN_S, SELF_CHANNELS, MemorySink, Sampler

native = _procfs._procread
pytestmark = [pytest.mark.skipif(native is None or not hasattr(native, "Ticker"),
                                 reason="C extension reveal.collect._procread not built"),
              pytest.mark.usefixtures("native_on")]

INTERVAL_S = 0.05


class KeyValueProbe(FileProbe):
    """``key value`` lines of one file the test rewrites."""

    name = "test_kv"

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def plan(self) -> dict[str, Any]:
        return {"kv": GroupSpec((Source(str(self.path), lambda d: key_value_layout(d, "kv.")),))}


class PythonOnlyProbe(KeyValueProbe):
    """The same file, but declaring that it needs Python on every tick."""

    name = "test_kv_python"

    def native_parts(self) -> list[NativePart] | None:
        return None


class TurnsPythonProbe(KeyValueProbe):
    """Native until ``python_after`` is set, then needs Python each tick."""

    name = "test_kv_turns"
    python_after = threading.Event()

    def native_parts(self) -> list[NativePart] | None:
        return None if self.python_after.is_set() else super().native_parts()


def _opened(probe: Any) -> Any:
    probe.open()
    return probe


def _rows(sink: MemorySink) -> tuple[list[str], np.ndarray, np.ndarray]:
    channels, ts, rows = sink.parts[-1]
    return channels, np.asarray(ts), np.asarray(rows)


def _buffers(capacity: int, width: int) -> tuple[np.ndarray, ...]:
    """Arrays for ``Ticker.drain``: ts, rows, latency, lag, missed."""
    return (np.zeros(capacity, np.int64), np.zeros((capacity, width)), np.zeros(capacity),
            np.zeros(capacity), np.zeros(capacity, np.int64))


def _stop_after(seconds: float) -> Any:
    end = time.monotonic() + seconds
    return lambda: time.monotonic() >= end


def test_real_probes_run_in_c_on_the_grid_with_the_python_loops_channels() -> None:
    probes = [_opened(CpuProbe()), _opened(MemoryProbe())]
    try:
        sampler = Sampler(probes, INTERVAL_S, refresh_s=0.4, self_channels=True)
        sink = MemorySink(sampler.channels)
        sampler.run(sink, duration_s=1.5)
        assert sampler.mode == "native"
        channels, ts, rows = _rows(sink)
        assert channels == sampler.channels and channels[-3:] == list(SELF_CHANNELS)
        n = len(ts)
        assert 27 <= n + sampler.stats.missed_ticks <= 30
        assert sampler.stats.samples == n
        # on the grid: each tick within a few ms after start + k * interval
        k = np.rint((ts - sampler.start_ns) / (INTERVAL_S * 1e9))
        lag = (ts - sampler.start_ns - k * INTERVAL_S * 1e9) / 1e9
        assert np.all(lag >= 0) and np.median(lag) < 0.01
        assert np.all(np.diff(k) >= 1)  # never a tick twice, never a burst
        np.testing.assert_allclose(rows[:, -2], lag, atol=2e-3)  # recorded lag
        assert np.all(rows[:, -3] > 0)  # read latency
        # cumulative CPU jiffies never go back; memory totals are there every tick
        jiffies = rows[:, [channels.index(f"cpu.{f}") for f in ("user", "nice", "system",
                                                                "idle", "iowait")]].sum(1)
        assert np.all(np.diff(jiffies) >= 0) and jiffies[-1] > jiffies[0]
        assert np.isfinite(rows[:, channels.index("mem.MemTotal")]).all()
        # the same channels as the per-tick Python loop would give
        python = Sampler(probes, INTERVAL_S, self_channels=True)
        python.native_ticks = False
        psink = MemorySink(python.channels)
        python.run(psink, duration_s=0.3)
        assert python.mode == "python"
        pchannels, _, prows = _rows(psink)
        assert pchannels == channels
        assert np.array_equal(np.isfinite(prows[:, :-3]).all(0), np.isfinite(rows[:, :-3]).all(0))
    finally:
        for probe in probes:
            probe.close()


def test_perf_groups_read_what_the_probe_reads() -> None:
    probe = PerfProbe()
    try:
        probe.open()
    except ProbeUnavailable as exc:
        pytest.skip(str(exc))
    try:
        parts = probe.native_parts()
        assert parts is not None and len(parts) == 1
        reader = parts[0].reader
        assert reader.nout() == len(probe.channels)
        before, by_c, after = (np.empty(len(probe.channels)) for _ in range(3))
        probe.read(before)
        reader.read(by_c)
        probe.read(after)
        ok = np.isfinite(before)
        assert ok.any()
        assert np.array_equal(ok, np.isfinite(by_c))
        # counters: the C read lies between two Python reads of the same groups
        assert np.all(before[ok] <= by_c[ok]) and np.all(by_c[ok] <= after[ok])
        with pytest.raises(ValueError):
            reader.read(np.empty(len(probe.channels) + 1))
    finally:
        probe.close()


def test_perf_groups_give_raw_words_and_nan_when_a_group_read_fails(tmp_path: Path) -> None:
    # a pipe stands in for a perf fd: it returns the bytes written to it, in one read each
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    try:
        # channels: two counts and enabled/running of group 1, the count of group 2
        groups = native.PerfGroups([(r1, 40), (r2, 32)], [3, 4, 1, 2, 8])
        words1 = np.array([2, 1000, 250, 7, 40], dtype=np.uint64)  # ran a quarter of the time
        words2 = np.array([1, 500, 0, 9], dtype=np.uint64)  # never ran
        os.write(w1, words1.tobytes())
        os.write(w2, words2.tobytes())
        out = np.empty(5)
        groups.read(out)
        assert out.tolist() == [7.0, 40.0, 1000.0, 250.0, 9.0]  # as read, never scaled
        os.write(w1, np.array([2, 2000, 1250, 2**60 + 1, 41], dtype=np.uint64).tobytes())
        os.write(w2, np.array([1, 500], dtype=np.uint64).tobytes())  # short read
        groups.read(out)
        assert out[:4].tolist() == [float(2**60 + 1), 41.0, 2000.0, 1250.0]
        assert np.isnan(out[4])
    finally:
        for fd in (r1, w1, r2, w2):
            os.close(fd)
    with pytest.raises(IndexError):
        native.PerfGroups([(0, 32)], [4])
    with pytest.raises(ValueError):
        native.PerfGroups([(0, 20)], [0])


def test_ticker_copies_constants_counts_missed_ticks_while_held_and_stops_at_end() -> None:
    values = np.array([1.5, 2.5])
    start = time.monotonic_ns()
    interval = int(INTERVAL_S * 1e9)
    ticker = native.Ticker([(values, 1)], 4, start, interval, 64, end_ns=start + 40 * interval)
    first, second = _buffers(64, 4), _buffers(64, 4)
    try:
        time.sleep(5.5 * INTERVAL_S)
        ticker.hold()  # the thread waits between ticks: those ticks are missed, not replayed
        time.sleep(6 * INTERVAL_S)
        n_held, _ = ticker.drain(*first)
        ticker.release()
        while not ticker.state()[2]:
            time.sleep(INTERVAL_S)
        n, failed = ticker.drain(*second)
    except BaseException:
        ticker.close()
        raise
    ticker.close()
    total = n_held + n
    ts, rows, _, _, missed = (np.concatenate([a[:n_held], b[:n]])
                              for a, b in zip(first, second, strict=True))
    _, skipped, finished = ticker.state()
    assert finished and failed == []
    assert 5 <= n_held <= 7
    assert skipped >= 4 and total + skipped == 40  # every tick of the run taken or missed
    assert np.all(rows[:total, 1:3] == values) and np.isnan(rows[:total, [0, 3]]).all()
    k = np.rint((ts[:total] - start) / interval)
    assert np.all(np.diff(k) >= 1) and k[-1] <= 39
    assert missed[total - 1] == skipped and np.all(np.diff(missed[:total]) >= 0)


def test_ticker_refuses_bad_items_and_unheld_changes() -> None:
    start = time.monotonic_ns()
    with pytest.raises(ValueError, match="outside the row"):
        native.Ticker([(np.zeros(3), 2)], 4, start, 10**8, 8)
    with pytest.raises(TypeError):
        native.Ticker([(np.zeros(3, dtype=np.int32), 0)], 4, start, 10**8, 8)
    with pytest.raises(ValueError):
        native.Ticker([], 4, start, 0, 8)
    ticker = native.Ticker([], 2, start, 10**8, 8)
    try:
        with pytest.raises(RuntimeError, match="hold"):
            ticker.set_items([], 2)
    finally:
        ticker.close()
    ticker.close()  # twice is fine


def test_a_plan_that_stops_fitting_is_nan_then_rediscovered_and_the_new_channel_recorded(
        tmp_path: Path) -> None:
    path = tmp_path / "kv"
    path.write_bytes(b"a 1\nb 2\n")
    probe = _opened(KeyValueProbe(path))
    assert probe.native_parts() is not None
    sampler = Sampler([probe], INTERVAL_S, refresh_s=0.5)
    sink = MemorySink(sampler.channels)

    def rewrite() -> None:
        time.sleep(0.8)
        path.write_bytes(b"a 3\nc 5\nb 4\n")  # a new key in the middle: the plan no longer fits

    writer = threading.Thread(target=rewrite)
    writer.start()
    sampler.run(sink, duration_s=3.5)
    writer.join()
    probe.close()
    assert sampler.mode == "native"
    assert sampler.stats.schema_changes == 1
    (old_channels, _, old_rows), (new_channels, _, new_rows) = sink.parts[0], sink.parts[-1]
    assert old_channels == ["kv.a", "kv.b"] and new_channels == ["kv.a", "kv.c", "kv.b"]
    old = np.asarray(old_rows)
    assert old[0].tolist() == [1.0, 2.0]
    after = old[np.isfinite(old).all(1)]
    assert set(map(tuple, after.tolist())) <= {(1.0, 2.0), (3.0, 4.0)}
    assert np.isnan(old).any(1).sum() <= 12  # NaN only until the next drain re-discovers
    new = np.asarray(new_rows)
    assert len(new) >= 5 and new.tolist() == [[3.0, 5.0, 4.0]] * len(new)


class FastAndSlowProbe(FileProbe):
    """Two files the test rewrites: ``fast`` read every tick, ``slow`` every 4 ticks."""

    name = "test_fast_slow"

    def __init__(self, fast: Path, slow: Path) -> None:
        super().__init__()
        self.fast, self.slow = fast, slow

    def plan(self) -> dict[str, Any]:
        return {"fast": GroupSpec((Source(str(self.fast), lambda d: key_value_layout(d, "f.")),)),
                "slow": GroupSpec((Source(str(self.slow), lambda d: key_value_layout(d, "s.")),),
                                  period_s=4 * INTERVAL_S)}


@pytest.mark.parametrize("in_c", [True, False])
def test_a_group_with_a_period_is_read_every_few_ticks_and_repeated_between(
        tmp_path: Path, in_c: bool) -> None:
    fast, slow = tmp_path / "fast", tmp_path / "slow"
    for path in (fast, slow):
        path.write_bytes(b"a 0\n")
    stop = threading.Event()

    def count() -> None:  # both files move every 5 ms, far faster than the ticks
        i = 0
        while not stop.wait(0.005):
            i += 1
            for path in (fast, slow):
                with open(path, "r+b") as handle:  # the probe's descriptors stay valid
                    handle.write(f"a {i:08d}\n".encode())

    writer = threading.Thread(target=count)
    writer.start()
    probe = _opened(FastAndSlowProbe(fast, slow))
    try:
        sampler = Sampler([probe], INTERVAL_S, refresh_s=10.0)
        sampler.native_ticks = in_c
        sink = MemorySink(sampler.channels)
        sampler.run(sink, duration_s=2.0)
    finally:
        stop.set()
        writer.join()
        probe.close()
    assert sampler.mode == ("native" if in_c else "python")
    channels, ts, rows = _rows(sink)
    assert channels == ["f.a", "s.a"] and np.isfinite(rows).all()
    n = len(ts)
    fast_changes = int((np.diff(rows[:, 0]) != 0).sum())
    slow_changes = int((np.diff(rows[:, 1]) != 0).sum())
    assert fast_changes >= n - 3  # read every tick
    assert n / 4 - 3 <= slow_changes <= n / 4 + 2  # one read in four ticks
    # between its reads the slow channel repeats its last value: it never runs ahead of
    # the fast one read at the same tick
    assert np.all(rows[:, 1] <= rows[:, 0])


def test_a_probe_that_needs_python_keeps_the_python_loop(tmp_path: Path) -> None:
    path = tmp_path / "kv"
    path.write_bytes(b"a 1\n")
    probes = [_opened(KeyValueProbe(path)), _opened(PythonOnlyProbe(path))]
    sampler = Sampler(probes, INTERVAL_S)
    sink = MemorySink(sampler.channels)
    sampler.run(sink, duration_s=0.3)
    assert sampler.mode == "python"
    assert np.asarray(sink.parts[-1][2]).tolist() == [[1.0, 1.0]] * len(sink.parts[-1][1])


def test_switch_to_python_mid_run_goes_on_from_the_next_tick(tmp_path: Path) -> None:
    path = tmp_path / "kv"
    path.write_bytes(b"a 1\n")
    TurnsPythonProbe.python_after.clear()
    probe = _opened(TurnsPythonProbe(path))
    sampler = Sampler([probe], INTERVAL_S, refresh_s=0.3)
    sink = MemorySink(sampler.channels)
    timer = threading.Timer(1.2, TurnsPythonProbe.python_after.set)
    timer.start()
    sampler.run(sink, duration_s=3.0)
    timer.join()
    probe.close()
    assert sampler.mode == "python"
    ts = np.asarray(sink.parts[-1][1])
    k = np.rint((ts - sampler.start_ns) / (INTERVAL_S * 1e9))
    assert np.all(np.diff(k) >= 1)  # no tick twice across the switch
    assert len(ts) + sampler.stats.missed_ticks == 60
    assert sampler.stats.missed_ticks <= 3


def test_stop_request_ends_within_a_drain_with_every_tick_taken_delivered(
        tmp_path: Path) -> None:
    path = tmp_path / "kv"
    path.write_bytes(b"a 1\n")
    probe = _opened(KeyValueProbe(path))
    sampler = Sampler([probe], INTERVAL_S)
    sink = MemorySink(sampler.channels)
    began = time.monotonic()
    sampler.run(sink, _stop_after(0.72))
    took = time.monotonic() - began
    probe.close()
    assert sampler.mode == "native"
    assert took < 0.72 + DRAIN_S + 0.3  # noticed at the next drain
    n = len(sink.parts[-1][1])
    assert sampler.stats.samples == n  # every tick taken reached the sink
    assert 12 <= n + sampler.stats.missed_ticks <= took / INTERVAL_S + 1


def _ticks_thread() -> int:
    for tid in os.listdir("/proc/self/task"):
        if Path(f"/proc/self/task/{tid}/comm").read_text().strip() == "reveal-ticks":
            return int(tid)
    raise AssertionError("no reveal-ticks thread")


@pytest.mark.parametrize("priority", [1, 0])
def test_ticks_thread_runs_fifo_where_permitted_and_says_so(priority: int) -> None:
    ticker = native.Ticker([], 0, time.monotonic_ns(), 10**8, 8, priority=priority)
    try:
        deadline = time.monotonic() + 5
        while ticker.realtime() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        granted = ticker.realtime()
        policy = os.sched_getscheduler(_ticks_thread())
    finally:
        ticker.close()
    assert granted == (policy == os.SCHED_FIFO)
    if priority == 0:
        assert granted is False and policy == os.SCHED_OTHER
    elif os.geteuid() == 0:
        assert granted is True  # root may: CAP_SYS_NICE


def test_collector_records_how_its_ticks_were_taken(tmp_path: Path) -> None:
    from reveal.collect.runner import CollectOptions, Collector

    collector = Collector(CollectOptions(out=tmp_path / "run", duration_s=1.5,
                                         include=["cpu", "memory"], realtime=False))
    collector.open()
    result = collector.run()
    stats = result.meta["stats"]
    assert stats["ticks_taken_by"] == "c-thread" and stats["ticks_realtime"] is False


def test_switch_to_python_in_the_refresh_that_changes_the_channel_count(
        tmp_path: Path) -> None:
    """A refresh that adds a channel in the same step as a probe starts needing Python:
    recording goes on in Python with the new channels, and no tick is lost or repeated."""
    path = tmp_path / "kv"
    path.write_bytes(b"a 1\n")
    TurnsPythonProbe.python_after.clear()
    probe = _opened(TurnsPythonProbe(path))
    sampler = Sampler([probe], INTERVAL_S, refresh_s=0.3)
    sink = MemorySink(sampler.channels)

    def change_both() -> None:
        path.write_bytes(b"a 1\nb 2\n")
        TurnsPythonProbe.python_after.set()

    timer = threading.Timer(1.2, change_both)
    timer.start()
    sampler.run(sink, duration_s=3.0)
    timer.join()
    probe.close()
    assert sampler.mode == "python"
    assert [part[0] for part in sink.parts] == [["kv.a"], ["kv.a", "kv.b"]]
    before, after = (np.asarray(part[2]) for part in sink.parts)
    assert before.shape[1] == 1 and after.shape[1] == 2
    assert after[-1].tolist() == [1.0, 2.0]
    ts = np.concatenate([np.asarray(part[1]) for part in sink.parts])
    k = np.rint((ts - sampler.start_ns) / (INTERVAL_S * 1e9))
    assert np.all(np.diff(k) >= 1)  # no tick twice across the switch
    assert len(ts) + sampler.stats.missed_ticks == 60
