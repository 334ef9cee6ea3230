"""``pca_error`` (PE): per-column PCA reconstruction error on each column's own scale."""

from __future__ import annotations

import numpy as np
import pytest

from reveal.analysis.detectors import PCAError, PCAMahalanobis, get, names
from reveal.analysis.ensemble import Ensemble
from reveal.config import DetectConfig
from reveal.errors import InputError


def correlated(n: int, k: int = 40, seed: int = 0) -> np.ndarray:
    """``n`` windows of ``k`` columns driven by two hidden factors, plus noise."""
    rng = np.random.default_rng(seed)
    mixing = np.random.default_rng(99).normal(size=(2, k))
    return rng.normal(size=(n, 2)) @ mixing + 0.3 * rng.normal(size=(n, k))


def test_registered_and_built_from_the_settings():
    assert "pca_error" in names() and get("pca_error") is PCAError
    ens = Ensemble(DetectConfig(detectors=("zscore", "pca_error"), pca_error_top=3))
    ens.fit(correlated(400))
    pe = next(d for d in ens.detectors_ if d.tag == "PE")
    assert pe.top == 3
    verdicts = ens.score(correlated(50, seed=1))
    assert set(verdicts.scores) == {"Z", "PE"}


def test_one_column_far_off_outranks_many_a_little_off():
    """One column 8 error-sigmas off against all 40 columns 2.5 off: PE ranks the first
    higher, a sum over columns (MAHA) the second."""
    base = correlated(2000)
    pe = PCAError(variance=0.9).fit(base)
    maha = PCAMahalanobis(variance=0.9).fit(base)
    fresh = correlated(1, seed=5)
    one, many = fresh.copy(), fresh.copy()
    one[0, 7] += 8 * pe.error_scale_[7]
    many[0] += 2.5 * pe.error_scale_
    assert pe.decision_function(one)[0] > pe.decision_function(many)[0]
    assert maha.decision_function(many)[0] > maha.decision_function(one)[0]
    contributions = pe.explain(one)[0]
    assert contributions.argmax() == 7 and (contributions >= 0).all()


def test_top_k_is_the_mean_of_the_largest_errors():
    base = correlated(500)
    pe = PCAError(variance=0.9, top=3).fit(base)
    X = correlated(20, seed=2)
    e = (pe._error(pe.pca_, X) - pe.error_center_) / pe.error_scale_
    expected = np.sort(e, axis=1)[:, -3:].mean(axis=1)
    np.testing.assert_allclose(pe.explain(X), np.maximum(e, 0.0), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(pe.decision_function(X), expected, rtol=1e-6)


def test_held_out_scales_keep_new_normal_windows_ordinary():
    """60 baseline windows in 200 columns: in-sample errors are far smaller than a new
    window's, so scales taken from them make ordinary windows look extreme; scales from
    held-out folds do not."""
    base, fresh = correlated(60, k=200), correlated(500, k=200, seed=3)
    held = PCAError(variance=0.95, folds=5).fit(base)
    in_sample = PCAError(variance=0.95, folds=0).fit(base)
    typical_held = float(np.median(held.explain(fresh)))
    typical_in = float(np.median(in_sample.explain(fresh)))
    assert typical_held < 2.0
    assert typical_in > 3 * typical_held


def test_bad_settings_and_input_are_clear_errors():
    base = correlated(100)
    with pytest.raises(InputError, match="top"):
        PCAError(top=0).fit(base)
    with pytest.raises(InputError, match="variance"):
        PCAError(variance=0.0).fit(base)
    pe = PCAError().fit(base)
    bad = base[:3].copy()
    bad[1, 2] = np.nan
    with pytest.raises(InputError, match="NaN"):
        pe.decision_function(bad)
    with pytest.raises(InputError, match="columns"):
        pe.decision_function(base[:, :5])
