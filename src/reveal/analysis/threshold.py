"""Automatic thresholds from a baseline score distribution.

- :func:`quantile_threshold`: the baseline scores' q-quantile (0.99 → the top 1 % of a
  clean baseline is flagged; a clean run yields ~1 % or fewer).
- :func:`pot_threshold`: peaks-over-threshold (extreme value theory, as in SPOT, Siffer et
  al., KDD 2017): a generalised Pareto distribution fitted to the baseline's excesses over
  a high quantile gives the score exceeded with probability ``risk``; it extrapolates past
  the largest baseline score instead of being capped by it.
"""

from __future__ import annotations

import warnings

import numpy as np

from reveal.errors import InputError


def _finite_scores(scores: np.ndarray, what: str = "baseline scores") -> np.ndarray:
    s = np.asarray(scores, dtype=np.float64).ravel()
    s = s[np.isfinite(s)]
    if s.size == 0:
        raise InputError(f"no finite {what} to set a threshold from")
    return s


def quantile_threshold(scores: np.ndarray, quantile: float = 0.99) -> float:
    """The ``quantile`` of the finite baseline scores."""
    if not 0.0 < quantile < 1.0:
        raise InputError(f"threshold quantile must be in (0, 1), got {quantile}")
    return float(np.quantile(_finite_scores(scores), quantile))


def fit_gpd(excesses: np.ndarray) -> tuple[float, float]:
    """Maximum-likelihood (shape ξ, scale σ) of a generalised Pareto law for excesses ≥ 0.

    Falls back to the exponential law (ξ = 0, σ = mean excess) when the fit fails or there
    are too few excesses.
    """
    y = np.asarray(excesses, dtype=np.float64)
    y = y[np.isfinite(y) & (y >= 0)]
    mean = float(y.mean()) if y.size else 0.0
    if y.size < 10 or mean <= 0:
        return 0.0, max(mean, 1e-12)
    from scipy.stats import genpareto

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            xi, _, sigma = genpareto.fit(y, floc=0.0)
    except (ValueError, RuntimeError, FloatingPointError):
        return 0.0, mean
    if not (np.isfinite(xi) and np.isfinite(sigma) and sigma > 0):
        return 0.0, mean
    return float(np.clip(xi, -0.5, 0.5)), float(sigma)


def pot_threshold(scores: np.ndarray, risk: float = 1e-3, init_quantile: float = 0.98) -> float:
    """Score exceeded with probability ``risk`` under a GPD tail fitted above ``init_quantile``.

    ``z = t + σ/ξ · ((risk · n / n_t)^(−ξ) − 1)`` (``σ · log(n_t / (risk · n))`` when ξ = 0),
    with ``t`` the initial threshold and ``n_t`` the number of baseline scores above it.
    """
    if not 0.0 < risk < 1.0:
        raise InputError(f"POT risk must be in (0, 1), got {risk}")
    if not 0.0 < init_quantile < 1.0:
        raise InputError(f"POT initial quantile must be in (0, 1), got {init_quantile}")
    s = _finite_scores(scores)
    t = float(np.quantile(s, init_quantile))
    peaks = s[s > t] - t
    if peaks.size == 0:
        return t
    xi, sigma = fit_gpd(peaks)
    ratio = risk * s.size / peaks.size
    if ratio >= 1.0:  # risk above the initial quantile's exceedance: stay inside the data
        return float(np.quantile(s, 1.0 - risk))
    if abs(xi) < 1e-6:
        return t + sigma * float(np.log(1.0 / ratio))
    return t + sigma / xi * float(ratio ** (-xi) - 1.0)
