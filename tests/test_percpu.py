"""Per-CPU channels by rank: a job the scheduler moved to the other CPU is not an anomaly,
a CPU that really got busier still is, and reports name the CPU, not its rank."""

from __future__ import annotations

import numpy as np
import pytest

from reveal.analyze.percpu import (
    cpu_order,
    cpu_siblings,
    rank_cpu_columns,
    unrank,
    window_busy,
)
from reveal.analyze.pipeline import analyze_run
from reveal.config import AnalyzeConfig
from reveal.frame import Telemetry


def test_ranks_follow_the_busiest_cpu_and_move_a_cpus_channels_together():
    cpus = ["0", "1"]
    channels = ["derived.cpu_busy_pct{cpu=0}", "derived.cpu_busy_pct{cpu=1}",
                "softirq.count{cpu=0,type=SCHED}", "softirq.count{cpu=1,type=SCHED}",
                "mem.Dirty", "irq.count{cpu=0,irq=5}"]  # no cpu=1 sibling: left as is
    features = ["mean"] * len(channels)
    values = np.array([[90.0, 5.0, 10.0, 300.0, 7.0, 1.0],   # job on cpu0
                       [4.0, 95.0, 280.0, 12.0, 7.0, 2.0]])  # job moved to cpu1
    busy = values[:, :2]
    out, names, sources = rank_cpu_columns(values, channels, features, cpus, busy)
    assert names[:4] == ["derived.cpu_busy_pct{cpu=r0}", "derived.cpu_busy_pct{cpu=r1}",
                         "softirq.count{cpu=r0,type=SCHED}", "softirq.count{cpu=r1,type=SCHED}"]
    assert names[4:] == channels[4:]
    # the busy CPU's softirqs stay with it: rank 0 is (busy, its own softirqs) in both rows
    np.testing.assert_array_equal(out[:, :4], [[90, 5, 10, 300], [95, 4, 12, 280]])
    np.testing.assert_array_equal(out[:, 4:], values[:, 4:])
    assert sources["softirq.count{cpu=r1,type=SCHED}"] == channels[2:4]
    order = cpu_order(busy)
    assert order.tolist() == [[0, 1], [1, 0]]
    assert unrank("softirq.count{cpu=r0,type=SCHED} rose", order[1], cpus) == \
        "softirq.count{cpu=1,type=SCHED} rose"
    assert unrank("no rank here {cpu=3}", order[0], cpus) == "no rank here {cpu=3}"
    # pruning keeps a group whole: a kept CPU brings its siblings
    assert cpu_siblings(channels, {"softirq.count{cpu=1,type=SCHED}"}) == channels[2:4]


def test_window_busy_is_the_mean_over_each_window():
    ts = np.arange(6, dtype=np.int64) * 100_000_000
    values = np.array([[10, 0], [20, 0], [30, 60], [np.nan, 60], [0, 90], [0, 90]], float)
    tel = Telemetry("h", ts, values, ["derived.cpu_busy_pct{cpu=0}",
                                      "derived.cpu_busy_pct{cpu=1}"], {"interval_s": 0.1})
    cpus, busy = window_busy(tel, np.array([0, 2, 4]), 2)
    assert cpus == ["0", "1"]
    np.testing.assert_allclose(busy, [[15, 0], [15, 60], [0, 90]])  # NaN counts as 0


def _two_cpus(seconds: float, seed: int, swap_at: float | None = None,
              both_busy: tuple[float, float] | None = None) -> Telemetry:
    """A job keeps one of two CPUs busy; ``swap_at``: the scheduler moves it to the other
    CPU for good; ``both_busy``: contention makes the idle CPU busy too."""
    rng = np.random.default_rng(seed)
    n = int(seconds * 10)
    ts = np.arange(n, dtype=np.int64) * 100_000_000
    busy_cpu = np.zeros(n, dtype=int)
    if swap_at is not None:
        busy_cpu[int(swap_at * 10):] = 1
    busy = np.where(np.arange(2) == busy_cpu[:, None], 92.0, 4.0) + rng.normal(0, 2, (n, 2))
    sched = np.where(np.arange(2) == busy_cpu[:, None], 40.0, 400.0) + rng.normal(0, 8, (n, 2))
    if both_busy is not None:
        a, b = (int(x * 10) for x in both_busy)
        busy[a:b] = 95.0 + rng.normal(0, 1, (b - a, 2))
        sched[a:b] = 30.0
    dirty = 5e6 + 1e5 * rng.normal(size=n)
    values = np.column_stack([np.clip(busy, 0, 100), np.cumsum(np.maximum(sched, 0) / 10, axis=0),
                              dirty])
    channels = ["derived.cpu_busy_pct{cpu=0}", "derived.cpu_busy_pct{cpu=1}",
                "softirq.count{cpu=0,type=SCHED}", "softirq.count{cpu=1,type=SCHED}",
                "mem.Dirty"]
    return Telemetry("host", ts, values, channels, {"interval_s": 0.1})


@pytest.fixture(scope="module")
def baseline() -> Telemetry:
    return _two_cpus(300, seed=1)


def _flagged_share(report, after_s: float) -> float:
    start = np.asarray(report.windows.start_ns) / 1e9
    flagged = np.asarray(report.windows.flagged)
    return float(flagged[start >= after_s].mean())


def test_a_job_moved_to_the_other_cpu_is_not_an_anomaly_by_rank(baseline):
    moved = _two_cpus(120, seed=2, swap_at=40)
    by_number = analyze_run(moved, baseline, AnalyzeConfig(rank_cpus=False))
    by_rank = analyze_run(moved, baseline)
    assert _flagged_share(by_number, 45) > 0.8  # every window after the move, by CPU number
    assert _flagged_share(by_rank, 45) < 0.05


def test_contention_is_still_found_and_reported_on_the_cpu_it_hit(baseline):
    run = _two_cpus(120, seed=3, both_busy=(50, 70))
    report = analyze_run(run, baseline)
    inside = [a for a in report.anomalies if 50e9 <= a.start_ns < 68e9]
    assert len(inside) >= 10
    assert all(a.subsystems[0] == "cpu" for a in inside)
    named = {r.channel for a in inside for r in a.reasons}
    assert any("cpu=1" in c for c in named)  # the idle CPU that became busy, by number
    assert not any("cpu=r" in c for c in named) and not any("cpu=r" in a.claim for a in inside)
