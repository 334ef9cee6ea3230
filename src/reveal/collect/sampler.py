"""The sampler: read every probe at a fixed rate into one row and hand it to a sink.

Ticks are scheduled on ``CLOCK_MONOTONIC`` at ``start + k * interval`` (no drift): the
sampler sleeps until the next deadline, reads every probe into its slice of one
preallocated float64 row, and passes the row to the sink (the segment writer). A tick
whose deadline passed by more than half an interval is skipped and counted, never replayed
in a burst. Every ``refresh_s`` the probes re-discover their channels; when the set
changes the row is rebuilt and the sink starts a new segment with the new schema. A probe
whose ``read`` raises is reported once, its slice is NaN for that tick, and the others go
on (node_exporter's manner).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from reveal.collect.probe import Probe
from reveal.frame import format_channel, parse_channel

#: Channels the sampler adds about itself when ``self_channels`` is on.
SELF_CHANNELS = ("reveal.sample_latency_s", "reveal.tick_lag_s", "reveal.missed_ticks")

Notify = Callable[[str, str], None]  # (level, message)


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
    """

    def __init__(self, probes: list[Probe], interval_s: float = 0.1, refresh_s: float = 5.0,
                 self_channels: bool = False, notify: Notify = _quiet) -> None:
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

    def refresh(self, sink: RowSink) -> bool:
        """Ask every probe for new channels; rebuild the row and tell the sink on change."""
        self.stats.refreshes += 1
        changed = False
        for probe in self.probes:
            try:
                changed |= bool(probe.refresh())
            except Exception as exc:
                self._read_failed(probe, exc)
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
        clock = time.monotonic_ns
        sleep = time.sleep
        interval = self.interval_ns
        half = interval // 2
        stats = self.stats
        latency, lag = stats.latency_s, stats.lag_s
        start = clock()
        self.start_ns = start
        for probe in self.probes:
            try:
                probe.schedule(start, interval)
            except Exception as exc:  # a probe that cannot prepare still reads
                self._read_failed(probe, exc)
        end = start + int(duration_s * 1e9) if duration_s is not None else None
        last_k = None if end is None else -(-(end - start) // interval) - 1
        next_refresh = start + self.refresh_ns
        k = 0
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
            if t1 >= next_refresh:
                next_refresh = t1 + self.refresh_ns
                self.refresh(sink)
            if after_tick is not None:
                after_tick(t0)
            # Next tick: the next deadline unless we are past it by more than half an
            # interval; the ticks jumped over are missed, never replayed.
            due = (clock() - start + half) // interval
            if last_k is not None:
                due = min(due, last_k + 1)  # ticks after the end are not missed
            k += 1
            if due > k:
                stats.missed_ticks += due - k
                k = due
