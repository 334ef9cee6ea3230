"""The fleet engine on a synthetic fleet of lock-step hosts (tests/fleet_hosts.py)."""

from __future__ import annotations

import numpy as np
import pytest

from fleet_hosts import GIB, WALL_START_S, Fault, fleet
from reveal.errors import InputError
from reveal.fleet.config import FleetConfig
from reveal.fleet.engine import compare_fleet, host_features
from reveal.fleet.roles import role_names


def _compare(tels, config=None):
    config = config or FleetConfig()
    return compare_fleet([host_features(t, config) for t in tels], config=config)


def test_clean_fleet_flags_nothing():
    for seed in (0, 1, 2):
        result = _compare(fleet(6, 120, seed=seed, ifaces=("eth0", "ens5"), gpus=(2, 8)))
        assert result.episodes == []
        assert result.config_outliers == []
        assert result.clock == []
        assert not result.flagged.any()
        assert result.flagged_hosts() == []


def test_level_shift_flags_that_host_only_in_memory_at_the_right_time():
    fault = Fault(3, memory_drop=GIB, span_s=(60.0, 90.0))
    result = _compare(fleet(6, 120, seed=4, faults=(fault,)))
    assert result.flagged_hosts() == ["host-3"]
    assert {e.host for e in result.episodes} == {"host-3"}
    episode = result.episodes[0]
    assert episode.subsystem == "memory"
    # windows of 3 s: the first to hold faulty samples starts 3 s before the fault
    start_s = episode.start_ns / 1e9 - WALL_START_S
    end_s = episode.end_ns / 1e9 - WALL_START_S
    assert 56.0 <= start_s <= 61.0
    assert 89.0 <= end_s <= 94.0
    channels = {r.channel for r in episode.reasons}
    assert channels & {"mem.MemAvailable", "derived.mem_used_pct"}
    available = [r for r in episode.reasons if r.channel == "mem.MemAvailable"]
    assert available and available[0].z < 0
    assert available[0].value - available[0].peer_median == pytest.approx(-GIB, rel=0.15)


def test_flagged_windows_lie_inside_the_fault():
    fault = Fault(1, memory_drop=2 * GIB, span_s=(30.0, 70.0))
    result = _compare(fleet(8, 100, seed=5, faults=(fault,)))
    rows, cols = np.nonzero(result.flagged)
    assert set(rows.tolist()) == {1}
    t = result.grid_start_ns[cols] / 1e9 - WALL_START_S
    assert t.min() >= 27.0 and t.max() <= 70.0


def test_hugepages_static_difference_is_a_configuration_outlier():
    result = _compare(fleet(6, 60, seed=6, faults=(Fault(2, hugepages=512),)))
    assert result.flagged_hosts() == ["host-2"]
    (outlier,) = result.config_outliers
    assert (outlier.host, outlier.channel, outlier.value, outlier.majority) == \
        ("host-2", "mem.HugePages_Total", 512.0, 0.0)
    assert outlier.peers_with_majority == 5
    assert result.episodes == []


def test_clock_offset_is_found_and_aligned():
    result = _compare(fleet(6, 120, seed=7, faults=(Fault(4, clock_s=7.0),)))
    assert [c.host for c in result.clock] == ["host-4"]
    assert result.clock[0].offset_s == pytest.approx(7.0, abs=1.0)
    assert result.clock[0].aligned
    assert result.episodes == []  # moved back, it is like its peers


def test_clock_offset_unaligned_is_still_found():
    config = FleetConfig(align_clocks=False)
    result = _compare(fleet(6, 120, seed=7, faults=(Fault(4, clock_s=-5.0),)), config)
    assert [c.host for c in result.clock] == ["host-4"]
    assert result.clock[0].offset_s == pytest.approx(-5.0, abs=1.0)
    assert not result.clock[0].aligned


def test_hosts_not_in_lock_step_get_no_clock_offset():
    # each host runs its own pattern (recorded one after another): some lag correlates by
    # chance, which says nothing of a clock
    tels = [fleet(1, 40, seed=20 + h, names=(f"solo-{h}",))[0] for h in range(5)]
    result = _compare(tels)
    assert result.clock == []
    assert any("not in step" in w for w in result.warnings)


def test_different_interface_names_and_gpu_counts_compare():
    tels = fleet(8, 120, seed=8, ifaces=("eth0", "ens5", "enp1s0"), disks=("vda", "nvme0n1"),
                 gpus=(2, 8), faults=(Fault(5, memory_drop=GIB, span_s=(40.0, 80.0)),))
    hosts = [host_features(t) for t in tels]
    assert all("net.rx_bytes{iface=rank0}" in h.channels for h in hosts)
    every = FleetConfig(channels=None)  # disks are not compared by default
    assert all("derived.disk_write_bytes_per_s{dev=rank0}" in host_features(t, every).channels
               for t in tels)
    result = compare_fleet(hosts)
    compared = {c for c, _ in result.columns}
    assert "net.rx_bytes{iface=rank0}" in compared
    assert "gpu.sm_util{gpu=1}" in compared and "gpu.sm_util{gpu=7}" in compared
    assert result.flagged_hosts() == ["host-5"]
    # the host's own interface name is kept for the report
    assert hosts[1].roles["net.rx_bytes{iface=rank0}"] == "net.rx_bytes{iface=ens5}"


def test_role_names_rank_interfaces_by_traffic():
    channels = ["net.rx_bytes{iface=eth1}", "net.rx_bytes{iface=eth0}", "net.rx_bytes{iface=lo}",
                "net.speed_mbps{iface=eth1}", "gpu.sm_util{gpu=0}"]
    values = np.array([[5e6, 1e3, 1e9, 1e4, 50.0]] * 3)
    names = role_names(channels, values)
    assert names == {"net.rx_bytes{iface=eth1}": "net.rx_bytes{iface=rank0}",
                     "net.rx_bytes{iface=eth0}": "net.rx_bytes{iface=rank1}",
                     "net.speed_mbps{iface=eth1}": "net.speed_mbps{iface=rank0}"}


def test_a_devices_role_is_the_same_whichever_channels_are_compared():
    """A device's role comes from the whole run: the default set (the job's namespaces only)
    and every channel name it alike, even where host-wide traffic the default set leaves
    out would reorder the devices (an interface seen in the host's namespace before a job
    moved it into its own)."""
    from reveal.frame import Telemetry

    rng = np.random.default_rng(3)
    n = 200
    ts = np.arange(n, dtype=np.int64) * 100_000_000
    rates = {  # bytes per second
        "net.rx_bytes{iface=veth-a}": 9e8,  # briefly host-wide, busy, before the move
        "net.rx_bytes{iface=veth-a,netns=job-a}": 1e5,
        "net.rx_bytes{iface=veth-b,netns=job-b}": 2e5,
        "net.rx_bytes{iface=eth0}": 1e6,
    }
    columns, channels = [], []
    for name, rate in rates.items():
        counter = np.cumsum(rng.poisson(rate * 0.1, n)).astype(float)
        if "netns" not in name and "veth" in name:
            counter[20:] = np.nan
        columns.append(counter)
        channels.append(name)
    for iface, netns in (("veth-a", "job-a"), ("veth-b", "job-b"), ("eth0", None)):
        labels = f"iface={iface}" + (f",netns={netns}" if netns else "")
        columns.append(np.full(n, 1500.0))
        channels.append(f"net.mtu{{{labels}}}")
    columns.append(50.0 + rng.normal(0, 1, n))
    channels.append("cgroup.cpu.usage_pct{cgroup=job}")
    tel = Telemetry("h", ts, np.column_stack(columns), channels,
                    {"interval_s": 0.1, "wall_offset_ns": 0})
    default = host_features(tel, FleetConfig())
    every = host_features(tel, FleetConfig(channels=None, job_network_only=False))
    assert default.statics == every.statics
    assert set(default.roles.items()) <= set(every.roles.items())
    assert "net.mtu{iface=rank0,netns=job-a}" in default.statics


def test_host_without_overlapping_time_is_a_warning():
    tels = fleet(6, 60, seed=9)
    late = fleet(1, 60, seed=10, names=("late-host",), start_s=(3600.0,))[0]
    result = _compare([*tels, late])
    assert "late-host" not in result.hosts
    assert any("share no time" in w and "late-host" in w for w in result.warnings)
    assert result.episodes == []


def test_too_few_hosts_is_an_input_error():
    with pytest.raises(InputError, match="at least 3 hosts"):
        _compare(fleet(2, 60, seed=11))


def test_hosts_starting_at_different_times_align_on_the_wall_clock():
    # every host recorded from another moment: the grid holds them where they overlap
    tels = fleet(6, 90, seed=12, start_s=(0.0, 5.0, 10.0),
                 faults=(Fault(2, memory_drop=GIB, span_s=(40.0, 70.0)),))
    result = _compare(tels)
    assert result.flagged_hosts() == ["host-2"]
    assert len(result.grid_start_ns) > 85
    assert result.clock == []


def test_block_statistics_match_numpy_and_ignore_chunking(monkeypatch):
    from reveal.fleet import peers

    rng = np.random.default_rng(0)
    cube = rng.normal(size=(9, 7, 40)).astype(np.float32)
    cube[rng.random(cube.shape) < 0.1] = np.nan
    cube[:, :, 5] = 2.0  # constant across hosts: no explosion
    cube[3, :, 5] = 2.5
    floors = np.full(40, 0.01)
    subsystem = np.arange(40) % 3
    args = (list(cube), floors, subsystem, 3)
    whole = peers.compare_block(*args, relative_floor=0.0)
    np.testing.assert_allclose(whole.median, np.nanmedian(cube, axis=0), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(whole.p10, np.nanquantile(cube, 0.1, axis=0), rtol=1e-5,
                               atol=1e-6)
    oracle = _z(cube, floors)
    for h in range(9):
        for w in range(7):
            cols = whole.top_column[h, w]
            np.testing.assert_allclose(whole.top_z[h, w], oracle[h, w, cols], rtol=1e-4,
                                       atol=1e-4)
            # the kept columns are the largest |z| (up to the cap)
            top = np.sort(np.minimum(np.nan_to_num(np.abs(oracle[h, w])), 50.0))[::-1][:8]
            np.testing.assert_allclose(np.minimum(np.abs(whole.top_z[h, w]), 50.0), top,
                                       rtol=1e-4, atol=1e-4)
    # host 3 on the constant column: (2.5 - 2) / the floor of 0.01 = 50 sigmas, not infinity
    assert whole.top_column[3, 0, 0] == 5 and whole.top_z[3, 0, 0] == pytest.approx(50.0)
    monkeypatch.setattr(peers, "CHUNK_VALUES", 50)  # one or two columns at a time
    chunked = peers.compare_block(*args, relative_floor=0.0)
    for name in ("subsystem_scores", "top_column", "top_z", "top_value", "median", "p90"):
        np.testing.assert_array_equal(getattr(whole, name), getattr(chunked, name))


def _z(cube, floors):
    """Robust z by the definition, column by column (the oracle)."""
    med = np.nanmedian(cube, axis=0)
    mad = np.nanmedian(np.abs(cube - med), axis=0)
    pooled = np.nanmedian(mad, axis=0)
    scale = np.maximum.reduce([1.4826 * mad, np.broadcast_to(1.4826 * pooled, mad.shape),
                               np.broadcast_to(floors, mad.shape)])
    return (cube - med) / scale


def _steady_hosts(shift: float) -> list:
    """Six hosts whose available memory swings ±1 MB around 5 MB in a 1 s square wave: every
    3 s window holds whole periods, so the window means agree across hosts to a few bytes
    while a window mean could move by 1 MB/√30 by chance; host-3's level is ``shift`` up."""
    from reveal.frame import Telemetry

    n, interval = 600, 0.1
    wave = np.where((np.arange(n) // 5) % 2 == 0, 1e6, -1e6)
    out = []
    for h in range(6):
        level = 5e6 + 10.0 * h + (shift if h == 3 else 0.0)
        ts = 10**9 + np.arange(n, dtype=np.int64) * round(interval * 1e9)
        meta = {"interval_s": interval, "wall_offset_ns": round(WALL_START_S * 1e9) - 10**9}
        out.append(Telemetry(f"host-{h}", ts, (level + wave)[:, None], ["mem.MemAvailable"],
                             meta))
    return out


def test_window_sigma_and_sampling_errors():
    from reveal.fleet.host import _window_sigma, sampling_errors

    x = np.random.default_rng(0).normal(3.0, 2.0, size=(3000, 2))
    x[:, 1] = 7.0
    x[::7, 0] = np.nan
    sigma = _window_sigma(x, np.arange(0, 2970, 10), 30)
    assert sigma[0] == pytest.approx(2.0, rel=0.1)
    assert sigma[1] == 0.0
    se = sampling_errors(["a", "a", "a", "r0"], ["mean", "std", "max", "mean"],
                         {"a": 2.0, "c1": 1.0, "c2": 4.0}, {"r0": ["c1", "c2"]}, 30)
    assert se[0] == pytest.approx(2.0 / np.sqrt(30))
    assert se[1] == pytest.approx(2.0 / np.sqrt(60))  # √((κ − 1) / 4n), κ = 3
    assert se[2] == pytest.approx(2.0 / np.sqrt(2 * np.log(30)))
    assert se[3] == pytest.approx(4.0 / np.sqrt(30))  # a CPU rank: its group's largest


def test_sampling_floor_keeps_a_chance_sized_difference_small():
    # peers that agree more closely than chance allows one window: a shift of 0.2 σ reads
    # as tens of sigmas against their spread, and as less than one against the window's
    # own sampling error
    tels = _steady_hosts(2e5)
    off = _compare(tels, FleetConfig(sampling_floor=0.0))
    on = _compare(tels, FleetConfig())
    assert off.flagged_hosts() == ["host-3"]
    assert on.flagged_hosts() == []
    assert float(np.nanmax(on.scores[3])) < 2.0
    # a shift of many standard errors is still found
    assert _compare(_steady_hosts(3e6)).flagged_hosts() == ["host-3"]


def test_distinct_channels_count_each_channel_once_whatever_the_chunking(monkeypatch):
    from reveal.fleet import peers

    rng = np.random.default_rng(1)
    cube = rng.normal(size=(9, 5, 12)).astype(np.float32)
    cube[4, :, 0:4] += 40.0  # host 4: one channel's four statistics far off
    channel = np.repeat(np.arange(3), 4)  # 3 channels × 4 features
    subsystem = np.zeros(12, dtype=np.int64)
    args = (list(cube), np.full(12, 0.01), subsystem, 1)
    columns = peers.compare_block(*args, relative_floor=0.0)
    channels = peers.compare_block(*args, relative_floor=0.0, channel_of=channel)
    oracle = np.minimum(np.abs(_z(cube, np.full(12, 0.01))), 50.0)
    per_channel = oracle.reshape(9, 5, 3, 4).max(axis=3)
    np.testing.assert_allclose(channels.subsystem_scores[:, :, 0],
                               per_channel.mean(axis=2), rtol=1e-4, atol=1e-4)
    # one channel alone: its four statistics made the score, one of three channels does not
    assert columns.subsystem_scores[4, :, 0].min() > 2 * channels.subsystem_scores[4, :, 0].max()
    np.testing.assert_array_equal(columns.top_column, channels.top_column)
    monkeypatch.setattr(peers, "CHUNK_VALUES", 50)  # chunks end at a channel's boundary
    chunked = peers.compare_block(*args, relative_floor=0.0, channel_of=channel)
    np.testing.assert_array_equal(chunked.subsystem_scores, channels.subsystem_scores)


def test_a_column_the_peers_disagree_on_counts_for_no_host():
    """Half the hosts at one level and half at another (a state each reached by its own
    history): with ``max_deviating_share`` that column sets no host apart, while a column
    on which one host alone deviates still does."""
    from reveal.fleet.peers import compare_block

    rng = np.random.default_rng(0)
    hosts, windows = 9, 6
    parts = []
    for i in range(hosts):
        split = 0.0 if i < 4 else 1000.0  # 4 hosts low, 5 high: the peers disagree
        alone = 500.0 if i == 7 else 0.0  # host 7 alone deviates
        parts.append(np.column_stack([split + rng.normal(0, 1, windows),
                                      100.0 + alone + rng.normal(0, 1, windows)])
                     .astype(np.float32))
    floors = np.ones(2, np.float32)
    subsystem_of = np.array([0, 1])
    kept = compare_block(parts, floors, subsystem_of, 2, max_deviating_share=1.0)
    dropped = compare_block(parts, floors, subsystem_of, 2, max_deviating_share=0.34)
    assert kept.subsystem_scores[0, :, 0].min() > 10  # the split column counts: host 0 apart
    assert np.all(dropped.subsystem_scores[:, :, 0] == 0)  # ... and now for no host
    assert np.all(dropped.subsystem_scores[7, :, 1] > 30)  # host 7 is still apart
    assert np.all(np.delete(dropped.subsystem_scores[:, :, 1], 7, axis=0) < 3)
