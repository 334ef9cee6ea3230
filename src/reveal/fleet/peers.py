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
from dataclasses import dataclass

import numpy as np

#: robust sigma of a normal sample from its MAD
MAD_SIGMA = 1.4826


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


def compare_block(cube: np.ndarray, floors: np.ndarray, subsystem_of: np.ndarray,
                  n_subsystems: int, *, first: int = 0, relative_floor: float = 0.05,
                  z_cap: float = 50.0, top_k: int = 3, keep_columns: int = 8,
                  min_hosts: int = 3) -> BlockResult:
    """Compare every host with its peers over one block.

    Parameters
    ----------
    cube : ndarray of float32, shape (H, B, K)
        Feature values; NaN where a host has no value.
    floors : ndarray, shape (K,)
        Least change that counts per column (feature units).
    subsystem_of : ndarray of int, shape (K,)
        Subsystem index of each column.
    """
    h, b, k = cube.shape
    x = np.ascontiguousarray(np.moveaxis(cube, 0, -1), dtype=np.float32)  # (B, K, H)
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
        scale = np.maximum.reduce([MAD_SIGMA * np.nan_to_num(mad),
                                   np.broadcast_to(MAD_SIGMA * pooled, mad.shape),
                                   np.broadcast_to(np.asarray(floors, np.float32), mad.shape),
                                   relative_floor * np.abs(np.nan_to_num(median)),
                                   np.full(mad.shape, 1e-9, np.float32)])
        z = (x - median[..., None]) / scale[..., None]
    z[n < min_hosts] = np.nan
    az = np.minimum(np.nan_to_num(np.abs(z), nan=0.0), z_cap)  # (B, K, H)
    sub = np.zeros((b, n_subsystems, h), np.float32)
    for si in range(n_subsystems):
        cols = np.flatnonzero(subsystem_of == si)
        if cols.size == 0:
            continue
        part = az[:, cols, :]
        kk = min(top_k, cols.size)
        top = -np.partition(-part, kk - 1, axis=1)[:, :kk, :]
        sub[:, si, :] = top.mean(axis=1)
    m = min(keep_columns, k)
    idx = np.argpartition(-az, m - 1, axis=1)[:, :m, :]  # (B, M, H)
    order = np.argsort(-np.take_along_axis(az, idx, axis=1), axis=1, kind="stable")
    idx = np.take_along_axis(idx, order, axis=1)
    top_z = np.take_along_axis(z, idx, axis=1)
    top_value = np.take_along_axis(x, idx, axis=1)
    return BlockResult(
        first=first,
        subsystem_scores=np.ascontiguousarray(np.moveaxis(sub, -1, 0)),
        top_column=np.ascontiguousarray(np.moveaxis(idx, -1, 0).astype(np.int32)),
        top_z=np.ascontiguousarray(np.moveaxis(top_z, -1, 0), dtype=np.float32),
        top_value=np.ascontiguousarray(np.moveaxis(top_value, -1, 0), dtype=np.float32),
        median=median, p10=p10, p90=p90)
