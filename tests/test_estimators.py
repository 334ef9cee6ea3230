"""Reveal's detectors as scikit-learn outlier detectors: scikit-learn's own estimator checks,
its sign conventions, and a Pipeline on real window features of a synthetic host."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.impute import SimpleImputer
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.utils.estimator_checks import parametrize_with_checks

from reveal.analysis.detectors import registry
from reveal.analysis.estimators import DetectorOutlier
from reveal.api import window_features
from synthetic import ar1_host

#: smaller forests keep scikit-learn's ~50 checks quick; every other setting is the default
_LIGHT = {"iforest": {"n_estimators": 25}}
_BUILTIN = registry.BUILTIN_MODULES


def _estimators() -> list[DetectorOutlier]:
    return [DetectorOutlier(name, _LIGHT.get(name)) for name in _BUILTIN]


#: checks that cannot apply, with the reason: none, every detector passes every check
#: (scikit-learn skips ``check_array_api_input`` unless SCIPY_ARRAY_API is set; set, it passes)
_EXPECTED_FAILED: dict[str, str] = {}


@parametrize_with_checks(_estimators(), expected_failed_checks=lambda e: _EXPECTED_FAILED)
def test_scikit_learn_estimator_checks(estimator, check) -> None:
    check(estimator)


def _blobs(n: int = 400, k: int = 5, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, k)) * np.array([1.0, 2.0, 0.5, 10.0, 1e3])[:k] + 7.0


@pytest.mark.parametrize("name", _BUILTIN)
def test_scikit_learn_signs_normal_is_high_outliers_negative(name: str) -> None:
    X = _blobs()
    est = DetectorOutlier(name, _LIGHT.get(name)).fit(X)
    far = X[:5] + np.array([40.0, 80.0, 20.0, 400.0, 4e4])  # 40 sigmas out in every column
    normal = est.score_samples(X[:50])
    assert est.score_samples(far).max() < normal.min()
    assert (est.predict(far) == -1).all() and (est.decision_function(far) < 0).all()
    np.testing.assert_allclose(est.decision_function(X), est.score_samples(X) - est.offset_)
    # the wrapped detector's own convention, reversed: higher = more anomalous there
    inner = est.detector_.decision_function(est.detector_input(X))
    np.testing.assert_array_equal(est.score_samples(X), -inner)
    assert est.predict(X).dtype == np.int64 and set(np.unique(est.predict(X))) <= {-1, 1}


@pytest.mark.parametrize("contamination", [0.01, 0.05, 0.2])
def test_contamination_is_the_share_of_training_windows_called_outliers(contamination) -> None:
    X = _blobs(n=500)
    est = DetectorOutlier("pca_mahalanobis", contamination=contamination).fit(X)
    share = float(np.mean(est.predict(X) == -1))
    assert share == pytest.approx(contamination, abs=1.0 / len(X))
    # the same cut as the analysis's baseline threshold at quantile 1 - contamination
    assert est.detector_.threshold_quantile == pytest.approx(1 - contamination)
    assert est.offset_ == pytest.approx(-est.detector_.threshold_, rel=1e-6, abs=1e-9)


def test_params_clone_and_set_params_rebuild_the_detector() -> None:
    est = DetectorOutlier("iforest", {"n_estimators": 30}, contamination=0.02)
    assert est.get_params()["detector_params"] == {"n_estimators": 30}
    twin = clone(est).set_params(detector="gmm", detector_params=None)
    assert est.detector == "iforest" and twin.detector == "gmm"
    twin.fit(_blobs())
    assert type(twin.detector_).name == "gmm"
    assert twin.detector_.threshold_quantile == pytest.approx(0.98)


def test_bad_parameters_are_value_errors_naming_the_choice() -> None:
    X = _blobs(n=50)
    with pytest.raises(ValueError, match="unknown detector 'nope'; known: zscore"):
        DetectorOutlier("nope").fit(X)
    with pytest.raises(ValueError, match=r"contamination must be in \(0, 0.5\]"):
        DetectorOutlier(contamination=0.7).fit(X)
    with pytest.raises(ValueError, match=r"detector 'zscore'.*n_estimators"):
        DetectorOutlier("zscore", {"n_estimators": 3}).fit(X)


def test_a_pipeline_on_window_features_flags_the_fault_span() -> None:
    start = pd.Timestamp("2026-03-02 14:00", tz="UTC")

    def frame(seconds: float, seed: int, fault=None) -> pd.DataFrame:
        tel = ar1_host(seconds, seed, fault=fault)
        index = start + pd.to_timedelta(tel.timestamps_ns, unit="ns")
        return pd.DataFrame(tel.values, index=index, columns=tel.channels)

    X0 = window_features(frame(240, seed=1))
    X = window_features(frame(120, seed=3, fault=(60, 80)))
    assert list(X.columns) == list(X0.columns)
    assert X.index[0] == start + pd.Timedelta(100, "ms")  # a rate needs a sample before it
    pipe = make_pipeline(SimpleImputer(strategy="median", keep_empty_features=True),
                         DetectorOutlier("zscore", contamination=0.01))
    flagged = X.index[pipe.fit(X0).predict(X) == -1]
    inside = (flagged + pd.Timedelta(3, "s") > start + pd.Timedelta(60, "s")) & \
        (flagged < start + pd.Timedelta(80, "s"))
    assert inside.sum() >= 15  # most of the 20 s fault's windows
    assert inside.mean() >= 0.9  # and hardly any elsewhere


def test_grid_search_tunes_a_detector_parameter() -> None:
    X = _blobs(n=300)
    grid = GridSearchCV(DetectorOutlier("iforest"),
                        {"detector_params": [{"n_estimators": 10}, {"n_estimators": 20}]},
                        scoring=lambda est, X, y=None: float(np.mean(est.score_samples(X))),
                        cv=3).fit(X)
    assert grid.best_params_["detector_params"]["n_estimators"] in (10, 20)
    assert grid.best_estimator_.detector_.n_estimators in (10, 20)
