"""``MAHA``: Mahalanobis distance (Hotelling T²) in the PCA subspace, plus the residual."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from reveal.analysis.detectors._subspace import PCASubspace
from reveal.analysis.detectors.base import Detector, blockwise
from reveal.analysis.detectors.registry import register
from reveal.analysis.estimator_params import keep_params
from reveal.errors import InputError


@register
class PCAMahalanobis(Detector):
    """Mahalanobis distance (T²) in the principal subspace keeping ``variance``.

    With ``residual=True`` (default) the distance is that of probabilistic PCA: T² plus the
    squared residual outside the subspace divided by the mean discarded variance, so a
    window that breaks the baseline's correlations (off the subspace) is not missed.

    Explanation: the complete decomposition of the quadratic form,
    ``c = (V Λ^-½ Vᵀ (x − μ) + r / σ)²`` per column (r the residual), non-negative and
    summing to the score.

    Parameters
    ----------
    variance : float
        Share of the baseline variance the subspace keeps (0.95).
    max_components : int or None
        Upper bound on the subspace dimension.
    residual : bool
        Add the scaled residual (probabilistic-PCA distance).
    min_variance : float
        Least variance of any direction of the subspace, in squared input units (0: no
        least; see :class:`PCASubspace`).
    threshold_quantile, max_fit_rows, random_state
        See :class:`Detector`.

    Attributes
    ----------
    n_components_ : int
        The dimension (q) of the fitted subspace ``pca_`` (a :class:`PCASubspace`).
    """

    name = "pca_mahalanobis"
    tag = "MAHA"
    min_rows = 3
    settings: ClassVar[Mapping[str, str]] = {"variance": "pca_variance",
                                             "min_variance": "min_variance"}

    def __init__(self, variance: float = 0.95, max_components: int | None = None,
                 residual: bool = True, threshold_quantile: float = 0.99,
                 max_fit_rows: int | None = None, random_state: int = 0,
                 min_variance: float = 0.0) -> None:
        super().__init__(threshold_quantile, max_fit_rows, random_state)
        keep_params(self, variance=variance, max_components=max_components, residual=residual,
                    min_variance=min_variance)

    def _fit(self, X: np.ndarray) -> None:
        if not 0.0 < self.variance <= 1.0:
            raise InputError(f"PCA variance share must be in (0, 1], got {self.variance}")
        self.pca_ = PCASubspace(self.variance, self.max_components,
                                self.min_variance).fit(X)
        if not self.residual:
            self.pca_.residual_var_ = 0.0
        self.n_components_ = self.pca_.n_components_

    def _score_block(self, X: np.ndarray) -> np.ndarray:
        W, R = self.pca_.project(X)
        s = np.einsum("ij,ij->i", W, W)
        if R is not None:
            s += np.einsum("ij,ij->i", R, R, dtype=np.float64)
        return s

    def _score(self, X: np.ndarray) -> np.ndarray:
        return blockwise(X, self._score_block)

    def _explain(self, X: np.ndarray) -> np.ndarray:
        W, R = self.pca_.project(X)
        Y = self.pca_.to_columns(W, X.dtype)
        if R is not None:
            Y += R
        return Y.astype(np.float64) ** 2
