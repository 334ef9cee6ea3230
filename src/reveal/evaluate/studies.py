"""Studies over analysis results: window-granularity agreement (paper §5.5, Table 2) and
reproducibility of metrics across repeated runs (§5.4). Pure analysis: no collector.

Intervals are ``(n, 2)`` int64 arrays of ``[start_ns, end_ns)``, sorted and disjoint once
merged. Lengths are in the same unit (ns) and reported in seconds where said.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from reveal.analysis.derive import derive
from reveal.catalog import default_catalog
from reveal.config import AnalyzeConfig, WindowConfig
from reveal.frame import Telemetry
from reveal.model import Reveal, report_run
from reveal.store.sources import open_source

# ------------------------------------------------------------------ interval agreement

def merge_intervals(intervals: np.ndarray) -> np.ndarray:
    """Union of ``[start, end)`` intervals as sorted, disjoint intervals (touching merge)."""
    iv = np.asarray(intervals, dtype=np.int64).reshape(-1, 2)
    iv = iv[iv[:, 1] > iv[:, 0]]
    if len(iv) == 0:
        return iv
    iv = iv[np.argsort(iv[:, 0], kind="stable")]
    running_end = np.maximum.accumulate(iv[:, 1])
    new_group = np.concatenate(([True], iv[1:, 0] > running_end[:-1]))
    group = np.cumsum(new_group) - 1
    starts = iv[new_group, 0]
    ends = np.full(len(starts), np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(ends, group, iv[:, 1])
    return np.column_stack([starts, ends])


def flagged_intervals(start_ns: np.ndarray, end_ns: np.ndarray, flagged: np.ndarray) -> np.ndarray:
    """Merged time covered by flagged windows."""
    mask = np.asarray(flagged, dtype=bool)
    return merge_intervals(np.column_stack([np.asarray(start_ns)[mask],
                                            np.asarray(end_ns)[mask]]))


def total_length(intervals: np.ndarray) -> int:
    iv = np.asarray(intervals, dtype=np.int64).reshape(-1, 2)
    return int((iv[:, 1] - iv[:, 0]).sum())


def _pairwise_overlap(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(len(a), len(b)) overlap lengths of two interval sets."""
    lo = np.maximum(a[:, None, 0], b[None, :, 0])
    hi = np.minimum(a[:, None, 1], b[None, :, 1])
    return np.clip(hi - lo, 0, None)


def intersection_length(a: np.ndarray, b: np.ndarray) -> int:
    """L(A ∩ B) for two merged (disjoint) interval sets."""
    a, b = merge_intervals(a), merge_intervals(b)
    if len(a) == 0 or len(b) == 0:
        return 0
    return int(_pairwise_overlap(a, b).sum())


def agreement(a: np.ndarray, b: np.ndarray) -> dict[str, float | None]:
    """Length-based IoU and hit rates of A against B (paper §5.5).

    ``iou`` = L(A∩B) / (L(A)+L(B)−L(A∩B)); ``hit_by_count`` = share of A's merged segments
    that intersect any segment of B; ``hit_by_length`` = L(A∩B) / L(A). None when undefined
    (A empty for the hit rates, both empty for IoU).
    """
    a, b = merge_intervals(a), merge_intervals(b)
    la, lb = total_length(a), total_length(b)
    inter = intersection_length(a, b)
    union = la + lb - inter
    hit_count = None
    if len(a):
        hit_count = (float((_pairwise_overlap(a, b) > 0).any(axis=1).mean())
                     if len(b) else 0.0)
    return {
        "iou": inter / union if union else None,
        "hit_by_count": hit_count,
        "hit_by_length": inter / la if la else None,
        "segments_a": len(a),
        "segments_b": len(b),
        "flagged_s_a": la / 1e9,
        "flagged_s_b": lb / 1e9,
    }


WINDOW_SETTINGS: tuple[tuple[float, float], ...] = ((3.0, 1.0), (1.5, 0.5), (5.0, 2.0))


def granularity_study(run: Any, baseline: Any = None,
                      settings: Sequence[tuple[float, float]] = WINDOW_SETTINGS,
                      config: Any = None) -> dict[str, Any]:
    """Analyse ``run`` with each (size_s, stride_s) window setting; compare flagged time.

    Returns ``settings`` (flagged seconds, windows, anomalies per setting) and ``pairs``
    (agreement of each earlier setting against each later one, as in Table 2).
    """

    config = config or AnalyzeConfig()
    tel = run if isinstance(run, Telemetry) else open_source(run)
    base = baseline if baseline is None or isinstance(baseline, Telemetry) else open_source(
        baseline)
    per_setting = []
    intervals = []
    for size_s, stride_s in settings:
        cfg = dataclasses.replace(config, window=WindowConfig(size_s=size_s, stride_s=stride_s))
        report = report_run(tel, base, model=Reveal(config=cfg))
        w = report.windows
        iv = flagged_intervals(w.start_ns, w.end_ns, w.flagged)
        intervals.append(iv)
        per_setting.append({"size_s": size_s, "stride_s": stride_s,
                            "windows": len(w.start_ns),
                            "flagged_windows": int(np.asarray(w.flagged).sum()),
                            "segments": len(iv), "flagged_s": total_length(iv) / 1e9})
    pairs = []
    for i in range(len(settings)):
        for j in range(i + 1, len(settings)):
            pairs.append({"a": _label(settings[i]), "b": _label(settings[j]),
                          **agreement(intervals[i], intervals[j])})
    return {"settings": per_setting, "pairs": pairs}


def _label(setting: tuple[float, float]) -> str:
    return f"{setting[0]:g} s/{setting[1]:g} s"


# ------------------------------------------------------------------ reproducibility

def dtw_batch(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """DTW distances of many equal-length pairs at once: ``x``, ``y`` of shape (B, n), (B, m).

    Cost |x_i − y_j|, steps (1,0), (0,1), (1,1); the DP runs along anti-diagonals, each one
    vectorised over the batch and the diagonal's cells. Returns (B,) float64.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim == 1:
        x, y = x[None, :], y[None, :]
    batch, n = x.shape
    m = y.shape[1]
    inf = np.inf
    # prev2, prev1: cost-to-reach along diagonals d-2, d-1, indexed by row i (0..n-1).
    prev2 = np.full((batch, n), inf)
    prev1 = np.full((batch, n), inf)
    rows = np.arange(n)
    for d in range(n + m - 1):
        i = rows[(rows <= d) & (d - rows < m)]
        j = d - i
        cost = np.abs(x[:, i] - y[:, j])
        if d == 0:
            best = np.zeros((batch, 1))
        else:
            # (i-1, j) and (i, j-1) lie on diagonal d-1, (i-1, j-1) on d-2.
            up = np.where(i >= 1, prev1[:, np.maximum(i - 1, 0)], inf)
            left = np.where(j >= 1, prev1[:, i], inf)
            diag = np.where((i >= 1) & (j >= 1), prev2[:, np.maximum(i - 1, 0)], inf)
            best = np.minimum(np.minimum(up, left), diag)
        current = np.full((batch, n), inf)
        current[:, i] = cost + best
        prev2, prev1 = prev1, current
    return prev1[:, n - 1]


@dataclass
class ReproResult:
    channel: str
    dtw_to_median: list[float]  # per run: mean per-step DTW distance over its chunks
    statistic: float | None
    p_value: float | None
    median_dtw: float
    median_surrogate: float
    reproducible: bool


def _aligned(runs: Sequence[Telemetry], channels: list[str], step_s: float) -> np.ndarray:
    """(runs, T, channels) derived values on a common relative-time grid of ``step_s``."""
    durations = [(t.timestamps_ns[-1] - t.timestamps_ns[0]) / 1e9 for t in runs]
    n = int(min(durations) // step_s)
    grid = np.arange(n) * step_s
    out = np.full((len(runs), n, len(channels)), np.nan)
    for r, tel in enumerate(runs):
        rel = (tel.timestamps_ns - tel.timestamps_ns[0]) / 1e9
        idx = np.clip(np.searchsorted(rel, grid, side="right") - 1, 0, len(rel) - 1)
        cols = [tel.channels.index(c) for c in channels]
        out[r] = tel.values[idx][:, cols]
    return out


def reproducibility_study(runs: Sequence[Any], step_s: float = 0.5, chunk_s: float = 10.0,
                          alpha: float = 0.05, seed: int = 0,
                          max_channels: int | None = None) -> dict[str, Any]:
    """How alike are repeated runs, metric by metric (paper §5.4)?

    Each run is derived (rates), put on a common relative-time grid of ``step_s`` seconds,
    and every channel z-normalised with the pooled mean/std. Run r's median trace is the
    element-wise median over the *other* runs (leave-one-out, so a run never matches
    itself). Each run's trace is cut into ``chunk_s`` chunks; for chunk k, ``d_k`` is its
    DTW distance (per step) to the median trace's chunk k and ``s_k`` its
    distance to a surrogate: the median's chunk π(k) for a fixed random derangement π
    (same values, temporal alignment broken). A two-sided Wilcoxon signed-rank test over
    the (d, s) pairs of all runs and chunks (normal approximation, tie-corrected) gives
    p; a channel is **reproducible** when p < ``alpha`` and median d < median s.
    Constant channels are skipped.
    """
    from scipy.stats import wilcoxon

    if len(runs) < 2:
        raise ValueError("a reproducibility study needs at least two runs")
    catalog = default_catalog()
    tels = [derive(r if isinstance(r, Telemetry) else open_source(r), catalog)[0] for r in runs]
    common = sorted(set.intersection(*(set(t.channels) for t in tels)))
    data = _aligned(tels, common, step_s)
    finite = np.isfinite(data).all(axis=(0, 1))
    pooled_std = np.nanstd(data.reshape(-1, len(common)), axis=0)
    keep = finite & (pooled_std > 1e-12)
    channels = [c for c, k in zip(common, keep, strict=True) if k]
    data = data[:, :, keep]
    if max_channels is not None:
        channels, data = channels[:max_channels], data[:, :, :max_channels]
    data = (data - data.mean(axis=(0, 1))) / data.std(axis=(0, 1))
    # Leave-one-out: run r is compared with the median of the *other* runs, so a run never
    # matches itself (with 3 runs the median would often be the run's own value).
    n_runs, n_ch = data.shape[0], data.shape[2]
    others = np.stack([np.median(np.delete(data, r, axis=0), axis=0) for r in range(n_runs)])
    per_chunk = max(2, round(chunk_s / step_s))
    n_chunks = data.shape[1] // per_chunk
    if n_chunks < 3:
        raise ValueError(f"runs too short: {data.shape[1] * step_s:.0f} s gives fewer than "
                         f"3 chunks of {chunk_s:g} s")
    usable = n_chunks * per_chunk
    rng = np.random.default_rng(seed)
    perm = _derangement(n_chunks, rng)

    def batch(arr: np.ndarray) -> np.ndarray:  # (runs, T, C) -> (runs*chunks*C, L)
        chunks = arr[:, :usable].reshape(n_runs, n_chunks, per_chunk, n_ch)
        return np.moveaxis(chunks, 3, 2).reshape(-1, per_chunk)

    xs = batch(data)
    real = batch(others)
    surr = batch(others[:, :usable].reshape(n_runs, n_chunks, per_chunk, n_ch)[:, perm]
                 .reshape(n_runs, usable, n_ch))
    d = dtw_batch(xs, real).reshape(n_runs, n_chunks, n_ch) / per_chunk
    s = dtw_batch(xs, surr).reshape(n_runs, n_chunks, n_ch) / per_chunk
    # One vectorised test over all channels: (runs*chunks, C) pairs, normal approximation
    # with tie correction (the exact/permutation variants cost ~0.2 s per channel).
    d_flat, s_flat = d.reshape(-1, n_ch), s.reshape(-1, n_ch)
    with np.errstate(all="ignore"):
        test = wilcoxon(d_flat, s_flat, alternative="two-sided", zero_method="wilcox",
                        method="approx", axis=0, nan_policy="omit")
    stats = np.atleast_1d(np.asarray(test.statistic, dtype=float))
    pvals = np.atleast_1d(np.asarray(test.pvalue, dtype=float))
    same = np.all(d_flat == s_flat, axis=0)
    results = []
    for c, name in enumerate(channels):
        ok = not same[c] and np.isfinite(pvals[c])
        p = float(pvals[c]) if ok else None
        dm, sm = float(np.median(d_flat[:, c])), float(np.median(s_flat[:, c]))
        results.append(ReproResult(
            name, [round(float(v), 4) for v in d[:, :, c].mean(axis=1)],
            float(stats[c]) if ok else None, p, dm, sm,
            bool(p is not None and p < alpha and dm < sm)))
    share = (sum(r.reproducible for r in results) / len(results)) if results else None
    return {"runs": len(runs), "channels": len(results), "step_s": step_s, "chunk_s": chunk_s,
            "chunks": n_chunks, "alpha": alpha, "reproducible_share": share,
            "results": [r.__dict__ for r in results]}


def _derangement(n: int, rng: np.random.Generator) -> np.ndarray:
    """A permutation of range(n) with no fixed point (n ≥ 2)."""
    while True:
        perm = rng.permutation(n)
        if not np.any(perm == np.arange(n)):
            return perm
