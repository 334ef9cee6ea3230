"""Evaluation metrics on small hand-worked examples."""

from __future__ import annotations

import numpy as np
import pytest

from reveal.errors import InputError
from reveal.evaluate.hitrate import channel_scores, ground_truth_rows, hit_rates
from reveal.evaluate.metrics import (
    auprc,
    best_f1,
    event_prf,
    point_adjust,
    point_adjusted_prf,
    point_prf,
    segments,
)
from reveal.store.labelled import Interpretation

#             0  1  2  3  4  5  6  7  8  9
Y = np.array([0, 1, 1, 1, 0, 0, 1, 1, 0, 0])
P = np.array([0, 0, 1, 0, 0, 1, 0, 0, 0, 1], dtype=bool)


def test_point_prf_by_hand():
    # tp = 1 (row 2), fp = 2 (rows 5, 9), fn = 4 (rows 1, 3, 6, 7)
    r = point_prf(Y, P)
    assert r.precision == pytest.approx(1 / 3)
    assert r.recall == pytest.approx(1 / 5)
    assert r.f1 == pytest.approx(2 * (1 / 3) * (1 / 5) / (1 / 3 + 1 / 5))


def test_segments_and_event_scores_by_hand():
    assert segments(Y).tolist() == [[1, 4], [6, 8]]
    assert segments(P).tolist() == [[2, 3], [5, 6], [9, 10]]
    r = event_prf(Y, P)
    assert r.recall == pytest.approx(1 / 2)  # segment [1, 4) is hit, [6, 8) is not
    assert r.precision == pytest.approx(1 / 3)  # of 3 flagged runs, one overlaps a segment
    assert r.f1 == pytest.approx(0.4)


def test_point_adjust_by_hand():
    adjusted = point_adjust(Y, P)
    assert adjusted.astype(int).tolist() == [0, 1, 1, 1, 0, 1, 0, 0, 0, 1]
    r = point_adjusted_prf(Y, P)  # tp 3, fp 2, fn 2
    assert (r.precision, r.recall) == (pytest.approx(3 / 5), pytest.approx(3 / 5))
    assert point_prf(Y, P).f1 < r.f1  # adjustment inflates


def test_best_f1_and_auprc_by_hand():
    y = np.array([1, 0, 1, 0])
    s = np.array([0.9, 0.8, 0.7, 0.1])
    # thresholds 0.9: P 1, R .5, F .667; 0.8: P .5 R .5; 0.7: P .667 R 1, F .8
    best, thr = best_f1(y, s)
    assert best.f1 == pytest.approx(0.8) and thr == pytest.approx(0.7)
    # AP = 0.5·1 + 0.5·(2/3)
    assert auprc(y, s) == pytest.approx(0.5 + 1 / 3)


def test_ties_count_as_one_threshold():
    y = np.array([1, 0, 1])
    s = np.array([1.0, 1.0, 0.0])
    best, _ = best_f1(y, s)
    # threshold 1.0 flags rows 0 and 1 together: P .5 R .5; threshold 0 flags all: F .8
    assert best.f1 == pytest.approx(0.8)
    assert auprc(y, s) == pytest.approx(0.5 * 0.5 + 0.5 * (2 / 3))


def test_metrics_agree_with_scikit_learn():
    from sklearn.metrics import average_precision_score, precision_recall_curve

    rng = np.random.default_rng(0)
    y = (rng.random(500) < 0.1).astype(int)
    s = np.round(rng.random(500) + y * 0.5, 2)  # with ties
    assert auprc(y, s) == pytest.approx(average_precision_score(y, s))
    p, r, _ = precision_recall_curve(y, s)
    f = np.max(np.where(p + r > 0, 2 * p * r / np.maximum(p + r, 1e-300), 0))
    assert best_f1(y, s)[0].f1 == pytest.approx(f)


def test_hit_rate_readme_definition_by_hand():
    labels = np.array([0, 1, 1, 0, 1])
    # line 1 is off by one row but overlaps segment [1, 3); line 2 covers row 4
    interp = [Interpretation(2, 4, [0, 2]), Interpretation(4, 5, [3])]
    gt_index, gt_sets = ground_truth_rows(labels, interp)
    assert gt_sets == [(0, 2), (3,)]
    assert gt_index.tolist() == [-1, 0, 0, -1, 1]
    scores = np.array([
        [0.0, 0.0, 0.0, 0.0],
        [5.0, 4.0, 1.0, 0.0],  # GT {0,2}: top-2 {0,1} → 1/2 hit; top-3 {0,1,2} → 2/2
        [1.0, 0.0, 3.0, 0.0],  # top-2 {2,0} → 2/2; top-3 → 2/2
        [0.0, 0.0, 0.0, 0.0],
        [0.0, 2.0, 0.0, 1.0],  # GT {3}: top-1 {1} → 0; top-⌊1.5⌋=1 → 0
    ])
    rows = np.array([1, 2, 4])
    r = hit_rates(scores[rows], gt_index[rows], gt_sets, (1.0, 1.5))
    assert r[1.0] == pytest.approx((0.5 + 1.0 + 0.0) / 3)
    assert r[1.5] == pytest.approx((1.0 + 1.0 + 0.0) / 3)
    assert np.isnan(hit_rates(scores[:1], np.array([-1]), gt_sets)[1.0])


def test_channel_scores_sum_feature_contributions():
    contrib = np.array([[1.0, 2.0, 3.0, 4.0]])
    assert channel_scores(contrib, np.array([0, 0, 1, 1]), 3).tolist() == [[3.0, 7.0, 0.0]]


def test_bad_metric_inputs():
    with pytest.raises(InputError, match="rows"):
        point_prf(Y, P[:5])
    with pytest.raises(InputError, match="0/1"):
        point_prf(Y * 2, P)
    with pytest.raises(InputError, match="NaN"):
        best_f1(Y, np.full(10, np.nan))
