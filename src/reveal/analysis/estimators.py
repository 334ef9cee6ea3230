"""Reveal's detectors as scikit-learn outlier detectors, for Pipelines and model selection.

:class:`DetectorOutlier` wraps any detector of the registry (:mod:`.detectors`) with
scikit-learn's outlier-detection conventions (those of ``sklearn.ensemble.IsolationForest``),
which differ from the detectors' own:

==========================  ==================================  ===========================
                            a Reveal detector                   :class:`DetectorOutlier`
==========================  ==================================  ===========================
score of a window           ``decision_function``: higher =     ``score_samples``: higher =
                            more anomalous                      more normal (its negative)
decision                    ``threshold_``: the baseline        ``decision_function`` =
                            scores' ``threshold_quantile``      ``score_samples - offset_``;
                            quantile                            negative = anomalous
``predict``                 bool, True = anomalous              +1 inlier, -1 outlier
bad input                   ``InputError``                      ``ValueError`` (scikit-learn's
                                                                own checks and messages)
==========================  ==================================  ===========================

Input is any numeric matrix (windows × columns): each column is first put in robust z
against the training data (median and 1.4826 · MAD, clipped to ±``clip``), as the analysis
does before its detectors. Window features of a run come from
:func:`reveal.api.window_features`.
"""

from __future__ import annotations

from typing import Any, Self

import numpy as np
from sklearn.base import BaseEstimator, OutlierMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from reveal.analysis.detectors import registry
from reveal.analysis.detectors.base import Detector, robust_center_scale
from reveal.analysis.estimator_params import keep_params


class DetectorOutlier(OutlierMixin, BaseEstimator):
    """A registered Reveal detector with scikit-learn's outlier-detector interface.

    Parameters
    ----------
    detector : str
        Registry name: ``"zscore"``, ``"pca_mahalanobis"``, ``"iforest"``, ``"gmm"`` (or any
        detector registered with :func:`reveal.analysis.detectors.register`).
    detector_params : dict or None
        The detector's own parameters (``{"n_estimators": 50}`` for ``iforest``); its
        threshold quantile and seed come from ``contamination`` and ``random_state``.
    contamination : float
        Share of the training windows taken as outliers, in (0, 0.5]: sets ``offset_``
        (0.01: the training data's top 1 % of anomaly scores lie beyond it, as the
        analysis's 99th-percentile baseline threshold).
    scale : bool
        Put each column in robust z against the training data first (median / MAD).
    clip : float
        Bound on |z| after scaling (baseline sigmas), so one column that barely moved in
        training cannot dominate.
    random_state : int
        Seed of randomised detectors and of subsampling.

    Attributes
    ----------
    detector_ : Detector
        The fitted Reveal detector (``detector_.explain(X)`` splits scores into columns;
        give it :meth:`detector_input`).
    offset_ : float
        ``score_samples`` below this are outliers: the ``contamination`` quantile of the
        training data's ``score_samples``.
    center_, scale_ : ndarray of shape (n_features_in_,)
        Robust centre and scale of each column (0 and 1 with ``scale=False``).
    n_features_in_ : int
        Columns seen by :meth:`fit`.
    """

    def __init__(self, detector: str = "pca_mahalanobis",
                 detector_params: dict[str, Any] | None = None, contamination: float = 0.01,
                 scale: bool = True, clip: float = 100.0, random_state: int = 0) -> None:
        keep_params(self, detector=detector, detector_params=detector_params,
                    contamination=contamination, scale=scale, clip=clip,
                    random_state=random_state)

    def _build(self) -> Detector:
        if self.detector not in registry.names():
            raise ValueError(f"unknown detector {self.detector!r}; known: "
                             f"{', '.join(registry.names())}")
        cls = registry.get(self.detector)
        params = dict(self.detector_params or {})
        params.update(threshold_quantile=1.0 - float(self.contamination),
                      random_state=self.random_state)
        try:
            return cls(**params)
        except TypeError as exc:
            raise ValueError(f"detector {self.detector!r}: {exc}") from None

    def fit(self, X: Any, y: None = None) -> Self:
        """Fit on training windows ``X`` (n_samples, n_features); ``y`` is ignored."""
        if not 0.0 < float(self.contamination) <= 0.5:
            raise ValueError(f"contamination must be in (0, 0.5], got {self.contamination!r}")
        detector = self._build()
        X = validate_data(self, X, dtype=[np.float64, np.float32],
                          ensure_min_samples=max(2, detector.min_rows))
        if self.scale:
            center, scale = robust_center_scale(np.asarray(X, dtype=np.float64))
        else:
            center, scale = np.zeros(X.shape[1]), np.ones(X.shape[1])
        self.center_, self.scale_ = center, scale
        self.detector_ = detector.fit(self._scaled(X))
        self.offset_ = float(np.percentile(-self.detector_.decision_scores_,
                                           100.0 * float(self.contamination)))
        return self

    def detector_input(self, X: Any) -> np.ndarray:
        """``X`` as the detector sees it: robust z, clipped (n_samples, n_features)."""
        check_is_fitted(self)
        return self._scaled(validate_data(self, X, dtype=[np.float64, np.float32],
                                          reset=False))

    def _scaled(self, X: np.ndarray) -> np.ndarray:
        Z = (np.asarray(X, dtype=np.float64) - self.center_) / self.scale_
        return np.clip(Z, -self.clip, self.clip) if self.scale else Z

    def score_samples(self, X: Any) -> np.ndarray:
        """Normality of each window, higher = more normal: minus the detector's anomaly
        score (n_samples,)."""
        check_is_fitted(self)
        return -self.detector_.decision_function(self.detector_input(X))

    def decision_function(self, X: Any) -> np.ndarray:
        """``score_samples(X) - offset_`` (n_samples,): negative = outlier."""
        return self.score_samples(X) - self.offset_

    def predict(self, X: Any) -> np.ndarray:
        """+1 for inliers, -1 for outliers (n_samples,), int64."""
        return np.where(self.decision_function(X) < 0, -1, 1).astype(np.int64)

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "detector_")
