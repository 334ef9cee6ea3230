"""Interval agreement (IoU, hit rates), batched DTW and the reproducibility test."""

from __future__ import annotations

import numpy as np
import pytest

from reveal.evaluate.studies import (
    agreement,
    dtw_batch,
    flagged_intervals,
    merge_intervals,
    reproducibility_study,
)
from reveal.frame import Telemetry


def _dtw_reference(a: np.ndarray, b: np.ndarray) -> float:
    n, m = len(a), len(b)
    cost = np.full((n + 1, m + 1), np.inf)
    cost[0, 0] = 0.0
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            cost[i, j] = abs(a[i - 1] - b[j - 1]) + min(cost[i - 1, j], cost[i, j - 1],
                                                         cost[i - 1, j - 1])
    return float(cost[n, m])


def test_dtw_batch_matches_the_textbook_recursion() -> None:
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(6, 13)), rng.normal(size=(6, 9))
    expected = [_dtw_reference(a, b) for a, b in zip(x, y, strict=True)]
    assert dtw_batch(x, y) == pytest.approx(expected)
    # A time-shifted copy is closer under DTW than under the point-wise distance.
    t = np.linspace(0, 6, 60)
    a, b = np.sin(t), np.sin(t - 0.5)
    assert dtw_batch(a[None], b[None])[0] < np.abs(a - b).sum()
    assert dtw_batch(a[None], a[None])[0] == 0.0


def test_merge_and_agreement_follow_the_paper_definitions() -> None:
    merged = merge_intervals(np.array([[5, 8], [1, 3], [2, 4], [8, 9], [10, 10]]))
    assert merged.tolist() == [[1, 4], [5, 9]]
    a = np.array([[0, 10], [20, 30]])
    b = np.array([[5, 15]])
    result = agreement(a, b)
    assert result["iou"] == pytest.approx(5 / 25)
    assert result["hit_by_count"] == pytest.approx(0.5)
    assert result["hit_by_length"] == pytest.approx(5 / 20)
    reverse = agreement(b, a)
    assert reverse["hit_by_count"] == 1.0 and reverse["hit_by_length"] == pytest.approx(0.5)
    assert agreement(np.empty((0, 2)), np.empty((0, 2)))["iou"] is None
    assert agreement(a, np.empty((0, 2)))["hit_by_count"] == 0.0


def test_flagged_windows_become_merged_time() -> None:
    start = np.arange(10) * 10
    flags = np.array([0, 1, 1, 0, 0, 1, 0, 0, 0, 1], dtype=bool)
    assert flagged_intervals(start, start + 30, flags).tolist() == [[10, 80], [90, 120]]


def _runs(shapes: list[np.ndarray], noise: float, seed: int) -> list[Telemetry]:
    rng = np.random.default_rng(seed)
    runs = []
    for _ in range(3):
        n = len(shapes[0])
        ts = np.arange(n, dtype=np.int64) * 100_000_000 + int(rng.integers(0, 10**9))
        values = np.column_stack([s + rng.normal(0, noise, n) for s in shapes])
        runs.append(Telemetry("h", ts, values, [f"m{i}" for i in range(len(shapes))],
                              {"interval_s": 0.1}))
    return runs


def test_reproducible_shape_passes_and_pure_noise_does_not() -> None:
    t = np.arange(1200) * 0.1
    shaped = 5 * np.sin(2 * np.pi * t / 17.0) + (t % 30 > 20) * 4.0  # a repeated pattern
    flat = np.zeros_like(t)  # only noise: nothing to reproduce
    result = reproducibility_study(_runs([shaped, flat], noise=0.5, seed=1), step_s=0.5,
                                   chunk_s=10.0)
    by_name = {r["channel"]: r for r in result["results"]}
    assert by_name["m0"]["reproducible"] and by_name["m0"]["p_value"] < 1e-3
    assert not by_name["m1"]["reproducible"]
    assert result["chunks"] == 11  # 119.9 s of samples: 11 full chunks of 10 s
    assert result["reproducible_share"] == pytest.approx(0.5)


def test_reproducibility_needs_two_runs() -> None:
    with pytest.raises(ValueError, match="two runs"):
        reproducibility_study(_runs([np.zeros(100)], 0.1, 0)[:1])
