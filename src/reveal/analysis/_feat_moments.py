"""Window statistics other than ADF, computed for many windows at once.

Every kernel takes ``X`` of shape (n, N): row ``j`` holds the ``j``-th value of each of
``N`` windows (one window per column), and returns one value per window, shape (N,).
Definitions follow tsfresh 0.21's feature calculators exactly (see docs/features.md):
population variance (ddof 0), pandas' bias-corrected skewness/kurtosis, scipy's
least-squares slope against 0..n-1, tsfresh's lag-1 autocorrelation.
Moments are computed on values shifted by each window's first value and then centred,
so that a large offset (1e9 + small noise) loses no digits.
"""

from __future__ import annotations

import numpy as np

# A window is constant for the lag-1 autocorrelation when its standard deviation is at most
# this share of its root mean square: variation at the level of float64 round-off of the
# values themselves (~450 eps), whatever the channel's unit. tsfresh's absolute cut-off
# (np.isclose(variance, 0): variance <= 1e-8) would call every window of a small-unit gauge
# constant (values of 1e-6 vary by far less than 1e-4).
AUTOCORR_CONSTANT_REL_STD = 1e-13
# Absolute floor on the variance, at float64's smallest normal number: an all-zero window
# (mean square 0) is constant.
AUTOCORR_MIN_VARIANCE = float(np.finfo(np.float64).tiny)


class Centred:
    """Shared pieces of one block: the centred values and their second moment.

    Attributes
    ----------
    n : int
        Rows per window.
    shift : ndarray (N,)
        First value of each window.
    mean_dev : ndarray (N,)
        Mean of ``X - shift``.
    dev : ndarray (n, N)
        ``X - shift - mean_dev``: deviations from the window mean.
    m2 : ndarray (N,)
        Sum of squared deviations.
    """

    def __init__(self, X: np.ndarray) -> None:
        self.n = X.shape[0]
        self.shift = X[0].copy()
        shifted = X - self.shift
        self.mean_dev = shifted.sum(axis=0) / self.n
        shifted -= self.mean_dev
        self.dev = shifted
        self.dev2 = shifted * shifted
        self.m2 = self.dev2.sum(axis=0)


def mean(c: Centred) -> np.ndarray:
    return c.shift + c.mean_dev


def variance(c: Centred) -> np.ndarray:
    return c.m2 / c.n


def std(c: Centred) -> np.ndarray:
    return np.sqrt(c.m2 / c.n)


def skewness(c: Centred) -> np.ndarray:
    """pandas ``Series.skew`` (G1); NaN for fewer than 3 values or a constant window."""
    n = c.n
    if n < 3:
        return np.full(c.m2.shape, np.nan)
    m3 = (c.dev2 * c.dev).sum(axis=0)
    return _skew_from_moments(float(n), c.m2, m3)


def _skew_from_moments(n: float | np.ndarray, m2: np.ndarray, m3: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = m3 / (m2 * np.sqrt(m2))
        return ratio * ((n * np.sqrt(n - 1.0)) / (n - 2.0))


def _kurt_from_moments(n: float | np.ndarray, m2: np.ndarray, m4: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = m4 / (m2 * m2)
        inner = n * (n + 1.0) * ratio - 3.0 * (n - 1.0)
        return ((n - 1.0) / ((n - 2.0) * (n - 3.0))) * inner


def kurtosis(c: Centred, X: np.ndarray) -> np.ndarray:
    """pandas ``Series.kurtosis`` (G2, NaN values skipped); NaN below 4 values or constant."""
    n = c.n
    if n >= 4:
        m4 = (c.dev2 * c.dev2).sum(axis=0)
        out = _kurt_from_moments(float(n), c.m2, m4)
    else:
        out = np.full(c.m2.shape, np.nan)
    has_nan = np.isnan(c.m2)
    if has_nan.any():
        cols = np.flatnonzero(has_nan)
        out[cols] = _kurtosis_skipna(X[:, cols])
    return out


def _kurtosis_skipna(X: np.ndarray) -> np.ndarray:
    """Kurtosis of the non-NaN values of each column (pandas skipna=True)."""
    valid = ~np.isnan(X)
    count = valid.sum(axis=0).astype(np.float64)
    # shift by the first non-NaN value of each column, then centre on the NaN-free mean
    first_idx = np.argmax(valid, axis=0)
    shift = X[first_idx, np.arange(X.shape[1])]
    shift = np.where(count > 0, shift, 0.0)
    shifted = np.where(valid, X - shift, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_dev = shifted.sum(axis=0) / count
    dev = np.where(valid, shifted - mean_dev, 0.0)
    dev2 = dev * dev
    m2 = dev2.sum(axis=0)
    m4 = (dev2 * dev2).sum(axis=0)
    out = _kurt_from_moments(count, m2, m4)
    out[count < 4] = np.nan
    return out


def minimum(X: np.ndarray) -> np.ndarray:
    return X.min(axis=0)


def maximum(X: np.ndarray) -> np.ndarray:
    return X.max(axis=0)


class Sorted:
    """Each window's values in ascending order (NaN last), from ``S`` (N, n)."""

    def __init__(self, S: np.ndarray) -> None:
        self.values = np.sort(S, axis=1)
        self.has_nan = np.isnan(self.values[:, -1])

    def minimum(self) -> np.ndarray:
        out = self.values[:, 0].copy()
        out[self.has_nan] = np.nan
        return out

    def maximum(self) -> np.ndarray:
        return self.values[:, -1].copy()

    def median(self) -> np.ndarray:
        """``np.median``: the middle value, or the mean of the middle two; NaN if any NaN."""
        n = self.values.shape[1]
        half = n // 2
        if n % 2:
            out = self.values[:, half].copy()
        else:
            out = (self.values[:, half - 1] + self.values[:, half]) / 2.0
        out[self.has_nan] = np.nan
        return out


def slope_weights(n: int) -> np.ndarray:
    """Weights w (n,) with slope = sum(w * x): least squares against t = 0..n-1."""
    t = np.arange(n, dtype=np.float64)
    tc = t - t.mean()
    denom = float((tc * tc).sum())
    if denom == 0.0:
        return np.full(n, np.nan)
    return tc / denom


def slope(c: Centred) -> np.ndarray:
    """scipy ``linregress(range(n), x).slope``; NaN for a single-row window."""
    w = slope_weights(c.n)
    return np.einsum("i,ij->j", w, c.dev)


def autocorr_lag1(c: Centred) -> np.ndarray:
    """tsfresh ``autocorrelation(x, 1)``; NaN for a constant window.

    A window is constant when its variance is at most ``AUTOCORR_CONSTANT_REL_STD²`` times
    its mean square (or at most ``AUTOCORR_MIN_VARIANCE``): the cut-off follows the
    channel's scale, so a scaled copy of a window has the same autocorrelation.
    """
    n = c.n
    var = c.m2 / n
    if n < 2:
        return np.full(var.shape, np.nan)
    prod = np.einsum("ij,ij->j", c.dev[:-1], c.dev[1:])
    mu = mean(c)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        out = prod / ((n - 1) * var)
        cutoff = np.maximum(AUTOCORR_CONSTANT_REL_STD**2 * (var + mu * mu), AUTOCORR_MIN_VARIANCE)
    out[var <= cutoff] = np.nan
    return out


def total(X: np.ndarray) -> np.ndarray:
    """tsfresh ``sum_values``."""
    return X.sum(axis=0)
