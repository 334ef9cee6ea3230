"""Automatic thresholds: baseline quantile and peaks-over-threshold."""

from __future__ import annotations

import numpy as np
import pytest

from reveal.analysis.threshold import fit_gpd, pot_threshold, quantile_threshold
from reveal.errors import InputError


def test_quantile_threshold_ignores_nonfinite():
    s = np.r_[np.arange(101.0), np.nan, np.inf]
    assert quantile_threshold(s, 0.99) == pytest.approx(99.0)


def test_gpd_fit_recovers_exponential_tail():
    rng = np.random.default_rng(0)
    xi, sigma = fit_gpd(rng.exponential(2.0, size=20000))
    assert abs(xi) < 0.05 and sigma == pytest.approx(2.0, rel=0.05)


def test_pot_matches_the_true_quantile_of_an_exponential_law():
    rng = np.random.default_rng(1)
    s = rng.exponential(1.0, size=50000)
    # P(S > z) = exp(-z): the 1e-4 quantile is log(1e4) ≈ 9.21, beyond most of the data
    assert pot_threshold(s, risk=1e-4, init_quantile=0.98) == pytest.approx(np.log(1e4),
                                                                            rel=0.08)


def test_pot_risk_inside_the_data_falls_back_to_the_quantile():
    s = np.random.default_rng(2).normal(size=1000)
    assert pot_threshold(s, risk=0.05, init_quantile=0.98) == pytest.approx(
        np.quantile(s, 0.95))


def test_bad_threshold_inputs():
    with pytest.raises(InputError):
        quantile_threshold(np.array([np.nan, np.nan]))
    with pytest.raises(InputError):
        quantile_threshold(np.arange(5.0), 1.5)
    with pytest.raises(InputError):
        pot_threshold(np.arange(5.0), risk=0.0)
