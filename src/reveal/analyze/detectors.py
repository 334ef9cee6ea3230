"""Unsupervised window detectors: fit on baseline windows, score windows, explain scores.

Every detector follows the scikit-learn contract (parameters stored as given in
``__init__``, fitted state in ``attr_``) and gets ``decision_scores_`` (the baseline's
scores), ``threshold_`` (their ``threshold_quantile`` quantile) and :meth:`predict` from
one base class, as in PyOD's ``BaseDetector``. Scores are "higher = more anomalous";
:meth:`explain` splits a window's score into non-negative per-column contributions.

Input is a (windows, columns) matrix, normally already scaled by
:class:`reveal.analyze.preprocess.RobustScaler` (robust z, no NaN).

=========  ==========================================================================
``Z``      mean |z| over columns (robust z against the baseline median / MAD)
``MAHA``   Mahalanobis distance (Hotelling T²) in the PCA subspace keeping
           ``variance`` of the baseline variance
``IF``     Isolation Forest (scikit-learn), score = mean isolation "surprise" in (0, 1]
``GMM``    Gaussian mixture in the whitened PCA subspace, components chosen by BIC;
           score = negative log-likelihood
=========  ==========================================================================
"""

from __future__ import annotations

import warnings
from typing import Self

import numpy as np
from scipy import sparse

from reveal.analyze.preprocess import MAD_TO_SIGMA, check_matrix
from reveal.errors import InputError


class Detector:
    """Base class: threshold from the baseline score distribution, shared by all detectors.

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
    """

    name = "?"
    min_rows = 2

    def __init__(self, threshold_quantile: float = 0.99, max_fit_rows: int | None = None,
                 random_state: int = 0) -> None:
        self.threshold_quantile = threshold_quantile
        self.max_fit_rows = max_fit_rows
        self.random_state = random_state

    # -- the shared rule -------------------------------------------------------------
    def fit(self, X: np.ndarray) -> Self:
        """Fit on baseline windows ``X`` (n, K); set ``decision_scores_`` and ``threshold_``."""
        X = self._check(X, fitting=True)
        if not 0.0 < self.threshold_quantile < 1.0:
            raise InputError(f"threshold quantile must be in (0, 1), got "
                             f"{self.threshold_quantile}")
        self.n_features_in_ = X.shape[1]
        self._fit(self._subsample(X))
        self.decision_scores_ = self.score_samples(X)
        self.threshold_ = float(np.quantile(self.decision_scores_, self.threshold_quantile))
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        """bool (n,): score above ``threshold_``."""
        return self.score_samples(X) > self.threshold_

    def score_samples(self, X: np.ndarray) -> np.ndarray:
        """Anomaly score per window, shape (n,), higher = more anomalous."""
        return self._score(self._check(X))

    def explain(self, X: np.ndarray) -> np.ndarray:
        """Non-negative contribution of each column to each window's score, shape (n, K)."""
        return self._explain(self._check(X))

    # -- to implement ------------------------------------------------------------------
    def _fit(self, X: np.ndarray) -> None:
        raise NotImplementedError

    def _score(self, X: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _explain(self, X: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    # -- helpers -----------------------------------------------------------------------
    def _check(self, X: np.ndarray, fitting: bool = False) -> np.ndarray:
        X = check_matrix(X, f"{self.name} input")
        if X.shape[1] == 0:
            raise InputError(f"{self.name}: no usable feature columns")
        if fitting:
            if X.shape[0] < self.min_rows:
                raise InputError(f"{self.name} needs at least {self.min_rows} baseline windows, "
                                 f"got {X.shape[0]}")
        elif not hasattr(self, "n_features_in_"):
            raise InputError(f"{self.name} is not fitted")
        elif X.shape[1] != self.n_features_in_:
            raise InputError(f"{self.name} was fitted on {self.n_features_in_} columns, "
                             f"got {X.shape[1]}")
        if not np.isfinite(X).all():
            raise InputError(f"{self.name} input holds NaN or inf (scale it with RobustScaler)")
        return X

    def _subsample(self, X: np.ndarray) -> np.ndarray:
        if self.max_fit_rows is None or X.shape[0] <= self.max_fit_rows:
            return X
        rng = np.random.default_rng(self.random_state)
        rows = np.sort(rng.choice(X.shape[0], self.max_fit_rows, replace=False))
        return X[rows]

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.endswith("_"))
        return f"{type(self).__name__}({params})"


BLOCK_ROWS = 8192  # rows scored at a time by Z, MAHA and GMM (bounds memory)
RANDOMIZED_ABOVE = 1000  # PCA by randomized SVD when rows and columns both exceed this


def _blockwise(X: np.ndarray, fn) -> np.ndarray:
    return np.concatenate([fn(X[i:i + BLOCK_ROWS]) for i in range(0, X.shape[0], BLOCK_ROWS)])


def _robust_center_scale(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    center = np.median(X, axis=0)
    scale = np.median(np.abs(X - center), axis=0) * MAD_TO_SIGMA
    std = X.std(axis=0)
    scale = np.where(scale > 1e-12, scale, np.where(std > 1e-12, std, 1.0))
    return center.astype(np.float64), scale.astype(np.float64)


class ZScore(Detector):
    """Mean |robust z| over columns; a column's contribution is its |z| / K.

    ``min_scale``: least per-column scale (1.0 when the input is already robust z, so
    that a scale floor applied upstream is not undone).
    """

    name = "Z"
    min_scale = 0.0

    def _fit(self, X: np.ndarray) -> None:
        self.center_, self.scale_ = _robust_center_scale(X)
        self.scale_ = np.maximum(self.scale_, self.min_scale)

    def _z(self, X: np.ndarray) -> np.ndarray:
        return np.abs((X - self.center_.astype(X.dtype)) / self.scale_.astype(X.dtype))

    def _score(self, X: np.ndarray) -> np.ndarray:
        return _blockwise(X, lambda B: self._z(B).mean(axis=1, dtype=np.float64))

    def _explain(self, X: np.ndarray) -> np.ndarray:
        return self._z(X) / X.shape[1]




class _PCASubspace:
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

    def fit(self, X: np.ndarray) -> _PCASubspace:
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
        Least variance of any direction (see :class:`_PCASubspace`); 0 for none.
    """

    name = "MAHA"
    min_rows = 3

    def __init__(self, variance: float = 0.95, max_components: int | None = None,
                 residual: bool = True, threshold_quantile: float = 0.99,
                 max_fit_rows: int | None = None, random_state: int = 0,
                 min_variance: float = 0.0) -> None:
        super().__init__(threshold_quantile, max_fit_rows, random_state)
        self.variance = variance
        self.max_components = max_components
        self.residual = residual
        self.min_variance = min_variance

    def _fit(self, X: np.ndarray) -> None:
        if not 0.0 < self.variance <= 1.0:
            raise InputError(f"PCA variance share must be in (0, 1], got {self.variance}")
        self.pca_ = _PCASubspace(self.variance, self.max_components,
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
        return _blockwise(X, self._score_block)

    def _explain(self, X: np.ndarray) -> np.ndarray:
        W, R = self.pca_.project(X)
        Y = self.pca_.to_columns(W, X.dtype)
        if R is not None:
            Y += R
        return Y.astype(np.float64) ** 2


class IsolationForest(Detector):
    """scikit-learn's Isolation Forest; score = ``-score_samples`` (in (0, 1], 1 = isolated).

    Explanation (a simplified DIFFI): every split on a window's path through a tree credits
    its column with ``1 / path length`` of that window in that tree, so columns that
    isolate the window early get most. A forest splits on random columns, so in many
    dimensions these credits are spread thinly; each column's credit is therefore
    multiplied by the window's |z| in that column (how far it sits from the baseline centre
    there), and the products are scaled to sum to the score.

    Parameters
    ----------
    n_estimators : int
        Trees.
    max_samples : int or "auto"
        Baseline windows per tree (256 for "auto", as in the original method).
    n_jobs : int or None
        Threads for scikit-learn.
    grid : bool array (K,) or None
        Columns in units of their scale floor (the ensemble marks the columns with a floor,
        whose unit is the least change that counts), rounded to whole units before the
        forest sees them. A forest is blind to each column's scale: it splits anywhere
        between a node's smallest and largest value, so a window 0.02 floors beyond the
        baseline's range in one column is isolated at once, and floors would change
        nothing. On the grid such a column moves only when it moves by about a floor. A
        column within half a floor of its median on the whole baseline becomes constant,
        and a forest never splits on a constant column (as it never did on a column
        constant on the baseline): the other detectors watch those.
    """

    name = "IF"

    def __init__(self, n_estimators: int = 200, max_samples: int | str = "auto",
                 n_jobs: int | None = None, threshold_quantile: float = 0.99,
                 max_fit_rows: int | None = None, random_state: int = 0,
                 grid: np.ndarray | None = None) -> None:
        super().__init__(threshold_quantile, max_fit_rows, random_state)
        self.n_estimators = n_estimators
        self.max_samples = max_samples
        self.n_jobs = n_jobs
        self.grid = grid

    def _on_grid(self, X: np.ndarray) -> np.ndarray:
        """``X`` (float32) with the ``grid`` columns rounded to whole units."""
        Xf = X.astype(np.float32, copy=True)
        if self.grid is not None and np.any(self.grid):
            cols = np.flatnonzero(self.grid)
            Xf[:, cols] = np.round(Xf[:, cols])
        return Xf

    def _fit(self, X: np.ndarray) -> None:
        from sklearn.ensemble import IsolationForest as SkIsolationForest

        if self.grid is not None and len(self.grid) != X.shape[1]:
            raise InputError(f"grid marks {len(self.grid)} columns, data has {X.shape[1]}")
        self.center_, self.scale_ = _robust_center_scale(X)
        self.forest_ = SkIsolationForest(
            n_estimators=self.n_estimators, max_samples=self.max_samples,
            random_state=self.random_state, n_jobs=self.n_jobs,
        ).fit(self._on_grid(X))

    def _score(self, X: np.ndarray) -> np.ndarray:
        return -self.forest_.score_samples(self._on_grid(X))

    def _explain(self, X: np.ndarray) -> np.ndarray:
        Xf = self._on_grid(X)
        n, k = Xf.shape
        credit = sparse.csr_matrix((n, k), dtype=np.float64)
        for tree, feats in zip(self.forest_.estimators_, self.forest_.estimators_features_,
                               strict=True):
            path = tree.decision_path(Xf[:, feats]).tocsr()  # (n, nodes) 0/1
            depth = np.asarray(path.sum(axis=1)).ravel() - 1.0  # splits on the path
            weight = 1.0 / np.maximum(depth, 1.0)
            node_feat = tree.tree_.feature
            split = node_feat >= 0
            nodes = np.flatnonzero(split)
            onehot = sparse.csr_matrix(
                (np.ones(nodes.size), (nodes, feats[node_feat[nodes]])),
                shape=(node_feat.size, k))
            credit = credit + sparse.diags(weight) @ path @ onehot
        credit = credit.toarray() * np.abs(X - self.center_.astype(X.dtype)) / self.scale_
        total = credit.sum(axis=1, keepdims=True)
        score = self._score(X)[:, None]
        return credit * (score / np.where(total > 0, total, 1.0))


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
    """

    name = "GMM"
    min_rows = 4

    def __init__(self, max_components: int = 6, variance: float = 0.95, max_dims: int = 30,
                 bic_rows: int = 5000, reg_covar: float = 1e-3,
                 threshold_quantile: float = 0.99, max_fit_rows: int | None = None,
                 random_state: int = 0, min_variance: float = 0.0) -> None:
        super().__init__(threshold_quantile, max_fit_rows, random_state)
        self.max_components = max_components
        self.variance = variance
        self.max_dims = max_dims
        self.bic_rows = bic_rows
        self.reg_covar = reg_covar
        self.min_variance = min_variance

    def _subspace(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Coordinates the mixture lives in (whitened, or input units with
        ``min_variance``) and the scaled residual."""
        return self.pca_.project(X, whiten=self.min_variance <= 0)

    def _fit(self, X: np.ndarray) -> None:
        from sklearn.mixture import GaussianMixture
        from threadpoolctl import threadpool_limits

        self.pca_ = _PCASubspace(self.variance, self.max_dims, self.min_variance).fit(X)
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
        return _blockwise(X, self._score_block)

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


DETECTORS: dict[str, type[Detector]] = {
    "zscore": ZScore,
    "pca_mahalanobis": PCAMahalanobis,
    "iforest": IsolationForest,
    "gmm": GMM,
}
