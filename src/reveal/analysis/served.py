"""CPU time the kernel spent serving something else, inside the host's CPU busy percentage.

``derived.cpu_busy_pct`` counts every state of ``/proc/stat`` that is work
(:data:`reveal.analysis.derive.CPU_BUSY_FIELDS`), kernel mode and interrupts included. The
catalog says kernel-mode and interrupt time *follow* what the kernel serves (``follows``:
page faults, I/O, packets): they are evidence, never the cause. A rise of the busy
percentage made of those states is then no CPU cause either: a process that populates
4 GiB keeps a CPU busy zeroing pages for seconds, and that CPU is the memory's. This
module says how much of a window's busy rise is made of them, from the window's own rates
of those states, so that the claim can size the busy change by the rest (the work the
host's tasks did themselves).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from reveal.analysis.derive import CPU_BUSY_FIELDS
from reveal.analysis.floors import USER_HZ
from reveal.catalog import default_catalog
from reveal.frame import parse_channel

BUSY = "derived.cpu_busy_pct"
#: features of a level: the busy share and the states' rates are compared as such
LEVEL_FEATURES = ("median", "mean")


@functools.lru_cache(maxsize=32)
def _busy_columns(channels: tuple[str, ...], features: tuple[str, ...]
                  ) -> tuple[tuple[int, int, tuple[int, ...]], ...]:
    """Each level column of a CPU busy share, whether it is the host's (1) or one CPU's
    (0), and the columns of the same feature of the host-wide busy states that follow
    (catalog ``follows``) the model kept."""
    catalog = default_catalog()
    following = [f"cpu.{s}" for s in CPU_BUSY_FIELDS if catalog.lookup(f"cpu.{s}").follows]
    index = {(c, f): k for k, (c, f) in enumerate(zip(channels, features, strict=True))}
    out = []
    for k, (channel, feature) in enumerate(zip(channels, features, strict=True)):
        metric, labels = parse_channel(channel)
        if metric != BUSY or feature not in LEVEL_FEATURES or set(labels) - {"cpu"}:
            continue
        parts = tuple(index[(s, feature)] for s in following if (s, feature) in index)
        if parts:
            out.append((k, int(not labels), parts))
    return tuple(out)


def served_share(row: np.ndarray, median: np.ndarray, channels: Sequence[str],
                 features: Sequence[str], n_cpus: int) -> np.ndarray:
    """(K,) per feature column of one window: the percentage points of a rise of a CPU
    busy share (a ``median`` or ``mean`` column) that the host's busy states that follow
    (kernel mode, interrupts) can account for, from the window's rates of those states
    against the baseline's: for the host's share, their rise over the ``n_cpus`` CPUs'
    ticks; for one CPU's (which CPU spent it is not kept), their rise as a share of one
    CPU, at most the CPU's own rise. 0 for every other column, and everywhere when
    ``n_cpus`` is unknown (0). ``row`` and ``median``: the window's and the baseline's
    feature values (ticks per second for the states, percent for the shares); a state
    the model did not keep counts no rise."""
    out = np.zeros(len(channels))
    if n_cpus <= 0:
        return out
    for k, host, parts in _busy_columns(tuple(channels), tuple(features)):
        columns = np.asarray(parts, dtype=np.intp)
        ticks = max(float(np.nansum(row[columns] - median[columns])), 0.0)
        out[k] = ticks * 100.0 / (USER_HZ * (n_cpus if host else 1))
    return out
