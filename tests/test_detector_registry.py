"""The detector registry: built-ins by name, settings to detectors, a new detector in one file."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest
from sklearn.base import clone

from reveal.analysis import detectors
from reveal.analysis.detectors import (
    GMM,
    Detector,
    IsolationForest,
    PCAError,
    PCAMahalanobis,
    ZScore,
    register,
    unregister,
)
from reveal.analysis.ensemble import Ensemble, EnsembleOptions
from reveal.analysis.estimator_params import keep_params
from reveal.config import DetectConfig
from reveal.errors import InputError


class FarthestColumn(Detector):
    """Largest |x − baseline median| over columns; all of it credited to that column."""

    name = "farthest"
    tag = "FAR"

    def _fit(self, X: np.ndarray) -> None:
        self.center_ = np.median(X, axis=0)

    def _score(self, X: np.ndarray) -> np.ndarray:
        return np.abs(X - self.center_).max(axis=1)

    def _explain(self, X: np.ndarray) -> np.ndarray:
        d = np.abs(X - self.center_)
        return np.where(d == d.max(axis=1, keepdims=True), d, 0.0)


@pytest.fixture
def farthest():
    register(FarthestColumn)
    yield FarthestColumn
    unregister(FarthestColumn.name)


def test_builtins_are_registered_in_order():
    assert detectors.names() == ("zscore", "pca_mahalanobis", "iforest", "gmm", "pca_error")
    assert detectors.names()[:4] == DetectConfig().detectors  # pca_error: not by default
    assert [detectors.get(n) for n in detectors.names()] == [ZScore, PCAMahalanobis,
                                                            IsolationForest, GMM, PCAError]
    assert [cls.tag for cls in (ZScore, PCAMahalanobis, IsolationForest, GMM, PCAError)] == \
        ["Z", "MAHA", "IF", "GMM", "PE"]


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(InputError, match="unknown detector 'nope'; known: zscore, "
                                         "pca_mahalanobis, iforest, gmm, pca_error"):
        detectors.get("nope")


def test_register_refuses_a_taken_or_missing_name():
    class Other(FarthestColumn):
        name = "zscore"

    with pytest.raises(ValueError, match="taken by ZScore"):
        register(Other)

    class Nameless(Detector):
        pass

    with pytest.raises(ValueError, match="needs a name"):
        register(Nameless)
    with pytest.raises(ValueError, match="not a Detector"):
        register(int)  # type: ignore[type-var]
    assert register(ZScore) is ZScore  # the same class again: nothing changes
    assert detectors.names()[0] == "zscore"


def test_from_settings_takes_what_each_detector_needs():
    config = DetectConfig(threshold_quantile=0.95, random_state=7, pca_variance=0.8,
                          iforest_trees=33, gmm_max_components=2)
    options = EnsembleOptions(max_fit_rows=1234)
    grid = np.array([True, False, True])
    built = {n: detectors.get(n).from_settings(config, options, grid, 1.0)
             for n in detectors.names()}
    for det in built.values():
        assert (det.threshold_quantile, det.max_fit_rows, det.random_state) == (0.95, 1234, 7)
    assert built["zscore"].min_scale == 1.0
    assert built["pca_mahalanobis"].variance == 0.8
    assert built["pca_mahalanobis"].min_variance == 1.0
    assert built["iforest"].n_estimators == 33 and built["iforest"].grid is grid
    assert built["gmm"].max_components == 2 and built["gmm"].variance == 0.8
    assert built["gmm"].min_variance == 1.0
    assert built["pca_error"].top == config.pca_error_top
    plain = FarthestColumn.from_settings(config, options)  # the base class's: shared ones
    assert plain.get_params() == {"threshold_quantile": 0.95, "max_fit_rows": 1234,
                                  "random_state": 7}

    class Settled(FarthestColumn):
        """A detector with settings of its own, named in ``settings`` only."""

        settings: ClassVar = {"share": "pca_variance", "least": "min_variance"}

        def __init__(self, share: float = 0.5, least: float = 0.0,
                     threshold_quantile: float = 0.99, max_fit_rows: int | None = None,
                     random_state: int = 0) -> None:
            super().__init__(threshold_quantile, max_fit_rows, random_state)
            keep_params(self, share=share, least=least)

    settled = Settled.from_settings(config, options, grid, 2.0)
    assert settled.get_params() == {"threshold_quantile": 0.95, "max_fit_rows": 1234,
                                    "random_state": 7, "share": 0.8, "least": 2.0}
    assert clone(settled).get_params() == settled.get_params()


@pytest.mark.parametrize("name", ["zscore", "pca_mahalanobis", "iforest", "gmm"])
def test_detectors_are_scikit_learn_estimators(name):
    det = detectors.get(name)(random_state=3)
    params = det.get_params()
    assert params["random_state"] == 3
    copy = clone(det)
    assert copy is not det and copy.get_params().keys() == params.keys()
    assert copy.set_params(threshold_quantile=0.9).threshold_quantile == 0.9
    assert not hasattr(copy, "threshold_")  # fitted state only after fit


def test_a_new_detector_runs_in_the_ensemble(farthest):
    rng = np.random.default_rng(2)
    base = rng.normal(size=(400, 6))
    run = rng.normal(size=(120, 6))
    run[60:70, 4] += 9.0
    assert "farthest" in detectors.names()
    ens = Ensemble(DetectConfig(detectors=("zscore", "farthest"))).fit(base)
    assert [type(d) for d in ens.detectors_] == [ZScore, farthest]
    v = ens.score(run)
    assert set(v.scores) == {"Z", "FAR"}
    assert v.scores["FAR"].shape == (120,)
    assert v.flagged[60:70].all() and v.flagged[:60].mean() <= 0.05
    contrib = ens.explain(run, np.arange(60, 70), centres=v.centres)
    assert (contrib.argmax(axis=1) == 4).all()


def test_unregistered_detector_is_unknown_again(farthest):
    unregister(farthest.name)
    with pytest.raises(InputError, match="unknown detector 'farthest'"):
        Ensemble(DetectConfig(detectors=("zscore", "farthest"))).fit(np.eye(20))
