"""One episode grouper: flagged windows whose spans overlap or touch are one episode.

Used by the single-host report (windows with their own start and end, nanoseconds) and by
the fleet (windows on a regular grid, where a gap of a few windows is bridged); the live
watch groups as it goes (:class:`reveal.live.alerts.EpisodeTracker`) and closes an
episode after a quiet time instead.
"""

from __future__ import annotations

import numpy as np


def touching(start: np.ndarray, end: np.ndarray) -> list[tuple[int, int]]:
    """Groups of spans, as (first, last) positions into ``start``/``end`` (sorted by start),
    where each span starts no later than the latest end of the spans before it in the group.
    Any unit (nanoseconds, window indices); an empty input gives no group."""
    start = np.asarray(start)
    end = np.asarray(end)
    if start.size == 0:
        return []
    reach = np.maximum.accumulate(end)
    breaks = np.flatnonzero(start[1:] > reach[:-1])
    firsts = np.r_[0, breaks + 1]
    lasts = np.r_[breaks, start.size - 1]
    return list(zip(firsts.tolist(), lasts.tolist(), strict=True))


def runs(mask: np.ndarray, gap: int) -> list[tuple[int, int]]:
    """Runs of True in a 1-D ``mask`` as (first, last) indices, gaps of up to ``gap``
    windows bridged: the windows of a regular grid grouped by :func:`touching`, each
    reaching ``gap + 1`` windows past its own index."""
    idx = np.flatnonzero(mask)
    return [(int(idx[a]), int(idx[b])) for a, b in touching(idx, idx + gap + 1)]
