"""``PE``: each column's PCA reconstruction error on its own scale; the largest few count."""

from __future__ import annotations

from collections.abc import Mapping
from itertools import pairwise
from typing import ClassVar

import numpy as np

from reveal.analysis.detectors._subspace import PCASubspace
from reveal.analysis.detectors.base import Detector, blockwise, robust_center_scale
from reveal.analysis.detectors.registry import register
from reveal.analysis.estimator_params import keep_params
from reveal.errors import InputError


@register
class PCAError(Detector):
    """Per-column PCA reconstruction error, each column on its own robust scale, combined
    by the mean of the ``top`` largest (one column far off is enough).

    The principal subspace is fitted on the baseline; a window's error in column ``j`` is
    ``|r_j| = |x_j − x̂_j|``, turned into ``e_j = (|r_j| − m_j) / s_j`` with ``m_j``, ``s_j``
    the median and robust scale (1.4826 · MAD) of that column's error on baseline windows
    the subspace did not see (``folds`` contiguous folds, each scored by a subspace fitted
    on the others: an in-sample error is smaller than a new window's, most of all on a
    short baseline with many columns). The score is the mean of the ``top`` largest
    ``e_j``. Sum-type scores (MAHA's distance, Z's mean) let many quiet columns drown one
    broken one; here a column's error counts in the units of its own baseline error.

    Explanation: ``max(e_j, 0)``.

    Parameters
    ----------
    variance : float
        Share of the baseline variance the subspace keeps.
    max_components : int or None
        Upper bound on the subspace dimension (never more than half the columns).
    top : int
        How many of the largest per-column errors are averaged (1: the maximum).
    folds : int
        Contiguous baseline folds for the held-out error scales (< 2: in-sample errors).
    min_variance : float
        Least variance of any direction (see :class:`PCASubspace`); 0 for none.
    threshold_quantile, max_fit_rows, random_state
        See :class:`Detector`.

    Attributes
    ----------
    pca_ : PCASubspace
        The subspace fitted on every baseline window.
    error_center_, error_scale_ : ndarray of shape (K,)
        Median and robust scale of each column's held-out baseline error.
    """

    name = "pca_error"
    tag = "PE"
    min_rows = 4
    settings: ClassVar[Mapping[str, str]] = {"variance": "pca_variance", "top": "pca_error_top",
                                             "min_variance": "min_variance"}

    def __init__(self, variance: float = 0.95, max_components: int | None = None,
                 top: int = 1, folds: int = 5, threshold_quantile: float = 0.99,
                 max_fit_rows: int | None = None, random_state: int = 0,
                 min_variance: float = 0.0) -> None:
        super().__init__(threshold_quantile, max_fit_rows, random_state)
        keep_params(self, variance=variance, max_components=max_components, top=top,
                    folds=folds, min_variance=min_variance)

    def _subspace(self, X: np.ndarray) -> PCASubspace:
        """The principal subspace of ``X``, at most half the columns wide: a subspace that
        spans every column leaves no error to score."""
        half = max(1, X.shape[1] // 2)
        most = half if self.max_components is None else min(self.max_components, half)
        return PCASubspace(self.variance, most, self.min_variance).fit(X)

    @staticmethod
    def _error(pca: PCASubspace, X: np.ndarray) -> np.ndarray:
        """``|x − x̂|`` (n, K) of windows ``X`` against subspace ``pca`` (exactly 0 where the
        subspace spans every column: what is left is rounding)."""
        if pca.n_components_ >= X.shape[1]:
            return np.zeros(X.shape, dtype=X.dtype)
        mean = pca.mean_.astype(X.dtype)
        comps = pca.components_.astype(X.dtype)
        Xc = X - mean
        return np.abs(Xc - (Xc @ comps) @ comps.T)

    def _fit(self, X: np.ndarray) -> None:
        if not 0.0 < self.variance <= 1.0:
            raise InputError(f"PCA variance share must be in (0, 1], got {self.variance}")
        if int(self.top) < 1:
            raise InputError(f"top must be at least 1, got {self.top}")
        self.pca_ = self._subspace(X)
        self.n_components_ = self.pca_.n_components_
        n = X.shape[0]
        folds = int(self.folds)
        if folds >= 2 and n >= 2 * folds:
            held = np.empty(X.shape, dtype=np.float64)
            for start, stop in pairwise(np.linspace(0, n, folds + 1).astype(np.int64)):
                rest = np.r_[0:start, stop:n]
                held[start:stop] = self._error(self._subspace(X[rest]), X[start:stop])
        else:
            held = self._error(self.pca_, X).astype(np.float64)
        self.error_center_, self.error_scale_ = robust_center_scale(held)

    def _normalised(self, X: np.ndarray) -> np.ndarray:
        """``(|r| − m) / s`` per column (n, K); negative where a column fits better than
        its baseline median error."""
        e = self._error(self.pca_, X)
        e -= self.error_center_.astype(X.dtype)
        e /= self.error_scale_.astype(X.dtype)
        return e

    def _score_block(self, X: np.ndarray) -> np.ndarray:
        e = self._normalised(X)
        k = min(int(self.top), e.shape[1])
        if k == 1:
            return e.max(axis=1).astype(np.float64)
        largest = np.partition(e, e.shape[1] - k, axis=1)[:, e.shape[1] - k:]
        return largest.mean(axis=1, dtype=np.float64)

    def _score(self, X: np.ndarray) -> np.ndarray:
        return blockwise(X, self._score_block)

    def _explain(self, X: np.ndarray) -> np.ndarray:
        return np.maximum(self._normalised(X), 0.0).astype(np.float64)
