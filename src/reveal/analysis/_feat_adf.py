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
# Below this share of Σ y², the refit's RSS is recomputed from the residuals (the
# Gram-based value has a relative error of about 1e-16 * Σ y² / RSS).
RECOMPUTE_RSS_BELOW = 1e-5
# Refit groups with fewer series than this build their Gram matrix entry by entry.
DIRECT_BELOW = 2048
# The lag search runs on chunks of this many windows (its (K, K, N) arrays stay in cache);
# the refits run on all windows of a call at once (fewer, larger groups).
SEARCH_CHUNK = 8192
# Below this share of valid windows, the valid ones are gathered before the work (a gather
# costs about what the ADF of 6% of the windows does).
COMPACT_BELOW = 0.92


def adf_maxlag(n: int) -> int:
    """statsmodels' default maxlag for a series of ``n`` values with a constant."""
    if n < 1:
        return -1
    lag = int(np.ceil(12.0 * np.power(n / 100.0, 1 / 4.0)))
    return min(n // 2 - 2, lag)


def adf_stat(
    X: np.ndarray, dev: np.ndarray | None = None, m2: np.ndarray | None = None
) -> np.ndarray:
    """ADF t-statistic (constant, AIC lag choice) of each column of ``X`` (n, N).

    ``dev`` (X minus each column's mean, computed so that a constant column gives exact
    zeros) and ``m2`` (column sums of dev²) may be passed when already computed.
    """
    n, N = X.shape
    out = np.full(N, np.nan)
    p = adf_maxlag(n)
    if p < 0 or N == 0:
        return out
    if dev is None or m2 is None:
        dev = X - X[0]  # exact zeros for a constant window
        dev -= dev.mean(axis=0)
        m2 = np.einsum("ij,ij->j", dev, dev)
    # NaN/inf anywhere -> m2 not finite; a constant window -> every deviation is 0
    with np.errstate(invalid="ignore"):
        valid = np.isfinite(m2) & (m2 > 0)
    n_valid = int(valid.sum())
    if n_valid == 0:
        return out
    if n_valid < COMPACT_BELOW * N:  # many invalid: compact; else compute all and mask
        cols = np.flatnonzero(valid)
        X, dev = np.take(X, cols, axis=1), np.take(dev, cols, axis=1)
        out[cols] = _adf_fast(X, dev, p, np.ones(cols.size, dtype=bool))
        return out
    X, dev = np.ascontiguousarray(X), np.ascontiguousarray(dev)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        return _adf_fast(X, dev, p, valid)


def _adf_general(X: np.ndarray, p: int) -> np.ndarray:
    """Reference path for windows where statsmodels may drop the intercept."""
    N = X.shape[1]
    S = _Series(X)
    lag = _search(S, p)
    out = np.full(N, np.nan)
    for k in np.unique(lag):
        sel = np.flatnonzero(lag == k)
        out[sel] = _refit(S, int(k), sel)
    return out


def _prefix_rows(a: np.ndarray) -> np.ndarray:
    """Row prefix sums with a leading zero row: out[i] = a[:i].sum(axis=0).

    A loop over rows: ``np.cumsum(axis=0)`` is ~30x slower on (rows, many) arrays.
    """
    out = np.empty((a.shape[0] + 1, *a.shape[1:]), dtype=a.dtype)
    out[0] = 0
    for i in range(a.shape[0]):
        np.add(out[i], a[i], out=out[i + 1])
    return out


def _lagged_gram(
    dev: np.ndarray, ds: np.ndarray, a: int, kmax: int, level_first: bool, direct: bool = False
) -> tuple[np.ndarray, np.ndarray, int]:
    """Uncentred Gram matrix of the ADF regressors and response, plus column sums.

    The sample is Δx rows a..n-2 (``m = n-1-a`` rows). ``dev`` is x minus its window mean
    and ``ds`` Δx minus its window mean (shifts that an intercept absorbs). Columns, in
    factorisation order: [x_{t-1}, Δx_{t-1}, ..., Δx_{t-kmax}, Δx_t] when ``level_first``
    (the lag search: each model is a prefix), else [Δx_{t-1..t-kmax}, x_{t-1}, Δx_t] (the
    refit: x_{t-1} last among the regressors). Returns G (K, K, N) with only its upper
    triangle filled (K = kmax + 2), the column sums (K, N) and m.

    Entries along a diagonal of the lag structure share products: each is the previous one
    plus a row and minus a row. ``direct`` computes each entry as one dot product instead:
    fewer NumPy calls, which wins for few windows.
    """
    n, N = dev.shape
    m = n - 1 - a
    K = kmax + 2
    # column of Δx_{t-l}; l = 0 is the response
    pos = [K - 1] + [lag if level_first else lag - 1 for lag in range(1, kmax + 1)]
    level_pos = 0 if level_first else kmax

    def entry(l1: int, l2: int) -> np.ndarray:
        i, j = pos[l1], pos[l2]
        return G[min(i, j), max(i, j)]

    G = np.empty((K, K, N))
    tmp = np.empty(N)
    for d in range(kmax + 1):
        # entry (l, l+d), l = 0..kmax-d: Σ over rows i = a..n-2 of Δx_{i-l} Δx_{i-l-d}
        if direct or kmax <= 2:
            for lo in range(kmax - d + 1):
                np.einsum(
                    "ij,ij->j",
                    ds[a - lo : n - 1 - lo],
                    ds[a - lo - d : n - 1 - lo - d],
                    out=entry(lo, lo + d),
                )
            continue
        # the sum for l is Σ_v Δ[v+d] Δ[v] over v = r..r+m-1 with r = a-d-l; slide r
        # upwards from l = kmax-d: add the product entering, subtract the one leaving
        r = a - kmax
        acc = entry(kmax - d, kmax)
        np.einsum("ij,ij->j", ds[r + d : r + d + m], ds[r : r + m], out=acc)
        for lo in range(kmax - d - 1, -1, -1):
            nxt = entry(lo, lo + d)
            np.multiply(ds[r + m + d], ds[r + m], out=tmp)
            np.add(acc, tmp, out=nxt)
            np.multiply(ds[r + d], ds[r], out=tmp)
            nxt -= tmp
            acc = nxt
            r += 1
    level = dev[a : n - 1]
    np.einsum("ij,ij->j", level, level, out=G[level_pos, level_pos])
    for lag in range(kmax + 1):
        i = pos[lag]
        out = G[min(i, level_pos), max(i, level_pos)]
        np.einsum("ij,ij->j", level, ds[a - lag : n - 1 - lag], out=out)
    sums = np.empty((K, N))
    lag_sums = np.empty((kmax + 1, N))
    np.add.reduce(ds[a - kmax : n - 1 - kmax], axis=0, out=lag_sums[kmax])
    for lag in range(kmax - 1, -1, -1):
        np.add(lag_sums[lag + 1], ds[n - 2 - lag], out=lag_sums[lag])
        lag_sums[lag] -= ds[a - lag - 1]
    sums[pos] = lag_sums
    np.add.reduce(level, axis=0, out=sums[level_pos])
    return G, sums, m


def _cholesky_stack(G: np.ndarray, sums: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Cholesky factor of the Gram matrix of [1, columns of G], stacked over N.

    ``G`` (K, K, N) holds the upper triangle of the uncentred Gram matrix; its last column
    is the response. Row 0 of the factor is the intercept (sums / sqrt(m)); row j+1 belongs
    to column j. A regressor whose residual norm² is below DEPENDENT_TOL of its own norm²
    is dependent: its row is zero (the fit is as without it). Returns R (K, K, N) (entries
    left of the diagonal undefined) and independence (K-1, N).
    """
    K, _, N = G.shape
    R = np.empty((K, K, N))
    np.multiply(sums, 1.0 / np.sqrt(m), out=R[0])
    indep = np.empty((K - 1, N), dtype=bool)
    with np.errstate(invalid="ignore"):
        for j in range(K - 1):
            v = G[j, j:] - np.einsum("in,ikn->kn", R[: j + 1, j], R[: j + 1, j:])
            ok = np.greater(v[0], DEPENDENT_TOL * G[j, j], out=indep[j])
            r = np.sqrt(v[0])
            if not ok.all():
                r[~ok] = np.inf
            np.divide(v, r, out=R[j + 1, j:])
    return R, indep


def _adf_fast(X: np.ndarray, dev: np.ndarray, p: int, valid: np.ndarray) -> np.ndarray:
    """ADF for the ``valid`` windows (NaN elsewhere), assuming statsmodels keeps the intercept.

    Windows with a dependent regressor may be ones where statsmodels drops the intercept
    (a constant non-zero regressor); those that are go through :func:`_adf_general`.
    """
    n, N = X.shape
    ds = X[1:] - X[:-1]
    ds -= (X[n - 1] - X[0]) / (n - 1)
    lag = np.empty(N, dtype=np.intp)
    general = np.empty(N, dtype=bool)
    for c0 in range(0, N, SEARCH_CHUNK):
        c1 = min(N, c0 + SEARCH_CHUNK)
        lag[c0:c1], general[c0:c1] = _search_fast(dev[:, c0:c1], ds[:, c0:c1], p)

    # refit per chosen lag, on series sorted by lag so that each group is a slice
    perm = np.argsort(lag, kind="stable")
    bounds = np.searchsorted(lag[perm], np.arange(p + 2))
    dev_s = np.take(dev, perm, axis=1)
    ds_s = np.take(ds, perm, axis=1)
    t_s = np.empty(N)
    dep_s = np.zeros(N, dtype=bool)
    for k in range(p + 1):
        lo, hi = bounds[k], bounds[k + 1]
        if lo < hi:
            t_s[lo:hi], dep_s[lo:hi] = _refit_fast(
                dev_s[:, lo:hi], ds_s[:, lo:hi], k, direct=hi - lo < DIRECT_BELOW
            )
    out = np.empty(N)
    out[perm] = t_s
    general[perm[dep_s]] = True
    out[~valid] = np.nan
    cand = np.flatnonzero(general & valid)
    if cand.size:
        S = _Series(np.take(X, cand, axis=1))
        drop = S.no_intercept(p, p, slice(None))
        drop |= _refit_drops_intercept(S, lag[cand])
        redo = cand[drop]
        if redo.size:
            out[redo] = _adf_general(np.take(X, redo, axis=1), p)
    return out


def _search_fast(dev: np.ndarray, ds: np.ndarray, p: int) -> tuple[np.ndarray, np.ndarray]:
    """AIC lag choice (intercept kept) and whether any regressor was dependent."""
    G, sums, m = _lagged_gram(dev, ds, p, p, level_first=True)
    K = p + 2
    R, indep = _cholesky_stack(G, sums, m)
    yy = G[K - 1, K - 1]
    ry2 = R[:, K - 1] ** 2
    rss = yy - ry2[0] - _prefix_rows(ry2[1:])[1:]  # row k: model with lags 1..k
    rank = _prefix_rows(indep.astype(np.intp))[1:] + 1
    # AIC = m log(RSS) + 2 rank + const is minimised where RSS * exp(2 rank / m) is;
    # a perfect fit (AIC -inf) scores -1
    penalty = np.exp(2.0 * np.arange(K + 1) / m)
    score = rss * penalty[rank]
    score[rss <= PERFECT_FIT_TOL * yy] = -1.0
    return np.argmin(score, axis=0), ~indep.all(axis=0)


def _refit_drops_intercept(S: _Series, lag: np.ndarray) -> np.ndarray:
    flag = np.zeros(lag.shape, dtype=bool)
    for k in np.unique(lag):
        sel = np.flatnonzero(lag == k)
        flag[sel] = S.no_intercept(int(k), int(k), sel)
    return flag


def _refit_fast(
    dev: np.ndarray, ds: np.ndarray, k: int, direct: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """t-value of x_{t-1} with lag k (intercept kept); also which fits had a dependency.

    ``t = R[x, y] / sqrt(RSS / df)`` with x_{t-1} last among the regressors. Where the
    fit is nearly perfect the Gram-based RSS loses digits; there the RSS is recomputed
    from the residuals themselves.
    """
    G, sums, m = _lagged_gram(dev, ds, k, k, level_first=False, direct=direct)
    K = k + 2
    R, indep = _cholesky_stack(G, sums, m)
    yy = G[K - 1, K - 1]
    rss = yy - np.einsum("in,in->n", R[:, K - 1], R[:, K - 1])
    df = m - 1 - indep.sum(axis=0)
    close = np.flatnonzero(rss < RECOMPUTE_RSS_BELOW * yy)
    if close.size:
        rss[close] = _residual_rss(R[:, :, close], indep[:, close], dev[:, close], ds[:, close], k)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = R[K - 1, K - 1] / np.sqrt(rss / df)
    bad = ~indep[K - 2] | (rss <= PERFECT_FIT_TOL * yy) | (df <= 0)
    t[bad] = np.nan
    return t, ~indep.all(axis=0)


def _residual_rss(
    R: np.ndarray, indep: np.ndarray, dev: np.ndarray, ds: np.ndarray, k: int
) -> np.ndarray:
    """RSS of the lag-k refit from its residuals (coefficients by back substitution)."""
    n = dev.shape[0]
    K = k + 2
    beta = np.zeros((K - 1, dev.shape[1]))
    for j in range(K - 2, -1, -1):
        acc = R[j + 1, K - 1] - np.einsum("in,in->n", R[j + 1, j + 1 : K - 1], beta[j + 1 :])
        beta[j] = np.where(indep[j], acc / np.where(indep[j], R[j + 1, j], 1.0), 0.0)
    resid = ds[k : n - 1] - beta[k] * dev[k : n - 1]
    for lag in range(1, k + 1):
        resid -= beta[lag - 1] * ds[k - lag : n - 1 - lag]
    resid -= resid.mean(axis=0)
    return np.einsum("ij,ij->j", resid, resid)


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


def _factor(cols: list[np.ndarray], icpt: np.ndarray,
            m: int) -> tuple[list[list[np.ndarray]], list[np.ndarray], int, np.ndarray]:
    """The Cholesky factor of the Gram matrix of ``cols`` (the response last), the columns
    it kept, the matrix's order K and the response's sum of squares (per series)."""
    G = _gram(cols, icpt, m)
    R, keep = _cholesky(G)
    K = len(G)
    return R, keep, K, G[K - 1][K - 1]


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
    R, keep, K, yy = _factor(cols, icpt, m)
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
    R, keep, K, yy = _factor(cols, icpt, m)
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
