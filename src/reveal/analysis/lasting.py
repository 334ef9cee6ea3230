"""Lasting levels: a change judged against the baseline over the span it has lasted.

A window's level is judged against the levels the baseline's own windows reached (its
reach, :func:`reveal.analysis.significance.level_tails`): a job that swings its memory by
4 points while it loads data reaches 8 % for a window now and then, and a fault that holds
memory at 8 % is within that reach window by window. Held for :data:`lasting_s` seconds,
it is not: the baseline's levels averaged over that long never reached it, and its windows
held it for less than that long in all. So every level is judged twice: window by window
against the baseline's window reach, and averaged over the last ``lasting_s`` seconds of
windows against the reach of the baseline's own averages over as long and of the levels
its windows held for as long in all (``DetectConfig.lasting_s``; 0: off), while the
window's own level is still past that reach by as much. Either is a change that matters.
"""

from __future__ import annotations

import numpy as np

from reveal.analysis.significance import level_tails, significant_cells


def lasting_windows(lasting_s: float, stride_s: float) -> int:
    """Windows a lasting level is averaged over (0: not judged; at least 2 otherwise)."""
    if lasting_s <= 0 or stride_s <= 0:
        return 0
    return max(2, round(lasting_s / stride_s))


def trailing_means(values: np.ndarray, windows: int,
                   history: np.ndarray | None = None) -> np.ndarray:
    """(W, K) the mean of each column over every window's last ``windows`` windows (itself
    included; ``history``: the rows just before ``values``), ignoring missing values; NaN
    where fewer than ``windows`` windows lie behind it or none of them has a value."""
    before = 0 if history is None or not len(history) else len(history)
    x = np.vstack([history, values]) if before else np.asarray(values, dtype=np.float64)
    finite = np.isfinite(x)
    sums = np.cumsum(np.where(finite, x, 0.0), axis=0)
    counts = np.cumsum(finite, axis=0, dtype=np.int64)
    zero = np.zeros((1, x.shape[1]))
    sums = np.vstack([zero, sums])
    counts = np.vstack([zero.astype(np.int64), counts])
    n = len(x)
    out = np.full(x.shape, np.nan)
    if n >= windows:
        total = sums[windows:] - sums[:-windows]
        count = counts[windows:] - counts[:-windows]
        with np.errstate(invalid="ignore", divide="ignore"):
            out[windows - 1:] = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    return out[before:]


def lasting_reach(base_values: np.ndarray, windows: int, features: tuple[str, ...],
                  min_spans: int = 4) -> np.ndarray | None:
    """(2, K) how far the baseline's own levels averaged over ``windows`` windows reached
    above and below their median, and at least how far the levels its windows held for as
    long in all reached (the quantile at ``windows`` over the baseline's windows: a job that
    spends a fifth of its learn at a lower pace of its own, in spells shorter than a
    lasting span, has that pace among its levels, however long it holds it later). None:
    the baseline holds fewer than ``min_spans`` spans of that many windows end to end,
    ``DetectConfig.lasting_min_spans``: the reach of a few overlapping averages would be
    too tight, and a fault's recovery would look like a lasting change."""
    if windows < 2 or len(base_values) < max(int(min_spans), 1) * windows:
        return None
    means = trailing_means(base_values, windows)[windows - 1:]
    held = level_tails(base_values, features, quantile=1.0 - windows / len(base_values))
    return np.maximum(level_tails(means, features), held)


def lasting_cells(values: np.ndarray, history: np.ndarray | None, windows: int,
                  median: np.ndarray, scale: np.ndarray, least: np.ndarray,
                  direction: np.ndarray | None, reach: np.ndarray) -> np.ndarray:
    """(W, K) where the level averaged over a window's last ``windows`` windows is a change
    that matters past the baseline's lasting ``reach`` (see :func:`lasting_reach`), and the
    window's own level is still past that reach by as much, the same way: a change that
    has ended is not kept by the average of the windows that held it. The
    lasting reach stands for the baseline's spread (``scale``, a window's robust sigma, is
    not used: a counter read once a second is noisy window by window, not over 30 s)."""
    means = trailing_means(values, windows, history)
    # no window's robust sigmas: an average over a lasting span is judged against the
    # spread the baseline's own averages over as long showed (its reach), and the window
    # only by its distance from the median
    del scale
    lasting = significant_cells(means, median, np.zeros_like(median), least, z_min=0.0,
                                direction=direction, reach=reach)
    still = significant_cells(values, median, np.zeros_like(median), least, z_min=0.0,
                              direction=direction, reach=reach)
    with np.errstate(invalid="ignore"):
        same_way = np.sign(values - median) == np.sign(means - median)
    return lasting & still & same_way
