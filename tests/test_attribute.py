"""Attribution: top reasons, subsystem grouping, robust z (analysis), and the claims the
report words from them."""

from __future__ import annotations

import numpy as np
import pytest

from reveal.analysis.attribute import ROBUST_Z_CAP, attribute, robust_z
from reveal.analysis.evidence import heaviest_subsystem, weigh_subsystems
from reveal.catalog import Catalog, MetricInfo
from reveal.report.claims import window_claim

CATALOG = Catalog([
    MetricInfo("derived.cpu_busy_pct", "cpu", "gauge", "%", 100, "CPU busy percentage"),
    MetricInfo("disk.sectors_read", "storage", "counter", "", 50, "disk read sectors"),
    MetricInfo("net.rx_bytes", "network", "counter", "", 50, "network receive throughput"),
])
CHANNELS = ["derived.cpu_busy_pct", "derived.cpu_busy_pct", "disk.sectors_read{dev=vda}",
            "net.rx_bytes{iface=eth|0}"]
FEATURES = ["mean", "variance", "max", "mean"]


def test_top_reason_subsystems_and_claim():
    contributions = np.array([[0.1, 5.0, 1.0, 0.0], [0.0, 0.0, 0.2, 4.0]])
    values = np.array([[50.0, 90.0, 800.0, 1.0], [50.0, 1.0, 10.0, 9e6]])
    med, mad = np.array([50.0, 10.0, 100.0, 1e3]), np.array([5.0, 2.0, 20.0, 100.0])
    out = attribute(contributions, values, CHANNELS, FEATURES, med, mad, CATALOG, top=3)
    first, second = out
    assert first.reasons[0].channel == "derived.cpu_busy_pct"
    assert first.reasons[0].feature == "variance"
    assert first.subsystems[0] == "cpu" and "storage" in first.subsystems
    assert abs(sum(first.shares.values()) - 1.0) < 1e-9
    claim = window_claim(first.reasons, CATALOG)
    # a variance is quoted as its square root, in the channel's unit (%)
    assert claim.startswith("CPU busy percentage varied by ±9.49 % within the window "
                            "(baseline ±3.16 %, +27.0σ)")
    assert "also storage" in claim
    assert second.subsystems[0] == "network"
    # label text kept, escaped later by renderers
    assert "on eth|0" in window_claim(second.reasons, CATALOG)
    assert len(first.reasons) == 3 and len(second.reasons) == 2  # zero contributions dropped


def test_robust_z_is_finite_on_flat_baselines():
    z = robust_z(np.array([0.0, 3.0, -3.0]), np.zeros(3), np.zeros(3))
    assert z[0] == 0.0 and z[1] == ROBUST_Z_CAP and z[2] == -ROBUST_Z_CAP  # not 3·10⁶


def test_no_windows_no_attributions():
    assert attribute(np.zeros((0, 4)), np.zeros((0, 4)), CHANNELS, FEATURES,
                     np.zeros(4), np.zeros(4), CATALOG) == []


def test_breadth_does_not_outrank_strong_evidence():
    """Many memory columns that each moved a little do not outrank two strong network
    counters: a subsystem's evidence is its two strongest channels."""
    channels = [f"mem.level{i}" for i in range(40)] + ["snmp.Tcp.RetransSegs",
                                                      "netstat.TcpExt.TCPSackRecovery"]
    catalog = Catalog([MetricInfo("mem.*", "memory", "gauge"),
                       MetricInfo("snmp.*", "network", "event"),
                       MetricInfo("netstat.*", "network", "event")])
    contributions = np.array([[1.0] * 40 + [10.0, 8.0]])  # memory sums to 40, network 18
    k = contributions.shape[1]
    out = attribute(contributions, np.ones((1, k)), channels, ["mean"] * 40 + ["sum"] * 2,
                    np.zeros(k), np.ones(k), catalog)
    assert out[0].subsystems[0] == "network"
    assert abs(sum(out[0].shares.values()) - 1.0) < 1e-9
    assert out[0].reasons[0].channel == "snmp.Tcp.RetransSegs"


def test_one_dominant_channel_outranks_several_side_effects():
    """After pruning, one channel stands for a whole correlated group (datagrams sent,
    packets, IP transmits): its evidence is not outweighed by three moderate side effects
    (context switches, rescheduling IPIs, softirqs) of another subsystem."""
    channels = ["snmp.Udp.OutDatagrams", "perf.ctx{cpu=1}", "irq.RES{cpu=1}", "soft.SCHED"]
    catalog = Catalog([MetricInfo("snmp.*", "network", "event"),
                       MetricInfo("perf.*", "cpu", "counter"),
                       MetricInfo("irq.*", "cpu", "event"),
                       MetricInfo("soft.*", "cpu", "event")])
    contributions = np.array([[10.0, 4.0, 4.0, 4.0]])  # cpu sums to 12, its top two to 8
    out = attribute(contributions, np.ones((1, 4)), channels, ["mean"] * 4, np.zeros(4),
                    np.ones(4), catalog)
    assert out[0].subsystems[0] == "network"
    assert out[0].shares["network"] == pytest.approx(10 / 18, abs=1e-3)  # rounded


def test_given_subsystems_override_the_catalog():
    contributions = np.array([[0.0, 0.0, 0.0, 4.0]])
    out = attribute(contributions, np.ones((1, 4)), CHANNELS, FEATURES, np.zeros(4),
                    np.ones(4), CATALOG, subsystems=["cpu", "cpu", "storage", "storage"])
    assert out[0].subsystems == ["storage"]
    assert out[0].reasons[0].subsystem == "storage"


def test_many_feature_columns_do_not_outweigh_one_event_column():
    """A gauge summarised by eleven features that each moved a little does not outrank an
    event counter (one ``sum`` column) that moved a lot."""
    feats = ["mean", "variance", "std", "skewness", "kurtosis", "min", "max", "median",
             "slope", "autocorr_lag1", "adf_stat"]
    channels = ["mem.Cached"] * len(feats) + ["snmp.Tcp.RetransSegs"]
    catalog = Catalog([MetricInfo("mem.*", "memory", "gauge"),
                       MetricInfo("snmp.*", "network", "event")])
    contributions = np.array([[1.0] * len(feats) + [4.0]])  # memory sums to 11, network 4
    k = contributions.shape[1]
    out = attribute(contributions, np.ones((1, k)), channels, [*feats, "sum"], np.zeros(k),
                    np.ones(k), catalog)
    assert out[0].subsystems[0] == "network"


def test_reasons_quote_the_floored_robust_z_and_claims_name_a_channel_once():
    channels = ["mem.Committed_AS", "disk.sectors_read{dev=vda}", "disk.sectors_read{dev=vda}"]
    catalog = Catalog([MetricInfo("mem.*", "memory", "gauge", "", 50, "committed memory"),
                       MetricInfo("disk.*", "storage", "counter", "", 50, "disk reads")])
    contributions = np.array([[5.0, 1.0, 1.0]])
    values = np.array([[1.1e9, 10.0, 12.0]])
    med, mad = np.array([1.0e9, 0.0, 0.0]), np.array([1.0, 0.0, 0.0])
    bare = attribute(contributions, values, channels, ["mean", "mean", "max"], med, mad,
                     catalog)[0]
    floored = attribute(contributions, values, channels, ["mean", "mean", "max"], med, mad,
                        catalog, scale_floor=np.array([5e7, 1.0, 1.0]))[0]
    assert bare.reasons[0].robust_z == ROBUST_Z_CAP  # a quiet baseline: capped sigmas
    bare_claim = window_claim(bare.reasons, catalog)
    assert "went from flat 1e+09 to 1.1e+09" in bare_claim  # no sigmas beyond any sense
    assert "σ" not in bare_claim
    assert "rose to 1.1e+09 (baseline 1e+09, +2.0σ)" in window_claim(floored.reasons, catalog)
    assert floored.reasons[0].robust_z == pytest.approx(2.0)  # 1e8 / 5 % of 1e9
    assert window_claim(floored.reasons, catalog).count("disk reads") == 1


def test_a_bursty_channel_idle_at_the_median_is_judged_by_its_spread_not_worded_flat():
    """A counter idle in most baseline windows (median and MAD of its window means 0) that
    bursts now and then: the detectors scale it by its standard deviation, and a reason
    about a burst quotes that z, not the "flat baseline" cap."""
    from reveal.analysis.pipeline import reason_scales
    from reveal.frame import Telemetry
    from reveal.model import Reveal
    from reveal.report.claims import FLAT_Z

    def minutes(rows: int, seed: int, start: int, bursts: np.ndarray) -> Telemetry:
        rng = np.random.default_rng(seed)
        steady = 50 + rng.normal(size=(rows, 3))
        sparse = np.zeros(rows)
        sparse[bursts] = 10.0
        ts = (np.arange(rows, dtype=np.int64) + start) * np.int64(60e9)
        return Telemetry("host", ts, np.column_stack([steady, sparse]),
                         ["smd.a", "smd.b", "smd.c", "smd.sparse"], {"interval_s": 60.0})

    rng = np.random.default_rng(1)
    base = minutes(3000, 1, 0, rng.choice(3000, 30, replace=False))  # 1 % of rows
    run = minutes(400, 2, 3000, np.arange(200, 203))  # three bursting rows in a row
    model = Reveal().fit(base)
    fitted = model.fitted_
    col = fitted.column_channels.index("smd.sparse")  # its window mean
    assert fitted.mad[col] == 0 and reason_scales(fitted)[col] > 0
    quoted = [r.robust_z for e in model.score_windows(run, lead_in=base).evidence
              for r in e.reasons if r.channel == "smd.sparse" and r.feature == "mean"]
    assert quoted and all(3 < z < FLAT_Z for z in quoted)


def test_an_episode_is_named_by_the_subsystem_its_windows_weigh_most_in():
    # a strong memory window outweighs two weak network ones; the weights add up in place
    weights: dict[str, float] = {}
    weigh_subsystems(weights, {"network": 0.9, "memory": 0.1}, 1.0)
    weigh_subsystems(weights, {"network": 0.8, "cpu": 0.2}, 1.0)
    assert heaviest_subsystem(weights) == "network"
    assert weigh_subsystems(weights, {"memory": 1.0}, 4.0) is weights
    assert weights == pytest.approx({"network": 1.7, "memory": 4.1, "cpu": 0.2})
    assert heaviest_subsystem(weights) == "memory"
    assert heaviest_subsystem({}) == "unknown"
    assert heaviest_subsystem({}, default="cpu") == "cpu"
    assert heaviest_subsystem({"cpu": 1.0, "gpu": 1.0}) == "cpu"  # the first of equals
