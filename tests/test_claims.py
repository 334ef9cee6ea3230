"""Claims in the channel's unit, with real catalog metrics: levels and rates as value against
baseline, spread, trend, extremes, shape in plain words, event counts, "from flat", plain
numbers where there is no unit, escaped tenant labels, and the CPU named as the reasons name
it (not its busy rank)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from reveal.analysis.evidence import Reason
from reveal.catalog import default_catalog
from reveal.frame import Telemetry, channel_metric, parse_channel
from reveal.report.claims import FLAT_Z, window_claim
from reveal.report.units import quantity

CATALOG = default_catalog()


def reason(channel: str, feature: str, value: float, median: float, z: float,
           subsystem: str | None = None) -> Reason:
    metric = channel_metric(channel)
    return Reason(channel, metric, feature, subsystem or CATALOG.lookup(metric).subsystem,
                  1.0, value, median, z)


def claim(*reasons: Reason, interval_s: float | None = 0.1, **window: float) -> str:
    return window_claim(list(reasons), CATALOG, interval_s, window or None)


def test_rates_and_levels_read_in_the_channels_unit():
    assert claim(reason("derived.disk_read_bytes_per_s{dev=vda}", "mean", 4.12e8, 2e7, 8.1)) \
        == "Disk read throughput on vda rose to 412 MB/s (baseline 20 MB/s, +8.1σ)."
    # a counter of USER_HZ ticks, rated per second: a share of one CPU
    assert claim(reason("cpu.user{cpu=3}", "mean", 78.0, 5.0, 12.0)) \
        == "CPU time in user mode on CPU 3 rose to 78 % of a CPU (baseline 5 % of a CPU, +12.0σ)."
    assert "rose to 2.5 CPUs" in claim(reason("cgroup.cpu.usage_usec{cgroup=web}", "mean",
                                              2.5e6, 1e6, 9.0))
    # PSI stall time (µs per second): a share of the time
    assert "rose to 35 % of the time" in claim(reason("psi.cpu.some.total", "mean", 3.5e5,
                                                      1e4, 20.0))
    assert "fell to 120 MB (baseline 2.1 GB" in claim(reason("mem.MemAvailable", "mean",
                                                             1.2e8, 2.1e9, -30.0))
    assert "rose to 12 tasks (window median; baseline 2 tasks" in claim(
        reason("cpu.procs_running", "median", 12, 2, 15.0))
    assert "rose to 1,200 packets/s (baseline 100 packets/s" in claim(
        reason("net.rx_packets{iface=eth0}", "mean", 1200, 100, 7.0))
    assert "rose to 12.3k packets/s" in claim(reason("net.rx_packets{iface=eth0}", "mean",
                                                    12345, 100, 7.0))
    assert "71 °C" in claim(reason("gpu.temp_c{gpu=0}", "max", 71, 60, 5.0))
    assert "rose to 250 W" in claim(reason("gpu.power_mw{gpu=0}", "mean", 2.5e5, 1e5, 6.0))


def test_a_baseline_that_barely_moved_is_worded_as_flat():
    text = claim(reason("derived.disk_read_bytes_per_s{dev=vda}", "mean", 4.12e8, 0.0, 1000.0))
    assert text == "Disk read throughput on vda went from flat 0 B/s to 412 MB/s."
    assert "σ" not in text and "1000" not in text
    assert "from a flat" in claim(reason("ebpf.block.latency_ns_max", "max", 1.2e7, 8e5, FLAT_Z))


def test_spread_trend_and_extremes():
    # std and variance in the unit: the variance is quoted as its square root
    assert "varied by ±12 % within the window (baseline ±2 %, +9.0σ)" in claim(
        reason("derived.cpu_busy_pct", "std", 12.0, 2.0, 9.0))
    assert "varied by ±12 % within the window (baseline ±2 %" in claim(
        reason("derived.cpu_busy_pct", "variance", 144.0, 4.0, 9.0))
    assert "held steadier than usual: ±1 MB/s" in claim(
        reason("derived.net_bytes_per_s{iface=eth0}", "std", 1e6, 5e7, -4.0))
    # slope per sample (0.1 s apart) → per second
    assert "trended up by 0.5 % per second (baseline flat" in claim(
        reason("derived.mem_used_pct", "slope", 0.05, 0.0, 6.0))
    assert "trended down by 20 MB/s per second" in claim(
        reason("derived.disk_write_bytes_per_s{dev=sda}", "slope", -2e6, 0.0, -5.0))
    assert "peaked at 12 ms (baseline peak 800 µs, +7.0σ)" in claim(
        reason("ebpf.block.latency_ns_max", "max", 1.2e7, 8e5, 7.0))
    assert "dropped to 120 MB (baseline low 2 GB" in claim(
        reason("mem.MemAvailable", "min", 1.2e8, 2e9, -9.0))


def test_shape_features_are_plain_words_without_raw_statistics():
    bursty = claim(reason("derived.disk_util_pct{dev=vda}", "kurtosis", 17.3, 0.2, 11.0),
                   max=80.0, median=2.0)
    assert "turned bursty: peaks 40× the median (80 % over 2 %)" in bursty
    assert "17.3" not in bursty and "kurtosis" not in bursty
    assert "turned bursty: brief drops to 30 % from a median of 100 %" in claim(
        reason("derived.cpu_busy_pct{cpu=2}", "kurtosis", 12.0, -1.0, 9.0),
        max=100.0, median=100.0, min=30.0)
    assert "turned bursty: short spikes" in claim(
        reason("derived.disk_util_pct{dev=vda}", "kurtosis", 17.3, 0.2, 11.0))
    assert "skewed upwards" in claim(reason("derived.cpu_busy_pct", "skewness", 3.1, 0.1, 8.0))
    assert "changed its rhythm" in claim(reason("derived.cpu_busy_pct", "autocorr_lag1",
                                                0.95, 0.2, 6.0))
    assert "stopped being steady" in claim(reason("derived.cpu_busy_pct", "adf_stat",
                                                  -0.5, -4.0, 5.0))


def test_event_counts_per_window():
    # sum of per-second rates over a window of 0.1 s samples: 40 × 0.1 = 4 retransmissions
    assert claim(reason("snmp.Tcp.RetransSegs", "sum", 40.0, 0.0, 1000.0)) \
        == "TCP segments retransmitted went from none to 4 in the window."
    assert "reached 12 packets in the window (baseline 2 packets, +6.0σ)" in claim(
        reason("net.rx_drop{iface=eth0}", "sum", 120.0, 20.0, 6.0))


def test_channels_without_a_unit_read_as_plain_numbers():
    text = claim(reason("smd.disk_q", "mean", 0.02887, 0.00462, 40.0), interval_s=60.0)
    assert text == "Disk queue length rose to 0.02887 (baseline 0.00462, +40.0σ)."
    assert "per minute" in claim(reason("smd.eth1_fi", "slope", 0.04, 0.0, 50.0),
                                 interval_s=60.0)
    assert not quantity(CATALOG.lookup("asd.m3")).known
    assert claim(reason("asd.m3", "mean", 0.8, 0.1, 9.0)).startswith(
        "Anonymised application-server metric m3 rose to 0.8")


def test_every_catalog_unit_is_worded():
    """No unit in the catalog falls through to a stored unit a reader cannot use (USER_HZ
    ticks, sectors, kernel kB, words): those are converted to CPUs, bytes, ..."""
    for entry in CATALOG.entries():
        text = quantity(entry).format(1234.5)
        for raw in ("USER_HZ", "sector", "kernel", "word", "scaled", "wraps", "KiB"):
            assert raw not in text, (entry, text)
        assert "\n" not in text


def test_tenant_labels_are_escaped_and_claims_stay_one_line():
    nasty = "web\x1b[31m\nred\u202eevil"
    text = claim(reason(f"cgroup.memory.current{{cgroup={nasty}}}", "mean", 3e9, 1e9, 8.0),
                 reason("net.rx_bytes{iface=eth0}", "mean", 1.0, 0.0, 2.0, "network"))
    assert "\x1b" not in text and "\n" not in text and "\u202e" not in text
    assert "in cgroup web?[31m?red?evil" in text
    assert text.count("\n") == 0 and text.endswith(".")


def _per_cpu(seconds: float, seed: int, hot: tuple[float, float] | None = None) -> Telemetry:
    """Four CPUs' /proc/stat tick counters at 10 Hz; optionally CPU 2 saturated."""
    rng = np.random.default_rng(seed)
    n, cpus = int(seconds * 10), 4
    user = rng.poisson(2.0, size=(n, cpus)).astype(float)
    system = rng.poisson(0.5, size=(n, cpus)).astype(float)
    if hot is not None:
        a, b = int(hot[0] * 10), int(hot[1] * 10)
        user[a:b, 2] = 9.0
        system[a:b, 2] = 1.0
    idle = np.clip(10.0 - user - system, 0.0, None)
    columns, names = [], []
    for field, ticks in (("user", user), ("system", system), ("idle", idle)):
        for cpu in range(cpus):
            columns.append(np.cumsum(ticks[:, cpu]))
            names.append(f"cpu.{field}{{cpu={cpu}}}")
    ts = np.arange(n, dtype=np.int64) * 100_000_000
    return Telemetry("cpus", ts, np.column_stack(columns), names, {"interval_s": 0.1})


def test_claims_name_the_cpu_the_reasons_name():
    """CPU columns are compared by busy rank; reasons and claims name the CPU itself."""
    from reveal.model import report_run

    report = report_run(_per_cpu(90, seed=2, hot=(40, 55)), _per_cpu(300, seed=1))
    assert report.anomalies
    named = 0
    for a in report.anomalies:
        labels = [parse_channel(r.channel)[1].get("cpu") for r in a.reasons]
        assert not any(c is not None and c.startswith("r") for c in labels), a.reasons
        said = re.findall(r"on CPU (\S+?)[ ,;.]", a.claim)
        assert not any(c.startswith("r") for c in said), a.claim
        top = parse_channel(a.reasons[0].channel)[1].get("cpu")
        if top is not None:
            assert f"on CPU {top} " in a.claim, (a.claim, a.reasons[0].channel)
            named += 1
    assert named
    inside = [a for a in report.anomalies if 40e9 <= a.start_ns <= 55e9]
    assert inside and any("on CPU 2 " in a.claim for a in inside)


@pytest.mark.parametrize(("value", "text"), [(0.0, "0 B/s"), (999.96e6, "1 GB/s"),
                                             (1.5e3, "1.5 kB/s"), (512.0, "512 B/s")])
def test_byte_rates_scale(value: float, text: str):
    q = quantity(CATALOG.lookup("derived.disk_read_bytes_per_s"))
    assert q.format(value) == text


def test_locations_read_as_words():
    assert claim(reason("irq.count{cpu=0,irq=39}", "mean", 900, 100, 9.0)).startswith(
        "Interrupts handled on CPU 0 for IRQ 39 rose to 900 interrupts/s")
    assert claim(reason("buddy.free_blocks{node=0,order=3,zone=Normal}", "std", 40, 2, 6.0)) \
        .startswith("Free memory blocks of one size order on NUMA node 0 (order 3, zone Normal) "
                    "varied by ±40 blocks")


def test_a_claim_names_a_metric_by_its_whole_noun_phrase():
    """A claim cuts a catalog description at its first parenthesis: a description must not
    go on after one ("GPU memory (HBM) temperature" read "GPU memory rose to 41 °C")."""
    from reveal.catalog import default_catalog
    from reveal.report.claims import _short

    def goes_on(description: str) -> bool:
        after = description.split(" (", 1)[1].partition(")")[2].strip()
        return bool(after) and after[0] not in ",;:."

    cut = [e.name for e in default_catalog().entries()
           if " (" in (e.description or "") and goes_on(e.description)]
    assert cut == []
    assert _short(default_catalog().lookup("gpu.mem_temp_c").description) == \
        "GPU memory temperature"
