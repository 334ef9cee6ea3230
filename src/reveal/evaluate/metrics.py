"""Scores of anomaly verdicts against point labels (0/1 per row), honest and inflated.

Honest (what we report first):

- point-wise precision / recall / F1 of a boolean prediction;
- best F1 over all thresholds of a score (an upper bound no automatic threshold beats);
- AUPRC (average precision: Σ (Rₙ − Rₙ₋₁) Pₙ over decreasing thresholds);
- event-wise (segment) recall: share of labelled segments with at least one flagged row;
  event precision: share of flagged runs (maximal runs of consecutive flagged rows) that
  overlap a labelled segment.

Inflated, reported only beside the honest ones: point-adjusted F1 — every row of a
labelled segment counts as found once one of its rows is flagged (a random detector scores
~0.76 on SMD with it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reveal.errors import InputError


def _labels(labels: np.ndarray) -> np.ndarray:
    y = np.asarray(labels).ravel()
    if y.size and not np.isin(y, (0, 1)).all():
        raise InputError("labels must be 0/1")
    return y.astype(bool)


def _pair(labels: np.ndarray, other: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray]:
    y = _labels(labels)
    o = np.asarray(other).ravel()
    if o.shape != y.shape:
        raise InputError(f"{what} has {o.size} rows, labels have {y.size}")
    return y, o


@dataclass(frozen=True)
class PRF:
    precision: float
    recall: float
    f1: float


def _prf(tp: float, fp: float, fn: float) -> PRF:
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / (tp + fn) if tp + fn else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return PRF(float(p), float(r), float(f))


def point_prf(labels: np.ndarray, predicted: np.ndarray) -> PRF:
    """Point-wise precision, recall, F1 of a boolean prediction."""
    y, p = _pair(labels, predicted, "prediction")
    p = p.astype(bool)
    tp = float(np.sum(p & y))
    return _prf(tp, float(np.sum(p & ~y)), float(np.sum(~p & y)))


def _pr_curve(labels: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray,
                                                                np.ndarray]:
    """Precision, recall and threshold at each distinct score (flag = score ≥ threshold)."""
    y, s = _pair(labels, scores, "scores")
    s = np.asarray(s, dtype=np.float64)
    if not np.isfinite(s).all():
        raise InputError("scores hold NaN or inf")
    order = np.argsort(-s, kind="mergesort")
    s_sorted, y_sorted = s[order], y[order]
    tp = np.cumsum(y_sorted)
    n = np.arange(1, s.size + 1)
    last = np.r_[np.flatnonzero(np.diff(s_sorted) != 0), s.size - 1]  # end of each tie group
    positives = max(int(y.sum()), 1)
    return tp[last] / n[last], tp[last] / positives, s_sorted[last]


def best_f1(labels: np.ndarray, scores: np.ndarray) -> tuple[PRF, float]:
    """The best point-wise F1 over all thresholds, and that threshold (flag = score ≥ it)."""
    y = _labels(labels)
    if y.size == 0 or not y.any():
        return PRF(0.0, 0.0, 0.0), float("inf")
    precision, recall, thresholds = _pr_curve(labels, scores)
    with np.errstate(invalid="ignore", divide="ignore"):
        f1 = np.where(precision + recall > 0,
                      2 * precision * recall / (precision + recall), 0.0)
    i = int(np.argmax(f1))
    return PRF(float(precision[i]), float(recall[i]), float(f1[i])), float(thresholds[i])


def auprc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Average precision (area under the precision–recall curve, step-wise)."""
    y = _labels(labels)
    if y.size == 0 or not y.any():
        return 0.0
    precision, recall, _ = _pr_curve(labels, scores)
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def segments(mask: np.ndarray) -> np.ndarray:
    """Maximal runs of True in a boolean vector, as rows ``[start, end)`` (shape (n, 2))."""
    m = np.asarray(mask).ravel().astype(np.int8)
    d = np.diff(np.r_[0, m, 0])
    return np.column_stack([np.flatnonzero(d == 1), np.flatnonzero(d == -1)])


def event_prf(labels: np.ndarray, predicted: np.ndarray) -> PRF:
    """Event recall (labelled segments hit), event precision (flagged runs that hit a
    labelled segment), and their harmonic mean."""
    y, p = _pair(labels, predicted, "prediction")
    p = p.astype(bool)
    truth, runs = segments(y), segments(p)
    cum_p = np.r_[0, np.cumsum(p)]
    cum_y = np.r_[0, np.cumsum(y)]
    found = (cum_p[truth[:, 1]] - cum_p[truth[:, 0]]) > 0 if len(truth) else np.zeros(0, bool)
    right = (cum_y[runs[:, 1]] - cum_y[runs[:, 0]]) > 0 if len(runs) else np.zeros(0, bool)
    recall = float(found.mean()) if found.size else 0.0
    precision = float(right.mean()) if right.size else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return PRF(precision, recall, float(f1))


def false_alarm_episodes(labels: np.ndarray, predicted: np.ndarray) -> tuple[int, int]:
    """False alarms as an operator counts them: flagged runs (maximal runs of consecutive
    flagged rows) that touch no labelled segment, and the rows outside labelled segments
    (divide to get a rate per row, hour or day)."""
    y, p = _pair(labels, predicted, "prediction")
    runs = segments(p.astype(bool))
    cum_y = np.r_[0, np.cumsum(y)]
    false = int(np.sum((cum_y[runs[:, 1]] - cum_y[runs[:, 0]]) == 0)) if len(runs) else 0
    return false, int((~y).sum())


def point_adjust(labels: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """The point-adjusted prediction: a labelled segment with one flagged row is all flagged."""
    y, p = _pair(labels, predicted, "prediction")
    out = p.astype(bool).copy()
    cum_p = np.r_[0, np.cumsum(out)]
    for start, end in segments(y):
        if cum_p[end] > cum_p[start]:
            out[start:end] = True
    return out


def point_adjusted_prf(labels: np.ndarray, predicted: np.ndarray) -> PRF:
    """Point-wise scores of :func:`point_adjust` (inflated; report beside honest scores)."""
    return point_prf(labels, point_adjust(labels, predicted))
