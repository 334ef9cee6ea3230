"""Baseline-robust scaling of feature matrices before detection.

Each feature column is centred and divided by a robust scale fitted on the baseline
(1.4826 · MAD; the standard deviation where more than half the baseline values are equal,
as for mostly-idle counters): a robust z-score in "baseline sigmas".

The centre is the baseline median, or — with ``drift_window`` set — a centre that follows
slow drift using only past windows: the median of the medians of the previous blocks of
``drift_block`` windows covering the last ``drift_window`` windows (the baseline's last
blocks precede a scored run). A level that persists for longer than about half the drift
window becomes the new normal; shorter excursions stay visible. The scale is always the
baseline's.

Decisions (documented in docs/detectors.md):

- NaN (a feature undefined in a window, e.g. the skewness of a flat window) is imputed with
  the centre, i.e. z = 0: "no evidence of change".
- ``±inf`` in the baseline is bad input (:class:`InputError`); in scored features it is
  treated as the most extreme value allowed (``±clip``) and counted in ``n_nonfinite_``.
- A column that is constant on the baseline (scale ≤ ``min_scale`` relative to its level),
  or undefined (NaN) in more than ``max_nan_share`` of the baseline windows, is not used
  by the detectors (``keep_`` is False for it); ``columns_used_`` lists the others.
- z is clipped to ``±clip`` so that one column that barely moved on the baseline cannot
  dominate every distance.
- ``scale_floor`` (per column, in the column's units) is the smallest change that matters:
  the scale is never below it. A short, quiet baseline gives some columns a spread far
  below their run-to-run variation (a memory level steady to the page for a minute); the
  floor keeps a change of a few per cent from reading as thousands of sigmas. A column
  constant on the baseline but with a positive floor is scored (with the floor as scale).
"""

from __future__ import annotations

import warnings

import numpy as np

from reveal.analysis.constants import MAD_TO_SIGMA
from reveal.analysis.estimator_params import keep_params
from reveal.errors import InputError

ROW_CHUNK_VALUES = 4_000_000  # values transformed at a time (bounds temporaries)


def check_matrix(X: np.ndarray, what: str) -> np.ndarray:
    """Return ``X`` as a 2-D float array or raise :class:`InputError` naming ``what``."""
    arr = np.asarray(X)
    if arr.ndim != 2:
        raise InputError(f"{what} must be a 2-D (windows, columns) matrix, got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.floating):
        try:
            arr = arr.astype(np.float64)
        except (TypeError, ValueError):
            raise InputError(f"{what} holds non-numeric values (dtype {arr.dtype})") from None
    return arr


class RobustScaler:
    """Median/MAD scaling fitted on baseline windows, optionally with a drift-following centre.

    Parameters
    ----------
    clip : float
        Largest |z| kept (baseline sigmas).
    min_scale : float
        A column whose robust scale is below ``min_scale · max(|median|, 1)`` is constant.
    max_nan_share : float
        A column undefined in more than this share of baseline windows is dropped.
    dtype : numpy dtype
        Dtype of the transformed matrix (float32 halves memory on large runs).
    drift_window : int or None
        Windows of past data the drift-following centre looks back over; None: the centre is
        the baseline median.
    drift_block : int
        Windows per block; the centre is updated once per block from whole past blocks.
    max_fit_rows : int or None
        Estimate median / MAD / std from at most this many baseline windows (a seeded
        random subsample); the ±inf check and the drift history use every window.

    Attributes
    ----------
    median_, scale_ : ndarray (K,)
        Baseline median and robust scale per input column (scale 1 where unused).
    keep_ : ndarray of bool (K,)
        Columns used downstream.
    columns_used_ : ndarray of int
        ``np.flatnonzero(keep_)``.
    history_ : ndarray (blocks, len(columns_used_)) or None
        Medians of the baseline's last blocks (the drift centre's past for a scored run).
    n_nonfinite_ : int
        ``±inf`` values met by the last :meth:`transform` (clipped to ``±clip``).
    """

    def __init__(self, clip: float = 100.0, min_scale: float = 1e-9,
                 max_nan_share: float = 0.5, dtype: type | np.dtype = np.float64,
                 drift_window: int | None = None, drift_block: int = 60,
                 max_fit_rows: int | None = None, random_state: int = 0) -> None:
        keep_params(self, clip=clip, min_scale=min_scale, max_nan_share=max_nan_share,
                    dtype=dtype, drift_window=drift_window, drift_block=drift_block,
                    max_fit_rows=max_fit_rows, random_state=random_state)

    def fit(self, X: np.ndarray, scale_floor: np.ndarray | None = None) -> RobustScaler:
        """Fit on baseline windows ``X`` (n, K); ``scale_floor`` (K,): least scale per column."""
        X = check_matrix(X, "baseline features")
        if X.shape[0] == 0 or X.shape[1] == 0:
            raise InputError(f"baseline feature matrix is empty (shape {X.shape})")
        if self.drift_window is not None and (self.drift_window < 1 or self.drift_block < 1
                                              or self.drift_block > self.drift_window):
            raise InputError(f"drift window of {self.drift_window} windows in blocks of "
                             f"{self.drift_block}: need 1 <= block <= window")
        inf_cols = np.flatnonzero(np.isinf(X).any(axis=0))
        if inf_cols.size:
            raise InputError(f"baseline features hold ±inf in {inf_cols.size} column(s) "
                             f"(first: column {int(inf_cols[0])})")
        S = X
        if self.max_fit_rows is not None and X.shape[0] > self.max_fit_rows:
            rng = np.random.default_rng(self.random_state)
            S = X[np.sort(rng.choice(X.shape[0], self.max_fit_rows, replace=False))]
        nan_share = np.isnan(S).mean(axis=0)
        if nan_share.any():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns
                median = np.nanmedian(S, axis=0)
                mad = np.nanmedian(np.abs(S - median), axis=0) * MAD_TO_SIGMA
                std = np.nanstd(S, axis=0)
        else:  # the common case, and much faster
            median = np.median(S, axis=0)
            mad = np.median(np.abs(S - median), axis=0) * MAD_TO_SIGMA
            std = S.std(axis=0, dtype=np.float64)
        median = np.nan_to_num(median)
        floor = self.min_scale * np.maximum(np.abs(median), 1.0)
        scale = np.where(mad > floor, mad, np.where(std > floor, std, 0.0))
        scale = np.nan_to_num(scale)
        if scale_floor is not None:
            least = np.nan_to_num(np.asarray(scale_floor, dtype=np.float64), nan=0.0)
            if least.shape != scale.shape:
                raise InputError(f"scale floor has {least.size} values for {scale.size} columns")
            scale = np.maximum(scale, np.clip(least, 0.0, None))
        keep = (scale > 0) & (nan_share <= self.max_nan_share)
        self.n_features_in_ = X.shape[1]
        self.median_ = median.astype(np.float64)
        self.scale_ = np.where(keep, scale, 1.0).astype(np.float64)
        self.keep_ = keep
        self.columns_used_ = np.flatnonzero(keep)
        self.nan_share_ = nan_share
        self.n_nonfinite_ = 0
        self.history_ = None
        if self.drift_window is not None:
            medians = self._block_medians(X)
            self.history_ = medians[-self._blocks_back():]
        return self

    # -- drift-following centre --------------------------------------------------------
    def _blocks_back(self) -> int:
        assert self.drift_window is not None
        return max(1, self.drift_window // self.drift_block)

    def _block_medians(self, X: np.ndarray) -> np.ndarray:
        """Median of each block of ``drift_block`` rows (used columns; NaN → baseline median)."""
        cols = self.columns_used_
        b = self.drift_block
        n_blocks = -(-X.shape[0] // b)
        out = np.empty((n_blocks, cols.size), dtype=np.float64)
        med = self.median_[cols]
        for j in range(n_blocks):
            block = X[j * b:(j + 1) * b][:, cols].astype(np.float64)
            block = np.where(np.isfinite(block), block, med)
            out[j] = np.median(block, axis=0)
        return out

    def centres(self, X: np.ndarray, own_history: bool = False) -> np.ndarray | None:
        """Per-block centres (n_blocks, len(columns_used_)) for the rows of ``X``, or None.

        Block ``j`` (rows ``[j·drift_block, (j+1)·drift_block)``) is centred on the median of
        the medians of the blocks before it within ``drift_window``: the baseline's last
        blocks and then ``X``'s own (``own_history=True``: only ``X``'s own, for the
        baseline itself or a self-fitted run; its first block uses the baseline median).
        """
        if self.drift_window is None:
            return None
        X = check_matrix(X, "features")
        medians = self._block_medians(X)
        back = self._blocks_back()
        past = np.zeros((0, medians.shape[1])) if own_history or self.history_ is None \
            else self.history_
        stacked = np.vstack([past, medians])
        offset = past.shape[0]
        out = np.empty_like(medians)
        for j in range(medians.shape[0]):
            lo, hi = max(0, offset + j - back), offset + j
            out[j] = (np.median(stacked[lo:hi], axis=0) if hi > lo
                      else self.median_[self.columns_used_])
        return out

    # -- scaling -----------------------------------------------------------------------
    def transform(self, X: np.ndarray, centres: np.ndarray | None = None,
                  rows: np.ndarray | None = None) -> np.ndarray:
        """Robust z of the used columns, shape (n, len(columns_used_)), NaN → 0, clipped.

        ``centres`` (from :meth:`centres` on the same ``X``) switches on the drift-following
        centre; ``rows`` restricts the output to those rows of ``X``.
        """
        X = check_matrix(X, "features")
        if X.shape[1] != self.n_features_in_:
            raise InputError(f"features have {X.shape[1]} columns, the baseline had "
                             f"{self.n_features_in_}")
        cols = self.columns_used_
        idx = np.arange(X.shape[0]) if rows is None else np.asarray(rows, dtype=np.int64)
        out = np.empty((idx.size, cols.size), dtype=self.dtype)
        step = max(1, ROW_CHUNK_VALUES // max(cols.size, 1))
        inv = (1.0 / self.scale_[cols]).astype(self.dtype)
        base_centre = self.median_[cols].astype(self.dtype)
        n_inf = 0
        for r0 in range(0, idx.size, step):
            sel = idx[r0:r0 + step]
            block = X[sel][:, cols].astype(self.dtype, copy=False)
            if centres is None:
                z = (block - base_centre) * inv
            else:
                z = (block - centres[sel // self.drift_block].astype(self.dtype)) * inv
            n_inf += int(np.isinf(block).sum())
            np.nan_to_num(z, copy=False, nan=0.0, posinf=self.clip, neginf=-self.clip)
            np.clip(z, -self.clip, self.clip, out=out[r0:r0 + step])
        self.n_nonfinite_ = n_inf
        return out

    def fit_transform(self, X: np.ndarray) -> np.ndarray:
        """Fit on the baseline and scale it (its drift centre from its own past)."""
        self.fit(X)
        return self.transform(X, self.centres(X, own_history=True))
