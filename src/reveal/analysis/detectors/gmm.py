"""``GMM``: Gaussian mixture in the PCA subspace; score = negative log-likelihood."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from reveal.analysis.detectors._subspace import PCASubspace
from reveal.analysis.detectors.base import Detector, blockwise
from reveal.analysis.detectors.registry import register
from reveal.analysis.estimator_params import keep_params


@register
class GMM(Detector):
    """Gaussian mixture in the whitened PCA subspace; score = negative log-likelihood.

    The number of components is chosen by BIC over ``1..max_components``. As for ``MAHA``,
    the residual outside the subspace counts too (``½ · |r|² / σ²``, the log-likelihood of
    an isotropic Gaussian residual). Explanation: the window's Mahalanobis distance to its
    most responsible component plus the residual, decomposed as for ``MAHA``
    (``(V · P_k^½ (u − μ_k) + r / σ)²`` with ``P_k`` that component's precision).

    Parameters
    ----------
    max_components : int
        Largest mixture size tried.
    variance : float
        Variance share of the PCA subspace the mixture lives in.
    max_dims : int
        Upper bound on that subspace's dimension (full covariances cost dims²).
    bic_rows : int
        Baseline windows used for the BIC search and the fit (seeded subsample).
    reg_covar : float
        Added to each covariance diagonal (whitened units).
    min_variance : float
        With a positive value the mixture lives in the unwhitened subspace (input units)
        and every covariance gets at least this much variance in every direction (as
        ``reg_covar``): the least change that counts, as for ``MAHA``. 0: whitened.
    threshold_quantile, max_fit_rows, random_state
        See :class:`Detector`.

    Attributes
    ----------
    pca_ : PCASubspace
    mixture_ : sklearn.mixture.GaussianMixture
        The mixture with the lowest BIC.
    n_mixture_components_ : int
    precision_roots_ : ndarray of shape (n_mixture_components_, q, q)
        Symmetric square roots of the component precisions (for explanations).
    """

    name = "gmm"
    tag = "GMM"
    min_rows = 4
    settings: ClassVar[Mapping[str, str]] = {
        "max_components": "gmm_max_components", "variance": "pca_variance",
        "min_variance": "min_variance"}

    def __init__(self, max_components: int = 6, variance: float = 0.95, max_dims: int = 30,
                 bic_rows: int = 5000, reg_covar: float = 1e-3,
                 threshold_quantile: float = 0.99, max_fit_rows: int | None = None,
                 random_state: int = 0, min_variance: float = 0.0) -> None:
        super().__init__(threshold_quantile, max_fit_rows, random_state)
        keep_params(self, max_components=max_components, variance=variance, max_dims=max_dims,
                    bic_rows=bic_rows, reg_covar=reg_covar, min_variance=min_variance)

    def _subspace(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Coordinates the mixture lives in (whitened, or input units with
        ``min_variance``) and the scaled residual."""
        return self.pca_.project(X, whiten=self.min_variance <= 0)

    def _fit(self, X: np.ndarray) -> None:
        from sklearn.mixture import GaussianMixture
        from threadpoolctl import threadpool_limits

        self.pca_ = PCASubspace(self.variance, self.max_dims, self.min_variance).fit(X)
        U = self._subspace(X)[0]
        reg_covar = max(self.reg_covar, self.min_variance)
        if U.shape[0] > self.bic_rows:
            rng = np.random.default_rng(self.random_state)
            U = U[rng.choice(U.shape[0], self.bic_rows, replace=False)]
        best, best_bic = None, np.inf
        for m in range(1, max(1, min(self.max_components, U.shape[0] // 2)) + 1):
            # small matrices: one BLAS thread avoids costly thread hand-offs
            with warnings.catch_warnings(), threadpool_limits(1):
                warnings.simplefilter("ignore")
                gm = GaussianMixture(m, covariance_type="full", reg_covar=reg_covar,
                                     random_state=self.random_state, n_init=1).fit(U)
            bic = gm.bic(U)
            if bic < best_bic:
                best, best_bic = gm, bic
        assert best is not None
        self.mixture_ = best
        self.n_mixture_components_ = best.n_components
        # symmetric square roots of the component precisions, for explanations
        roots = []
        for prec in best.precisions_:
            w, v = np.linalg.eigh(prec)
            roots.append((v * np.sqrt(np.clip(w, 0.0, None))) @ v.T)
        self.precision_roots_ = np.array(roots)

    def _score_block(self, X: np.ndarray) -> np.ndarray:
        U, R = self._subspace(X)
        s = -self.mixture_.score_samples(U)
        if R is not None:
            s += 0.5 * np.einsum("ij,ij->i", R, R, dtype=np.float64)
        return s

    def _score(self, X: np.ndarray) -> np.ndarray:
        return blockwise(X, self._score_block)

    def _explain(self, X: np.ndarray) -> np.ndarray:
        U, R = self._subspace(X)
        comp = self.mixture_.predict(U)
        G = np.empty_like(U)
        for m in np.unique(comp):
            rows = comp == m
            G[rows] = (U[rows] - self.mixture_.means_[m]) @ self.precision_roots_[m]
        Y = self.pca_.to_columns(G, X.dtype)
        if R is not None:
            Y += R
        return Y.astype(np.float64) ** 2
