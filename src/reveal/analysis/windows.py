"""Sliding windows over the rows of a run: which rows each window holds, and when.

A window is ``size`` consecutive rows starting at ``start``; windows start at row 0 and
every ``stride`` rows after it, and only windows that fit entirely are kept. Windows are
defined on rows (samples), not on clock time: a gap in the timestamps (missed samples)
does not change which rows a window holds, and a window's time span is that of its rows
(from its first sample to one interval after its last). Sizes are given in seconds
(converted to rows with the sampling interval) or directly in rows (minute-level data such
as SMD).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reveal.config import WindowConfig
from reveal.errors import InputError


@dataclass(frozen=True)
class Windows:
    """The windows of one run.

    Attributes
    ----------
    start : ndarray of int64, shape (W,)
        First row index of each window.
    size : int
        Rows per window.
    stride : int
        Rows between consecutive window starts.
    start_ns : ndarray of int64, shape (W,)
        Timestamp (ns) of each window's first row.
    end_ns : ndarray of int64, shape (W,)
        Exclusive end (ns): timestamp of the window's last row plus one sampling interval
        (``start_ns + size * interval`` when no sample is missing inside the window).
    """

    start: np.ndarray
    size: int
    stride: int
    start_ns: np.ndarray
    end_ns: np.ndarray

    @property
    def ids(self) -> np.ndarray:
        """Window ids 0..W-1 (int64)."""
        return np.arange(len(self.start), dtype=np.int64)

    def __len__(self) -> int:
        return len(self.start)


def span_sums(x: np.ndarray, starts: np.ndarray, size: int) -> np.ndarray:
    """``x[s:s + size].sum(axis=0)`` for every ``s`` of ``starts`` (W, columns); rows
    outside ``x`` count as 0. The rows of a span are added one by one in order, so a sum
    is bit for bit the same wherever its rows sit in ``x`` (a difference of cumulative sums
    is not: it rounds by what precedes the rows). A live scorer that reads only a window's
    rows therefore gets the whole run's sums, ties included. Vectorised over spans ×
    columns; the loop runs over the ``size`` rows of a span."""
    starts = np.asarray(starts, dtype=np.int64)
    acc = np.zeros((len(starts), x.shape[1]))
    for j in range(size):
        rows = starts + j
        ok = (rows >= 0) & (rows < x.shape[0])
        if ok.all():
            acc += x[rows]
        elif ok.any():
            acc[ok] += x[rows[ok]]
    return acc


def sampling_interval_s(timestamps_ns: np.ndarray) -> float:
    """Median step between consecutive timestamps, in seconds (robust to gaps)."""
    ts = np.asarray(timestamps_ns, dtype=np.int64)
    if ts.size < 2:
        raise InputError("cannot infer the sampling interval from fewer than 2 samples")
    return float(np.median(np.diff(ts))) / 1e9


def make_windows(
    timestamps_ns: np.ndarray, config: WindowConfig, interval_s: float | None = None
) -> Windows:
    """Cut a run with the given timestamps into sliding windows.

    Parameters
    ----------
    timestamps_ns : ndarray of int64, shape (T,)
        Sample times in nanoseconds, strictly increasing.
    config : WindowConfig
        ``size_rows``/``stride_rows`` when set (``stride_rows`` defaults to 1), else
        ``size_s``/``stride_s`` in seconds, converted with
        ``rows = round(seconds / interval_s)``.
    interval_s : float, optional
        Sampling interval in seconds; defaults to the median timestamp step.

    Raises
    ------
    InputError
        Timestamps not 1-D or not increasing, a window or stride of less than one row,
        or a run shorter than one window.
    """
    ts = np.asarray(timestamps_ns)
    if ts.ndim != 1:
        raise InputError(f"timestamps must be 1-D, got shape {ts.shape}")
    ts = ts.astype(np.int64, copy=False)
    n_rows = int(ts.size)
    if n_rows >= 2 and np.any(np.diff(ts) <= 0):
        raise InputError("timestamps are not strictly increasing")
    if interval_s is not None and not (np.isfinite(interval_s) and interval_s > 0):
        raise InputError(f"sampling interval must be positive seconds, got {interval_s}")

    if config.size_rows is not None:
        size = int(config.size_rows)
        stride = int(config.stride_rows) if config.stride_rows is not None else 1
        if size < 1 or stride < 1:
            raise InputError(f"window of {size} rows with stride {stride}: both must be >= 1")
        if interval_s is None:
            interval_s = sampling_interval_s(ts) if n_rows >= 2 else 0.0
        if n_rows < size:
            raise InputError(
                f"run has {n_rows} samples ({n_rows * interval_s:g} s), "
                f"shorter than one window of {size} rows"
            )
    else:
        if interval_s is None:
            if n_rows < 2:
                raise InputError(
                    f"run has {n_rows} samples, shorter than one window of {config.size_s:g} s"
                )
            interval_s = sampling_interval_s(ts)
        if interval_s <= 0:
            raise InputError("sampling interval is 0 s (repeated timestamps)")
        size = round(config.size_s / interval_s)
        stride = round(config.stride_s / interval_s)
        if size < 1 or stride < 1:
            raise InputError(
                f"window of {config.size_s:g} s with stride {config.stride_s:g} s is shorter "
                f"than the sampling interval of {interval_s:g} s; set size_rows/stride_rows"
            )
        if n_rows < size:
            raise InputError(
                f"run has {n_rows} samples ({n_rows * interval_s:g} s), "
                f"shorter than one window of {config.size_s:g} s"
            )

    n_windows = (n_rows - size) // stride + 1
    start = np.arange(n_windows, dtype=np.int64) * stride
    start_ns = ts[start].copy()
    # the last row's own time: a gap inside the window moves the end with it
    end_ns = ts[start + (size - 1)] + np.int64(round(interval_s * 1e9))
    return Windows(start=start, size=size, stride=stride, start_ns=start_ns, end_ns=end_ns)
