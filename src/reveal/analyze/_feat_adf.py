"""Augmented Dickey-Fuller test statistic for many windows at once.

Reproduces statsmodels' ``adfuller(x, regression="c", autolag="AIC")[0]`` (as called by
tsfresh's ``augmented_dickey_fuller``) for every column of ``X`` (n, N):

1. ``maxlag p = min(ceil(12 * (n/100)**0.25), n//2 - 2)``; NaN when ``p < 0`` (n <= 3),
   when the window holds NaN/inf, or when it is constant.
2. Lag search on the common sample (Δx rows p..n-2, ``m = n-1-p``): nested regressions of
   Δx_t on [1, x_{t-1}, Δx_{t-1}, ..., Δx_{t-k}], k = 0..p. One Cholesky factorisation of
   the Gram matrix of [1, x, Δx lags, Δx] gives every nested residual sum of squares;
   ``AIC_k = m log RSS_k + 2 rank_k`` (plus a constant); the smallest wins, ties go to
   the smaller lag.
3. Refit with the chosen lag on its own (longer) sample; the statistic is the t-value of
   the x_{t-1} coefficient, read off a Cholesky factor with x_{t-1} ordered last among the
   regressors: ``t = R[x, y] / sqrt(RSS / (m' - rank))``.

statsmodels details kept: ``add_trend(has_constant="skip")`` drops the intercept when a
regressor column is constant and non-zero (then no shift is applied, as a regression
without intercept is not shift invariant); rank deficient designs (e.g. all-zero lag
columns of sparse series) count their rank, and a dependent column leaves the fit
unchanged. Where the intercept is present, x is shifted by its window mean and Δx by its
window mean before the products, so large offsets (1e9 + noise) lose no digits.

Deviations from statsmodels, all on degenerate windows (see docs/features.md): a perfect
fit (RSS at round-off, e.g. an exact ramp or sinusoid) gives NaN instead of round-off
noise; an exact AIC tie (a column dependent on earlier ones) goes to the smaller lag.
"""

from __future__ import annotations

import numpy as np

# A regressor is dependent when its residual norm² after projection on the earlier ones is
# below this share of its own norm² (Gram-based factorisation resolves ~1e-15).
DEPENDENT_TOL = 1e-12
# A fit is perfect when its RSS is below this share of the (shifted) Σ y².
PERFECT_FIT_TOL = 1e-13


def adf_maxlag(n: int) -> int:
    """statsmodels' default maxlag for a series of ``n`` values with a constant."""
    if n < 1:
        return -1
    lag = int(np.ceil(12.0 * np.power(n / 100.0, 1 / 4.0)))
    return min(n // 2 - 2, lag)


def adf_stat(X: np.ndarray) -> np.ndarray:
    """ADF t-statistic (constant, AIC lag choice) of each column of ``X`` (n, N)."""
    n, N = X.shape
    out = np.full(N, np.nan)
    p = adf_maxlag(n)
    if p < 0 or N == 0:
        return out
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(X).all(axis=0)
        ok &= X.max(axis=0) != X.min(axis=0)
    cols = np.flatnonzero(ok)
    if cols.size == 0:
        return out
    Xv = X if cols.size == N else X[:, cols]
    out[cols] = _adf_valid(np.ascontiguousarray(Xv), p)
    return out


class _Series:
    """Per-block arrays shared by the search and the refit."""

    def __init__(self, X: np.ndarray) -> None:
        n = X.shape[0]
        self.n = n
        self.x = X
        self.dx = X[1:] - X[:-1]
        self.x_mean = X.mean(axis=0)
        self.dx_mean = self.dx.mean(axis=0)
        # prefix counts of non-zero Δx and of changes between consecutive Δx
        nz = np.zeros((n, X.shape[1]), dtype=np.int32)
        np.cumsum(self.dx != 0, axis=0, out=nz[1:])
        self.nz_prefix = nz
        ch = np.zeros((n - 1, X.shape[1]), dtype=np.int32)
        if n >= 3:
            np.cumsum(self.dx[1:] != self.dx[:-1], axis=0, out=ch[1:])
        self.change_prefix = ch

    def no_intercept(self, a: int, k: int, sel: np.ndarray | slice) -> np.ndarray:
        """statsmodels drops the intercept: a regressor constant and non-zero on rows a..n-2.

        Regressors are x_{t-1} (x[a..n-2]) and Δx lags 1..k (Δx[a-j..n-2-j]).
        """
        n = self.n
        x = self.x[:, sel]
        dx = self.dx[:, sel]
        nz = self.nz_prefix[:, sel]
        ch = self.change_prefix[:, sel]
        # x[a..n-2] constant <=> Δx[a..n-3] all zero
        flag = (nz[n - 2] - nz[a] == 0) & (x[a] != 0)
        for j in range(1, k + 1):
            # Δx[a-j..n-2-j] constant <=> no change between consecutive Δx in that range
            flag |= (ch[n - 2 - j] - ch[a - j] == 0) & (dx[a - j] != 0)
        return flag


def _gram(cols: list[np.ndarray], intercept: np.ndarray, m: int) -> list[list[np.ndarray]]:
    """Gram matrix of [1, cols...]; the intercept column is zero where ``intercept`` is 0."""
    K = len(cols) + 1
    G: list[list[np.ndarray]] = [[None] * K for _ in range(K)]  # type: ignore[list-item]
    G[0][0] = intercept * float(m)
    for b in range(1, K):
        G[0][b] = intercept * cols[b - 1].sum(axis=0)
        for c in range(b, K):
            G[b][c] = np.einsum("ij,ij->j", cols[b - 1], cols[c - 1])
    return G


def _cholesky(G: list[list[np.ndarray]]) -> tuple[list[list[np.ndarray]], list[np.ndarray]]:
    """Upper Cholesky factor R of a Gram matrix whose last column is the response.

    Regressor columns whose residual after the earlier ones is negligible are dependent:
    their row of R is zero (the fit is as without them). Returns R (R[i][j], i <= j,
    i < K-1) and the per-column independence masks.
    """
    K = len(G)
    R: list[list[np.ndarray]] = [[None] * K for _ in range(K)]  # type: ignore[list-item]
    keep: list[np.ndarray] = []
    for j in range(K - 1):
        s = G[j][j].copy()
        for i in range(j):
            s -= R[i][j] * R[i][j]
        indep = s > DEPENDENT_TOL * G[j][j]
        keep.append(indep)
        rjj = np.sqrt(np.where(indep, s, 1.0))
        R[j][j] = np.where(indep, rjj, 0.0)
        for c in range(j + 1, K):
            v = G[j][c].copy()
            for i in range(j):
                v -= R[i][j] * R[i][c]
            R[j][c] = np.where(indep, v / rjj, 0.0)
    return R, keep


def _adf_valid(X: np.ndarray, p: int) -> np.ndarray:
    N = X.shape[1]
    S = _Series(X)
    lag = _search(S, p)
    out = np.full(N, np.nan)
    for k in np.unique(lag):
        sel = np.flatnonzero(lag == k)
        out[sel] = _refit(S, int(k), sel)
    return out


def _search(S: _Series, p: int) -> np.ndarray:
    """Chosen lag per series.

    A perfect fit (RSS at round-off) counts as AIC -inf, as statsmodels' exact zero RSS
    does: the first perfect model wins. When RSS is exactly zero (Δx all zero on the
    search sample) this is statsmodels' choice too; otherwise its choice is round-off.
    """
    n = S.n
    m = n - 1 - p
    full = slice(None)
    no_icpt = S.no_intercept(p, p, full)
    icpt = (~no_icpt).astype(np.float64)
    x_shift = icpt * S.x_mean
    d_shift = icpt * S.dx_mean
    dxs = S.dx - d_shift
    level = S.x[p : n - 1] - x_shift
    cols = [level] + [dxs[p - j : n - 1 - j] for j in range(1, p + 1)] + [dxs[p : n - 1]]
    G = _gram(cols, icpt, m)
    R, keep = _cholesky(G)
    K = len(G)
    yy = G[K - 1][K - 1]
    rss = yy.copy()
    rank = np.zeros(yy.shape, dtype=np.int64)
    # prefix [1, x] for lag 0, then one Δx lag more per model
    best_aic = np.full(yy.shape, np.inf)
    best_lag = np.zeros(yy.shape, dtype=np.int64)
    for j in range(K - 1):
        rss = rss - R[j][K - 1] * R[j][K - 1]
        rank = rank + keep[j]
        if j < 1:
            continue
        k = j - 1
        is_perfect = rss <= PERFECT_FIT_TOL * yy
        with np.errstate(divide="ignore", invalid="ignore"):
            aic = m * np.log(np.where(is_perfect, 1.0, rss)) + 2.0 * rank
        aic = np.where(is_perfect, -np.inf, aic)
        better = aic < best_aic
        best_aic = np.where(better, aic, best_aic)
        best_lag = np.where(better, k, best_lag)
    return best_lag


def _refit(S: _Series, k: int, sel: np.ndarray) -> np.ndarray:
    """t-value of x_{t-1} in Δx_t ~ [1, Δx_{t-1..t-k}, x_{t-1}] on Δx rows k..n-2."""
    n = S.n
    m = n - 1 - k
    no_icpt = S.no_intercept(k, k, sel)
    icpt = (~no_icpt).astype(np.float64)
    x = S.x[:, sel]
    dx = S.dx[:, sel]
    dxs = dx - icpt * S.dx_mean[sel]
    level = x[k : n - 1] - icpt * S.x_mean[sel]
    cols = [dxs[k - j : n - 1 - j] for j in range(1, k + 1)] + [level, dxs[k : n - 1]]
    G = _gram(cols, icpt, m)
    R, keep = _cholesky(G)
    K = len(G)
    yy = G[K - 1][K - 1]
    rss = yy.copy()
    rank = np.zeros(yy.shape, dtype=np.int64)
    for j in range(K - 1):
        rss -= R[j][K - 1] * R[j][K - 1]
        rank += keep[j]
    df = m - rank
    with np.errstate(divide="ignore", invalid="ignore"):
        t = R[K - 2][K - 1] / np.sqrt(rss / df)
    bad = ~keep[K - 2] | (rss <= PERFECT_FIT_TOL * yy) | (df <= 0)
    t[bad] = np.nan
    return t


__all__ = ["adf_maxlag", "adf_stat"]
