"""The base class of every detector: fit on baseline windows, score windows, explain scores.

A detector is a scikit-learn estimator (parameters stored as given in ``__init__``, fitted
state in ``attr_``; ``get_params``, ``set_params`` and ``sklearn.base.clone`` work). As in
PyOD's ``BaseDetector``, the base class gives every detector ``decision_scores_`` (the
baseline's scores), ``threshold_`` (their ``threshold_quantile`` quantile) and
:meth:`Detector.predict`; a detector implements ``_fit``, ``_score`` and ``_explain``.
Scores are "higher = more anomalous" (unlike scikit-learn's outlier detectors, whose
``decision_function`` is higher for inliers).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Self

import numpy as np
from sklearn.base import BaseEstimator

from reveal.analysis.constants import MAD_TO_SIGMA
from reveal.analysis.estimator_params import keep_params
from reveal.analysis.preprocess import check_matrix
from reveal.errors import InputError

if TYPE_CHECKING:
    from reveal.analysis.ensemble import EnsembleOptions
    from reveal.config import DetectConfig

BLOCK_ROWS = 8192  # rows scored at a time by Z, MAHA and GMM (bounds memory)


class Detector(BaseEstimator):
    """Base class: threshold from the baseline score distribution, shared by all detectors.

    Subclasses set the class attributes ``name`` (the key in the registry and in
    ``DetectConfig.detectors``, e.g. ``"zscore"``), ``tag`` (the short label of its scores
    in verdicts and reports, e.g. ``"Z"``), ``min_rows`` (least baseline windows) and,
    where needed, ``explains_floored`` (False: the ensemble leaves its explanation out of
    attributions on floored columns unless ``DetectConfig.explain_forest``), and implement
    ``_fit``, ``_score`` and ``_explain`` on a checked matrix.

    Parameters
    ----------
    threshold_quantile : float
        Quantile of the baseline scores above which a window is flagged (0.99: the
        baseline's top 1 %).
    max_fit_rows : int or None
        Fit the model on at most this many baseline windows (a seeded random subsample);
        the threshold still uses the scores of every baseline window.
    random_state : int
        Seed for subsampling and randomised models.

    Attributes
    ----------
    n_features_in_ : int
        Columns seen by :meth:`fit` (K).
    decision_scores_ : ndarray of shape (n_baseline,)
        Scores of every baseline window.
    threshold_ : float
        The ``threshold_quantile`` quantile of ``decision_scores_``.
    """

    name: ClassVar[str] = "?"
    tag: ClassVar[str] = "?"
    min_rows: ClassVar[int] = 2
    explains_floored: ClassVar[bool] = True
    #: The detector's own ``__init__`` parameters that :meth:`from_settings` fills: each
    #: from a :class:`DetectConfig` attribute of the name given, or from what the ensemble
    #: passes (``"grid"``, ``"min_variance"``).
    settings: ClassVar[Mapping[str, str]] = {}

    def __init__(self, threshold_quantile: float = 0.99, max_fit_rows: int | None = None,
                 random_state: int = 0) -> None:
        keep_params(self, threshold_quantile=threshold_quantile, max_fit_rows=max_fit_rows,
                    random_state=random_state)

    # -- construction from the analysis settings ----------------------------------------
    @classmethod
    def from_settings(cls, config: DetectConfig, options: EnsembleOptions,
                      grid: np.ndarray | None = None, min_variance: float = 0.0) -> Self:
        """The detector the ensemble fits, built from the analysis settings.

        Parameters
        ----------
        config : DetectConfig
            Baseline quantile, seed and the detectors' own settings (PCA variance share,
            forest size, mixture size, ...).
        options : EnsembleOptions
            Ensemble settings (``max_fit_rows``).
        grid : bool ndarray of shape (K,) or None
            Columns in units of their scale floor (the ensemble's input has a floor there).
        min_variance : float
            Least variance of any direction, in squared input units (1 on floored input,
            else 0).

        Returns
        -------
        Detector
            Unfitted: the shared parameters and the detector's own :attr:`settings`.
        """
        given = {"grid": grid, "min_variance": min_variance}
        own = {param: given[source] if source in given else getattr(config, source)
               for param, source in cls.settings.items()}
        return cls(**own, **cls.shared_settings(config, options))

    @staticmethod
    def shared_settings(config: DetectConfig, options: EnsembleOptions) -> dict[str, Any]:
        """Keyword arguments every detector takes: baseline quantile, fit rows, seed."""
        return {"threshold_quantile": config.threshold_quantile,
                "max_fit_rows": options.max_fit_rows,
                "random_state": config.random_state}

    # -- the shared rule -------------------------------------------------------------
    def fit(self, X: np.ndarray, y: None = None) -> Self:
        """Fit on baseline windows; set ``decision_scores_`` and ``threshold_``.

        Parameters
        ----------
        X : ndarray of shape (n, K)
            Baseline windows, finite (normally robust z from
            :class:`reveal.analysis.preprocess.RobustScaler`).
        y : None
            Ignored (scikit-learn convention).

        Returns
        -------
        self
        """
        X = self._check(X, fitting=True)
        if not 0.0 < self.threshold_quantile < 1.0:
            raise InputError(f"threshold quantile must be in (0, 1), got "
                             f"{self.threshold_quantile}")
        self.n_features_in_ = X.shape[1]
        self._fit(self._subsample(X))
        self.decision_scores_ = self.decision_function(X)
        self.threshold_ = float(np.quantile(self.decision_scores_, self.threshold_quantile))
        return self

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        """Anomaly score of each window, higher = more anomalous.

        Parameters
        ----------
        X : ndarray of shape (n, K)
            Windows, the columns the detector was fitted on.

        Returns
        -------
        ndarray of shape (n,), float64
        """
        return self._score(self._check(X))

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Whether each window scores above ``threshold_``.

        Parameters
        ----------
        X : ndarray of shape (n, K)

        Returns
        -------
        bool ndarray of shape (n,)
        """
        return self.decision_function(X) > self.threshold_

    def explain(self, X: np.ndarray) -> np.ndarray:
        """Contribution of each column to each window's score.

        Parameters
        ----------
        X : ndarray of shape (n, K)

        Returns
        -------
        ndarray of shape (n, K)
            Non-negative; for Z and MAHA each row sums to the window's score.
        """
        return self._explain(self._check(X))

    # -- to implement ------------------------------------------------------------------
    def _fit(self, X: np.ndarray) -> None:
        """Fit the model on checked baseline windows (m, K), m ≤ ``max_fit_rows``."""
        raise NotImplementedError

    def _score(self, X: np.ndarray) -> np.ndarray:
        """Scores (n,) of checked windows (n, K)."""
        raise NotImplementedError

    def _explain(self, X: np.ndarray) -> np.ndarray:
        """Non-negative contributions (n, K) of checked windows (n, K)."""
        raise NotImplementedError

    # -- helpers -----------------------------------------------------------------------
    def _check(self, X: np.ndarray, fitting: bool = False) -> np.ndarray:
        X = check_matrix(X, f"{self.tag} input")
        if X.shape[1] == 0:
            raise InputError(f"{self.tag}: no usable feature columns")
        if fitting:
            if X.shape[0] < self.min_rows:
                raise InputError(f"{self.tag} needs at least {self.min_rows} baseline windows, "
                                 f"got {X.shape[0]}")
        elif not hasattr(self, "n_features_in_"):
            raise InputError(f"{self.tag} is not fitted")
        elif X.shape[1] != self.n_features_in_:
            raise InputError(f"{self.tag} was fitted on {self.n_features_in_} columns, "
                             f"got {X.shape[1]}")
        if not np.isfinite(X).all():
            raise InputError(f"{self.tag} input holds NaN or inf (scale it with RobustScaler)")
        return X

    def _subsample(self, X: np.ndarray) -> np.ndarray:
        if self.max_fit_rows is None or X.shape[0] <= self.max_fit_rows:
            return X
        rng = np.random.default_rng(self.random_state)
        rows = np.sort(rng.choice(X.shape[0], self.max_fit_rows, replace=False))
        return X[rows]


def blockwise(X: np.ndarray, fn: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """``fn`` applied to blocks of ``BLOCK_ROWS`` rows of ``X`` (n, K), results (n,) joined."""
    return np.concatenate([fn(X[i:i + BLOCK_ROWS]) for i in range(0, X.shape[0], BLOCK_ROWS)])


def robust_center_scale(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-column median and scale (K,) of ``X`` (n, K): 1.4826 · MAD, else the standard
    deviation, else 1."""
    center = np.median(X, axis=0)
    scale = np.median(np.abs(X - center), axis=0) * MAD_TO_SIGMA
    std = X.std(axis=0)
    scale = np.where(scale > 1e-12, scale, np.where(std > 1e-12, std, 1.0))
    return center.astype(np.float64), scale.astype(np.float64)
