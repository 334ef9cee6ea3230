"""The sampler: read every probe at a fixed rate into one row and hand it to a sink.

Ticks are scheduled on ``CLOCK_MONOTONIC`` at ``start + k * interval`` (no drift): the
sampler sleeps until the next deadline, reads every probe into its slice of one
preallocated float64 row, and passes the row to the sink (the segment writer). A read
stands for the grid slot nearest its start: slots that passed unread (a late wake-up, a
slow read) are skipped and counted, never replayed in a burst, and no two reads share a
slot. Every ``refresh_s`` the probes re-discover their channels; when the set
changes the row is rebuilt and the sink starts a new segment with the new schema. A probe
that hears its sources change (a cgroup made, a namespace mounted, an interface or qdisc
announced: :meth:`Probe.wants_refresh`, asked about once a second) brings the refresh
forward, and a second one follows :data:`SETTLE_S` later. A probe
whose ``read`` raises is reported once, its slice is NaN for that tick, and the others go
on (node_exporter's manner).

When every probe can be read by the C extension (``Probe.native_parts``), the ticks are
taken by a C thread (:class:`reveal.collect._procread.Ticker`) into a ring of rows, and
Python wakes only every ``DRAIN_S`` (a second) to drain them into the sink, flush it
and, between two ticks, refresh the probes. The thread asks for SCHED_FIFO (``realtime``)
so that busy tasks do not delay its ticks: the interpreter no longer wakes cold ten times
a second. A file group whose C plan stops fitting is NaN for those ticks and re-discovered
at the next drain; a probe that needs Python on every tick (eBPF) keeps the whole
sampler on the per-tick Python loop. ``REVEAL_NATIVE_TICKS=0`` always uses that loop.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from reveal.collect import _procfs
from reveal.collect.probe import Probe
from reveal.frame import format_channel, parse_channel

#: Channels the sampler adds about itself when ``self_channels`` is on.
SELF_CHANNELS = ("reveal.sample_latency_s", "reveal.tick_lag_s", "reveal.missed_ticks")

Notify = Callable[[str, str], None]  # (level, message)

#: Let a C thread take the ticks when every probe allows it (see the module docstring).
NATIVE_TICKS: bool = os.environ.get("REVEAL_NATIVE_TICKS", "1") != "0"
#: SCHED_FIFO priority of the C tick thread (the lowest real-time one: ahead of every
#: ordinary task, behind every other real-time one).
REALTIME_PRIORITY = 1
#: How often Python drains the C thread's rows and flushes the journal, seconds: a SIGKILL
#: loses at most this much (the segment writer's flush period).
DRAIN_S = 1.0
#: The Python tick loop asks the probes whether they want a refresh every this many ticks.
WANTED_EVERY = 10
#: After a refresh a probe asked for (a cgroup, namespace, interface or qdisc came or
#: went), one more this many seconds later: a container is set up in several steps (its
#: cgroup, its namespace, its links, its process moved in), and the last steps may come
#: after the first refresh without an announcement of their own.
SETTLE_S = 2.0


def _quiet(level: str, message: str) -> None:
    del level, message


class RowSink(Protocol):
    """Where rows go: :class:`reveal.store.segment_writer.SegmentWriter` or a memory sink."""

    def append(self, ts_ns: int, row: np.ndarray) -> None: ...

    def set_channels(self, channels: list[str]) -> None: ...


class MemorySink:
    """Keeps every row in memory (short recordings, tests); a new schema starts a new part."""

    def __init__(self, channels: list[str]) -> None:
        self.parts: list[tuple[list[str], list[int], list[np.ndarray]]] = [(list(channels), [],
                                                                             [])]

    def append(self, ts_ns: int, row: np.ndarray) -> None:
        self.parts[-1][1].append(ts_ns)
        self.parts[-1][2].append(row.copy())

    def set_channels(self, channels: list[str]) -> None:
        self.parts.append((list(channels), [], []))


class RecentValues:
    """The last ``size`` values of a per-tick measurement, for exact percentiles."""

    def __init__(self, size: int = 1 << 16) -> None:
        self._values = np.full(size, np.nan)
        self._n = 0
        self.max = 0.0

    def add(self, value: float) -> None:
        self._values[self._n % len(self._values)] = value
        self._n += 1
        if value > self.max:
            self.max = value

    def add_many(self, values: np.ndarray) -> None:
        """Add several values at once (oldest first)."""
        total = len(values)
        if not total:
            return
        top = float(values.max())
        if top > self.max:
            self.max = top
        size = len(self._values)
        kept = values[-size:]  # older ones would be overwritten anyway
        n = len(kept)
        at = (self._n + total - n) % size
        head = min(n, size - at)
        self._values[at:at + head] = kept[:head]
        self._values[:n - head] = kept[head:]
        self._n += total

    def quantile(self, q: float) -> float:
        if self._n == 0:
            return float("nan")
        return float(np.quantile(self._values[:min(self._n, len(self._values))], q))


@dataclass
class SamplerStats:
    """What the sampler did (latencies and lags in seconds, over the last 65 536 ticks)."""

    samples: int = 0
    missed_ticks: int = 0
    refreshes: int = 0
    schema_changes: int = 0
    latency_s: RecentValues = field(default_factory=RecentValues)  # time to read all probes
    lag_s: RecentValues = field(default_factory=RecentValues)  # tick start minus deadline
    read_errors: dict[str, dict[str, object]] = field(default_factory=dict)

    def summary(self) -> dict[str, object]:
        """JSON-ready figures for ``meta.json`` (milliseconds)."""
        def ms(value: float) -> float | None:
            return None if value != value else round(value * 1e3, 4)

        return {
            "samples": self.samples,
            "missed_ticks": self.missed_ticks,
            "schema_changes": self.schema_changes,
            "latency_ms_p50": ms(self.latency_s.quantile(0.5)),
            "latency_ms_p99": ms(self.latency_s.quantile(0.99)),
            "latency_ms_max": ms(self.latency_s.max),
            "jitter_ms_p50": ms(self.lag_s.quantile(0.5)),
            "jitter_ms_p99": ms(self.lag_s.quantile(0.99)),
            "jitter_ms_max": ms(self.lag_s.max),
            "read_errors": self.read_errors,
        }


class Sampler:
    """Read ``probes`` (already opened) every ``interval_s`` seconds into a sink.

    Parameters
    ----------
    probes : list of Probe
        Opened probes; one with no channels is kept (it may gain some on refresh).
    interval_s : float
        Sampling interval, seconds.
    refresh_s : float
        How often probes re-discover their channels, seconds.
    self_channels : bool
        Add :data:`SELF_CHANNELS` (read latency, tick lag, missed ticks) to every row.
    notify : callable(level, message)
        Receives one message per failing probe.
    realtime : bool
        The C tick thread asks for SCHED_FIFO (:data:`REALTIME_PRIORITY`) so that busy
        tasks do not delay its ticks; refused without CAP_SYS_NICE, then it runs as usual.
    """

    def __init__(self, probes: list[Probe], interval_s: float = 0.1, refresh_s: float = 5.0,
                 self_channels: bool = False, notify: Notify = _quiet,
                 realtime: bool = True) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval must be positive, got {interval_s}")
        self.probes = list(probes)
        self.interval_ns = round(interval_s * 1e9)
        self.refresh_ns = round(refresh_s * 1e9)
        self.self_channels = self_channels
        self.notify = notify
        self.stats = SamplerStats()
        self.start_ns = 0
        self.on_layout_change: Callable[[], None] | None = None
        self.native_ticks = NATIVE_TICKS
        self.mode = "python"  # "native" while a C thread takes the ticks
        self.realtime = realtime
        self.realtime_granted: bool | None = None  # whether the C thread got SCHED_FIFO
        self._driven: list[Probe] = []  # probes whose periodic work the sampler does
        self._build_layout()

    # -- layout ----------------------------------------------------------------------------
    @property
    def channels(self) -> list[str]:
        return list(self._channels)

    def _build_layout(self) -> None:
        channels: list[str] = []
        bounds: list[tuple[Probe, int, int]] = []
        seen: set[str] = set()
        for probe in self.probes:
            start = len(channels)
            for name in probe.channels:
                if name in seen:  # two probes claim one name: keep both, tell them apart
                    metric, labels = parse_channel(name)
                    name = format_channel(metric, {**labels, "probe": probe.name})
                seen.add(name)
                channels.append(name)
            bounds.append((probe, start, len(channels)))
        if self.self_channels:
            channels.extend(SELF_CHANNELS)
        self._channels = channels
        self._row = np.full(len(channels), np.nan, dtype=np.float64)
        self._parts = [(probe, self._row[a:b]) for probe, a, b in bounds if b > a]
        self._bounds = [(probe, a, b) for probe, a, b in bounds if b > a]

    @property
    def row(self) -> np.ndarray:
        return self._row

    # -- one tick ----------------------------------------------------------------------------
    def read_once(self) -> np.ndarray:
        """Read every probe into the row (NaN for a probe that raised); returns the row."""
        for probe, view in self._parts:
            try:
                probe.read(view)
            except Exception as exc:  # one failing probe must not stop the others
                view.fill(np.nan)
                self._read_failed(probe, exc)
        return self._row

    def _read_failed(self, probe: Probe, exc: Exception) -> None:
        record = self.stats.read_errors.get(probe.name)
        if record is None:
            message = f"{type(exc).__name__}: {exc}"
            self.stats.read_errors[probe.name] = {"count": 1, "first": message}
            self.notify("warning", f"probe {probe.name}: read failed ({message}); its channels "
                                   f"are NaN while it fails (reported once)")
        else:
            record["count"] = int(record["count"]) + 1  # type: ignore[call-overload]

    def _each(self, probes: list[Probe], call: Callable[[Probe], object]) -> list[Probe]:
        """Call ``call`` on every one of ``probes`` (one that raises is counted as a failed
        read and the others go on); those for which it returned something true."""
        said_yes: list[Probe] = []
        for probe in probes:
            try:
                if call(probe):
                    said_yes.append(probe)
            except Exception as exc:
                self._read_failed(probe, exc)
        return said_yes

    def _wanted(self) -> bool:
        """Let the driven probes do their periodic work (:meth:`Probe.poll`); then whether
        a probe asks for a refresh now (see :meth:`Probe.wants_refresh`). About once a
        second."""
        self._each(self._driven, lambda probe: probe.poll())
        return bool(self._each(self.probes, lambda probe: probe.wants_refresh()))

    def _drive(self) -> None:
        """Take over the periodic work of the probes that offer it (:meth:`Probe.drive`)."""
        self._driven = self._each(self.probes, lambda probe: probe.drive())

    def refresh(self, sink: RowSink) -> bool:
        """Ask every probe for new channels; rebuild the row and tell the sink on change."""
        self.stats.refreshes += 1
        changed = bool(self._each(self.probes, lambda probe: probe.refresh()))
        if changed:
            before = self._channels
            self._build_layout()
            if self._channels != before:
                self.stats.schema_changes += 1
                sink.set_channels(self.channels)
                if self.on_layout_change is not None:
                    self.on_layout_change()
        return changed

    # -- the loop ----------------------------------------------------------------------------
    def run(self, sink: RowSink, should_stop: Callable[[], bool] = lambda: False,
            duration_s: float | None = None,
            after_tick: Callable[[int], None] | None = None) -> None:
        """Sample until ``should_stop()`` is true or ``duration_s`` of ticks were taken."""
        self._drive()
        start = time.monotonic_ns()
        self.start_ns = start
        end = start + int(duration_s * 1e9) if duration_s is not None else None
        k: int | None = 0
        if self.native_ticks and ticker_available():
            items = self._native_items()
            if items is not None:
                k = self._run_native(items, sink, should_stop, end, after_tick)
                if k is None:
                    return
        self.mode = "python"
        # a probe that cannot prepare still reads
        self._each(self.probes, lambda probe: probe.schedule(start, self.interval_ns))
        self._run_python(k, sink, should_stop, end, after_tick)

    def _run_python(self, k: int, sink: RowSink, should_stop: Callable[[], bool],
                    end: int | None, after_tick: Callable[[int], None] | None) -> None:
        """The per-tick loop in Python, from tick ``k`` of the grid."""
        clock = time.monotonic_ns
        sleep = time.sleep
        interval = self.interval_ns
        half = interval // 2
        stats = self.stats
        latency, lag = stats.latency_s, stats.lag_s
        start = self.start_ns
        last_k = None if end is None else -(-(end - start) // interval) - 1
        next_refresh = clock() + self.refresh_ns
        settle, settle_ns = False, min(round(SETTLE_S * 1e9), self.refresh_ns)
        while True:
            deadline = start + k * interval
            if end is not None and deadline >= end:
                break
            now = clock()
            while now < deadline:
                sleep(min(deadline - now, 250_000_000) / 1e9)
                if should_stop():
                    return
                now = clock()
            if should_stop():
                return
            t0 = clock()
            # The read stands for the grid slot nearest its start; slots before it that
            # passed unread are missed (never replayed) and the next read waits for the
            # slot after it: no two reads share a slot or come half an interval apart.
            slot = max(k, (t0 - start + half) // interval)
            if last_k is not None:
                slot = min(slot, max(k, last_k))  # slots after the end are not missed
            stats.missed_ticks += slot - k
            row = self.read_once()
            t1 = clock()
            if self.self_channels:
                row[-3] = (t1 - t0) / 1e9
                row[-2] = (t0 - deadline) / 1e9
                row[-1] = stats.missed_ticks
            sink.append(t0, row)
            stats.samples += 1
            latency.add((t1 - t0) / 1e9)
            lag.add((t0 - deadline) / 1e9)
            if slot % WANTED_EVERY == 0 and self._wanted():
                next_refresh = t1
                settle = True
            if t1 >= next_refresh:
                next_refresh = t1 + (settle_ns if settle else self.refresh_ns)
                settle = False
                self.refresh(sink)
            if after_tick is not None:
                after_tick(t0)
            k = slot + 1

    # -- ticks taken in C ----------------------------------------------------------------------
    def _native_items(self) -> _NativeItems | None:
        """The C readers of every channel, or None when some probe needs Python each tick."""
        items = _NativeItems()
        for probe, a, _ in self._bounds:
            parts = probe.native_parts()
            if parts is None:
                return None
            for part in parts:
                every = max(1, round(part.period_s * 1e9 / self.interval_ns))
                items.readers.append((part.reader, a + part.start, every))
                items.recover.append((probe, part.recover, a + part.start, a + part.stop))
        return items

    def _run_native(self, items: _NativeItems, sink: RowSink, should_stop: Callable[[], bool],
                    end: int | None, after_tick: Callable[[int], None] | None) -> int | None:
        """Let a C thread take the ticks; drain them every ``DRAIN_S``. Returns None when
        done, or the tick to go on from in Python (a probe now needs Python each tick)."""
        start, interval = self.start_ns, self.interval_ns
        per_drain = max(1, round(DRAIN_S * 1e9 / interval))
        capacity = max(64, 8 * per_drain)
        ticker = _procfs._procread.Ticker(  # type: ignore[union-attr]
            items.readers, len(self._channels), start, interval, capacity,
            end_ns=end or 0, priority=REALTIME_PRIORITY if self.realtime else 0)
        self.mode = "native"
        buffers = _DrainBuffers(capacity, len(self._channels))
        next_refresh = start + self.refresh_ns
        settle, settle_ns = False, min(round(SETTLE_S * 1e9), self.refresh_ns)
        j = 1
        to_python = False
        try:
            while True:
                # wake half-way between two ticks, every per_drain ticks
                wake = start + (j * per_drain) * interval + interval // 2
                j += 1
                stopped = _sleep_until(wake, should_stop)
                if stopped:
                    break
                failed = self._drain(ticker, buffers, sink, after_tick)
                self.realtime_granted = ticker.realtime()
                _, missed, finished = ticker.state()
                self.stats.missed_ticks = missed
                if finished:
                    break
                now = time.monotonic_ns()
                if self._wanted():
                    next_refresh = now
                    settle = True
                if not failed and now < next_refresh:
                    continue
                ticker.hold()
                try:
                    failed = sorted({*failed, *self._drain(ticker, buffers, sink, after_tick)})
                    for i in failed:
                        self._recover(items, i)
                    if now >= next_refresh:
                        next_refresh = now + (settle_ns if settle else self.refresh_ns)
                        settle = False
                        self.refresh(sink)
                    fresh = self._native_items()
                    if fresh is None:  # a probe now needs Python each tick
                        to_python = True  # the ticker keeps its width: so do the buffers
                        break
                    items = fresh
                    ticker.set_items(items.readers, len(self._channels))
                    buffers = buffers.fit(len(self._channels))  # the ticker's new width
                finally:
                    ticker.release()
        finally:
            ticker.close()
            self._drain(ticker, buffers, sink, after_tick)
            next_k, self.stats.missed_ticks, _ = ticker.state()  # the thread is joined
        return next_k if to_python else None

    def _drain(self, ticker: object, buffers: _DrainBuffers, sink: RowSink,
               after_tick: Callable[[int], None] | None) -> list[int]:
        """Move the ticks taken into the sink; returns the items whose plan did not fit."""
        b = buffers
        n, failed = ticker.drain(b.ts, b.rows, b.latency, b.lag, b.missed)  # type: ignore[attr-defined]
        if not n:
            return failed
        rows = b.rows[:n]
        if self.self_channels:
            rows[:, -3] = b.latency[:n]
            rows[:, -2] = b.lag[:n]
            rows[:, -1] = b.missed[:n]
        append_block = getattr(sink, "append_block", None)
        if append_block is not None:
            append_block(b.ts[:n], rows)
        else:
            for i in range(n):
                sink.append(int(b.ts[i]), rows[i])
        flush = getattr(sink, "flush", None)
        if flush is not None:
            flush()  # journaled at every drain: a SIGKILL loses at most DRAIN_S of rows
        self.stats.samples += n
        self.stats.latency_s.add_many(b.latency[:n])
        self.stats.lag_s.add_many(b.lag[:n])
        if after_tick is not None:
            after_tick(int(b.ts[n - 1]))
        return failed

    def _recover(self, items: _NativeItems, i: int) -> None:
        """Re-read (and so re-discover) the part behind item ``i`` in Python."""
        probe, recover, a, b = items.recover[i]
        scratch = np.full(b - a, np.nan)
        try:
            recover(scratch)
        except Exception as exc:
            self._read_failed(probe, exc)


@dataclass
class _NativeItems:
    """The Ticker's items, ``(reader, offset in the row, read every N ticks)``, and how to
    recover each."""

    readers: list[tuple[object, int, int]] = field(default_factory=list)
    recover: list[tuple[Probe, Callable[[np.ndarray], None], int, int]] = field(
        default_factory=list)


class _DrainBuffers:
    """Arrays a drain copies the C ring into (``capacity`` rows of ``width`` channels)."""

    def __init__(self, capacity: int, width: int) -> None:
        self.capacity, self.width = capacity, width
        self.ts = np.zeros(capacity, dtype=np.int64)
        self.missed = np.zeros(capacity, dtype=np.int64)
        self.latency = np.zeros(capacity)
        self.lag = np.zeros(capacity)
        self.rows = np.zeros((capacity, width))

    def fit(self, width: int) -> _DrainBuffers:
        return self if width == self.width else _DrainBuffers(self.capacity, width)


def ticker_available() -> bool:
    """True when the C extension with the Ticker is built and enabled."""
    native = _procfs._procread
    return native is not None and _procfs.USE_NATIVE and hasattr(native, "Ticker")


def _sleep_until(deadline_ns: int, should_stop: Callable[[], bool]) -> bool:
    """Sleep until ``deadline_ns`` (CLOCK_MONOTONIC, at most a drain period away) in one
    go, asking ``should_stop`` before and after: every wake-up of the interpreter costs,
    so a stop request waits for the next drain (at most ``DRAIN_S``); True on a stop."""
    if should_stop():
        return True
    now = time.monotonic_ns()
    if now < deadline_ns:
        time.sleep((deadline_ns - now) / 1e9)
    return should_stop()
