"""The PCA subspace MAHA and GMM live in (shared by both, not a detector)."""

from __future__ import annotations

import numpy as np

from reveal.errors import InputError

RANDOMIZED_ABOVE = 1000  # PCA by randomized SVD when rows and columns both exceed this


class PCASubspace:
    """PCA keeping ``variance`` of the total variance (at most ``max_components``).

    Exact eigen-decomposition of the covariance (or Gram) matrix for small problems; for
    large ones (rows and columns above ``RANDOMIZED_ABOVE``) the leading components by
    randomized SVD (Halko et al.), which is much cheaper when few components suffice.

    ``residual_var_`` is the mean variance of the discarded directions: the isotropic noise
    of probabilistic PCA (Tipping & Bishop), used to put the residual on the same scale.

    ``min_variance`` (squared input units): the least variance any direction, kept or
    discarded, is whitened by. Where the input is in scale-floored z (one unit = the least
    change that counts), 1 says that a change smaller than one floor along any combination
    of columns is not evidence; without it a baseline of a few dozen windows in thousands
    of columns leaves directions, and a residual, of almost no variance, and a one-floor
    step of a quiet column along them reads as hundreds of sigmas.
    """

    def __init__(self, variance: float, max_components: int | None,
                 min_variance: float = 0.0) -> None:
        self.variance = variance
        self.max_components = max_components
        self.min_variance = min_variance

    def fit(self, X: np.ndarray) -> PCASubspace:
        """Fit on windows ``X`` (n, K); sets ``components_`` (K, q), ``explained_variance_``
        (q,), ``residual_var_`` and ``whiten_var_`` (q,)."""
        n, k = X.shape
        self.mean_ = X.mean(axis=0, dtype=np.float64)
        work = np.float64 if k <= 2000 else X.dtype
        Xc = (X - self.mean_.astype(X.dtype)).astype(work)
        total = float(np.einsum("ij,ij->", Xc, Xc, dtype=np.float64)) / max(n - 1, 1)
        if total <= 0:
            raise InputError("baseline has no variance in any column")
        found = self._randomized(Xc, total) if min(n, k) > RANDOMIZED_ABOVE else None
        evals, evecs = found if found is not None else self._exact(Xc)
        order = np.argsort(evals)[::-1]
        evals, evecs = np.clip(evals[order], 0.0, None), evecs[:, order]
        good = evals > 1e-10 * evals[0]
        share = np.cumsum(evals) / total
        q = int(np.searchsorted(share, self.variance) + 1)
        q = max(1, min(q, int(good.sum())))
        if self.max_components is not None:
            q = min(q, self.max_components)
        self.components_ = evecs[:, :q].astype(np.float64)  # (K, q), orthonormal columns
        self.explained_variance_ = evals[:q].astype(np.float64)
        self.explained_variance_ratio_ = self.explained_variance_ / total
        self.n_components_ = q
        rest = max(total - float(self.explained_variance_.sum()), 0.0)
        self.residual_var_ = rest / (k - q) if k > q and rest > 1e-12 * total else 0.0
        if k > q and self.min_variance > 0:
            self.residual_var_ = max(self.residual_var_, self.min_variance)
        self.whiten_var_ = np.maximum(self.explained_variance_, self.min_variance)
        return self

    @staticmethod
    def _exact(Xc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n, k = Xc.shape
        if k <= n:
            cov = (Xc.T @ Xc).astype(np.float64) / max(n - 1, 1)
            return np.linalg.eigh(cov)
        # fewer rows than columns: eigen-decompose the Gram matrix instead
        gram = (Xc @ Xc.T).astype(np.float64) / max(n - 1, 1)
        evals, u = np.linalg.eigh(gram)
        pos = evals > 1e-12 * max(float(evals.max()), 1e-300)
        evals, u = evals[pos], u[:, pos]
        return evals, (Xc.T.astype(np.float64) @ u) / np.sqrt(evals * max(n - 1, 1))

    def _randomized(self, Xc: np.ndarray, total: float) -> tuple[np.ndarray, np.ndarray] | None:
        """Leading components by randomized SVD, doubling their number until they hold
        ``variance`` (or ``max_components`` are found); None when that needs more than a
        quarter of the dimensions (the exact route is then cheaper)."""
        from sklearn.utils.extmath import randomized_svd

        n, k = Xc.shape
        limit = min(n, k) // 4
        want = 64 if self.max_components is None else min(self.max_components, limit)
        while True:
            _, sv, vt = randomized_svd(Xc, want, n_oversamples=16, n_iter=4, random_state=0)
            evals = sv.astype(np.float64) ** 2 / max(n - 1, 1)
            enough = evals.sum() / total >= self.variance
            if enough or (self.max_components is not None and want >= self.max_components):
                return evals, vt.T
            if want * 2 > limit:
                return None
            want *= 2

    def project(self, X: np.ndarray,
                whiten: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
        """Coordinates in the subspace (n, q), whitened unless ``whiten`` is False, and,
        when the residual counts, the residual (n, K) divided by its noise standard
        deviation."""
        V = self.components_.astype(X.dtype)
        Xc = X - self.mean_.astype(X.dtype)
        P = Xc @ V
        W = P.astype(np.float64)
        if whiten:
            W /= np.sqrt(self.whiten_var_)
        if self.residual_var_ <= 0:
            return W, None
        R = (Xc - P @ V.T) * X.dtype.type(1.0 / np.sqrt(self.residual_var_))
        return W, R

    def to_columns(self, G: np.ndarray, dtype: np.dtype) -> np.ndarray:
        """Map subspace vectors (n, q) back onto columns: ``G @ V.T`` (norm preserved)."""
        return G.astype(dtype) @ self.components_.T.astype(dtype)
