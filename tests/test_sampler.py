"""The sampler's schedule (drift-free, missed ticks skipped), failing probes, new channels.

The probes here are real probes reading real kernel files; the slow one really sleeps.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from reveal.collect.probe import Probe
from reveal.collect.sampler import SELF_CHANNELS, MemorySink, RecentValues, Sampler
from reveal.store.layout import META_FILE, write_json_atomic
from reveal.store.run_reader import read_run
from reveal.store.run_writer import base_meta
from reveal.store.segment_writer import SegmentWriter


class UptimeProbe(Probe):
    """``/proc/uptime``: seconds up and idle seconds summed over CPUs."""

    name = "test_uptime"

    def open(self) -> None:
        self._fd = os.open("/proc/uptime", os.O_RDONLY)
        self.channels = ["test.uptime_s", "test.idle_s"]

    def read(self, out: np.ndarray) -> None:
        out[:] = [float(v) for v in os.pread(self._fd, 128, 0).split()[:2]]

    def close(self) -> None:
        os.close(self._fd)


class SlowProbe(UptimeProbe):
    """Reads /proc/uptime, but every ``every``-th read takes ``delay_s`` seconds longer."""

    name = "test_slow"

    def __init__(self, delay_s: float, every: int) -> None:
        super().__init__()
        self.delay_s, self.every, self.reads = delay_s, every, 0

    def read(self, out: np.ndarray) -> None:
        self.reads += 1
        if self.reads % self.every == 0:
            time.sleep(self.delay_s)
        super().read(out)


class BrokenProbe(UptimeProbe):
    """Reads a file that vanished after open (as a hot-unplugged device's would)."""

    name = "test_broken"

    def read(self, out: np.ndarray) -> None:
        with open("/proc/reveal-no-such-file", "rb") as handle:
            out[:] = float(handle.read())


class GrowingProbe(UptimeProbe):
    """Gains a channel (``/proc/loadavg``'s 1-minute load) at the refresh after ``after_s``."""

    name = "test_growing"

    def __init__(self, after_s: float) -> None:
        super().__init__()
        self.after_s = after_s
        self.opened = 0.0
        self.grown = False

    def open(self) -> None:
        super().open()
        self.opened = time.monotonic()

    def refresh(self) -> bool:
        if not self.grown and time.monotonic() - self.opened >= self.after_s:
            self.grown = True
            self.channels = [*self.channels, "test.load1"]
            return True
        return False

    def read(self, out: np.ndarray) -> None:
        super().read(out[:2])
        if self.grown:
            with open("/proc/loadavg", "rb") as handle:
                out[2] = float(handle.read().split()[0])


def _opened(*probes: Probe) -> list[Probe]:
    for probe in probes:
        probe.open()
    return list(probes)


def test_ticks_stay_on_the_grid_without_drift():
    interval = 0.02
    sampler = Sampler(_opened(UptimeProbe()), interval_s=interval, self_channels=True)
    sink = MemorySink(sampler.channels)
    sampler.run(sink, duration_s=1.2)
    ts = np.array(sink.parts[0][1])
    rows = np.array(sink.parts[0][2])
    assert sampler.stats.samples + sampler.stats.missed_ticks == 60
    # Every sample's deadline (its time minus its recorded lag) is start + k * interval
    # exactly: lateness never carries over into the schedule, so there is no drift.
    lag_ns = np.rint(rows[:, -2] * 1e9)
    deadlines = ts - lag_ns
    k = (deadlines - sampler.start_ns) / (interval * 1e9)
    np.testing.assert_allclose(k, np.rint(k), atol=1e-5)
    assert (lag_ns >= 0).all() and (np.diff(k) >= 1).all()
    assert np.median(lag_ns) < 3e6  # taken within a few ms of the deadline
    assert np.all(np.diff(rows[:, 0]) >= 0)  # uptime really read each tick


def test_slow_reads_skip_ticks_and_never_burst():
    interval = 0.05
    probe = SlowProbe(delay_s=0.13, every=5)  # every 5th read overruns ~2.6 intervals
    sampler = Sampler(_opened(probe), interval_s=interval)
    sink = MemorySink(sampler.channels)
    sampler.run(sink, duration_s=2.0)
    ts = np.array(sink.parts[0][1])
    offsets = (ts - sampler.start_ns) / 1e9
    grid = np.rint(offsets / interval).astype(int)
    stats = sampler.stats
    assert stats.missed_ticks >= 6  # ~8 slow reads, each losing 2 ticks
    assert stats.samples + stats.missed_ticks == 40  # every deadline taken or counted
    assert len(set(grid)) == len(grid)  # one sample per grid slot
    gaps = np.diff(offsets)
    assert gaps.min() > interval / 2  # missed ticks are not replayed in a burst
    assert stats.latency_s.max >= 0.13


def test_a_failing_probe_is_reported_once_and_others_go_on():
    messages: list[tuple[str, str]] = []
    good, bad = UptimeProbe(), BrokenProbe()
    sampler = Sampler(_opened(good, bad), interval_s=0.01,
                      notify=lambda level, msg: messages.append((level, msg)))
    sink = MemorySink(sampler.channels)
    sampler.run(sink, duration_s=0.3)
    rows = np.array(sink.parts[0][2])
    assert len(rows) >= 20
    assert np.isfinite(rows[:, :2]).all()  # the good probe's slice
    assert np.isnan(rows[:, 2:]).all()  # the broken probe's slice
    assert len(messages) == 1 and "test_broken" in messages[0][1]
    assert sampler.stats.read_errors["test_broken"]["count"] == len(rows)
    assert "FileNotFoundError" in str(sampler.stats.read_errors["test_broken"]["first"])


def test_duplicate_channel_names_are_told_apart():
    sampler = Sampler(_opened(UptimeProbe(), SlowProbe(0.0, 10**9)), interval_s=0.1)
    assert len(set(sampler.channels)) == 4
    assert "test.uptime_s{probe=test_slow}" in sampler.channels


def test_self_channels_record_latency_lag_and_missed_ticks():
    sampler = Sampler(_opened(UptimeProbe()), interval_s=0.02, self_channels=True)
    sink = MemorySink(sampler.channels)
    sampler.run(sink, duration_s=0.3)
    assert sampler.channels[-3:] == list(SELF_CHANNELS)
    rows = np.array(sink.parts[0][2])
    assert (rows[:, -3] > 0).all() and (rows[:, -3] < 0.02).all()
    assert (rows[:, -2] >= 0).all()
    summary = sampler.stats.summary()
    assert summary["samples"] == len(rows) and summary["latency_ms_p99"] > 0


def test_channel_appearing_mid_run_starts_a_journal_nan_before(tmp_path):
    run = tmp_path / "run"
    probe = GrowingProbe(after_s=0.6)
    sampler = Sampler(_opened(UptimeProbe(), probe), interval_s=0.05, refresh_s=0.2)
    writer = SegmentWriter(run, sampler.channels, interval_s=0.05, background=False)
    write_json_atomic(run / META_FILE, base_meta("h", 0.05))
    sampler.run(writer, duration_s=1.5)
    assert sampler.stats.schema_changes == 1
    assert writer.journal_number == 2  # the new schema went to a new journal
    assert "test.load1" in writer.channels
    writer.close()
    tel = read_run(run)
    load = tel.column("test.load1")
    first_seen = int(np.argmax(np.isfinite(load)))
    assert 5 <= first_seen < len(load) - 5
    assert np.isnan(load[:first_seen]).all() and np.isfinite(load[first_seen:]).all()
    assert np.isfinite(tel.column("test.uptime_s{probe=test_growing}")).all()
    assert tel.n_samples == sampler.stats.samples


def test_bad_interval_is_refused():
    with pytest.raises(ValueError, match="interval"):
        Sampler([], interval_s=0)


@pytest.mark.parametrize("chunks", [(3, 5, 9), (17,), (1, 1, 40), (0, 4)])
def test_recent_values_add_many_keeps_what_add_keeps(chunks):
    one, many = RecentValues(size=8), RecentValues(size=8)
    rng = np.random.default_rng(len(chunks))
    for n in chunks:
        values = rng.normal(size=n)
        for v in values:
            one.add(float(v))
        many.add_many(values)
        assert many.max == one.max
        for q in (0.0, 0.5, 0.99, 1.0):
            assert many.quantile(q) == one.quantile(q) or np.isnan(one.quantile(q))
