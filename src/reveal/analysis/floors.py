"""The smallest change that matters, per feature column: the scale floor of the detectors.

A baseline of a minute or two is quieter than a host is from one run to the next: a memory
level steady to the page, a rate that barely moved. Scaled by that spread alone, a change of
one or two per cent reads as thousands of sigmas, and every level that drifts after a
fault (page cache refilled, socket buffers grown) keeps flagging. The floor says that a
change smaller than ``relative`` × the channel's baseline level (its median, in derived
units: bytes, per-second rates, percent) is not evidence, however quiet the baseline was.

Counters and event counts are also given an absolute floor, for a baseline on which they
were idle (level zero): a burst of ``SPIKE_GRANULES`` granules (3 pages, 3 packets, 3 ms
of I/O time; a granule is one count, 4 KiB for byte and sector counters, 1 ms for µs/ns
time counters) within one sample is not evidence. A stray mlock of three pages by a
process start-up would otherwise be thousands of sigmas above a flat zero.

Only channels with physical units get floors (collector channels); metrics whose catalog
unit says they are already normalised (:data:`UNFLOORED_UNITS`, e.g. labelled benchmark
data scaled to 0..1) get none. Shape features (skewness, kurtosis,
autocorrelation, ADF) are dimensionless and get none either.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from reveal.analysis.constants import TAIL_QUANTILE
from reveal.catalog import Catalog, default_catalog
from reveal.frame import channel_metric, parse_channel


@functools.lru_cache(maxsize=8192)
def is_held_counter(channel: str) -> bool:
    """Whether ``channel`` is a counter the collector reads less often than every sample
    and repeats between reads (catalog ``repeated``: ``always``, or ``in_netns`` with a
    ``netns`` label). Their rate is 0 on the samples between two reads and the whole
    period's on the read, so a window's median is 0 whatever they count; their window mean
    is their rate over the window, and takes the median's place as the level that lasts."""
    info = default_catalog().lookup(channel_metric(channel))
    held = info.repeated == "always" or (info.repeated == "in_netns"
                                         and bool(parse_channel(channel)[1].get("netns")))
    return held and info.kind in ("counter", "event")


#: Catalog units of metrics that are already normalised (no physical unit to floor).
UNFLOORED_UNITS = ("scaled",)
RELATIVE_KINDS = ("gauge", "counter", "state")
COUNT_KINDS = ("counter", "event")
SPIKE_GRANULES = 3.0
GRANULE_BY_UNIT = {"bytes": 4096.0, "512-byte sectors": 8.0, "KiB": 4.0, "µs": 1000.0,
                   "ns": 1e6}
#: Percentages computed from /proc/stat jiffies (catalog ``jiffy_percent``): one USER_HZ
#: tick in one sample is their granule (10 percentage points per CPU at 100 ms), and a
#: burst of a few is not evidence.
USER_HZ = 100.0
#: Catalog ``level_granule``: the least level change of gauges the kernel keeps in
#: batches, in the metric's units. A protocol's socket memory (``sockstat.*.mem``, pages)
#: is charged through a per-CPU reserve that reaches the global count only when it passes
#: ``net.core.mem_pcpu_rsv`` (256 pages, 1 MiB, by default): after a burst of traffic the
#: count can stay that far from its earlier level on an idle host, for as long as no CPU's
#: reserve fills again. Task counts move in whole tasks: from a level of zero, one task
#: blocked for a moment is not thousands of sigmas.
#:
#: Catalog ``spike_granule``: page counters that a process's start or exit moves in bulk
#: (copy-on-write pages reused after a fork, pages that start-up code mlocks and the exit
#: releases). Their spike granule is one small process's worth, 1 MiB (256 pages) within
#: one sample, not 3 pages: a process that starts or exits is not a performance anomaly
#: (what it does while it runs shows in the CPU, memory, disk and network channels).
#: Before this, a load generator's fork out-shouted the half core it then took.


@dataclass(frozen=True)
class ChannelFloor:
    """Least change that counts for one channel, in its derived units.

    level : ``relative × |baseline median|`` (0 for event counts), and at least the
        metric's catalog ``level_granule``.
    spike : rate of ``SPIKE_GRANULES`` granules within one sample (counters and events;
    at least the catalog ``spike_granule``: a process's start or exit for page counters),
    or that many jiffies of one sample as a percentage (per-CPU busy %, the total's
    granule divided by the number of CPUs).
    quantum : the step of a counter's per-sample rate (one granule per sample; one jiffy
    for the busy %): a window's median, minimum and maximum move in whole steps.
    """

    level: float = 0.0
    spike: float = 0.0
    quantum: float = 0.0


def channel_floors(channels: Sequence[str], levels: np.ndarray, relative: float,
                   interval_s: float, catalog: Catalog | None = None) -> list[ChannelFloor]:
    """The floors of every channel (``levels``: baseline medians, derived units)."""
    catalog = catalog or default_catalog()
    levels = np.nan_to_num(np.abs(np.asarray(levels, dtype=np.float64)), nan=0.0,
                           posinf=0.0, neginf=0.0)
    interval = interval_s if np.isfinite(interval_s) and interval_s > 0 else 1.0
    jiffy_pct = 100.0 / (USER_HZ * interval)
    per_cpu = [catalog.lookup(channel_metric(c)).jiffy_percent and "cpu" in parse_channel(c)[1]
               for c in channels]
    n_cpus = max(1, sum(per_cpu))
    out = []
    for i, channel in enumerate(channels):
        metric = channel_metric(channel)
        info = catalog.lookup(metric)
        if info.unit in UNFLOORED_UNITS:
            out.append(ChannelFloor())
            continue
        level = relative * levels[i] if info.kind in RELATIVE_KINDS and relative > 0 else 0.0
        level = max(level, info.level_granule)
        spike = (SPIKE_GRANULES * GRANULE_BY_UNIT.get(info.unit, 1.0) / interval
                 if info.kind in COUNT_KINDS else 0.0)
        spike = max(spike, info.spike_granule / interval)
        quantum = spike / SPIKE_GRANULES if info.kind == "counter" else 0.0
        if info.jiffy_percent:
            spike = SPIKE_GRANULES * jiffy_pct / (1 if per_cpu[i] else n_cpus)
            quantum = spike / SPIKE_GRANULES
        out.append(ChannelFloor(float(level), float(spike), float(quantum)))
    return out


#: Standard errors of the shape statistics of ``n`` independent values (Bartlett's for the
#: lag-1 autocorrelation, the normal-theory ones for skewness and excess kurtosis); the ADF
#: statistic is a t-statistic, whose sampling spread is about one.
SHAPE_FLOORS = {"autocorr_lag1": lambda n: 1.0 / np.sqrt(n),
                "skewness": lambda n: np.sqrt(6.0 / n),
                "kurtosis": lambda n: np.sqrt(24.0 / n),
                "adf_stat": lambda n: 1.0}


def feature_floors(column_channels: Sequence[str], column_features: Sequence[str],
                   floors: dict[str, ChannelFloor], rows_per_window: float,
                   shape_floors: bool = True, catalog: Catalog | None = None) -> np.ndarray:
    """Per feature column, its floor in the feature's units.

    A spike of one sample moves a window's maximum by ``spike``, its mean, median and
    minimum by ``spike / rows``, its standard deviation by about ``spike / sqrt(rows)``
    and its sum of rates (event features) by ``spike``; the slope (per row) floor is the
    level floor spread over the window.

    Shape features (skewness, kurtosis, autocorrelation, ADF) of collector channels get
    their statistic's sampling standard error over a window of ``rows`` values
    (:data:`SHAPE_FLOORS`, with ``shape_floors``): a job with a regular rhythm (a log line
    every few samples) gives the same autocorrelation in every baseline window, and a
    change smaller than what chance gives one window is then read as hundreds of sigmas.
    """
    catalog = catalog or default_catalog()
    out = np.zeros(len(column_channels), dtype=np.float64)
    rows = max(float(rows_per_window), 1.0)
    for k, (channel, feature) in enumerate(zip(column_channels, column_features, strict=True)):
        f = floors.get(channel)
        if (shape_floors and f is not None and feature in SHAPE_FLOORS
                and catalog.lookup(channel_metric(channel)).unit not in UNFLOORED_UNITS):
            out[k] = SHAPE_FLOORS[feature](rows)
            continue
        if f is None or (f.level <= 0 and f.spike <= 0):
            continue
        if feature in ("median", "min"):
            out[k] = max(f.level, f.spike / rows, f.quantum)
        elif feature == "mean":
            out[k] = max(f.level, f.spike / rows)
        elif feature in ("max", "sum"):
            out[k] = max(f.level, f.spike)
        elif feature == "std":
            out[k] = max(f.level, f.spike / np.sqrt(rows))
        elif feature == "variance":
            out[k] = max(f.level, f.spike / np.sqrt(rows)) ** 2
        elif feature == "slope":
            out[k] = max(f.level, f.spike / rows) / rows
    return out


SHAPE_FEATURES = ("skewness", "kurtosis", "autocorr_lag1", "adf_stat")
#: relative margin above a std floor before a window counts as moving (rounding only)
FLAT_RTOL = 1e-9


def flat_shape_mask_plan(column_channels: Sequence[str], column_features: Sequence[str],
                         column_floors: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which shape columns to blank in windows where their channel is flat.

    Returns ``(shape_cols, std_cols, thresholds)``: shape column ``shape_cols[i]`` is
    undefined in a window whose channel std (column ``std_cols[i]``) is at most
    ``thresholds[i]`` (the std floor). The skewness of a counter idle but for one event is
    √n whatever the event's size, so the shape of a window that barely moves is noise.
    """
    std_of: dict[str, int] = {}
    for k, (channel, feature) in enumerate(zip(column_channels, column_features, strict=True)):
        if feature == "std" and column_floors[k] > 0:
            std_of[channel] = k
    shape_cols, std_cols = [], []
    for k, (channel, feature) in enumerate(zip(column_channels, column_features, strict=True)):
        if feature in SHAPE_FEATURES and channel in std_of:
            shape_cols.append(k)
            std_cols.append(std_of[channel])
    shape = np.asarray(shape_cols, dtype=np.intp)
    std = np.asarray(std_cols, dtype=np.intp)
    return shape, std, np.asarray(column_floors, dtype=np.float64)[std]


def blank_flat_shapes(values: np.ndarray,
                      plan: tuple[np.ndarray, np.ndarray, np.ndarray]) -> int:
    """Set planned shape features to NaN (in place) where the window is flat; returns how
    many values were blanked."""
    shape_cols, std_cols, thresholds = plan
    if shape_cols.size == 0 or values.shape[0] == 0:
        return 0
    # NaN std counts as flat; a std equal to its floor but for rounding (one event of a
    # counter: the floor is that quantum's spread) is flat however the window's features
    # were summed (one window scored live or many in a batch)
    flat = ~(values[:, std_cols] > thresholds * (1.0 + FLAT_RTOL))
    block = values[:, shape_cols]
    block[flat] = np.nan
    values[:, shape_cols] = block
    return int(flat.sum())


#: What chance alone gives one window's statistic of ``n`` values of spread σ and kurtosis
#: κ (not excess; Gaussian 3): (standard error as a function of n and κ, power of σ it is
#: in). The shape errors treat a bursty window as Poisson-many bursts among ``n`` values
#: (κ ≈ n / bursts): one burst more or less moves the kurtosis by about κ·√(κ/n) and the
#: skewness by κ/(2√n), which for Gaussian data is close to the normal-theory errors.
SAMPLING_SE = {"mean": (lambda n, k: 1.0 / np.sqrt(n), 1),
               "median": (lambda n, k: 1.2533 / np.sqrt(n), 1),
               "std": (lambda n, k: np.sqrt((k - 1.0) / (4.0 * n)), 1),
               "variance": (lambda n, k: np.sqrt((k - 1.0) / n), 2),
               "slope": (lambda n, k: np.sqrt(12.0 / (n * (n * n - 1.0))), 1),
               "kurtosis": (lambda n, k: k * np.sqrt(k / n), 0),
               "skewness": (lambda n, k: k / (2.0 * np.sqrt(n)), 0),
               # the extremes (the scale of the maximum of n normal values) and a sum of
               # n rates: the fleet's peers; a single host's analysis floors these by a
               # one-sample spike instead (:func:`feature_floors`)
               "min": (lambda n, k: 1.0 / np.sqrt(2.0 * np.log(n)), 1),
               "max": (lambda n, k: 1.0 / np.sqrt(2.0 * np.log(n)), 1),
               "sum": (lambda n, k: np.sqrt(n), 1)}


def reads_per_window(mean: np.ndarray, std: np.ndarray, rows: float) -> np.ndarray:
    """(W,) how many of a held counter's ``rows`` samples per window are reads, from its
    window ``mean`` and ``std`` (population): reads of equal size c among zeros give
    m = r·c / n and m² + s² = r·c² / n, so r = n·m² / (m² + s²) (NaN where m is 0)."""
    m2 = np.asarray(mean, dtype=np.float64) ** 2
    with np.errstate(all="ignore"):
        return np.where(m2 > 0, rows * m2 / (m2 + np.asarray(std, dtype=np.float64) ** 2),
                        np.nan)


def read_floor(level: float, reads: np.ndarray, one_read: float) -> float:
    """The floor of a held counter's window mean at ``level``: one read's worth (the
    level over the baseline's median count of ``reads`` per window) times how far a
    window's count strays from that median (its :data:`TAIL_QUANTILE` quantile), at most
    ``one_read`` (the worth of one read where the counts cannot be told)."""
    counts = reads[np.isfinite(reads)]
    if counts.size == 0:
        return one_read
    typical = float(np.median(counts))
    if typical <= 0:
        return one_read
    strays = float(np.quantile(np.abs(counts - typical), TAIL_QUANTILE))
    return min(one_read, level / typical * min(strays, 1.0))


#: the statistics :func:`sampling_floors` floors in one host's analysis
SAMPLED_FEATURES = ("mean", "median", "std", "variance", "slope", "kurtosis", "skewness")


def sampling_floors(column_channels: Sequence[str], column_features: Sequence[str],
                    values: np.ndarray, rows_per_window: float,
                    catalog: Catalog | None = None) -> np.ndarray:
    """Per feature column, the standard error chance gives it within one window.

    A channel whose within-window spread σ is the same in every baseline window (a job
    with a steady rhythm) has a window mean, spread and slope that vary far less from one
    baseline window to the next than chance allows a single window: scaled by that
    between-window spread alone, a window with one more burst than usual reads as dozens
    of sigmas ("varied by ±109 pages/s, baseline ±86 pages/s, +65σ"). The floor is the
    statistic's sampling error over ``rows`` values, with σ the baseline median of the
    channel's ``std`` column and κ from its ``kurtosis`` column (a bursty channel's spread
    and shape are themselves far less certain). Collector channels with physical units only; columns
    whose channel has no ``std`` column get 0.

    A held counter's window mean (:func:`is_held_counter`) is no average of independent
    values: it is the count over the window, and chance moves it only by a read that
    falls in or out at the window's edges. A window's reads are counted from its own mean
    m and spread s: the reads carry the count (0 between them, equal on them), so they are
    a share m² / (m² + s²) of its n samples (:func:`reads_per_window`). One read's worth is
    the level L (the median of the ``mean`` column) over the baseline's median count r;
    the floor is that worth times how far a window's count strayed from r in the baseline
    (its 99th percentile, at most one read). A collector that reads on a fixed grid of
    ticks (the C sampler: every 5th tick) puts the same count in every window, and chance
    moves the mean by nothing but the job's own changes, which the baseline's spread
    between windows holds; one whose reads slip by a tick (read when due by the clock)
    strays by a read, and the floor is one read's worth, (L² + σ²) / (L·n) with σ the
    median spread. Taken as one read's worth always, a job's CPU time read twice a second
    had a floor of a sixth of its level, and a job stopped half of every second stood at
    3 σ; taken as σ/√n, a third, and a hung job stood under 3 σ.
    """
    catalog = catalog or default_catalog()
    n = max(float(rows_per_window), 2.0)
    out = np.zeros(len(column_channels), dtype=np.float64)
    if values.shape[0] == 0:
        return out
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns
        medians = np.nan_to_num(np.nanmedian(values, axis=0), nan=0.0)
    std_of: dict[str, float] = {}
    std_at: dict[str, int] = {}
    kurt_of: dict[str, float] = {}
    mean_of: dict[str, float] = {}
    for k, (channel, feature) in enumerate(zip(column_channels, column_features, strict=True)):
        if feature == "std":
            std_of[channel] = abs(float(medians[k]))
            std_at[channel] = k
        elif feature == "kurtosis":
            kurt_of[channel] = float(medians[k]) + 3.0
        elif feature == "mean":
            mean_of[channel] = abs(float(medians[k]))
    for k, (channel, feature) in enumerate(zip(column_channels, column_features, strict=True)):
        sigma = std_of.get(channel, 0.0)
        if (feature not in SAMPLED_FEATURES or sigma <= 0
                or catalog.lookup(channel_metric(channel)).unit in UNFLOORED_UNITS):
            continue
        level = mean_of.get(channel, 0.0)
        if feature == "mean" and level > 0 and is_held_counter(channel):
            reads = reads_per_window(values[:, k], values[:, std_at[channel]], n)
            out[k] = read_floor(level, reads, (level * level + sigma * sigma) / (level * n))
            continue
        kappa = min(max(kurt_of.get(channel, 3.0), 3.0), n)
        se, power = SAMPLING_SE[feature]
        out[k] = float(se(n, kappa)) * sigma ** power
    return out
