"""CPU time the kernel spent serving something else, inside the CPU busy percentages.

``derived.cpu_busy_pct`` counts every state of ``/proc/stat`` that is work
(:data:`reveal.analysis.derive.CPU_BUSY_FIELDS`), kernel mode and interrupts included. The
catalog says kernel-mode and interrupt time *follow* what the kernel serves (``follows``:
page faults, I/O, packets): they are evidence, never the cause. A rise of a busy percentage
made of those states is then no CPU cause either: a process that populates 4 GiB keeps a
CPU busy zeroing pages for seconds, and that CPU is the memory's. The model keeps the
baseline's level of those states host-wide (ticks per second, the median of its window
means: :func:`kernel_level`), each flagged window's rise over it is read from the run
(:func:`kernel_rise`, whichever feature columns the selection kept), and the claim sizes a
busy rise by what that rise cannot account for (:func:`served_share`).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Sequence

import numpy as np

from reveal.analysis.derive import CPU_BUSY_FIELDS
from reveal.analysis.direct import window_means
from reveal.analysis.floors import USER_HZ
from reveal.analysis.percpu import BUSY_METRIC
from reveal.catalog import default_catalog
from reveal.frame import Telemetry, parse_channel

#: features of a level: the busy share and the states' rates are compared as such
LEVEL_FEATURES = ("median", "mean")


@functools.lru_cache(maxsize=1)
def kernel_states() -> tuple[str, ...]:
    """The host-wide ``/proc/stat`` busy states that follow what the kernel serves."""
    catalog = default_catalog()
    return tuple(f"cpu.{s}" for s in CPU_BUSY_FIELDS if catalog.lookup(f"cpu.{s}").follows)


def _kernel_columns(channels: Sequence[str]) -> np.ndarray:
    states = set(kernel_states())
    return np.array([k for k, c in enumerate(channels) if c in states], dtype=np.intp)


def _window_kernel_ticks(d_tel: Telemetry, start_ns: np.ndarray, size: int) -> np.ndarray:
    """(W,) the host's kernel and interrupt time in each window, ticks per second (the sum
    of the states' window means); NaN where the run has none of them."""
    cols = _kernel_columns(d_tel.channels)
    if not len(cols) or not len(start_ns):
        return np.full(len(start_ns), np.nan)
    means = window_means(d_tel, cols, np.asarray(start_ns), size)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.where(np.isnan(means).all(axis=1), np.nan, np.nansum(means, axis=1))


def kernel_level(d_base: Telemetry, start_ns: np.ndarray, size: int) -> float | None:
    """The baseline's level of the host's kernel and interrupt time: the median over its
    windows (``size`` samples from each of ``start_ns``) of their means, ticks per second;
    None where the baseline has none of those states."""
    ticks = _window_kernel_ticks(d_base, start_ns, size)
    if not np.isfinite(ticks).any():
        return None
    return float(np.nanmedian(ticks))


def kernel_rise(d_run: Telemetry, start_ns: np.ndarray, size: int,
                level: float | None) -> np.ndarray:
    """(W,) how far the host's kernel and interrupt time rose over the baseline's ``level``
    in each window of a derived run, ticks per second (never below 0; 0 where either is
    unknown)."""
    if level is None:
        return np.zeros(len(start_ns))
    ticks = _window_kernel_ticks(d_run, start_ns, size)
    return np.nan_to_num(np.maximum(ticks - level, 0.0))


@functools.lru_cache(maxsize=32)
def _busy_columns(channels: tuple[str, ...], features: tuple[str, ...]
                  ) -> tuple[tuple[int, bool], ...]:
    """Each level column of a CPU busy share, and whether it is the host's (else one
    CPU's)."""
    out = []
    for k, (channel, feature) in enumerate(zip(channels, features, strict=True)):
        metric, labels = parse_channel(channel)
        if metric == BUSY_METRIC and feature in LEVEL_FEATURES and not set(labels) - {"cpu"}:
            out.append((k, not labels))
    return tuple(out)


def served_share(channels: Sequence[str], features: Sequence[str], rise_ticks: float,
                 n_cpus: int) -> np.ndarray:
    """(K,) per feature column of one window: the percentage points of a rise of a CPU
    busy share (a ``median`` or ``mean`` column) that the host's rise of kernel and
    interrupt time, ``rise_ticks`` per second (:func:`kernel_rise`), accounts for: over the
    ``n_cpus`` CPUs' ticks for the host's share; as a share of one CPU for one CPU's (which
    CPU spent it is not kept: the claim takes at most the CPU's own rise). 0 for every
    other column, and everywhere when ``n_cpus`` is unknown (0)."""
    out = np.zeros(len(channels))
    if n_cpus <= 0 or rise_ticks <= 0:
        return out
    for k, host in _busy_columns(tuple(channels), tuple(features)):
        out[k] = rise_ticks * 100.0 / (USER_HZ * (n_cpus if host else 1))
    return out
