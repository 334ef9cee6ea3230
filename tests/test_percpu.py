"""Per-CPU channels by rank: a job the scheduler moved to the other CPU is not an anomaly,
a CPU that really got busier still is, and reports name the CPU, not its rank."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from reveal.analysis.percpu import (
    cpu_order,
    cpu_siblings,
    rank_cpu_columns,
    rank_cpu_rows,
    sample_order,
    unrank,
    window_busy,
)
from reveal.config import AnalyzeConfig
from reveal.frame import Telemetry
from reveal.model import Reveal, report_run


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


def test_tied_cpus_rank_the_same_in_a_window_read_alone_as_in_the_whole_run():
    """Two CPUs saturated together tie in every window of that span. Their order must not
    depend on what precedes the window (a live scorer reads only the window's rows): a
    difference of whole-run cumulative sums rounds differently per CPU and swapped some."""
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 100, (400, 2))
    x[200:260] = 100.0  # both saturated
    ts = np.arange(400, dtype=np.int64) * 100_000_000
    names = ["derived.cpu_busy_pct{cpu=0}", "derived.cpu_busy_pct{cpu=1}"]
    whole = Telemetry("h", ts, x, names, {"interval_s": 0.1})
    starts = np.arange(200, 231)
    busy = window_busy(whole, starts, 30)[1]
    np.testing.assert_array_equal(busy[:, 0], busy[:, 1])  # an exact tie
    assert (cpu_order(busy) == [0, 1]).all()  # kept in CPU order
    for s in starts:  # and bit for bit what the window alone gives
        alone = window_busy(whole.slice_rows(s, s + 30), np.array([0]), 30)[1]
        np.testing.assert_array_equal(alone[0], busy[s - 200])
    # the trailing means of the sample ranking are the same kind of sums
    order = sample_order(x, 0.1)
    for s in (205, 230):
        np.testing.assert_array_equal(sample_order(x[s - 9:s + 30], 0.1)[9:], order[s:s + 30])

def _two_cpus(seconds: float, seed: int, swap_at: float | None = None,
              both_busy: tuple[float, float] | None = None,
              hops: tuple[float, ...] = ()) -> Telemetry:
    """A job keeps one of two CPUs busy; ``swap_at``: the scheduler moves it to the other
    CPU for good; ``both_busy``: contention makes the idle CPU busy too; ``hops``: it moves
    to the other CPU at each of these times for 1.5 s, and back."""
    rng = np.random.default_rng(seed)
    n = int(seconds * 10)
    ts = np.arange(n, dtype=np.int64) * 100_000_000
    busy_cpu = np.zeros(n, dtype=int)
    if swap_at is not None:
        busy_cpu[int(swap_at * 10):] = 1
    for at in hops:
        busy_cpu[int(at * 10):int(at * 10) + 15] ^= 1
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
    by_number = report_run(moved, baseline, model=Reveal(config=AnalyzeConfig(rank_cpus=False)))
    by_rank = report_run(moved, baseline)
    assert _flagged_share(by_number, 45) > 0.8  # every window after the move, by CPU number
    assert _flagged_share(by_rank, 45) < 0.05


def test_sample_ranks_follow_each_sample_and_break_ties_by_the_last_second():
    busy = np.array([[0, 100], [0, 100], [100, 0], [0, 0], [50, 50], [100, 100]], float)
    order = sample_order(busy, interval_s=0.1)
    # a move shows at once; ties go to the CPU busier over the last second (cpu1 here)
    assert order.tolist() == [[1, 0], [1, 0], [0, 1], [1, 0], [1, 0], [1, 0]]
    assert sample_order(np.array([[5.0, 5.0]]), 0.1).tolist() == [[0, 1]]  # then CPU order


def test_rank_rows_moves_a_cpus_channels_together_and_keeps_names():
    ts = np.arange(3, dtype=np.int64) * 100_000_000
    channels = ["derived.cpu_busy_pct{cpu=0}", "derived.cpu_busy_pct{cpu=1}",
                "irq.count{cpu=0,irq=CAL}", "irq.count{cpu=1,irq=CAL}", "mem.Dirty"]
    values = np.array([[90, 5, 10, 300, 1], [4, 95, 280, 12, 2], [92, 3, 11, 290, 3]], float)
    ranked = rank_cpu_rows(Telemetry("h", ts, values, channels, {"interval_s": 0.1}))
    assert ranked.channels == channels
    np.testing.assert_array_equal(ranked.values, [[90, 5, 10, 300, 1], [95, 4, 12, 280, 2],
                                                  [92, 3, 11, 290, 3]])
    one_cpu = Telemetry("h", ts, values[:, [0, 2, 4]], [channels[0], channels[2], channels[4]])
    assert rank_cpu_rows(one_cpu) is one_cpu


def test_a_job_that_hops_to_the_other_cpu_within_a_window_is_not_an_anomaly(baseline):
    hops = (40.3, 62.6, 81.1, 100.8)
    run = _two_cpus(120, seed=4, hops=hops)
    # bursts as short as a hop may count here (detect.sustained off): the ranking decides
    by_window = report_run(run, baseline, model=Reveal(overrides={"detect.sustained": False}))
    ranked = AnalyzeConfig(rank_cpu_samples=True)
    ranked = replace(ranked, detect=replace(ranked.detect, sustained=False))
    by_sample = report_run(run, baseline, model=Reveal(config=ranked))
    start = np.asarray(by_window.windows.start_ns) / 1e9
    near = np.zeros(len(start), dtype=bool)
    for at in hops:  # windows that hold part of a hop
        near |= (start < at + 1.5) & (start + 3.0 > at)
    assert np.asarray(by_window.windows.flagged)[near].mean() > 0.5
    assert not np.asarray(by_sample.windows.flagged).any()


def test_contention_is_still_found_and_reported_on_the_cpu_it_hit(baseline):
    run = _two_cpus(120, seed=3, both_busy=(50, 70))
    report = report_run(run, baseline)
    inside = [a for a in report.anomalies if 50e9 <= a.start_ns < 68e9]
    assert len(inside) >= 10
    assert all(a.subsystems[0] == "cpu" for a in inside)
    named = {r.channel for a in inside for r in a.reasons}
    assert any("cpu=1" in c for c in named)  # the idle CPU that became busy, by number
    assert not any("cpu=r" in c for c in named) and not any("cpu=r" in a.claim for a in inside)


def test_the_cli_chooses_how_cpus_are_compared(baseline, tmp_path, capsys):
    import json

    from reveal.cli import main
    from reveal.store.run_writer import write_run

    base = write_run(baseline, tmp_path / "base")
    run = write_run(_two_cpus(60, seed=5, hops=(20.3, 40.6)), tmp_path / "run")
    flagged = {}
    for mode in ("rank", "sample-rank"):
        out = tmp_path / f"{mode}.json"
        assert main(["analyze", str(run), "--baseline", str(base), "--cpus", mode,
                     "--json", str(out), "--format", "none", "--quiet"]) == 0
        payload = json.loads(out.read_text())
        assert payload["config"]["rank_cpu_samples"] == (mode == "sample-rank")
        flagged[mode] = sum(payload["windows"]["flagged"])
    assert flagged["rank"] > 0 and flagged["sample-rank"] == 0
    with pytest.raises(SystemExit):
        main(["analyze", str(run), "--cpus", "by-socket"])
    assert "--cpus" in capsys.readouterr().err
