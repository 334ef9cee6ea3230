"""Counter rates with resets and wraps, and derived metrics."""

from __future__ import annotations

import numpy as np
import pytest

from reveal.analysis.derive import (
    counter_deltas,
    derive,
    multiplex_columns,
    multiplex_factor,
    to_rates,
)
from reveal.catalog import Catalog, MetricInfo, default_catalog
from reveal.frame import Telemetry

CATALOG = Catalog([
    MetricInfo("c.bytes", "network", "counter"),
    MetricInfo("c.errors", "network", "event"),
    MetricInfo("g.level", "memory", "gauge"),
    MetricInfo("cpu.*", "cpu", "counter"),
    MetricInfo("perf.*", "cpu", "counter"),
    MetricInfo("mem.*", "memory", "gauge"),
    MetricInfo("disk.*", "storage", "counter"),
])


def _tel(columns: dict[str, list[float]], step_s: float = 0.5) -> Telemetry:
    n = len(next(iter(columns.values())))
    ts = (np.arange(n) * step_s * 1e9).astype(np.int64)
    return Telemetry("h", ts, np.column_stack(list(columns.values())), list(columns))


def test_rates_per_second_and_gauges_untouched():
    tel = _tel({"c.bytes": [0, 100, 300, 300], "g.level": [5, 6, 7, 8]})
    rated, report = to_rates(tel, CATALOG)
    np.testing.assert_allclose(rated.column("c.bytes"), [200, 400, 0])  # per second, 0.5 s steps
    np.testing.assert_allclose(rated.column("g.level"), [6, 7, 8])
    assert rated.n_samples == 3 and not report.resets and not report.wraps


def test_wrap_32_and_64_bit_and_reset():
    # values near 2**64 are spaced 4096 apart in float64
    raw = np.array([[2.0**32 - 10, 2.0**64 - 8192, 1000.0],
                    [5.0, 3.0, 20.0]])
    deltas, wraps, resets = counter_deltas(raw)
    np.testing.assert_allclose(deltas[0], [15.0, 8195.0, 20.0])
    assert wraps[0].tolist() == [True, True, False]
    assert resets[0].tolist() == [False, False, True]


def test_reset_is_reported_and_nan_propagates():
    tel = _tel({"c.errors": [10, 12, 3, np.nan, 5]}, step_s=1.0)
    rated, report = to_rates(tel, CATALOG)
    np.testing.assert_allclose(rated.column("c.errors"), [2, 3, np.nan, np.nan])
    assert report.resets == {"c.errors": 1}


def test_derived_ipc_busy_and_memory():
    n = 5
    cols = {
        "perf.instructions{cpu=0}": np.arange(n) * 300.0,
        "perf.cycles{cpu=0}": np.arange(n) * 100.0,
        "perf.instructions{cpu=1}": np.arange(n) * 100.0,
        "perf.cycles{cpu=1}": np.arange(n) * 100.0,
        "cpu.user{cpu=0}": np.arange(n) * 30.0,
        "cpu.system{cpu=0}": np.arange(n) * 10.0,
        "cpu.idle{cpu=0}": np.arange(n) * 60.0,
        "cpu.iowait{cpu=0}": np.zeros(n),
        "mem.MemTotal": np.full(n, 1000.0),
        "mem.MemAvailable": np.full(n, 250.0),
        "disk.sectors_read{dev=vda}": np.arange(n) * 8.0,
    }
    rated, report = derive(_tel(cols, step_s=1.0), CATALOG)
    np.testing.assert_allclose(rated.column("derived.ipc{cpu=0}"), 3.0)
    np.testing.assert_allclose(rated.column("derived.ipc"), 2.0)  # host total 400/200
    np.testing.assert_allclose(rated.column("derived.cpu_busy_pct{cpu=0}"), 40.0)
    np.testing.assert_allclose(rated.column("derived.mem_used_pct"), 75.0)
    np.testing.assert_allclose(rated.column("derived.disk_read_bytes_per_s{dev=vda}"), 8 * 512)
    assert "derived.ipc{cpu=0}" in report.derived


def test_network_utilisation_is_per_direction_on_a_full_duplex_link():
    # 1 Gbit/s link, 100 ms samples: 10 MB received and 12 MB sent per sample are 100 MB/s
    # (80 % of the link) and 120 MB/s (96 %); together 176 %, which no direction can reach
    n = 6
    cols = {
        "net.rx_bytes{iface=eth0}": 5e9 + np.arange(n) * 10e6,
        "net.tx_bytes{iface=eth0}": 7e9 + np.arange(n) * 12e6,
        "net.speed_mbps{iface=eth0}": np.full(n, 1000.0),
    }
    rated, report = derive(_tel(cols, step_s=0.1), default_catalog())
    rx = rated.column("derived.net_rx_util_pct{iface=eth0}")
    tx = rated.column("derived.net_tx_util_pct{iface=eth0}")
    np.testing.assert_allclose(rx, 80.0)
    np.testing.assert_allclose(tx, 96.0)
    np.testing.assert_allclose(rated.column("derived.net_bytes_per_s{iface=eth0}"), 220e6)
    assert not any(c.startswith("derived.net_util_pct") for c in rated.channels)
    assert "derived.net_rx_util_pct{iface=eth0}" in report.derived
    cat = default_catalog()
    for name in ("derived.net_rx_util_pct", "derived.net_tx_util_pct"):
        info = cat.lookup(name)
        assert (info.subsystem, info.kind, info.unit) == ("network", "gauge", "% of link speed")
        assert "link speed" in info.description


def test_zero_denominator_gives_nan_not_inf():
    tel = _tel({"perf.instructions": [0, 0, 0], "perf.cycles": [0, 0, 0]})
    rated, _ = derive(tel, CATALOG)
    assert np.isnan(rated.column("derived.ipc")).all()


def test_single_sample_run_yields_empty_rates():
    rated, _ = to_rates(_tel({"c.bytes": [1.0]}), CATALOG)
    assert rated.n_samples == 0


@pytest.mark.parametrize("step_s", [0.1, 1.0])
def test_rate_uses_actual_timestamps_with_gaps(step_s):
    ts = np.array([0, 1, 3], dtype=np.int64) * int(step_s * 1e9)
    tel = Telemetry("h", ts, np.array([[0.0], [10.0], [30.0]]), ["c.bytes"])
    rated, _ = to_rates(tel, CATALOG)
    np.testing.assert_allclose(rated.column("c.bytes"), [10 / step_s, 10 / step_s])


def test_recorded_wrap_range_is_used_for_rapl_like_counters():
    channel = "c.bytes"
    tel = _tel({channel: [900.0, 990.0, 30.0]}, step_s=1.0)
    tel.meta["probes"] = {"power": {"info": {"wrap": {channel: 1000.0}}}}
    rated, report = to_rates(tel, CATALOG)
    np.testing.assert_allclose(rated.column(channel), [90.0, 40.0])
    assert report.wraps == {channel: 1} and not report.resets


def _multiplexed_run(rate: float, shares: list[float], step_s: float = 0.1,
                     ipc: float = 2.0) -> tuple[Telemetry, np.ndarray]:
    """A CPU's cycles/instructions group counting ``shares`` of each interval at a true
    ``rate`` (cycles/s), stored raw with its time enabled and running (ns); also returns
    the scaled running estimate that runs recorded before stored (enabled/running × raw)."""
    per_step = rate * step_s
    counted = np.concatenate([[0.0], np.cumsum(np.rint(per_step * np.array(shares)))])
    enabled = np.rint(np.arange(len(shares) + 1) * step_s * 1e9)  # whole ns, as read
    running = np.concatenate([[0.0], np.cumsum(np.rint(np.array(shares) * step_s * 1e9))])
    start = 1e6  # opened a while before the first sample
    cycles, instructions = start + counted, ipc * (start + counted)
    enabled, running = enabled + 5e6, running + 5e6
    tel = _tel({"perf.cycles{cpu=0}": cycles, "perf.instructions{cpu=0}": instructions,
                "perf.time_enabled_ns{cpu=0,group=cycles}": enabled,
                "perf.time_running_ns{cpu=0,group=cycles}": running}, step_s=step_s)
    return tel, np.rint(cycles * enabled / running)


def test_multiplexed_raw_counts_give_the_true_rate_never_a_reset():
    # 500 k cycles/s: 50 k per 100 ms interval, the group counting part of each interval
    shares = [1.0, 0.25, 1.0, 0.5, 0.0, 0.2, 1.0, 0.75, 0.3, 1.0]
    tel, old_estimate = _multiplexed_run(500_000.0, shares)
    # the stored running estimate goes down: rated as a plain counter it reads as resets
    assert (np.diff(old_estimate) < 0).any()
    _, old_report = to_rates(_tel({"perf.cycles{cpu=0}": old_estimate}, 0.1), default_catalog())
    assert old_report.resets
    rated, report = derive(tel, default_catalog())
    rate = rated.column("perf.cycles{cpu=0}")
    counted = np.array(shares) > 0
    np.testing.assert_allclose(rate[counted], 500_000.0, rtol=1e-4)
    assert np.isnan(rate[~counted]).all()  # not counted that interval: unknown, not zero
    assert not report.resets and not report.wraps
    assert report.not_counted == {"perf.cycles{cpu=0}": 1, "perf.instructions{cpu=0}": 1}
    assert report.multiplexed["perf.cycles{cpu=0}"] == int((np.array(shares) % 1 > 0).sum())
    np.testing.assert_allclose(rated.column("perf.instructions{cpu=0}")[counted], 1e6,
                               rtol=1e-4)
    np.testing.assert_allclose(rated.column("derived.ipc{cpu=0}")[counted], 2.0, rtol=1e-4)
    # the group's own times are plain counters: enabled advances 1 s/s
    np.testing.assert_allclose(rated.column("perf.time_enabled_ns{cpu=0,group=cycles}"), 1e9)


def test_reset_of_a_multiplexed_group_is_found_on_the_raw_counts():
    """A group reopened (CPU hotplug) restarts counts and times from zero: one reset on
    each, and the interval's rate still comes from the new values, scaled."""
    tel, _ = _multiplexed_run(400_000.0, [1.0, 0.5, 1.0])
    values = tel.values.copy()
    values[3] = [10_000.0, 20_000.0, 0.1e9, 0.05e9]  # reopened: 0.1 s enabled, half counted
    tel = Telemetry("h", tel.timestamps_ns, values, tel.channels)
    rated, report = derive(tel, default_catalog())
    np.testing.assert_allclose(rated.column("perf.cycles{cpu=0}"), [400e3, 400e3, 200e3])
    assert set(report.resets) == set(tel.channels)
    assert all(n == 1 for n in report.resets.values())


def test_runs_without_group_times_rate_their_counts_as_before():
    """Runs recorded before the raw format stored scaled estimates and no enabled/running
    channels: those counters are rated like any counter, unscaled."""
    cycles = np.array([0.0, 1e5, 2.1e5, 2.9e5, 4.0e5])
    misses = np.array([0.0, 10.0, 30.0, 30.0, 70.0])
    tel = _tel({"perf.cycles{cpu=0}": cycles, "perf.cache_misses{cpu=0}": misses}, 0.1)
    rated, report = derive(tel, default_catalog())
    np.testing.assert_allclose(rated.column("perf.cycles{cpu=0}"), np.diff(cycles) / 0.1)
    np.testing.assert_allclose(rated.column("perf.cache_misses{cpu=0}"), np.diff(misses) / 0.1)
    assert not report.multiplexed and not report.not_counted and not report.resets
    # and a group time channel under other labels does not pair with them
    other = dict(zip(tel.channels, tel.values.T, strict=True))
    other["perf.time_enabled_ns{cpu=1,group=cycles}"] = np.arange(5) * 1e8
    other["perf.time_running_ns{cpu=1,group=cycles}"] = np.arange(5) * 0.5e8
    rated2, _ = derive(_tel(other, 0.1), default_catalog())
    np.testing.assert_allclose(rated2.column("perf.cycles{cpu=0}"), np.diff(cycles) / 0.1)


def test_multiplex_factor_bounds():
    enabled = np.array([100.0, 100.0, 100.0, 0.0, np.nan, 100.0])
    running = np.array([100.0, 25.0, 0.0, 0.0, 50.0, 101.0])
    np.testing.assert_allclose(multiplex_factor(enabled, running),
                               [1.0, 4.0, np.nan, np.nan, np.nan, 1.0])


def test_glob_catalog_entry_carries_its_multiplex_group():
    catalog = Catalog([MetricInfo("perf.x_*", "cpu", "counter", "", 0, "",
                                  multiplex_group="g")])
    assert catalog.lookup("perf.x_one{cpu=0}").multiplex_group == "g"
    counter, enabled, running = multiplex_columns(
        ["perf.x_one{cpu=0}", "perf.time_enabled_ns{cpu=0,group=g}",
         "perf.time_running_ns{cpu=0,group=g}", "perf.x_two{cpu=1}"], catalog)
    assert counter.tolist() == [0] and enabled.tolist() == [1] and running.tolist() == [2]


def test_stall_above_one_second_per_second_moves_back_to_the_samples_before_it():
    """A cgroup's I/O pressure read once a second puts the second's stall into one 100 ms
    sample: 200 ms of it. Tasks stall for at most a second a second, so the excess goes
    back to the samples before, where it happened; the total is kept. Other µs counters
    (CPU time over many CPUs) are left as they are."""
    io = "cgroup.psi.io.some.total{cgroup=job}"
    # µs: nothing, then 350 ms of stall read at once, 50 ms more the next sample
    stalled = [0, 0, 0, 0, 350_000, 400_000]
    tel = _tel({io: stalled, "psi.memory.full.total": stalled,
                "cgroup.cpu.usage_usec{cgroup=job}": stalled}, step_s=0.1)
    rated, _ = to_rates(tel, default_catalog())
    for name in (io, "psi.memory.full.total"):
        rates = rated.column(name)
        np.testing.assert_allclose(rates, [5e5, 1e6, 1e6, 1e6, 5e5])
        assert rates.sum() * 0.1 == pytest.approx(400_000)
    np.testing.assert_allclose(rated.column("cgroup.cpu.usage_usec{cgroup=job}"),
                               [0, 0, 0, 3.5e6, 5e5])
