"""Episodes with an end: a fault's aftermath as a new steady state, named once.

After a fault the host rarely returns exactly to where it was: the page cache holds less
(or more), memory freed by a process stays free, socket buffers keep their size. Against
the baseline these levels are changes that matter, and window after window would be flagged
as if the fault went on. A level that has held still for :data:`SETTLE_S` seconds is a new
steady state instead: the windows whose only changes that matter are such levels are not
anomalies, and the report names the new state once ("Page-cache memory holds 3.1 GiB less
than in the baseline, steady since 10:32:05").

Only levels of state-like gauges qualify (memory, pages, sockets, free blocks: catalog kinds
``gauge`` and ``state``, features mean, median, minimum and maximum): a rate that stays
different (CPU time, throughput, packets, stalls) is the job running differently, which is
never adopted here. A level holds still when its window values over the last
:data:`SETTLE_S` seconds stay within its least change that matters of each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.ndimage import maximum_filter1d, minimum_filter1d

from reveal.analysis.constants import LEVEL_FEATURES
from reveal.catalog import Catalog, default_catalog
from reveal.frame import channel_metric

#: Seconds a changed level must hold still before it is a new steady state.
SETTLE_S = 20.0
STATE_KINDS = ("gauge", "state")
#: Channels of a new state named in its claim, at most.
NAMED_CHANNELS = 3


@dataclass
class SteadyState:
    """A new steady state: since when (ns, monotonic like the windows), the windows it
    covers, and the levels that changed (channel, baseline median, level now; derived
    units)."""

    since_ns: int
    first_window: int
    last_window: int
    changes: list[tuple[str, float, float]] = field(default_factory=list)


def state_columns(channels: Sequence[str], features: Sequence[str],
                  catalog: Catalog | None = None) -> np.ndarray:
    """(K,) which feature columns are levels of state-like gauges."""

    catalog = catalog or default_catalog()
    out = np.zeros(len(channels), dtype=bool)
    for k, (channel, feature) in enumerate(zip(channels, features, strict=True)):
        if feature not in LEVEL_FEATURES:
            continue
        metric = channel_metric(channel)
        if catalog.lookup(metric).rate:  # a rate or share of time in disguise (catalog)
            continue
        out[k] = catalog.lookup(metric).kind in STATE_KINDS
    return out


def held_still(values: np.ndarray, least: np.ndarray, windows: int) -> np.ndarray:
    """``(W, K)``: whether each column's values over the last ``windows`` windows (this one
    included) stay within ``least`` of each other (False before that many windows).
    Missing values are left out; a span with none is not still. Running maxima and minima
    (``scipy.ndimage``), so the cost does not grow with ``windows``."""
    n, k = values.shape
    out = np.zeros((n, k), dtype=bool)
    if windows < 1 or n < windows:
        return out
    x = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(x)
    # a trailing window: the filter's window [i - size // 2 + origin ...] ends at i with
    # origin = (size - 1) // 2 for an odd size, size // 2 - 1 for an even one
    origin = (windows - 1) // 2 if windows % 2 else windows // 2 - 1
    top = maximum_filter1d(np.where(finite, x, -np.inf), windows, axis=0, origin=origin)
    low = minimum_filter1d(np.where(finite, x, np.inf), windows, axis=0, origin=origin)
    with np.errstate(invalid="ignore"):
        spread = top - low
        out[windows - 1:] = (np.isfinite(spread) & (spread < least))[windows - 1:]
    return out


def steady_windows(values: np.ndarray, cells: np.ndarray, least: np.ndarray,
                   state: np.ndarray, windows: int) -> tuple[np.ndarray, np.ndarray]:
    """(W,) windows whose changes that matter (``cells``) are all levels of state-like
    gauges (``state``) that have held still for ``windows`` windows, and (W,) windows
    where some such changed level holds still (whatever else changed)."""
    none = np.zeros(values.shape[0], dtype=bool)
    if not cells.any():
        return none, none
    finite = np.isfinite(least) & (least > 0)
    still = held_still(values, np.where(finite, least, np.inf), windows) & state & finite
    return cells.any(axis=1) & ~(cells & ~still).any(axis=1), (cells & still).any(axis=1)


def steady_states(steady: np.ndarray, cells: np.ndarray, values: np.ndarray,
                  median: np.ndarray, least: np.ndarray, channels: Sequence[str],
                  start_ns: np.ndarray, windows: int,
                  flagged: np.ndarray | None = None) -> list[SteadyState]:
    """One :class:`SteadyState` per stretch of consecutive windows where a changed level
    holds (``steady``; ``flagged``: only stretches where the detectors flagged some
    window), naming the levels that changed most (in units of their least change) in its
    first window."""
    out: list[SteadyState] = []
    idx = np.flatnonzero(steady)
    if idx.size == 0:
        return out
    breaks = np.flatnonzero(np.diff(idx) > 1)
    for first, last in zip(np.r_[idx[0], idx[breaks + 1]], np.r_[idx[breaks], idx[-1]],
                           strict=True):
        if flagged is not None and not flagged[first:last + 1].any():
            continue
        ks = np.flatnonzero(cells[first])
        with np.errstate(divide="ignore", invalid="ignore"):
            size = np.abs(values[first, ks] - median[ks]) / least[ks]
        seen: set[str] = set()
        changes = []
        for k in ks[np.argsort(-np.nan_to_num(size, nan=0.0))]:
            if channels[k] in seen:
                continue
            seen.add(channels[k])
            changes.append((channels[k], float(median[k]), float(values[first, k])))
            if len(changes) == NAMED_CHANNELS:
                break
        since = int(start_ns[max(int(first) - windows + 1, 0)])
        out.append(SteadyState(since, int(first), int(last), changes))
    return out
