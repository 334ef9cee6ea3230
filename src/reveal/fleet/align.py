"""Hosts on one wall-clock grid of windows, and hosts whose clock is off.

Every host's windows are binned onto a common grid (origin: the earliest window start;
step: the window stride), so window ``g`` of every host covers the same wall-clock
seconds. A host whose clock is off shows its activity shifted against its peers': the
fleet's common signal (mean CPU busy % per window) of each host is cross-correlated with
the peers' median signal, all hosts at once with an FFT, and the lag of the best
correlation is its clock offset, at the resolution of one stride. That holds only for hosts
in lock-step: hosts recorded at different times (or running different work) correlate at
some lag by chance, so offsets are estimated only when most hosts agree at no shift, and
a host's lag must be the same in both halves of the time covered.
"""

from __future__ import annotations

import warnings as pywarnings
from collections.abc import Sequence

import numpy as np

from reveal.fleet.records import ClockOffset, HostFeatures


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


def _xcorr(activity: np.ndarray, max_lag: int) -> tuple[np.ndarray, np.ndarray]:
    """Every host's correlation with the peers' median signal at lags ``-max_lag..max_lag``:
    the lags (L,) and the correlations (H, L) (host at t + lag against the peers at t)."""
    g = activity.shape[1]
    with pywarnings.catch_warnings():
        pywarnings.simplefilter("ignore", RuntimeWarning)
        reference = np.nanmedian(activity, axis=0)
    x = _standardised(activity)
    r = _standardised(reference[None, :])
    size = 1 << int(np.ceil(np.log2(2 * g)))
    corr = np.fft.irfft(np.fft.rfft(x, size, axis=1) * np.conj(np.fft.rfft(r, size, axis=1)),
                        size, axis=1)
    lag_axis = np.r_[np.arange(0, max_lag + 1), np.arange(-max_lag, 0)]
    return lag_axis, corr[:, lag_axis]


def clock_offsets(hosts: Sequence[str], activity: np.ndarray, stride_s: float,
                  max_offset_s: float, min_corr: float, min_gain: float,
                  aligned: bool) -> tuple[list[ClockOffset], np.ndarray, str | None]:
    """Hosts whose activity is shifted against the peers', and the lag of every host.

    ``activity`` (H, G): the common signal on the grid. A shift is evidence of a clock only
    where the hosts run in lock-step: the median host must correlate with the peers at lag
    zero by ``min_corr`` (else nothing is estimated and a note says why), and a host's best
    lag must hold in both halves of the grid (within one stride), not only over the whole.
    Returns the offsets found, the lag in grid slots of every host (0 where none was found;
    positive: the host's activity comes ``lag`` windows after the peers') and the note.
    """
    h, g = activity.shape
    lags = np.zeros(h, dtype=np.int64)
    if h < 3 or g < 16:
        return [], lags, None
    max_lag = min(int(max_offset_s / stride_s), g // 2)
    lag_axis, cand = _xcorr(activity, max_lag)
    at_zero = cand[:, 0]
    active = np.abs(cand).max(axis=1) > 0  # hosts with a varying signal
    if active.sum() < 3:
        return [], lags, None
    in_step = float(np.median(at_zero[active]))
    if in_step < min_corr:
        return [], lags, (f"the hosts' activity is not in step (median correlation with the "
                          f"peers {in_step:.2f} at no shift, below {min_corr:g}): clock "
                          f"offsets were not estimated from it")
    best = np.argmax(cand, axis=1)
    best_lag = lag_axis[best]
    best_corr = cand[np.arange(h), best]
    half = g // 2
    consistent = np.ones(h, dtype=bool)
    for part in (activity[:, :half], activity[:, half:]):
        axis, c = _xcorr(part, min(max_lag, part.shape[1] // 2))
        consistent &= np.abs(axis[np.argmax(c, axis=1)] - best_lag) <= 1
    found = []
    for i in np.flatnonzero(active & consistent & (best_lag != 0) & (best_corr >= min_corr)
                            & (best_corr - at_zero >= min_gain)):
        lags[i] = best_lag[i]
        found.append(ClockOffset(hosts[i], float(best_lag[i] * stride_s), float(best_corr[i]),
                                 float(at_zero[i]), float(stride_s), aligned))
    return found, lags, None
