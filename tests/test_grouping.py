"""The one episode grouper, against a plain loop over random spans and masks."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from reveal.analysis.grouping import runs, touching


def _by_loop(start: list[int], end: list[int]) -> list[tuple[int, int]]:
    groups: list[tuple[int, int]] = []
    first, reach = 0, None
    for k, (s, e) in enumerate(zip(start, end, strict=True)):
        if reach is not None and s > reach:
            groups.append((first, k - 1))
            first, reach = k, None
        reach = e if reach is None else max(reach, e)
    if start:
        groups.append((first, len(start) - 1))
    return groups


@pytest.mark.parametrize("seed", range(20))
def test_touching_groups_as_a_loop_does(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    start = np.sort(rng.integers(0, 200, n))
    end = start + rng.integers(0, 15, n)  # spans of unequal length, some empty
    got = touching(start, end)
    assert got == _by_loop(start.tolist(), end.tolist())
    assert got[0][0] == 0 and got[-1][1] == n - 1


def test_touching_joins_spans_that_touch_and_splits_a_gap() -> None:
    assert touching(np.array([0, 10, 21]), np.array([10, 20, 30])) == [(0, 1), (2, 2)]
    # a long span reaches past a short one that follows it
    assert touching(np.array([0, 2, 30]), np.array([40, 3, 35])) == [(0, 2)]
    assert touching(np.array([], dtype=np.int64), np.array([], dtype=np.int64)) == []


@pytest.mark.parametrize("gap", [0, 1, 3])
def test_runs_bridge_gaps_of_up_to_gap_windows(gap: int) -> None:
    rng = np.random.default_rng(gap)
    mask = rng.random(300) < 0.3
    idx = np.flatnonzero(mask)
    want, first = [], idx[0]
    for a, b in itertools.pairwise(idx):
        if b - a > gap + 1:
            want.append((int(first), int(a)))
            first = b
    want.append((int(first), int(idx[-1])))
    assert runs(mask, gap) == want
    assert runs(np.zeros(5, dtype=bool), gap) == []
