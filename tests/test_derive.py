"""Counter rates with resets and wraps, and derived metrics."""

from __future__ import annotations

import numpy as np
import pytest

from reveal.analyze.derive import counter_deltas, derive, to_rates
from reveal.catalog import Catalog, MetricInfo
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
