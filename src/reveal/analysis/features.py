"""Window features: one statistic of one channel over one window, for all windows at once.

``compute_features`` turns a (T, C) channel matrix and a set of windows into a (W, K)
feature matrix. Gauges and counters (counters already converted to per-second rates) get
the dynamic features, events get their sum per window, static channels get none. Each
feature equals tsfresh 0.21's calculator of the same meaning on the same window (see
docs/features.md for the definitions, NaN handling and the few documented deviations).

Work is done in blocks of (windows × channels) small enough to stay in cache, vectorised
over the block, and spread over threads (NumPy releases the GIL in its loops). While it
runs, glibc is asked to keep freed memory for reuse (see ``_feat_alloc``): the blocks'
temporaries would otherwise cost a page fault per 4 KiB each time.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from reveal.analysis import _feat_moments as fm
from reveal.analysis._feat_adf import adf_stat
from reveal.analysis._feat_alloc import release_freed_memory, reuse_freed_memory
from reveal.analysis.windows import Windows
from reveal.errors import InputError

DYNAMIC_FEATURES: tuple[str, ...] = (
    "mean",
    "variance",
    "std",
    "skewness",
    "kurtosis",
    "min",
    "max",
    "median",
    "slope",
    "autocorr_lag1",
    "adf_stat",
)
EVENT_FEATURES: tuple[str, ...] = ("sum",)

DYNAMIC_KINDS = ("gauge", "counter", "smoothed")
EVENT_KINDS = ("event",)
STATIC_KINDS = ("static",)

# Values per block (windows × channels); keeps the block's temporaries in cache.
BLOCK_VALUES = 16384
#: Below this many values (windows × samples × channels) the features are computed in this
#: thread: starting and feeding worker threads costs more, in CPU and in wall time, than
#: they save (778 channels of 100 ms telemetry, 3 s windows: 5 windows 7.5 ms of CPU with
#: two threads against 6.8 ms in one, 40 windows 41 against 29 ms at the same wall time;
#: threads pay from about 80 windows, 2 M values).
SERIAL_BELOW_VALUES = 1_500_000
#: Free memory goes back to the kernel after a computation over at least this many
#: values (windows × samples × channels); smaller ones keep it for the next call.
TRIM_AFTER_VALUES = 4_000_000


@dataclass
class FeatureMatrix:
    """Features of every window.

    Attributes
    ----------
    values : ndarray, shape (W, K)
        ``values[w, k]`` is feature ``features[k]`` of channel ``channels[k]`` over window
        ``w``; float64 unless float32 was asked for. NaN where the feature is undefined.
    channels : list of str, length K
        Channel of each column.
    features : list of str, length K
        Feature name of each column.
    windows : Windows
        The windows (rows of ``values``).
    """

    values: np.ndarray
    channels: list[str]
    features: list[str]
    windows: Windows

    @property
    def columns(self) -> list[str]:
        """Column names ``"channel|feature"``."""
        return [f"{c}|{f}" for c, f in zip(self.channels, self.features, strict=True)]


def _dynamic_block(X: np.ndarray, S: np.ndarray, names: Sequence[str]) -> dict[str, np.ndarray]:
    """All requested dynamic features of the windows in ``X`` (n, N), also given as
    ``S`` = ``X.T`` (N, n) (one window per row; used for the order statistics)."""
    out: dict[str, np.ndarray] = {}
    needs_centred = any(f in _CENTRED or f in ("kurtosis", "adf_stat") for f in names)
    c = fm.Centred(X) if needs_centred else None
    ordered = fm.Sorted(S) if "median" in names else None
    for name in names:
        if name in _CENTRED:
            out[name] = _CENTRED[name](c)  # type: ignore[arg-type]
        elif name == "kurtosis":
            out[name] = fm.kurtosis(c, X)  # type: ignore[arg-type]
        elif name == "adf_stat":
            out[name] = adf_stat(X, c.dev, c.m2)  # type: ignore[union-attr]
        elif ordered is not None:
            out[name] = getattr(ordered, _ORDERED[name])()
        else:
            out[name] = fm.minimum(X) if name == "min" else fm.maximum(X)
    return out


_ORDERED = {"min": "minimum", "max": "maximum", "median": "median"}
_CENTRED: dict[str, Callable[[fm.Centred], np.ndarray]] = {
    "mean": fm.mean,
    "variance": fm.variance,
    "std": fm.std,
    "skewness": fm.skewness,
    "slope": fm.slope,
    "autocorr_lag1": fm.autocorr_lag1,
}


def _check_inputs(
    values: np.ndarray,
    channels: Sequence[str],
    kinds: Sequence[str],
    windows: Windows,
    features: Sequence[str] | None,
) -> tuple[np.ndarray, tuple[str, ...]]:
    arr = np.asarray(values)
    if arr.ndim != 2:
        raise InputError(f"channel matrix must be 2-D (rows, channels), got shape {arr.shape}")
    if arr.dtype != np.float64:
        arr = arr.astype(np.float64)
    if len(channels) != arr.shape[1] or len(kinds) != arr.shape[1]:
        raise InputError(
            f"channel matrix has {arr.shape[1]} columns but {len(channels)} channel names "
            f"and {len(kinds)} kinds"
        )
    for name, kind in zip(channels, kinds, strict=True):
        if kind not in DYNAMIC_KINDS + EVENT_KINDS + STATIC_KINDS:
            raise InputError(f"channel {name!r} has unknown kind {kind!r}")
    if len(windows.start) and (
        int(windows.start.min()) < 0 or int(windows.start.max()) + windows.size > arr.shape[0]
    ):
        raise InputError(
            f"windows reach past the end of the data ({arr.shape[0]} rows, last window "
            f"starts at row {int(windows.start.max())} and holds {windows.size} rows)"
        )
    feats = DYNAMIC_FEATURES if features is None else tuple(dict.fromkeys(features))
    unknown = [f for f in feats if f not in DYNAMIC_FEATURES]
    if unknown:
        raise InputError(
            f"unknown feature(s) {', '.join(unknown)}; known: {', '.join(DYNAMIC_FEATURES)}"
        )
    return arr, feats


def _gather(
    values: np.ndarray, rows: np.ndarray, chans: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """Block of windows × channels in two layouts, series numbered w * len(chans) + c.

    Returns X (n, N) with X[j, s] the j-th value of series s (window-major, for the
    vectorised moments) and S (N, n), the same values one series per row.
    """
    idx = rows[:, None] + np.arange(n)[None, :]
    lo, hi = int(chans[0]), int(chans[-1]) + 1
    if hi - lo == len(chans):
        block = values[idx, lo:hi]  # (windows, n, channels)
    else:
        block = values[idx[:, :, None], chans[None, None, :]]
    X = np.ascontiguousarray(block.transpose(1, 0, 2)).reshape(n, -1)
    S = np.ascontiguousarray(block.transpose(0, 2, 1)).reshape(-1, n)
    return X, S


def compute_features(
    values: np.ndarray,
    channels: Sequence[str],
    kinds: Sequence[str],
    windows: Windows,
    features: Sequence[str] | None = None,
    dtype: type | np.dtype = np.float64,
    n_jobs: int | None = None,
) -> FeatureMatrix:
    """Compute window features for every window × channel.

    Parameters
    ----------
    values : ndarray, shape (T, C)
        Channel values (float64; counters already as per-second rates). NaN = not sampled.
    channels : sequence of str, length C
        Channel names.
    kinds : sequence of str, length C
        Catalog kind per channel: ``gauge``/``counter`` get the dynamic features,
        ``event`` gets ``sum``, ``static`` gets no column.
    windows : Windows
        Windows over the rows of ``values``.
    features : sequence of str, optional
        Subset of :data:`DYNAMIC_FEATURES` (in the order given); all by default.
    dtype : float64 or float32
        Dtype of the output matrix (computation is always float64).
    n_jobs : int, optional
        Threads; default: all CPUs this process may use.

    Returns
    -------
    FeatureMatrix
        Columns channel-major: all features of channel 0, then channel 1, ...
    """
    arr, feats = _check_inputs(values, channels, kinds, windows, features)
    out_dtype = np.dtype(dtype)
    if out_dtype not in (np.dtype(np.float64), np.dtype(np.float32)):
        raise InputError(f"feature dtype must be float64 or float32, got {out_dtype}")

    col_channels: list[str] = []
    col_features: list[str] = []
    dyn: list[int] = []
    dyn_col0: list[int] = []
    ev: list[int] = []
    ev_col: list[int] = []
    for c, (name, kind) in enumerate(zip(channels, kinds, strict=True)):
        if kind in DYNAMIC_KINDS and feats:
            dyn.append(c)
            dyn_col0.append(len(col_features))
            col_channels += [name] * len(feats)
            col_features += list(feats)
        elif kind in EVENT_KINDS:
            ev.append(c)
            ev_col.append(len(col_features))
            col_channels.append(name)
            col_features.append("sum")

    n_win = len(windows.start)
    out = np.empty((n_win, len(col_features)), dtype=out_dtype)
    tasks = _plan(
        n_win,
        np.asarray(dyn, dtype=np.int64),
        np.asarray(dyn_col0, dtype=np.int64),
        np.asarray(ev, dtype=np.int64),
        np.asarray(ev_col, dtype=np.int64),
    )
    starts = np.asarray(windows.start, dtype=np.int64)
    n = int(windows.size)
    feat_offset = {f: i for i, f in enumerate(feats)}

    def run(task: tuple[int, int, np.ndarray, np.ndarray, bool]) -> None:
        w0, w1, chans, cols0, is_dyn = task
        X, S = _gather(arr, starts[w0:w1], chans, n)
        if is_dyn:
            res = _dynamic_block(X, S, feats)
            for name, v in res.items():
                out[w0:w1, cols0 + feat_offset[name]] = v.reshape(w1 - w0, len(chans))
        else:
            out[w0:w1, cols0] = fm.total(X).reshape(w1 - w0, len(chans))

    workers = _n_workers(n_jobs)
    reuse_freed_memory()
    large = n_win * n * len(channels) >= TRIM_AFTER_VALUES
    try:
        if workers <= 1 or len(tasks) <= 1 or n_win * n * len(channels) < SERIAL_BELOW_VALUES:
            # little work (a few windows, scored live): threads would cost more than it
            for task in tasks:
                run(task)
        else:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                for _ in pool.map(run, tasks):
                    pass
    finally:
        if large:  # a few windows scored live: their few MB are reused by the next call
            release_freed_memory()
    return FeatureMatrix(values=out, channels=col_channels, features=col_features, windows=windows)


def _n_workers(n_jobs: int | None) -> int:
    if n_jobs is None or n_jobs <= 0:
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except AttributeError:  # pragma: no cover - non-Linux
            return max(1, os.cpu_count() or 1)
    return int(n_jobs)


def _plan(
    n_win: int, dyn: np.ndarray, dyn_col0: np.ndarray, ev: np.ndarray, ev_col: np.ndarray
) -> list[tuple[int, int, np.ndarray, np.ndarray, bool]]:
    """Split the work into (window range, channel block) tasks of ~BLOCK_VALUES values."""
    tasks: list[tuple[int, int, np.ndarray, np.ndarray, bool]] = []
    for chans, cols, is_dyn in ((dyn, dyn_col0, True), (ev, ev_col, False)):
        if chans.size == 0 or n_win == 0:
            continue
        # 64 channels at a time over many windows; with few windows (scored live) more
        # channels per block, so that a call makes fewer, larger NumPy calls
        cb = int(min(chans.size, max(64, BLOCK_VALUES // n_win)))
        wc = max(1, BLOCK_VALUES // cb)
        for c0 in range(0, chans.size, cb):
            for w0 in range(0, n_win, wc):
                tasks.append(
                    (w0, min(n_win, w0 + wc), chans[c0 : c0 + cb], cols[c0 : c0 + cb], is_dyn)
                )
    return tasks
