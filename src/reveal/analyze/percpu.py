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
"""

from __future__ import annotations

import re
from collections import defaultdict

import numpy as np

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
    """CPU numbers and their mean busy % over each window (W, n_cpus); NaN counts as 0."""
    cpus, cols = [], []
    for i, channel in enumerate(tel.channels):
        metric, labels = parse_channel(channel)
        if metric == BUSY_METRIC and labels.get("cpu", "").isdigit() and len(labels) == 1:
            cpus.append(labels["cpu"])
            cols.append(i)
    if len(cols) < 2 or len(starts) == 0:
        return cpus, np.zeros((len(starts), len(cols)))
    x = np.nan_to_num(tel.values[:, cols], nan=0.0)
    c = np.vstack([np.zeros((1, len(cols))), np.cumsum(x, axis=0)])
    starts = np.asarray(starts, dtype=np.int64)
    return cpus, (c[starts + size] - c[starts]) / size


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
    order = cpu_order(busy)  # (W, n): CPU index by rank
    position = {cpu: i for i, cpu in enumerate(cpus)}
    groups: dict[tuple, dict[str, int]] = defaultdict(dict)
    for k, (channel, feature) in enumerate(zip(channels, features, strict=True)):
        found = _cpu_of(channel)
        if found is not None and found[1] in position:
            groups[(found[0], feature)][found[1]] = k
    out = values.copy()
    names = list(channels)
    sources: dict[str, list[str]] = {}
    for ((metric, rest), _feature), by_cpu in groups.items():
        if len(by_cpu) != len(cpus):
            continue
        cols = np.array([by_cpu[c] for c in cpus])
        out[:, cols] = np.take_along_axis(values[:, cols], order, axis=1)
        for rank, col in enumerate(cols):
            name = format_channel(metric, dict(rest) | {"cpu": f"{RANK_PREFIX}{rank}"})
            names[col] = name
            sources[name] = [channels[c] for c in cols]
    return out, names, sources


def cpu_siblings(channels: list[str], kept: set[str]) -> list[str]:
    """Channels of ``channels`` that differ from a ``kept`` one only by their CPU: ranking
    needs every CPU of a group, so correlation pruning keeps or drops a group whole."""
    groups = {found[0] for c in kept if (found := _cpu_of(c)) is not None}
    return [c for c in channels if (found := _cpu_of(c)) is not None and found[0] in groups]
