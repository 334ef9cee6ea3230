"""Derive: counters to per-second rates (resets and wraps handled) plus derived metrics.

Counters are stored raw (docs/run-format.md). Here every ``counter`` and ``event`` channel
becomes a per-second rate over consecutive samples; the first sample is dropped because it
has no predecessor. A decrease is a **wrap** when the previous value lies in the top half of
a 32- or 64-bit range and the wrapped delta is smaller than half that range; any other
decrease is a **reset** (the counter restarted from zero, as Prometheus' ``rate()`` assumes),
whose delta is the new value. Gauges pass through unchanged.

**Multiplexed counters** (perf): a counter whose catalog entry names a ``multiplex_group``
is stored raw, beside its group's ``perf.time_enabled_ns`` / ``perf.time_running_ns``
channels (same labels plus ``group=NAME``). When the kernel multiplexes the PMU the group
counts only part of the time, so each interval's delta is scaled by Δenabled / Δrunning
(1 when it ran the whole interval; NaN when it did not run at all, Δrunning = 0). Resets
and wraps are found on the raw counts as for any counter. Runs recorded without the time
channels (counts already scaled when read) are rated like any counter.

Derived metrics, added when their inputs exist (names under ``derived.``):
IPC, cache-miss ratio, branch-miss ratio, backend/L3 stall ratio (per CPU label set and
host total), CPU busy % (per CPU and total), memory used %, disk read/write throughput
(bytes/s) and utilisation %, network throughput (bytes/s, received + sent) and, when the
link speed is known, utilisation % per direction: links are full duplex, so received and
sent bytes are each measured against the link speed (each at most 100 % while the traffic
fits the link).
"""

from __future__ import annotations

import functools
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from reveal.catalog import TIME_ENABLED_METRIC, TIME_RUNNING_METRIC, Catalog, default_catalog
from reveal.frame import Telemetry, channel_metric, format_channel, parse_channel

_WRAPS = (2.0**32, 2.0**64)
SECTOR_BYTES = 512.0


@dataclass
class DeriveReport:
    """What derive did: resets and wraps seen per channel, derived channels added, and per
    multiplexed counter the intervals scaled up (``multiplexed``: its group counted part of
    the interval) or left NaN (``not_counted``: its group did not count at all)."""

    resets: dict[str, int] = field(default_factory=dict)
    wraps: dict[str, int] = field(default_factory=dict)
    derived: list[str] = field(default_factory=list)
    multiplexed: dict[str, int] = field(default_factory=dict)
    not_counted: dict[str, int] = field(default_factory=dict)


def counter_deltas(
    raw: np.ndarray, wrap_ranges: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Deltas of raw cumulative counters ``(T, C)`` → ``(T-1, C)``, with wraps and resets fixed.

    ``wrap_ranges`` (C,) gives a counter's own wrap value where the source recorded one
    (RAPL's ``max_energy_range_uj``), NaN elsewhere. Returns ``(deltas, wrap_mask,
    reset_mask)``; NaN in either neighbour gives NaN.
    """
    prev, cur = raw[:-1], raw[1:]
    delta = cur - prev
    negative = delta < 0
    wrap_mask = np.zeros_like(negative)
    if negative.any():
        fixed = delta.copy()
        if wrap_ranges is not None:
            own = np.broadcast_to(wrap_ranges, prev.shape)
            is_wrap = negative & np.isfinite(own) & (prev <= own)
            fixed = np.where(is_wrap, cur + (own - prev), fixed)
            wrap_mask |= is_wrap
        for size in _WRAPS:
            wrapped = cur + (size - prev)
            is_wrap = negative & ~wrap_mask & (prev >= size / 2) & (prev < size) \
                & (wrapped >= 0) & (wrapped < size / 2)
            fixed = np.where(is_wrap, wrapped, fixed)
            wrap_mask |= is_wrap
        reset_mask = negative & ~wrap_mask
        delta = np.where(reset_mask, cur, fixed)
    else:
        reset_mask = negative
    return delta, wrap_mask, reset_mask


def multiplex_factor(enabled_delta: np.ndarray, running_delta: np.ndarray) -> np.ndarray:
    """Per-interval scale Δenabled / Δrunning (ns / ns) of a multiplexed counter's delta.

    1 where the group ran the whole interval (Δrunning ≥ Δenabled), NaN where it did not
    run (Δrunning ≤ 0) or a time is missing; same shape as the inputs.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.where(running_delta >= enabled_delta, 1.0, enabled_delta / running_delta)
    factor[~(running_delta > 0)] = np.nan
    return factor


def multiplex_columns(channels: list[str],
                      catalog: Catalog) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Columns of multiplexed counters and of their group's time channels.

    A channel pairs when its metric has a catalog ``multiplex_group`` and both
    ``TIME_ENABLED_METRIC`` and ``TIME_RUNNING_METRIC`` exist with its labels plus
    ``group=NAME``. Returns ``(counter, enabled, running)`` index arrays into ``channels``.
    """
    return _multiplex_columns(tuple(channels), catalog)


@functools.lru_cache(maxsize=16)
def _multiplex_columns(channels: tuple[str, ...],
                       catalog: Catalog) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    position = {name: i for i, name in enumerate(channels)}
    found: list[tuple[int, int, int]] = []
    for i, name in enumerate(channels):
        group = catalog.lookup(name).multiplex_group
        if not group:
            continue
        labels = {**parse_channel(name)[1], "group": group}
        enabled = position.get(format_channel(TIME_ENABLED_METRIC, labels))
        running = position.get(format_channel(TIME_RUNNING_METRIC, labels))
        if enabled is not None and running is not None:
            found.append((i, enabled, running))
    if not found:
        empty = np.zeros(0, dtype=np.intp)
        return empty, empty, empty
    counter, enabled, running = (np.array(c, dtype=np.intp) for c in zip(*found, strict=True))
    return counter, enabled, running


def recorded_wrap_ranges(meta: dict) -> dict[str, float]:
    """Per-channel wrap values that probes recorded in the run metadata (``info.wrap``)."""
    out: dict[str, float] = {}
    for probe in (meta.get("probes") or {}).values():
        wraps = ((probe or {}).get("info") or {}).get("wrap") or {}
        for channel, value in wraps.items():
            try:
                out[str(channel)] = float(value)
            except (TypeError, ValueError):
                continue
    return out


def to_rates(
    telemetry: Telemetry, catalog: Catalog | None = None
) -> tuple[Telemetry, DeriveReport]:
    """Rate every counter/event channel (per second), dropping the first sample (it has no
    rate); with no counter or event channel (gauges only) every sample is kept as it is."""
    catalog = catalog or default_catalog()
    report = DeriveReport()
    counter_cols = _counter_columns(tuple(telemetry.channels), catalog)
    if not counter_cols.any():
        return telemetry, report
    if telemetry.n_samples < 2:
        return telemetry.slice_rows(1, 1), report
    values = telemetry.values[1:].copy()
    if counter_cols.any():
        dt_s = np.diff(telemetry.timestamps_ns).astype(np.float64) / 1e9
        names = [c for c, ok in zip(telemetry.channels, counter_cols, strict=True) if ok]
        known = recorded_wrap_ranges(telemetry.meta)
        ranges = np.array([known.get(c, np.nan) for c in names]) if known else None
        deltas, wraps, resets = counter_deltas(telemetry.values[:, counter_cols], ranges)
        _scale_multiplexed(deltas, names, catalog, report)
        values[:, counter_cols] = deltas / dt_s[:, None]
        _spread_stall_rates(values, telemetry.channels, dt_s)
        names = np.asarray(telemetry.channels, dtype=object)[counter_cols]
        for name, n in zip(names, wraps.sum(axis=0), strict=True):
            if n:
                report.wraps[str(name)] = int(n)
        for name, n in zip(names, resets.sum(axis=0), strict=True):
            if n:
                report.resets[str(name)] = int(n)
    rated = Telemetry(telemetry.host, telemetry.timestamps_ns[1:], values,
                      list(telemetry.channels), dict(telemetry.meta))
    return rated, report


#: Pressure stall totals (µs, catalog ``stall_total``), whose rate cannot exceed the time
#: that passed: tasks stall for at most a second per second. A total read less often than
#: every sample (a cgroup's I/O and memory pressure, every ``detail_period_s``, its last
#: value repeated between) puts a whole period's stall into one sample — 200 ms of it in a
#: 100 ms sample — and the kernel folds per-CPU stall time into a total only when it is
#: read. The stall above one second per second is moved back to the samples before it,
#: where it happened (at most :data:`STALL_SPREAD_SAMPLES`), so a window's sum is kept and
#: no sample exceeds it.
STALL_RATE_MAX = 1e6  # µs per second
STALL_SPREAD_SAMPLES = 64


@functools.lru_cache(maxsize=16)
def _stall_columns(channels: tuple[str, ...]) -> np.ndarray:
    """Columns of pressure stall totals (catalog ``stall_total``, see
    :data:`STALL_RATE_MAX`)."""
    catalog = default_catalog()
    return np.array([i for i, c in enumerate(channels)
                     if catalog.lookup(channel_metric(c)).stall_total], dtype=np.intp)


def _spread_stall_rates(values: np.ndarray, channels: list[str], dt_s: np.ndarray) -> None:
    """Move, in place, the stall of pressure totals above :data:`STALL_RATE_MAX` back to
    the samples before (rates per second, ``dt_s`` each sample's seconds). Vectorised
    over samples and channels: one pass per sample the stall moves back."""
    cols = _stall_columns(tuple(channels))
    if not cols.size:
        return
    room = (STALL_RATE_MAX * dt_s)[:, None]  # µs a sample can hold
    stalled = np.nan_to_num(values[:, cols] * dt_s[:, None], nan=0.0)
    gaps = ~np.isfinite(values[:, cols])
    for _ in range(STALL_SPREAD_SAMPLES):
        excess = np.maximum(stalled - room, 0.0)
        excess[0] = 0.0  # nothing before the first sample: it keeps its stall
        if not excess.any():
            break
        stalled -= excess
        stalled[:-1] += excess[1:]
    values[:, cols] = np.where(gaps, np.nan, stalled / dt_s[:, None])


@functools.lru_cache(maxsize=16)
def _counter_columns(channels: tuple[str, ...], catalog: Catalog) -> np.ndarray:
    """Which channels are counters or events (rated), as a read-only bool array."""
    mask = np.array([catalog.lookup(c).kind in ("counter", "event") for c in channels],
                    dtype=bool)
    mask.flags.writeable = False
    return mask


def _scale_multiplexed(deltas: np.ndarray, names: list[str], catalog: Catalog,
                       report: DeriveReport) -> None:
    """Scale, in place, the deltas ``(T-1, C)`` of multiplexed counters among ``names`` by
    their group's Δenabled / Δrunning; count the intervals scaled up or not counted."""
    counter, enabled, running = multiplex_columns(names, catalog)
    if not len(counter):
        return
    d_enabled, d_running = deltas[:, enabled], deltas[:, running]
    factor = multiplex_factor(d_enabled, d_running)
    deltas[:, counter] *= factor
    scaled_up = (factor > 1.0).sum(axis=0)
    idle = (np.isnan(factor) & np.isfinite(d_enabled) & np.isfinite(d_running)).sum(axis=0)
    for i, up, none in zip(counter, scaled_up, idle, strict=True):
        if up:
            report.multiplexed[names[i]] = int(up)
        if none:
            report.not_counted[names[i]] = int(none)


def _ratio(num: np.ndarray, den: np.ndarray, scale: float = 1.0) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        out = scale * num / den
    out[~np.isfinite(out)] = np.nan
    return out


class _Index:
    """Channels of a rated Telemetry grouped by metric, keyed by their label sets."""

    def __init__(self, telemetry: Telemetry) -> None:
        self.tel = telemetry
        self.by_metric = _by_metric(tuple(telemetry.channels))

    def pairs(self, a: str, b: str) -> list[tuple[dict[str, str], np.ndarray, np.ndarray]]:
        """(labels, a, b) for every label set present under both metrics."""
        out = []
        for key, ia in self.by_metric.get(a, {}).items():
            ib = self.by_metric.get(b, {}).get(key)
            if ib is not None:
                out.append((dict(key), self.tel.values[:, ia], self.tel.values[:, ib]))
        return out

    def total(self, metric: str) -> np.ndarray | None:
        """The unlabelled channel of ``metric``, else the sum over its label sets."""
        group = self.by_metric.get(metric)
        if not group:
            return None
        if () in group:
            return self.tel.values[:, group[()]]
        return self.tel.values[:, list(group.values())].sum(axis=1)

    def get(self, metric: str, labels: tuple[tuple[str, str], ...] = ()) -> np.ndarray | None:
        i = self.by_metric.get(metric, {}).get(labels)
        return None if i is None else self.tel.values[:, i]


@functools.lru_cache(maxsize=16)
def _by_metric(channels: tuple[str, ...]) -> dict[str, dict[tuple[tuple[str, str], ...], int]]:
    """Column of every channel by metric, then by sorted label pairs (shared: read only)."""
    out: dict[str, dict[tuple[tuple[str, str], ...], int]] = defaultdict(dict)
    for i, name in enumerate(channels):
        metric, labels = parse_channel(name)
        out[metric][tuple(sorted(labels.items()))] = i
    return dict(out)


_RATIOS = (  # derived metric, numerator, denominator, scale
    ("derived.ipc", "perf.instructions", "perf.cycles", 1.0),
    ("derived.cache_miss_ratio", "perf.cache_misses", "perf.cache_references", 1.0),
    ("derived.branch_miss_ratio", "perf.branch_misses", "perf.branches", 1.0),
    ("derived.backend_stall_ratio", "perf.stalled_cycles_backend", "perf.cycles", 1.0),
    ("derived.l3_stall_ratio", "perf.stalls_l3_miss", "perf.cycles", 1.0),
    ("derived.llc_miss_ratio", "perf.llc_load_misses", "perf.llc_loads", 1.0),
)
CPU_BUSY_FIELDS = ("user", "nice", "system", "irq", "softirq", "steal")
CPU_IDLE_FIELDS = ("idle", "iowait")


def _derived_metrics(idx: _Index) -> list[tuple[str, np.ndarray]]:
    out: list[tuple[str, np.ndarray]] = []
    for name, num, den, scale in _RATIOS:
        pairs = idx.pairs(num, den)
        for labels, a, b in pairs:
            out.append((format_channel(name, labels), _ratio(a, b, scale)))
        if len(pairs) > 1:
            tot_a, tot_b = idx.total(num), idx.total(den)
            if tot_a is not None and tot_b is not None:
                out.append((name, _ratio(tot_a, tot_b, scale)))
    # CPU busy %, from /proc/stat jiffies rates, per label set (cpu=N and the unlabelled total)
    label_sets = set(idx.by_metric.get("cpu.idle", {}))
    for key in sorted(label_sets):
        parts = [idx.get(f"cpu.{f}", key) for f in CPU_BUSY_FIELDS + CPU_IDLE_FIELDS]
        present = [p for p in parts if p is not None]
        idle = [idx.get(f"cpu.{f}", key) for f in CPU_IDLE_FIELDS]
        idle = [p for p in idle if p is not None]
        if len(present) >= 3 and idle:
            total = np.sum(present, axis=0)
            out.append((format_channel("derived.cpu_busy_pct", dict(key)),
                        _ratio(total - np.sum(idle, axis=0), total, 100.0)))
    # share of a cgroup's CPU-quota periods that were throttled, percent
    for labels, throttled, periods in idx.pairs("cgroup.cpu.nr_throttled", "cgroup.cpu.nr_periods"):
        out.append((format_channel("derived.cgroup_throttled_pct", labels),
                    _ratio(throttled, periods, 100.0)))
    mem_total, mem_avail = idx.get("mem.MemTotal"), idx.get("mem.MemAvailable")
    if mem_total is not None and mem_avail is not None:
        out.append(("derived.mem_used_pct", _ratio(mem_total - mem_avail, mem_total, 100.0)))
    for key, i in idx.by_metric.get("disk.sectors_read", {}).items():
        out.append((format_channel("derived.disk_read_bytes_per_s", dict(key)),
                    idx.tel.values[:, i] * SECTOR_BYTES))
    for key, i in idx.by_metric.get("disk.sectors_written", {}).items():
        out.append((format_channel("derived.disk_write_bytes_per_s", dict(key)),
                    idx.tel.values[:, i] * SECTOR_BYTES))
    for key, i in idx.by_metric.get("disk.time_io_ms", {}).items():
        # ms of I/O per second of wall time → percent busy
        out.append((format_channel("derived.disk_util_pct", dict(key)),
                    np.clip(idx.tel.values[:, i] / 10.0, 0.0, 100.0)))
    for key, rx in idx.by_metric.get("net.rx_bytes", {}).items():
        tx = idx.by_metric.get("net.tx_bytes", {}).get(key)
        if tx is None:
            continue
        rx_rate, tx_rate = idx.tel.values[:, rx], idx.tel.values[:, tx]
        out.append((format_channel("derived.net_bytes_per_s", dict(key)), rx_rate + tx_rate))
        speed = idx.get("net.speed_mbps", key)
        if speed is not None:
            # full duplex: each direction has the whole link speed (Mbit/s) to itself
            for name, rate in (("derived.net_rx_util_pct", rx_rate),
                               ("derived.net_tx_util_pct", tx_rate)):
                out.append((format_channel(name, dict(key)),
                            _ratio(rate * 8.0, speed * 1e6, 100.0)))
    return out


def derive(telemetry: Telemetry, catalog: Catalog | None = None) -> tuple[Telemetry, DeriveReport]:
    """Rates for counters plus derived metrics; returns the new Telemetry and a report."""
    rated, report = to_rates(telemetry, catalog)
    present = set(rated.channels)
    extra = [(n, v) for n, v in _derived_metrics(_Index(rated)) if n not in present]
    if extra:
        report.derived = [n for n, _ in extra]
        values = np.column_stack([rated.values, *[v for _, v in extra]])
        rated = Telemetry(rated.host, rated.timestamps_ns, values,
                          rated.channels + report.derived, rated.meta)
    return rated, report
