"""Long series cut to what a plot can show: the minimum and maximum per pixel bucket.

A trace of 36,000 samples (an hour at 100 ms) drawn 900 pixels wide shows at most two
values per pixel column: the lowest and the highest. :func:`min_max` keeps exactly those,
in one pass of NumPy's ``reduceat`` (no loop per bucket), so spikes and drops survive and
the page stays small. NaN (not sampled) is ignored within a bucket; a bucket with no
sample left is dropped.
"""

from __future__ import annotations

import numpy as np

#: Buckets of a decimated trace: about one per pixel column of a report's plot.
BUCKETS = 900


def min_max(x: np.ndarray, y: np.ndarray, buckets: int = BUCKETS) -> tuple[np.ndarray,
                                                                          np.ndarray]:
    """``(x, y)`` with at most ``2 × buckets`` points: per bucket of consecutive samples
    (equal counts), its first ``x`` twice, with the bucket's minimum then maximum of
    ``y`` (NaN ignored). Series no longer than ``2 × buckets`` come back as they are.

    ``x``: shape (T,), increasing (any unit); ``y``: shape (T,), float."""
    x = np.asarray(x)
    y = np.asarray(y, dtype=np.float64)
    n = len(y)
    if n <= 2 * buckets:
        return x, y
    starts = np.unique(np.linspace(0, n, buckets, endpoint=False).astype(np.int64))
    lo = np.fmin.reduceat(y, starts)  # fmin/fmax skip NaN unless all are NaN
    hi = np.fmax.reduceat(y, starts)
    keep = np.isfinite(lo)
    xs = np.repeat(x[starts][keep], 2)
    ys = np.column_stack([lo[keep], hi[keep]]).ravel()
    return xs, ys


def peak_rows(values: np.ndarray, buckets: int) -> np.ndarray:
    """Indices of at most ``buckets`` rows of ``values`` (shape (N,)): per bucket of
    consecutive rows, the row of its highest value (NaN lowest), in order. A score
    timeline keeps its peaks, and each kept row keeps its own window's words. Short
    arrays keep every row."""
    values = np.asarray(values, dtype=np.float64)
    n = len(values)
    if n <= buckets:
        return np.arange(n)
    starts = np.unique(np.linspace(0, n, buckets, endpoint=False).astype(np.int64))
    bucket = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, n)))
    key = np.where(np.isfinite(values), values, -np.inf)
    order = np.lexsort((-key, bucket))  # by bucket, highest first within it
    first = np.ones(n, dtype=bool)
    first[1:] = bucket[order][1:] != bucket[order][:-1]
    return np.sort(order[first])
