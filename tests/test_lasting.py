"""Lasting levels: a level judged over the span it has lasted, against the baseline's own
averages over as long; and a change that matters flags a window on its own."""

from __future__ import annotations

import numpy as np
import pytest

from reveal.analysis.lasting import lasting_cells, lasting_reach, lasting_windows, trailing_means
from reveal.frame import Telemetry
from reveal.model import Reveal

S = 1_000_000_000
GIB = 2**30


def test_trailing_means_count_the_history_and_skip_missing_values() -> None:
    values = np.array([[1.0], [np.nan], [3.0], [5.0]])
    out = trailing_means(values, 2)
    assert np.isnan(out[0, 0])  # one window behind it only
    assert out[1, 0] == 1.0 and out[2, 0] == 3.0 and out[3, 0] == 4.0
    with_history = trailing_means(values, 3, history=np.array([[7.0], [9.0]]))
    assert with_history[0, 0] == pytest.approx((7 + 9 + 1) / 3)
    assert with_history.shape == values.shape


def test_lasting_windows_and_a_baseline_too_short_for_them() -> None:
    assert lasting_windows(30.0, 1.0) == 30
    assert lasting_windows(0.0, 1.0) == 0
    assert lasting_windows(1.0, 1.0) == 2
    assert lasting_reach(np.zeros((20, 3)), 30, ("median",) * 3) is None
    assert lasting_reach(np.zeros((119, 3)), 30, ("median",) * 3) is None  # 4 spans: 120
    assert lasting_reach(np.zeros((120, 3)), 30, ("median",) * 3) is not None


def test_a_level_held_where_the_baseline_only_touched_matters_a_short_touch_does_not() -> None:
    rng = np.random.default_rng(0)
    base = 4.0 + rng.normal(0, 0.1, (300, 1))
    base[::50] += 4.0  # the job reaches 8 % for one window now and then
    reach_1 = np.array([[np.quantile(base, 0.99) - np.median(base)], [0.0]])
    reach_30 = lasting_reach(base, 30, ("median",))
    assert reach_30 is not None and reach_30[0, 0] < 1.0 < reach_1[0, 0]
    run = 4.0 + rng.normal(0, 0.1, (120, 1))
    run[40:100] += 5.0  # held at 9 % for a minute
    run[20] += 5.0  # and touched once
    median, scale, least = np.array([4.0]), np.array([0.1]), np.array([1.0])
    cells = lasting_cells(run, None, 30, median, scale, least, None, reach_30)[:, 0]
    assert not cells[:45].any()  # the touch, and the hold's first windows
    assert cells[69:100].all()  # judged as lasting once the average holds it
    assert not cells[100:].any()  # ended: the average of the windows that held it no more


def test_a_pace_the_job_held_for_a_lasting_span_in_all_is_one_of_its_levels() -> None:
    """A job that spends a fifth of its learn at a lower pace of its own (a rate cap, spells
    of 10 s) has that pace among its levels, however long it holds it later; the averages'
    reach alone was tighter than the pace. A hang, far below any level it held, matters."""
    rng = np.random.default_rng(3)
    n = 600
    base = 110.0 + rng.normal(0, 0.5, (n, 1))
    for start in range(0, n, 50):  # 10 of every 50 windows at the lower pace
        base[start + 20:start + 30] = 87.7
    means_only = np.array([[np.median(base) - np.quantile(
        trailing_means(base, 30)[29:], 0.01)]])
    reach = lasting_reach(base, 30, ("median",))
    assert reach is not None and reach[1, 0] >= np.median(base) - 87.7 > means_only[0, 0]
    run = 110.0 + rng.normal(0, 0.5, (200, 1))
    run[20:120] = 87.7  # the lower pace held for 100 s
    run[150:] = 0.0  # then the job hangs
    median, scale, least = np.median(base, axis=0), np.array([0.5]), np.array([1.25])
    cells = lasting_cells(run, None, 30, median, scale, least, np.array([-1]), reach)[:, 0]
    assert not cells[:150].any()
    assert cells[179:].all()


def _host(seed: int, seconds: float, held: tuple[float, float] | None = None) -> Telemetry:
    """Memory in use on a 16 GiB host at 10 samples/s, swinging by 0.6 GiB for 2 s
    every 40 s as a job loads data; ``held``: 0.9 GiB more held from/to (s)."""
    rng = np.random.default_rng(seed)
    n = int(seconds * 10)
    t = np.arange(n) * 0.1
    used = 2 * GIB + rng.normal(0, 4e6, n) + ((t % 40) < 2) * 0.6 * GIB
    if held is not None:
        used += ((t >= held[0]) & (t < held[1])) * 0.9 * GIB
    total = 16 * GIB
    ticks = np.cumsum((40 + rng.normal(0, 2, n)) / 10.0)
    ts = (np.arange(n) * 0.1 * S).astype(np.int64) + 100 * S
    return Telemetry("host", ts, np.column_stack([ticks, total - used, used,
                                                  np.full(n, float(total))]),
                     ["cpu.user", "mem.MemAvailable", "mem.AnonPages", "mem.MemTotal"],
                     {"interval_s": 0.1, "n_cpus": 2, "mem_total_bytes": float(total)})


def test_a_hog_holding_memory_is_flagged_while_it_holds_it() -> None:
    model = Reveal().fit(_host(1, 600))
    report = model.report(_host(2, 300, held=(60.0, 240.0)))
    start = (np.asarray(report.windows.start_ns) - 100 * S) / S
    flagged = np.asarray(report.windows.flagged, dtype=bool)
    inside = (start >= 60.0) & (start + 3.0 <= 240.0)
    after = start >= 245.0
    assert flagged[inside].mean() >= 0.9, flagged[inside].mean()
    assert not flagged[after].any()
    assert not flagged[start + 3.0 <= 55.0].any()
    assert not report.steady_states  # a held fault is not adopted as the new normal


def test_held_still_is_the_spread_of_each_trailing_span_missing_values_left_out() -> None:
    from reveal.analysis.steady import held_still

    rng = np.random.default_rng(0)
    values = np.cumsum(rng.normal(0, 0.3, (60, 5)), axis=0)
    values[rng.random(values.shape) < 0.1] = np.nan
    values[:, 4] = np.nan  # never a value: never still
    least = np.array([1.0, 2.0, 3.0, 0.5, 1.0])
    for windows in (1, 2, 7, 20, 21):
        got = held_still(values, least, windows)
        for i in range(len(values)):
            for k in range(values.shape[1]):
                span = values[max(i - windows + 1, 0):i + 1, k]
                span = span[np.isfinite(span)]
                want = (i >= windows - 1 and span.size > 0
                        and span.max() - span.min() < least[k])
                assert got[i, k] == want, (windows, i, k)
