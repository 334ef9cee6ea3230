"""Hosts on one wall-clock grid of windows, and hosts whose clock is off.

Every host's windows are binned onto a common grid (origin: the earliest window start;
step: the window stride), so window ``g`` of every host covers the same wall-clock
seconds. A host whose clock is off shows its activity shifted against its peers': the
fleet's common signal (mean CPU busy % per window) of each host is cross-correlated with
the peers' median signal, all hosts at once with an FFT, and the lag of the best
correlation is its clock offset, at the resolution of one stride.
"""

from __future__ import annotations

import warnings as pywarnings
from collections.abc import Sequence

import numpy as np

from reveal.fleet.result import ClockOffset, HostFeatures


def grid_slots(hosts: Sequence[HostFeatures], stride_ns: int) -> tuple[int, list[np.ndarray]]:
    """The grid origin (ns) and every host's window slots (grid indices)."""
    origin = min(int(h.start_ns[0]) for h in hosts if len(h.start_ns))
    slots = [np.rint((h.start_ns - origin) / stride_ns).astype(np.int64) for h in hosts]
    return origin, slots


def place(series: Sequence[np.ndarray], slots: Sequence[np.ndarray], n_slots: int) -> np.ndarray:
    """Per-host 1-D series put on the grid, (H, G), NaN where a host has no window."""
    out = np.full((len(series), n_slots), np.nan)
    for i, (x, s) in enumerate(zip(series, slots, strict=True)):
        ok = (s >= 0) & (s < n_slots)
        out[i, s[ok]] = x[ok]
    return out


def _standardised(x: np.ndarray) -> np.ndarray:
    """Rows centred and scaled to unit norm over their finite values (NaN -> 0)."""
    ok = np.isfinite(x)
    with pywarnings.catch_warnings():
        pywarnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(np.where(ok, x, np.nan), axis=1, keepdims=True)
    y = np.where(ok, x - np.nan_to_num(mean), 0.0)
    norm = np.sqrt((y * y).sum(axis=1, keepdims=True))
    return np.divide(y, norm, out=np.zeros_like(y), where=norm > 0)


def clock_offsets(hosts: Sequence[str], activity: np.ndarray, stride_s: float,
                  max_offset_s: float, min_corr: float, min_gain: float,
                  aligned: bool) -> tuple[list[ClockOffset], np.ndarray]:
    """Hosts whose activity is shifted against the peers', and the lag of every host.

    ``activity`` (H, G): the common signal on the grid. Returns the offsets found and the
    lag in grid slots of every host (0 where none was found): a positive lag means the
    host's activity comes ``lag`` windows after the peers'.
    """
    h, g = activity.shape
    lags = np.zeros(h, dtype=np.int64)
    if h < 3 or g < 8:
        return [], lags
    with pywarnings.catch_warnings():
        pywarnings.simplefilter("ignore", RuntimeWarning)
        reference = np.nanmedian(activity, axis=0)
    x = _standardised(activity)
    r = _standardised(reference[None, :])
    if not np.any(r):
        return [], lags
    size = 1 << int(np.ceil(np.log2(2 * g)))
    corr = np.fft.irfft(np.fft.rfft(x, size, axis=1) * np.conj(np.fft.rfft(r, size, axis=1)),
                        size, axis=1)  # corr[:, L]: host at t + L against the reference at t
    max_lag = min(int(max_offset_s / stride_s), g // 2)
    lag_axis = np.r_[np.arange(0, max_lag + 1), np.arange(-max_lag, 0)]
    cand = corr[:, lag_axis]
    best = np.argmax(cand, axis=1)
    best_lag = lag_axis[best]
    best_corr = cand[np.arange(h), best]
    at_zero = corr[:, 0]
    found = []
    for i in np.flatnonzero((best_lag != 0) & (best_corr >= min_corr)
                            & (best_corr - at_zero >= min_gain)):
        lags[i] = best_lag[i]
        found.append(ClockOffset(hosts[i], float(best_lag[i] * stride_s), float(best_corr[i]),
                                 float(at_zero[i]), float(stride_s), aligned))
    return found, lags
