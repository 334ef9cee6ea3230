"""Baseline-robust scaling of feature matrices before detection.

Each feature column is centred on its baseline median and divided by a robust scale
(1.4826 · MAD; the standard deviation where more than half the baseline values are equal,
as for mostly-idle counters). The result is a robust z-score in "baseline sigmas".

Decisions (documented in docs/detectors.md):

- NaN (a feature undefined in a window, e.g. the skewness of a flat window) is imputed with
  the baseline median, i.e. z = 0: "no evidence of change".
- ``±inf`` in the baseline is bad input (:class:`InputError`); in scored features it is
  treated as the most extreme value allowed (``±clip``) and counted in ``n_nonfinite_``.
- A column that is constant on the baseline (scale ≤ ``min_scale`` relative to its level),
  or undefined (NaN) in more than ``max_nan_share`` of the baseline windows, is not used
  by the detectors (``keep_`` is False for it); ``columns_used_`` lists the others.
- z is clipped to ``±clip`` so that one column that barely moved on the baseline cannot
  dominate every distance.
"""

from __future__ import annotations

import numpy as np

from reveal.errors import InputError

MAD_TO_SIGMA = 1.4826


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
    """Median/MAD scaling fitted on baseline windows.

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

    Attributes
    ----------
    median_, scale_ : ndarray (K,)
        Baseline median and robust scale per input column (scale 1 where unused).
    keep_ : ndarray of bool (K,)
        Columns used downstream.
    columns_used_ : ndarray of int
        ``np.flatnonzero(keep_)``.
    n_nonfinite_ : int
        ``±inf`` values met by the last :meth:`transform` (clipped to ``±clip``).
    """

    def __init__(self, clip: float = 100.0, min_scale: float = 1e-9,
                 max_nan_share: float = 0.5, dtype: type | np.dtype = np.float64) -> None:
        self.clip = clip
        self.min_scale = min_scale
        self.max_nan_share = max_nan_share
        self.dtype = dtype

    def fit(self, X: np.ndarray) -> RobustScaler:
        X = check_matrix(X, "baseline features")
        if X.shape[0] == 0 or X.shape[1] == 0:
            raise InputError(f"baseline feature matrix is empty (shape {X.shape})")
        inf_cols = np.flatnonzero(np.isinf(X).any(axis=0))
        if inf_cols.size:
            raise InputError(f"baseline features hold ±inf in {inf_cols.size} column(s) "
                             f"(first: column {int(inf_cols[0])})")
        nan_share = np.isnan(X).mean(axis=0)
        with np.errstate(all="ignore"):
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                median = np.nanmedian(X, axis=0)
                mad = np.nanmedian(np.abs(X - median), axis=0) * MAD_TO_SIGMA
                std = np.nanstd(X, axis=0)
        median = np.nan_to_num(median)
        floor = self.min_scale * np.maximum(np.abs(median), 1.0)
        scale = np.where(mad > floor, mad, np.where(std > floor, std, 0.0))
        scale = np.nan_to_num(scale)
        keep = (scale > 0) & (nan_share <= self.max_nan_share)
        self.n_features_in_ = X.shape[1]
        self.median_ = median.astype(np.float64)
        self.scale_ = np.where(keep, scale, 1.0).astype(np.float64)
        self.keep_ = keep
        self.columns_used_ = np.flatnonzero(keep)
        self.nan_share_ = nan_share
        self.n_nonfinite_ = 0
        return self

    def transform(self, X: np.ndarray) -> np.ndarray:
        """Robust z of the used columns, shape (n, len(columns_used_)), NaN → 0, clipped."""
        X = check_matrix(X, "features")
        if X.shape[1] != self.n_features_in_:
            raise InputError(f"features have {X.shape[1]} columns, the baseline had "
                             f"{self.n_features_in_}")
        cols = self.columns_used_
        out = np.empty((X.shape[0], cols.size), dtype=self.dtype)
        step = max(1, 4_000_000 // max(cols.size, 1))
        n_inf = 0
        med = self.median_[cols].astype(self.dtype)
        inv = (1.0 / self.scale_[cols]).astype(self.dtype)
        for r0 in range(0, X.shape[0], step):
            block = X[r0:r0 + step][:, cols].astype(self.dtype, copy=False)
            z = (block - med) * inv
            n_inf += int(np.isinf(block).sum())
            np.nan_to_num(z, copy=False, nan=0.0, posinf=self.clip, neginf=-self.clip)
            np.clip(z, -self.clip, self.clip, out=out[r0:r0 + step])
        self.n_nonfinite_ = n_inf
        return out

    def fit_transform(self, X: np.ndarray) -> np.ndarray:
        return self.fit(X).transform(X)
