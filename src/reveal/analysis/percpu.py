"""Per-CPU channels without CPU identity: the CPUs ranked by load in every window.

The scheduler places a job's threads on whichever CPU is free, and may move them for good
after a disturbance: on a 2-vCPU host a job that ran on ``cpu=0`` during the baseline runs on
``cpu=1`` after a memory hog has come and gone. Channel by channel, that reads as one CPU
suddenly 100 % busy and the other suddenly idle (with the idle CPU's scheduler softirqs
up), for as long as the job stays there, though the host does the same work. What a
detector should compare is "the busiest CPU", "the next one", ...: in every window the
CPUs are ranked by their mean busy % (``derived.cpu_busy_pct{cpu=N}``), and the features of
every group of channels that differ only in their ``cpu`` label take the CPU order of that
window, renamed ``cpu=r0`` (busiest), ``cpu=r1``, ... All channels of one CPU move together
(its softirqs, interrupts and times stay with its load). Totals over CPUs, the spread
between CPUs and any change that makes a CPU busier or idler are kept; which CPU carries
the load is not.

The scheduler also moves a job for a second and back (a load generator starts, a kernel
thread wakes): within one window the job is then on one CPU for part of it and on the
other for the rest, and both CPUs' channels swing between busy and idle, which a window
rank cannot undo. :func:`rank_cpu_rows` (``AnalyzeConfig.rank_cpu_samples``, off by
default) ranks the CPUs in every sample instead (by that sample's busy %, ties by the
mean of the last second), so each rank's series is an order statistic ("the busiest CPU
at each instant") and a job's move, however brief, is not a change of it.
"""

from __future__ import annotations

import functools
import re
from collections import defaultdict

import numpy as np

from reveal.analysis.windows import span_sums
from reveal.frame import Telemetry, format_channel, parse_channel

RANK_PREFIX = "r"


BUSY_METRIC = "derived.cpu_busy_pct"


def _cpu_of(channel: str) -> tuple[tuple[str, tuple[tuple[str, str], ...]], str] | None:
    metric, labels = parse_channel(channel)
    cpu = labels.get("cpu", "")
    if not cpu.isdigit():
        return None
    return (metric, tuple(sorted((k, v) for k, v in labels.items() if k != "cpu"))), cpu


def window_busy(tel: Telemetry, starts: np.ndarray, size: int) -> tuple[list[str], np.ndarray]:
    """CPU numbers and their mean busy % over each window (W, n_cpus); NaN counts as 0.

    A window's mean is the same to the last bit whatever precedes it
    (:func:`~reveal.analysis.windows.span_sums`): a live scorer that reads only a window's
    rows ranks tied CPUs (two saturated ones) as the whole run's analysis does.
    """
    cpus, cols = _busy_columns(tel.channels)
    if len(cols) < 2 or len(starts) == 0:
        return cpus, np.zeros((len(starts), len(cols)))
    x = np.nan_to_num(tel.values[:, cols], nan=0.0)
    return cpus, span_sums(x, starts, size) / size


def _busy_columns(channels: list[str]) -> tuple[list[str], list[int]]:
    """CPU numbers and the columns of their ``derived.cpu_busy_pct{cpu=N}``."""
    cpus, cols = _busy_columns_of(tuple(channels))
    return list(cpus), list(cols)


@functools.lru_cache(maxsize=16)
def _busy_columns_of(channels: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[int, ...]]:
    cpus, cols = [], []
    for i, channel in enumerate(channels):
        metric, labels = parse_channel(channel)
        if metric == BUSY_METRIC and labels.get("cpu", "").isdigit() and len(labels) == 1:
            cpus.append(labels["cpu"])
            cols.append(i)
    return tuple(cpus), tuple(cols)


TIE_BREAK_S = 1.0  # equal busy % in a sample: the CPU busier over this many seconds first


def sample_order(busy: np.ndarray, interval_s: float) -> np.ndarray:
    """Per sample, the CPU indices from busiest to idlest, (T, n).

    ``busy`` (T, n) is each CPU's busy % per sample (NaN counts as 0). A sample's busy %
    moves in whole jiffies, so ties are common (two idle CPUs, two saturated ones): they
    go to the CPU with the higher mean over the last :data:`TIE_BREAK_S` seconds, then to
    the lower CPU index, so that ranks do not flap between equals.
    """
    x = np.nan_to_num(np.asarray(busy, dtype=np.float64), nan=0.0)
    if x.shape[0] == 0:
        return np.zeros(x.shape, dtype=np.intp)
    k = max(1, round(TIE_BREAK_S / interval_s)) if interval_s > 0 else 1
    hi = np.arange(1, x.shape[0] + 1)
    lo = np.maximum(hi - k, 0)
    trailing = span_sums(x, hi - k, k) / (hi - lo)[:, None]
    # lexicographic (sample busy, trailing mean) via a composite key: the trailing mean
    # (0..100 %) is scaled below the smallest step of a sample's busy % that matters
    key = np.round(x, 6) + trailing * 1e-4
    return np.argsort(-key, axis=1, kind="stable")


def cpu_groups(channels: list[str], cpus: list[str],
               features: list[str] | None = None) -> dict[tuple, np.ndarray]:
    """Complete groups of per-CPU columns: channels (with ``features``: columns of one
    feature) that differ only by their ``cpu`` label, one for each CPU of ``cpus``.
    Key: ((metric, other labels), feature or None); value: the columns in ``cpus`` order."""
    position = {cpu: i for i, cpu in enumerate(cpus)}
    groups: dict[tuple, dict[str, int]] = defaultdict(dict)
    for k, channel in enumerate(channels):
        found = _cpu_of(channel)
        if found is not None and found[1] in position:
            groups[(found[0], features[k] if features is not None else None)][found[1]] = k
    return {key: np.array([by_cpu[c] for c in cpus]) for key, by_cpu in groups.items()
            if len(by_cpu) == len(cpus)}


def rank_cpu_rows(tel: Telemetry) -> Telemetry:
    """``tel`` with every complete group of per-CPU channels permuted in each sample by
    :func:`sample_order`: the column of the group's k-th CPU (in the order of the busy
    channels) holds, in every sample, the values of the CPU that was k-th busiest then.

    Channel names are unchanged (the window ranking that follows, see
    :func:`rank_cpu_columns`, then finds the CPUs in busy order in every window and names
    them ``cpu=rK``). A source without per-CPU busy % is returned as is.
    """
    cpus, busy_cols = _busy_columns(tel.channels)
    if len(cpus) < 2 or tel.n_samples == 0:
        return tel
    order = sample_order(tel.values[:, busy_cols], tel.interval_s)
    values = tel.values.copy()
    for cols in cpu_groups(tel.channels, cpus).values():
        values[:, cols] = np.take_along_axis(tel.values[:, cols], order, axis=1)
    return Telemetry(tel.host, tel.timestamps_ns, values, list(tel.channels), dict(tel.meta))


def cpu_order(busy: np.ndarray) -> np.ndarray:
    """Per window, the CPU indices from busiest to idlest (stable: ties keep CPU order)."""
    return np.argsort(-busy, axis=1, kind="stable")


_RANK = re.compile(r"cpu=" + RANK_PREFIX + r"(\d+)")


def unrank(text: str, order: np.ndarray, cpus: list[str]) -> str:
    """``text`` (a channel name or a sentence) with every ``cpu=rK`` replaced by the CPU
    that held rank K in the window whose CPU order is ``order`` (see :func:`cpu_order`):
    a report names the CPU, not its rank."""
    def cpu(match: re.Match[str]) -> str:
        rank = int(match.group(1))
        return f"cpu={cpus[int(order[rank])]}" if rank < len(order) else match.group(0)

    return _RANK.sub(cpu, text)


def rank_cpu_columns(values: np.ndarray, channels: list[str], features: list[str],
                     cpus: list[str], busy: np.ndarray) -> tuple[np.ndarray, list[str],
                                                                 dict[str, list[str]]]:
    """Feature columns of per-CPU channels reordered per window by the CPUs' busy share.

    In every window the CPUs are ranked by their mean busy % (``busy``, (W, n), stable:
    ties keep CPU order), and every per-CPU channel of a complete group (same metric and
    other labels, one channel per CPU of ``cpus``) takes, as ``cpu=r0``, the values of the
    busiest CPU, as ``cpu=r1`` those of the next, ... All channels of one CPU move
    together (its softirqs, interrupts and times stay with its load). Returns the new
    values, the new channel names and, per renamed channel, the channels it draws from.
    """
    if len(cpus) < 2 or busy.shape[0] != values.shape[0]:
        return values, channels, {}
    groups, names, sources = _rank_plan(tuple(channels), tuple(features), tuple(cpus))
    order = cpu_order(busy)  # (W, n): CPU index by rank
    out = values.copy()
    if groups:  # every group at once: (W, groups, n) taken along the CPU axis
        table = np.stack(groups)
        block = values[:, table]
        out[:, table] = np.take_along_axis(block, order[:, None, :], axis=2)
    return out, list(names), {k: list(v) for k, v in sources.items()}


@functools.lru_cache(maxsize=16)
def _rank_plan(channels: tuple[str, ...], features: tuple[str, ...], cpus: tuple[str, ...],
               ) -> tuple[tuple[np.ndarray, ...], tuple[str, ...],
                          dict[str, tuple[str, ...]]]:
    """The per-CPU column groups, the ranked column names and their sources of one column
    layout: the same for every window of a run and every call scoring it live (parsing
    thousands of channel names each call cost ~50 ms), so kept by value."""
    names = list(channels)
    sources: dict[str, tuple[str, ...]] = {}
    groups = []
    for ((metric, rest), _feature), cols in cpu_groups(list(channels), list(cpus),
                                                       list(features)).items():
        cols.setflags(write=False)
        groups.append(cols)
        for rank, col in enumerate(cols):
            name = format_channel(metric, dict(rest) | {"cpu": f"{RANK_PREFIX}{rank}"})
            names[col] = name
            sources[name] = tuple(channels[c] for c in cols)
    return tuple(groups), tuple(names), sources


def cpu_siblings(channels: list[str], kept: set[str]) -> list[str]:
    """Channels of ``channels`` that differ from a ``kept`` one only by their CPU: ranking
    needs every CPU of a group, so correlation pruning keeps or drops a group whole."""
    groups = {found[0] for c in kept if (found := _cpu_of(c)) is not None}
    return [c for c in channels if (found := _cpu_of(c)) is not None and found[0] in groups]
