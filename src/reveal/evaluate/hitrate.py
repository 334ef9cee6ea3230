"""HitRate@P%: do the top-ranked metrics of an anomalous point name the responsible ones?

For a labelled anomalous row whose segment has a ground-truth set GT of responsible
metrics (the dataset's interpretation labels), rank the metrics by a per-metric score
(for Reveal, the summed explain() contributions of all features of the metric), take the
top ``⌊P · |GT|⌋`` and count how many are in GT; HitRate@P = hits / |GT|, averaged over
rows (the OmniAnomaly / InterFusion definition; P = 100 % and 150 %). Ties are broken by
metric index.

Interpretation lines are matched to labelled segments by overlap (some lines are off by a
few rows or one segment): each labelled segment takes the columns of the interpretation
line that overlaps it most; a segment no line overlaps has no ground truth and is skipped.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from reveal.errors import InputError
from reveal.evaluate.metrics import segments
from reveal.store.labelled import Interpretation


def ground_truth_rows(labels: np.ndarray,
                      interpretation: Sequence[Interpretation]) -> tuple[np.ndarray, list[tuple]]:
    """For every labelled row, the index of its ground-truth set (−1: none).

    Returns ``(gt_index (T,), gt_sets)`` where ``gt_sets[i]`` is a sorted tuple of 0-based
    metric columns.
    """
    y = np.asarray(labels).ravel().astype(bool)
    gt_index = np.full(y.size, -1, dtype=np.int64)
    gt_sets: list[tuple] = []
    keyed: dict[tuple, int] = {}
    lines = [(i.start, i.end, tuple(sorted(set(i.columns)))) for i in interpretation]
    for start, end in segments(y):
        best, overlap = None, 0
        for s, e, cols in lines:
            o = min(end, e) - max(start, s)
            if o > overlap and cols:
                best, overlap = cols, o
        if best is None:
            continue
        if best not in keyed:
            keyed[best] = len(gt_sets)
            gt_sets.append(best)
        gt_index[start:end] = keyed[best]
    gt_index[~y] = -1
    return gt_index, gt_sets


def hit_rates(metric_scores: np.ndarray, gt_index: np.ndarray, gt_sets: list[tuple],
              percents: Sequence[float] = (1.0, 1.5)) -> dict[float, float]:
    """Mean HitRate@P for rows with ground truth.

    Parameters
    ----------
    metric_scores : (n, M) per-metric score of each row (higher = more responsible)
    gt_index : (n,) index into ``gt_sets`` per row, −1 for rows without ground truth
    gt_sets : ground-truth metric sets (0-based columns)
    percents : P values as fractions (1.0 = 100 %)

    Returns NaN for each P when no row has ground truth.
    """
    S = np.asarray(metric_scores, dtype=np.float64)
    g = np.asarray(gt_index).ravel()
    if S.ndim != 2 or S.shape[0] != g.size:
        raise InputError(f"metric scores of shape {S.shape} do not match {g.size} rows")
    out: dict[float, float] = {}
    for p in percents:
        total, count = 0.0, 0
        for i, cols in enumerate(gt_sets):
            rows = np.flatnonzero(g == i)
            k = min(int(np.floor(p * len(cols) + 1e-9)), S.shape[1])
            if rows.size == 0 or k == 0:
                continue
            order = np.argsort(-S[rows], axis=1, kind="stable")[:, :k]
            hits = np.isin(order, np.asarray(cols)).sum(axis=1)
            total += float(hits.sum()) / len(cols)
            count += rows.size
        out[p] = total / count if count else float("nan")
    return out


def channel_scores(contributions: np.ndarray, column_channel: np.ndarray,
                   n_channels: int) -> np.ndarray:
    """Sum per-column contributions (n, K) over the columns of each channel → (n, C)."""
    c = np.asarray(contributions, dtype=np.float64)
    idx = np.asarray(column_channel, dtype=np.int64)
    onehot = np.zeros((idx.size, n_channels))
    onehot[np.arange(idx.size), idx] = 1.0
    return c @ onehot
