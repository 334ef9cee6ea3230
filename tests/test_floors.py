"""Scale floors: the least change that counts, per channel and per feature column."""

from __future__ import annotations

import numpy as np
import pytest

from reveal.analysis.ensemble import Ensemble
from reveal.analysis.floors import SPIKE_GRANULES, ChannelFloor, channel_floors, feature_floors
from reveal.analysis.preprocess import RobustScaler
from reveal.catalog import NOT_DETECTED, default_catalog
from reveal.config import DetectConfig


def test_channel_floors_by_kind_unit_and_source():
    channels = ["mem.Cached", "vmstat.pgfault", "disk.sectors_written{dev=vda}",
                "snmp.Tcp.RetransSegs", "smd.cpu_r", "mem.MemTotal"]
    levels = np.array([2e9, 1000.0, 0.0, 0.0, 0.5, 24e9])
    floors = channel_floors(channels, levels, 0.05, interval_s=0.1)
    cached, pgfault, sectors, retrans, smd, total = floors
    assert cached == ChannelFloor(level=1e8, spike=0.0)  # a gauge: relative only
    assert pgfault.level == pytest.approx(50.0)
    assert pgfault.spike == pytest.approx(SPIKE_GRANULES / 0.1)  # 3 faults in one sample
    assert sectors.spike == pytest.approx(SPIKE_GRANULES * 8 / 0.1)  # 3 × 4 KiB
    assert retrans.level == 0.0 and retrans.spike > 0  # an event: no relative floor
    assert smd == ChannelFloor()  # labelled, normalised data: none
    assert total.level == 0.0  # static: none
    assert all(f == ChannelFloor() for f in channel_floors(channels, levels, 0.0, 0.1)[:1])


def test_jiffy_percentages_get_the_granule_of_one_user_hz_tick():
    """Per-CPU busy % moves in steps of one USER_HZ tick per sample (10 points at 100 ms):
    an idle CPU with a stray tick or two is not evidence; the host total's step is
    smaller by the number of CPUs."""
    channels = ["derived.cpu_busy_pct{cpu=0}", "derived.cpu_busy_pct{cpu=1}",
                "derived.cpu_busy_pct", "derived.mem_used_pct"]
    floors = channel_floors(channels, np.array([0.0, 100.0, 50.0, 40.0]), 0.05, 0.1)
    idle, busy, total, mem = floors
    assert idle.spike == pytest.approx(SPIKE_GRANULES * 10.0) and idle.level == 0.0
    assert busy.level == pytest.approx(5.0)
    assert total.spike == pytest.approx(SPIKE_GRANULES * 10.0 / 2)
    assert mem.spike == 0.0  # not from jiffies
    slow = channel_floors(channels[:1], np.zeros(1), 0.05, 1.0)[0]
    assert slow.spike == pytest.approx(SPIKE_GRANULES * 1.0)  # one tick per second is 1 %


def test_feature_floors_follow_what_a_spike_does_to_each_feature():
    floors = {"a": ChannelFloor(level=2.0, spike=30.0)}
    feats = ["mean", "max", "std", "variance", "slope", "skewness", "sum"]
    out = feature_floors(["a"] * len(feats), feats, floors, rows_per_window=30)
    mean, mx, std, var, slope, skew, total = out
    assert mean == pytest.approx(2.0)  # max(level 2, spike/30 = 1)
    assert mx == pytest.approx(30.0) and total == pytest.approx(30.0)
    assert std == pytest.approx(max(2.0, 30 / np.sqrt(30)))
    assert var == pytest.approx(std ** 2)
    assert slope == pytest.approx(2.0 / 30)
    assert skew == pytest.approx(np.sqrt(6 / 30))  # its sampling error over 30 values
    assert (feature_floors(["b"], ["mean"], floors, 30) == 0).all()  # unknown channel


def test_shape_floors_are_sampling_errors_and_medians_move_in_whole_quanta():
    floors = {"vmstat.pgfault": ChannelFloor(level=2.0, spike=30.0, quantum=10.0),
              "smd.cpu_r": ChannelFloor()}
    feats = ["autocorr_lag1", "skewness", "kurtosis", "adf_stat", "median", "min", "mean"]
    out = feature_floors(["vmstat.pgfault"] * len(feats), feats, floors, rows_per_window=36)
    np.testing.assert_allclose(out[:4], [1 / 6, np.sqrt(6 / 36), np.sqrt(24 / 36), 1.0])
    assert out[4] == out[5] == 10.0  # median and min: one step of the per-sample rate
    assert out[6] == pytest.approx(2.0)  # the mean averages steps: level floor
    off = feature_floors(["vmstat.pgfault"] * 4, feats[:4], floors, 36, shape_floors=False)
    assert (off == 0).all()
    # benchmark data: the catalog gives it unit "scaled" (normalised), so no floors
    assert (feature_floors(["smd.cpu_r"] * 4, feats[:4], floors, 36) == 0).all()


def test_counters_and_jiffy_percentages_get_a_quantum_and_state_a_level_floor():
    channels = ["vmstat.pgfault", "derived.cpu_busy_pct{cpu=0}", "mem.Cached",
                "buddy.free_blocks{node=0,order=2,zone=Normal}"]
    pgfault, busy, cached, buddy = channel_floors(channels, np.array([100.0, 50, 2e9, 300]),
                                                  0.05, interval_s=0.1)
    assert pgfault.quantum == pytest.approx(10.0)  # one fault in one 100 ms sample
    assert busy.quantum == pytest.approx(10.0)  # one jiffy of one CPU in one sample
    assert cached.quantum == 0.0  # a gauge moves by any amount
    assert default_catalog().lookup("buddy.free_blocks").kind == "state"
    assert buddy.level == pytest.approx(15.0) and buddy.spike == 0.0


def test_scaler_floor_caps_z_and_scores_baseline_constant_columns():
    rng = np.random.default_rng(0)
    base = np.column_stack([100 + 0.001 * rng.standard_normal(60), np.full(60, 50.0)])
    bare = RobustScaler().fit(base)
    assert list(bare.keep_) == [True, False]  # the constant column is unusable bare
    floored = RobustScaler().fit(base, scale_floor=np.array([5.0, 2.5]))
    assert list(floored.keep_) == [True, True]
    z = floored.transform(np.array([[102.0, 55.0]]))
    assert z[0, 0] == pytest.approx(0.4, abs=0.01)  # 2 % above: under half a floor
    assert z[0, 1] == pytest.approx(2.0)
    with pytest.raises(Exception, match="scale floor"):
        RobustScaler().fit(base, scale_floor=np.ones(3))


def test_floors_keep_a_small_level_change_from_being_flagged():
    """A level that was steady to 0.01 % on the baseline moves by 1 %: thousands of
    baseline sigmas, but below the floor; a 50 % move is still flagged. (Columns outnumber
    baseline windows, as in real runs.)"""
    rng = np.random.default_rng(1)
    n, k = 60, 200
    base = 1000 + rng.standard_normal((n, k))
    base[:, 0] = 5e6 + 500 * rng.standard_normal(n)  # a quiet memory level
    run = 1000 + rng.standard_normal((40, k))
    run[:, 0] = 5e6 * 1.01
    run[30:, 0] = 5e6 * 1.5
    floor = 0.05 * np.abs(np.median(base, axis=0))
    floor[1:] = 0.0
    config = DetectConfig(detectors=("pca_mahalanobis",))
    bare = Ensemble(config).fit(base).score(run)
    floored = Ensemble(config).fit(base, scale_floor=floor).score(run)
    assert bare.flagged[:30].mean() > 0.9  # the 1 % shift reads as a huge anomaly
    assert floored.flagged[:30].mean() < 0.1
    assert floored.flagged[30:].mean() > 0.8


def test_cumulative_vmstat_counters_and_smoothed_averages():
    catalog = default_catalog()
    for name in ("vmstat.nr_dirtied", "vmstat.nr_written", "vmstat.nr_vmscan_immediate_reclaim",
                 "vmstat.nr_foll_pin_acquired"):
        assert catalog.lookup(name).kind == "counter", name
    assert catalog.lookup("vmstat.nr_mapped").kind == "gauge"
    for name in ("loadavg.load1", "psi.cpu.some.avg10", "psi.io.full.avg300",
                 "cgroup.psi.cpu.some.avg10"):
        assert catalog.lookup(name).kind in NOT_DETECTED, name
    assert catalog.lookup("psi.cpu.some.total").kind == "counter"


def test_socket_memory_is_floored_at_the_kernels_per_cpu_reserve():
    """``sockstat.*.mem`` reaches the global count in per-CPU batches of up to 256 pages:
    a level that stays 157 pages off after a burst is bookkeeping, not load."""
    udp, tcp, inuse, many = channel_floors(
        ["sockstat.UDP.mem", "sockstat.TCP.mem", "sockstat.TCP.inuse", "sockstat.TCP.alloc"],
        np.array([0.0, 10_000.0, 40.0, 4000.0]), 0.05, interval_s=0.1)
    assert udp.level == pytest.approx(256.0)  # an idle baseline: the reserve
    assert tcp.level == pytest.approx(500.0)  # a busy one: its share of the level
    assert inuse.level == pytest.approx(2.0)  # sockets are counted one by one
    assert many.level == pytest.approx(200.0)  # a busy server: its share of the level


def test_page_counters_of_a_process_start_need_a_process_worth_of_pages():
    """A fork's copy-on-write reuses and a start-up's mlock move a few hundred pages at
    once; on those counters a spike must pass 1 MiB in one sample, elsewhere 3 pages."""
    reuse, mlocked, faults = channel_floors(
        ["vmstat.pgreuse", "vmstat.unevictable_pgs_mlocked", "vmstat.pgfault"],
        np.zeros(3), 0.05, interval_s=0.1)
    assert reuse.spike == pytest.approx(2560.0)  # 256 pages in one 100 ms sample
    assert mlocked.spike == pytest.approx(2560.0)
    assert reuse.quantum == pytest.approx(2560.0 / SPIKE_GRANULES)
    assert faults.spike == pytest.approx(SPIKE_GRANULES / 0.1)


def test_task_counts_are_floored_at_one_task():
    """From a level of zero, one task blocked for a moment is one task, not a billion
    sigmas; a busy level keeps its relative floor."""
    blocked, running = channel_floors(["cpu.procs_blocked", "cpu.procs_running"],
                                      np.array([0.0, 100.0]), 0.05, interval_s=0.1)
    assert blocked.level == pytest.approx(1.0)
    assert running.level == pytest.approx(5.0)


def test_sampling_floors_are_what_chance_gives_one_window():
    """σ from the channel's median std column, κ from its kurtosis column (excess + 3,
    between 3 and the window's rows); none for unfloored data or without a std column."""
    from reveal.analysis.floors import sampling_floors

    rows = 30
    channels = ["vmstat.nr_dirtied"] * 5 + ["smd.cpu_r"] * 2 + ["mem.Cached"]
    features = ["mean", "std", "variance", "kurtosis", "skewness", "mean", "std", "mean"]
    values = np.tile(np.array([[50.0, 10.0, 100.0, 0.0, 0.0, 1.0, 0.2, 5e9]]), (20, 1))
    values[:, 3] = np.linspace(-1.0, 3.0, 20)  # median excess kurtosis 1.0 → κ = 4
    floors = sampling_floors(channels, features, values, rows)
    mean, std, var, kurt, skew, smd_mean, smd_std, cached_mean = floors
    assert mean == pytest.approx(10.0 / np.sqrt(rows))
    assert std == pytest.approx(10.0 * np.sqrt(3.0 / (4 * rows)))
    assert var == pytest.approx(100.0 * np.sqrt(3.0 / rows))
    assert kurt == pytest.approx(4.0 * np.sqrt(4.0 / rows))
    assert skew == pytest.approx(4.0 / (2 * np.sqrt(rows)))
    assert smd_mean == smd_std == 0.0  # already normalised: no physical floor
    assert cached_mean == 0.0  # no std column for it
    bursty = values.copy()
    bursty[:, 3] = 500.0  # one burst per window: κ is capped at the rows
    assert sampling_floors(channels, features, bursty, rows)[1] == pytest.approx(
        10.0 * np.sqrt((rows - 1.0) / (4 * rows)))


def _held_windows(read_at: np.ndarray, n: int, rows: int = 30, stride: int = 10,
                  per_read: float = 5e9) -> np.ndarray:
    """(W, 2) window mean and spread of a held counter's per-sample rate over ``n``
    samples: ``per_read`` on the samples in ``read_at`` (the reads), 0 between them."""
    rate = np.zeros(n)
    rate[read_at] = per_read
    starts = range(0, n - rows + 1, stride)
    return np.array([[rate[a:a + rows].mean(), rate[a:a + rows].std()] for a in starts])


def test_a_held_counters_mean_is_floored_by_how_far_its_reads_per_window_stray():
    """A cgroup's CPU time read every 5th sample: 0 between reads, 5 CPUs' worth on them.
    Its window mean moves by chance only by a read that falls in or out at a window's
    edge. Read on a fixed grid of ticks, every window of 30 samples holds 6 reads and
    chance moves the mean by nothing (no floor: the baseline's spread between windows
    holds the job's own changes); read when due by the clock, the reads slip by a tick now
    and then, a window holds 5 or 6, and the floor is one read's worth, a sixth of the
    level (not σ/√n, a third). A counter read every sample keeps σ/√n."""
    from reveal.analysis.floors import reads_per_window, sampling_floors

    rows, n = 30, 3000
    held = "cgroup.cpuacct.usage_ns{cgroup=job}"
    channels = [held, held, "vmstat.nr_dirtied", "vmstat.nr_dirtied"]
    features = ["mean", "std", "mean", "std"]
    on_grid = _held_windows(np.arange(0, n, 5), n)
    np.testing.assert_allclose(reads_per_window(on_grid[:, 0], on_grid[:, 1], rows), 6.0)
    level, spread = float(np.median(on_grid[:, 0])), float(np.median(on_grid[:, 1]))
    assert level == pytest.approx(1e9)  # one CPU
    values = np.column_stack([on_grid, on_grid])
    floors = sampling_floors(channels, features, values, rows)
    assert floors[0] == 0.0
    assert floors[2] == pytest.approx(spread / np.sqrt(rows))
    # by the clock: every 5th tick, and one tick later every 7th read (a slow tick)
    gaps = np.where(np.arange(n // 5) % 7 == 6, 6, 5)
    slipping = _held_windows(np.cumsum(gaps)[np.cumsum(gaps) < n], n)
    counts = reads_per_window(slipping[:, 0], slipping[:, 1], rows)
    assert set(np.round(counts).astype(int)) == {5, 6}
    floors = sampling_floors(channels, features, np.column_stack([slipping, slipping]), rows)
    assert floors[0] == pytest.approx(np.median(slipping[:, 0]) / 6.0, rel=0.2)
    idle = values.copy()
    idle[:, 0] = 0.0  # a held counter idle in the baseline: chance as before
    assert sampling_floors(channels, features, idle, rows)[0] == pytest.approx(
        spread / np.sqrt(rows))
