"""The peer comparison of one time block: robust z of every host against the others.

For all hosts × a block of windows × the compared columns at once: the peers' median and
MAD per window and column (sorting along the host axis, NaN = no value; the spread is at
least the column's median spread over the block's windows, the catalog's unit floor and a
share of the level), the robust z of
each host, its score per subsystem (the mean of its ``top_k`` largest |z| there), the
columns that set each host-window apart, and the peer band (10 %, 50 %, 90 %) for traces.
Blocks are independent, so a fleet is compared block by block in bounded memory, in one
process or as Dask tasks (:mod:`reveal.fleet.distributed`).
"""

from __future__ import annotations

import warnings as pywarnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from reveal.analysis.constants import MAD_TO_SIGMA

#: |z| from which a host counts as deviating on a column (for ``max_deviating_share``)
DEVIATING_Z = 3.0


@dataclass
class BlockResult:
    """What one block contributes (``H`` hosts, ``B`` windows, ``K`` columns, ``S``
    subsystems, ``M`` kept columns per host-window)."""

    first: int  # grid index of the block's first window
    subsystem_scores: np.ndarray  # (H, B, S) float32
    top_column: np.ndarray  # (H, B, M) int32, columns by descending |z|
    top_z: np.ndarray  # (H, B, M) float32, signed z
    top_value: np.ndarray  # (H, B, M) float32, the host's value
    median: np.ndarray  # (B, K) float32 peer median
    p10: np.ndarray  # (B, K) float32
    p90: np.ndarray  # (B, K) float32


def _quantile_sorted(s: np.ndarray, n: np.ndarray, q: float) -> np.ndarray:
    """Quantile ``q`` along the last axis of ``s`` (sorted, NaN last; ``n`` finite counts)."""
    pos = q * np.maximum(n - 1, 0)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, np.maximum(n - 1, 0))
    frac = (pos - lo).astype(s.dtype)
    a = np.take_along_axis(s, lo[..., None], axis=-1)[..., 0]
    b = np.take_along_axis(s, hi[..., None], axis=-1)[..., 0]
    out = a + (b - a) * frac
    return np.where(n > 0, out, np.nan).astype(s.dtype)


#: values (windows × columns × hosts) compared at once inside a block: bounds the
#: temporaries (a few float32 copies of this size) whatever the block's size
CHUNK_VALUES = 2_000_000


def _top(values: np.ndarray, k: int) -> np.ndarray:
    """Indices along axis 1 of the ``k`` largest (unordered)."""
    if values.shape[1] <= k:
        return np.broadcast_to(np.arange(values.shape[1])[None, :, None],
                               values.shape).copy()
    return np.argpartition(-values, k - 1, axis=1)[:, :k, :]


def compare_block(parts: Sequence[np.ndarray], floors: np.ndarray, subsystem_of: np.ndarray,
                  n_subsystems: int, *, first: int = 0, relative_floor: float = 0.05,
                  z_cap: float = 50.0, top_k: int = 3, keep_columns: int = 8,
                  min_hosts: int = 3, channel_of: np.ndarray | None = None,
                  max_deviating_share: float = 1.0) -> BlockResult:
    """Compare every host with its peers over one block.

    Parameters
    ----------
    parts : sequence of H ndarrays of float32, shape (B, K)
        Each host's feature values on the block's windows; NaN where it has no value.
    floors : ndarray, shape (K,)
        Least change that counts per column (feature units).
    subsystem_of : ndarray of int, shape (K,)
        Subsystem index of each column.
    channel_of : ndarray of int, shape (K,), optional
        Channel index of each column, a channel's columns adjacent: a channel then counts
        once in its subsystem's top-k (its largest |z| over its features), so a score
        needs ``top_k`` channels that set the host apart, not one channel's statistics.
    max_deviating_share : float
        At a moment when more than this share of the hosts with a value deviate on a
        column (|z| > :data:`DEVIATING_Z`), the peers do not agree on it (a level each host
        reached by its own history) and it counts for no host; 1.0 keeps every column.

    The columns are taken :data:`CHUNK_VALUES` at a time; per-subsystem top-k and the kept
    columns are merged across chunks, so the result does not depend on the chunking.
    """
    h = len(parts)
    b, k = parts[0].shape if h else (0, 0)
    floors = np.asarray(floors, dtype=np.float32)
    subsystem_of = np.asarray(subsystem_of)
    median = np.full((b, k), np.nan, np.float32)
    p10 = np.full((b, k), np.nan, np.float32)
    p90 = np.full((b, k), np.nan, np.float32)
    sub_top = [np.zeros((b, 0, h), np.float32) for _ in range(n_subsystems)]
    keep_az = np.zeros((b, 0, h), np.float32)
    keep_col = np.zeros((b, 0, h), np.int64)
    keep_z = np.zeros((b, 0, h), np.float32)
    keep_x = np.zeros((b, 0, h), np.float32)
    step = max(1, CHUNK_VALUES // max(1, b * h))
    if channel_of is not None:
        channel_of = np.asarray(channel_of)
        channel_start = np.r_[0, np.flatnonzero(np.diff(channel_of) != 0) + 1]
    c1 = 0
    while c1 < k:
        c0 = c1
        c1 = min(k, c0 + step)
        if channel_of is not None and c1 < k:  # a channel's columns in one chunk
            c1 = int(channel_start[np.searchsorted(channel_start, c1)]) \
                if c1 <= channel_start[-1] else k
        x = np.stack([p[:, c0:c1] for p in parts], axis=-1).astype(np.float32, copy=False)
        med, lo, hi, z = _robust_z(x, floors[c0:c1], relative_floor, min_hosts)
        if max_deviating_share < 1.0:
            with np.errstate(invalid="ignore"):
                deviating = (np.abs(z) > DEVIATING_Z).sum(axis=-1)
            z[deviating > max_deviating_share * np.isfinite(x).sum(axis=-1)] = np.nan
        median[:, c0:c1], p10[:, c0:c1], p90[:, c0:c1] = med, lo, hi
        az = np.minimum(np.nan_to_num(np.abs(z), nan=0.0), z_cap)  # (B, kc, H)
        per, per_sub = az, subsystem_of[c0:c1]
        if channel_of is not None:  # each channel's largest |z| over its features
            first = channel_start[(channel_start >= c0) & (channel_start < c1)] - c0
            per, per_sub = np.maximum.reduceat(az, first, axis=1), per_sub[first]
        for si in np.unique(per_sub):
            cols = np.flatnonzero(per_sub == si)
            both = np.concatenate([sub_top[si], per[:, cols, :]], axis=1)
            sub_top[si] = np.take_along_axis(both, _top(both, top_k), axis=1)
        cand = np.concatenate([keep_az, az], axis=1)
        pick = _top(cand, keep_columns)
        chunk_cols = np.broadcast_to(np.arange(c0, c1)[None, :, None], az.shape)
        keep_az = np.take_along_axis(cand, pick, axis=1)
        keep_col = np.take_along_axis(np.concatenate([keep_col, chunk_cols], axis=1), pick, 1)
        keep_z = np.take_along_axis(np.concatenate([keep_z, z], axis=1), pick, axis=1)
        keep_x = np.take_along_axis(np.concatenate([keep_x, x], axis=1), pick, axis=1)
    sub = np.zeros((h, b, n_subsystems), np.float32)
    for si, top in enumerate(sub_top):
        if top.shape[1]:
            sub[:, :, si] = np.moveaxis(top.mean(axis=1), -1, 0)
    # kept columns by descending |z|, ties by column (the same whatever the chunking)
    order = np.lexsort((keep_col, -keep_az), axis=1)
    return BlockResult(
        first=first, subsystem_scores=sub,
        top_column=np.ascontiguousarray(np.moveaxis(
            np.take_along_axis(keep_col, order, axis=1), -1, 0).astype(np.int32)),
        top_z=np.ascontiguousarray(np.moveaxis(
            np.take_along_axis(keep_z, order, axis=1), -1, 0)),
        top_value=np.ascontiguousarray(np.moveaxis(
            np.take_along_axis(keep_x, order, axis=1), -1, 0)),
        median=median, p10=p10, p90=p90)


def _robust_z(x: np.ndarray, floors: np.ndarray, relative_floor: float,
              min_hosts: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Peer median, 10 % and 90 % quantiles, and every host's robust z, for ``x``
    (B, kc, H) (NaN: no value; z NaN where fewer than ``min_hosts`` hosts have one)."""
    n = np.isfinite(x).sum(axis=-1)
    s = np.sort(x, axis=-1)
    median = _quantile_sorted(s, n, 0.5)
    p10 = _quantile_sorted(s, n, 0.1)
    p90 = _quantile_sorted(s, n, 0.9)
    del s
    dev = np.abs(x - median[..., None])
    dev.sort(axis=-1)
    mad = _quantile_sorted(dev, n, 0.5)
    del dev
    with np.errstate(invalid="ignore"), pywarnings.catch_warnings():
        pywarnings.simplefilter("ignore", RuntimeWarning)  # columns without any value
        # the column's typical peer spread over the block: a moment when a few hosts
        # happen to agree closely does not make a small difference many sigmas
        pooled = np.nan_to_num(np.nanmedian(np.where(n >= min_hosts, mad, np.nan), axis=0))
        scale = np.maximum.reduce([MAD_TO_SIGMA * np.nan_to_num(mad),
                                   np.broadcast_to(MAD_TO_SIGMA * pooled, mad.shape),
                                   np.broadcast_to(floors, mad.shape),
                                   relative_floor * np.abs(np.nan_to_num(median)),
                                   np.full(mad.shape, 1e-9, np.float32)]).astype(np.float32)
        z = (x - median[..., None]) / scale[..., None]
    z[n < min_hosts] = np.nan
    return median, p10, p90, z
