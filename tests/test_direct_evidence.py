"""Direct evidence: throttling, qdisc drops and retransmissions lead a flagged window's
reasons and claim, judged against the baseline or, for a channel that appeared mid-run,
against zero."""

from __future__ import annotations

import dataclasses

import numpy as np

from reveal.analysis.derive import derive
from reveal.analysis.direct import (
    baseline_levels,
    direct_signs,
    lead_with,
    setting_changes,
    window_means,
)
from reveal.analysis.evidence import Reason, WindowEvidence
from reveal.frame import Telemetry
from reveal.model import Reveal
from reveal.report.claims import FLAT_Z

TICK_NS = 100_000_000
CGROUP = 'job "a" <b>'


def _host(n: int, seed: int, slow_from: int | None = None,
          extra: dict[str, np.ndarray] | None = None, shift: float = -30.0) -> Telemetry:
    """Two CPUs, memory and host retransmissions; busy moves by ``shift`` points from
    ``slow_from`` (a job held back: a fall; a neighbour taking the CPUs: a rise);
    ``extra``: more counter channels (cumulative)."""
    rng = np.random.default_rng(seed)
    busy = 50 + rng.normal(0, 3, n)
    if slow_from is not None:
        busy[slow_from:] += shift
    user, idle = np.cumsum(busy / 10), np.cumsum((100 - busy) / 10)
    channels = ["cpu.user{cpu=0}", "cpu.idle{cpu=0}", "cpu.user{cpu=1}", "cpu.idle{cpu=1}",
                "mem.MemAvailable", "snmp.Tcp.RetransSegs"]
    columns = [user, idle, user * 0.9, idle * 1.1, 1e9 + rng.normal(0, 1e6, n),
               np.cumsum(rng.poisson(0.01, n)).astype(float)]
    for name, values in (extra or {}).items():
        channels.append(name)
        columns.append(values)
    return Telemetry("h", np.arange(n, dtype=np.int64) * TICK_NS,
                     np.column_stack(columns).astype(float), channels, {"interval_s": 0.1})


def _throttled(n: int, start: int, share: float) -> dict[str, np.ndarray]:
    label = "{cgroup=" + CGROUP + "}"
    periods = np.cumsum(np.ones(n))
    throttled = np.cumsum((np.arange(n) >= start) * share)
    return {f"cgroup.cpu.nr_periods{label}": periods,
            f"cgroup.cpu.nr_throttled{label}": throttled}


def test_a_cgroup_that_appears_throttled_mid_run_leads_the_claim() -> None:
    base = _host(3000, 1)
    run = _host(1200, 2, slow_from=600, extra=_throttled(1200, 600, 0.9))
    report = Reveal().fit(base).report(run)
    assert report.episodes, "the slowed job should be flagged"
    assert any("judged against zero" in w for w in report.warnings)
    late = [a for a in report.anomalies if a.start_ns >= 600 * TICK_NS]
    assert late
    for anomaly in late:
        lead = anomaly.reasons[0]
        assert lead.metric == "derived.cgroup_throttled_pct"
        assert CGROUP in lead.channel
        assert lead.value >= 50 and lead.baseline_median == 0
        assert anomaly.subsystems[0] == "cpu"
        assert f"in cgroup {CGROUP}" in anomaly.claim
        assert "throttled" in anomaly.claim
    # before the quota, the same run has no throttling to quote
    early = [a for a in report.anomalies if a.end_ns <= 600 * TICK_NS]
    assert all(r.metric != "derived.cgroup_throttled_pct" for a in early for r in a.reasons)


def test_drops_the_baseline_already_had_are_no_sign_more_of_them_are() -> None:
    rng = np.random.default_rng(3)
    label = "qdisc.drops{iface=veth0,qdisc=tbf,netns=job}"
    base = _host(3000, 4, extra={label: np.cumsum(rng.poisson(0.2, 3000)).astype(float)})
    # a neighbour takes the CPUs from 60 s (the host doing less is no change that matters
    # on its own: docs/detectors.md), the drops stay as the baseline had them
    steady = _host(1200, 5, slow_from=600, shift=30.0,
                   extra={label: np.cumsum(rng.poisson(0.2, 1200)).astype(float)})
    report = Reveal().fit(base).report(steady)
    assert report.anomalies
    assert all(r.metric != "qdisc.drops" for a in report.anomalies for r in a.reasons[:1])
    drops = np.cumsum(rng.poisson(0.2, 1200) + (np.arange(1200) >= 600) * 20).astype(float)
    lossy = _host(1200, 5, slow_from=600, extra={label: drops})
    report = Reveal().fit(base).report(lossy)
    late = [a for a in report.anomalies if a.start_ns >= 600 * TICK_NS]
    assert late
    assert all(a.reasons[0].channel == label and a.subsystems[0] == "network" for a in late)
    assert all("in network namespace job" in a.claim for a in late)


def test_a_sign_flags_windows_the_detectors_miss_under_persistence() -> None:
    base = _host(3000, 6)
    # throttled from 60 s, the host's channels unaffected: only the sign tells
    run = _host(1200, 7, extra=_throttled(1200, 600, 0.9))
    report = Reveal().fit(base).report(run)
    assert report.anomalies
    assert all(a.start_ns >= 570 * TICK_NS for a in report.anomalies)
    assert all(a.detectors == ["direct"] and a.subsystems[0] == "cpu"
               for a in report.anomalies)
    assert len(report.episodes) == 1 and CGROUP in report.episodes[0].claim


def test_window_means_and_levels_are_per_window_over_finite_samples() -> None:
    ts = np.arange(10, dtype=np.int64) * TICK_NS
    values = np.array([[1.0], [3.0], [np.nan], [5.0], [5.0], [5.0], [7.0], [9.0], [9.0],
                       [9.0]])
    tel = Telemetry("h", ts, values, ["qdisc.drops{iface=x}"], {"interval_s": 0.1})
    starts = np.array([0, 3, 6]) * TICK_NS
    means = window_means(tel, np.array([0]), starts, 3)
    assert np.allclose(means[:, 0], [2.0, 5.0, 25 / 3])
    levels = baseline_levels(tel, starts, 3)
    med, mad, tail = levels["qdisc.drops{iface=x}"]
    assert med == 5.0 and np.isclose(mad, 3.0)
    assert np.isclose(tail, np.quantile([2.0, 5.0, 25 / 3], 0.99))
    # a window past the data holds nothing: no sign, no crash
    late = direct_signs(tel, np.array([20 * TICK_NS]), 3, levels)
    assert not late.shown.any() and late.reasons == {}


def test_causes_lead_symptoms() -> None:
    rng = np.random.default_rng(8)
    drops = "qdisc.drops{iface=veth1,qdisc=netem}"
    retrans = "snmp.Tcp.RetransSegs{netns=job}"
    n = 1200
    late = (np.arange(n) >= 600).astype(float)
    run = _host(n, 9, slow_from=600, extra={
        drops: np.cumsum(late * 2.0), retrans: np.cumsum(late * 30.0 + rng.poisson(0.01, n))})
    levels = {retrans: (0.1, 0.05)}
    rated = derive(run)[0]  # rates per second, as analysis sees them
    signs = direct_signs(rated, rated.timestamps_ns[700:703], 30, levels)
    assert signs.shown.all()
    for reasons in signs.reasons.values():
        # retransmissions rose further past their least value, but the drops are the cause
        assert [r.channel for r in reasons] == [drops, retrans]


def _pressure(n: int, seed: int, level: float, from_row: int | None = None,
              to_level: float = 0.0) -> dict[str, np.ndarray]:
    """Host CPU pressure (cumulative µs stalled) at ``level`` of the time, ``to_level``
    from ``from_row`` on."""
    rng = np.random.default_rng(seed)
    share = np.clip(level + rng.normal(0, 0.01, n), 0, 1)
    if from_row is not None:
        share[from_row:] = to_level
    return {"psi.cpu.some.total": np.cumsum(share * 1e5)}  # 100 ms ticks


def test_cpu_pressure_over_its_baseline_is_contention_at_its_own_level_is_not() -> None:
    """Tasks kept waiting for a CPU 60 % of the time, where the baseline had 1 %: CPU
    contention, whatever the detectors make of it. A job that oversubscribes its CPUs all
    along (pressure at 30 %) rising to 40 % is not a sign."""
    base = _host(3000, 1, extra=_pressure(3000, 1, 0.01))
    run = _host(1200, 2, extra=_pressure(1200, 2, 0.01, 600, 0.6))
    d_base, _ = derive(base)
    levels = baseline_levels(d_base, d_base.timestamps_ns[::10][:-3], 30)
    d_run, _ = derive(run)
    starts = d_run.timestamps_ns[::10][:-3]
    signs = direct_signs(d_run, starts, 30, levels)
    late = starts >= 600 * TICK_NS
    assert signs.shown[late].all() and not signs.shown[starts + 30 * TICK_NS <= 600 * TICK_NS].any()
    lead = signs.reasons[int(np.flatnonzero(late)[0])][0]
    assert lead.metric == "psi.cpu.some.total" and lead.subsystem == "cpu"
    assert lead.value >= 5.5e5 and lead.baseline_median < 2e4
    # oversubscribed all along: 30 % is the baseline, 40 % no sign
    base = _host(3000, 1, extra=_pressure(3000, 1, 0.3))
    d_base, _ = derive(base)
    levels = baseline_levels(d_base, d_base.timestamps_ns[::10][:-3], 30)
    d_run, _ = derive(_host(1200, 2, extra=_pressure(1200, 2, 0.3, 600, 0.4)))
    assert not direct_signs(d_run, starts, 30, levels).shown.any()


def _bursty_retrans(n: int, seed: int, burst_rows: int, burst_rate: float,
                    from_row: int | None = None, to_rate: float = 0.0) -> dict[str, np.ndarray]:
    """Retransmissions of a job that resends in bursts: about 20 a second, one sample in
    ``burst_rows`` resending ``burst_rate`` a second; ``to_rate`` a second from
    ``from_row`` on (cumulative counts, 100 ms samples)."""
    rng = np.random.default_rng(seed)
    per_sample = rng.poisson(2.0, n).astype(float)
    per_sample[::burst_rows] += burst_rate / 10
    if from_row is not None:
        per_sample[from_row:] = to_rate / 10
    return {"snmp.Tcp.RetransSegs{netns=job}": np.cumsum(per_sample)}


def test_a_burst_the_baseline_had_in_its_tail_is_no_sign_a_loss_beyond_it_is() -> None:
    """A distributed job retransmits in bursts as it goes: a window as loud as the
    baseline's loudest few (its 99th percentile) is no sign, though it is many MADs
    above the quiet median; a steady loss well past that tail is."""
    base = _host(6000, 3, extra=_bursty_retrans(6000, 3, 97, 2500.0))
    d_base, _ = derive(base)
    levels = baseline_levels(d_base, d_base.timestamps_ns[::10][:-3], 30)
    med, mad, tail = levels["snmp.Tcp.RetransSegs{netns=job}"]
    burst_z = (tail - med) / (1.4826 * mad)
    assert burst_z > 2 * 5.0  # by MAD alone, the baseline's own bursts would be signs
    quiet = derive(_host(1200, 4, extra=_bursty_retrans(1200, 4, 97, 2500.0)))[0]
    starts = quiet.timestamps_ns[::10][:-3]
    assert not direct_signs(quiet, starts, 30, levels).shown.any()
    lossy = derive(_host(1200, 5, extra=_bursty_retrans(1200, 5, 97, 2500.0, 600,
                                                         4 * tail)))[0]
    shown = direct_signs(lossy, starts, 30, levels).shown
    late = starts >= 600 * TICK_NS
    assert shown[late].all() and not shown[starts + 30 * TICK_NS <= 600 * TICK_NS].any()
    # levels saved before the tail was kept: judged on median and MAD, as then
    old = {k: v[:2] for k, v in levels.items()}
    assert direct_signs(quiet, starts, 30, old).shown.any()


def test_a_quiet_median_with_a_loud_tail_is_judged_by_the_tail_not_worded_flat() -> None:
    """A job that retransmits only in rare bursts: median and MAD 0, a 99th percentile of
    50/s. A steady 200/s loss is a sign some 9 tail sigmas out, quoted as such; the same
    loss over a baseline without any tail reads as "from flat"."""
    name = "snmp.Tcp.RetransSegs{netns=job}"
    run = derive(_host(600, 6, extra={name: np.cumsum(np.full(600, 20.0))}))[0]  # 200/s
    starts = run.timestamps_ns[::10][:-3]
    tailed = direct_signs(run, starts, 30, {name: (0.0, 0.0, 50.0)})
    assert tailed.shown.all()
    z = [r.robust_z for w in tailed.reasons.values() for r in w if r.channel == name]
    assert len(z) == len(starts) and np.allclose(z, 200 / (50 / 2.326), rtol=0.02)
    assert max(z) < FLAT_Z
    flat = direct_signs(run, starts, 30, {name: (0.0, 0.0, 0.0)})
    assert flat.shown.all() and all(r.robust_z >= FLAT_Z for w in flat.reasons.values() for r in w
               if r.channel == name)


def _evidence(shares: dict[str, float]) -> WindowEvidence:
    reasons = [Reason(f"ch.{s}", f"ch.{s}", "mean", s, v, 1.0, 0.0, 50.0)
               for s, v in sorted(shares.items(), key=lambda kv: -kv[1])]
    return WindowEvidence(7, 0, 1, 9.0, ["Z"], list(shares), dict(shares), reasons)


def test_a_symptom_yields_to_a_clear_detector_lead_a_cause_does_not() -> None:
    """A packet flood keeps the CPUs busy: CPU pressure 6 σ over its baseline (a symptom)
    follows the detectors' network lead on channels 50 σ out; where the detectors name no
    subsystem clearly, or the pressure left a flat baseline, it leads; a cause
    (throttling) leads whatever the detectors say."""
    pressure = Reason("psi.cpu.some.total", "psi.cpu.some.total", "mean", "cpu", 0.0,
                      6e5, 3e5, 6.0)
    flood = _evidence({"network": 0.6, "cpu": 0.4})
    kept = lead_with(flood, [pressure])
    assert kept.subsystems[0] == "network" and kept.subsystem_shares == flood.subsystem_shares
    assert kept.reasons[0].channel == "ch.network"
    assert kept.reasons[-1].channel == "psi.cpu.some.total"  # kept among the reasons
    unclear = lead_with(_evidence({"network": 0.45, "storage": 0.3, "cpu": 0.25}), [pressure])
    assert unclear.subsystems[0] == "cpu"
    assert unclear.reasons[0].channel == "psi.cpu.some.total"
    assert unclear.subsystem_shares["cpu"] > 0.5
    throttled = Reason("derived.cgroup_throttled_pct{cgroup=a}", "derived.cgroup_throttled_pct",
                       "mean", "cpu", 0.0, 90.0, 0.0, 1000.0)
    led = lead_with(_evidence({"network": 0.9, "cpu": 0.1}), [throttled])
    assert led.subsystems[0] == "cpu" and led.reasons[0].metric == throttled.metric
    # pressure from a flat baseline outweighs storage channels 50 σ out: it leads
    contention = Reason("psi.cpu.some.total", "psi.cpu.some.total", "mean", "cpu", 0.0,
                        4e5, 700.0, 1000.0)
    disk = lead_with(_evidence({"storage": 0.7, "cpu": 0.3}), [contention])
    assert disk.subsystems[0] == "cpu" and disk.reasons[0].metric == contention.metric
    # a symptom of the subsystem the detectors lead with leads it
    retrans = Reason("snmp.Tcp.RetransSegs{netns=a}", "snmp.Tcp.RetransSegs", "mean",
                     "network", 0.0, 300.0, 20.0, 12.0)
    same = lead_with(flood, [retrans])
    assert same.subsystems[0] == "network" and same.reasons[0].metric == retrans.metric


def test_a_symptom_yields_only_to_a_lead_that_can_matter_on_its_own() -> None:
    """CPU contention: pressure 6 σ over its baseline (a symptom) beside detectors that
    lead with memory, on the free lists' churn 1,700 σ out (free memory blocks, catalog
    ``alone = false``: memory moving between free and reclaimable never matters on its
    own). That lead outweighs nothing: the pressure leads, named CPU; the same share on
    anonymous memory (which can matter) still takes the lead."""
    pressure = Reason("psi.cpu.some.total", "psi.cpu.some.total", "mean", "cpu", 0.0,
                      6e5, 3e5, 6.0)
    churn = Reason("buddy.free_blocks{node=0,order=0,zone=Normal}", "buddy.free_blocks",
                   "variance", "memory", 0.6, 1.5e6, 869.0, 1700.0)
    busy = Reason("derived.cpu_busy_pct", "derived.cpu_busy_pct", "variance", "cpu", 0.4,
                  787.0, 3.9, 74.0)
    churning = WindowEvidence(7, 0, 1, 9.0, ["Z"], ["memory", "cpu"],
                              {"memory": 0.6, "cpu": 0.4}, [churn, busy])
    led = lead_with(churning, [pressure])
    assert led.subsystems[0] == "cpu" and led.reasons[0].metric == "psi.cpu.some.total"
    anon = dataclasses.replace(churn, channel="mem.AnonPages", metric="mem.AnonPages")
    held = lead_with(dataclasses.replace(churning, reasons=[anon, busy]), [pressure])
    assert held.subsystems[0] == "memory" and held.reasons[0].metric == "mem.AnonPages"


def _mtu(n: int, values: list[tuple[int, float]]) -> dict[str, np.ndarray]:
    """An MTU channel read once a second (a value repeats between reads): ``values``
    (row, bytes) from each row on; NaN before the first."""
    column = np.full(n, np.nan)
    for row, mtu in values:
        column[row:] = mtu
    return {"net.mtu{iface=veth0,netns=job <x>}": column}


def test_a_setting_changed_flags_the_windows_that_hold_the_change_and_names_it() -> None:
    base = _host(3000, 11, extra=_mtu(3000, [(0, 1500.0)]))
    # lowered at 60 s, set back at 90 s; the host's other channels unaffected
    run = _host(1500, 12, extra=_mtu(1500, [(5, 1500.0), (600, 576.0), (900, 1500.0)]))
    report = Reveal().fit(base).report(run)
    assert report.anomalies
    change_ns = (600 * TICK_NS, 900 * TICK_NS)
    for anomaly in report.anomalies:
        # every flagged window holds a change, and is led by it
        assert any(anomaly.start_ns < t <= anomaly.end_ns for t in change_ns), anomaly
        lead = anomaly.reasons[0]
        assert lead.metric == "net.mtu" and lead.feature == "setting"
        assert anomaly.subsystems[0] == "network" and "direct" in anomaly.detectors
    first = min(report.anomalies, key=lambda a: a.start_ns)
    assert "was set from 1,500 B to 576 B" in first.claim, first.claim
    assert "job <x>" in first.claim
    last = max(report.anomalies, key=lambda a: a.start_ns)
    assert "was set from 576 B to 1,500 B" in last.claim, last.claim
    # the windows between the two changes, at the lowered value all along, are not flagged
    assert not [a for a in report.anomalies
                if a.start_ns >= 640 * TICK_NS and a.end_ns <= 880 * TICK_NS]
    # the two changes 30 s apart are one episode of the network
    assert len(report.episodes) == 1 and report.episodes[0].subsystem == "network"


def test_a_run_set_up_differently_from_its_baseline_is_warned_not_flagged() -> None:
    base = _host(3000, 13, extra=_mtu(3000, [(0, 1500.0)]))
    run = _host(1200, 14, extra=_mtu(1200, [(0, 9000.0)]))
    report = Reveal().fit(base).report(run)
    assert not [a for a in report.anomalies if a.reasons[0].metric == "net.mtu"]
    assert any("net.mtu" in w and "9,000" in w and "1,500" in w for w in report.warnings), \
        report.warnings
    # an interface that appears mid-run (NaN, then a value) changed no setting; nor does
    # one the baseline never had, set anew as it came up
    late = _host(1200, 15, extra=_mtu(1200, [(700, 1500.0)]))
    report = Reveal().fit(base).report(late)
    assert not [r for a in report.anomalies for r in a.reasons if r.metric == "net.mtu"]
    other = {k.replace("veth0", "veth9"): v
             for k, v in _mtu(1200, [(700, 1500.0), (720, 1450.0)]).items()}
    report = Reveal().fit(base).report(_host(1200, 15, extra=other))
    assert not [r for a in report.anomalies for r in a.reasons if r.metric == "net.mtu"]


def test_setting_changes_are_found_per_window_over_finite_samples() -> None:
    ts = np.arange(12, dtype=np.int64) * TICK_NS
    values = np.array([[np.nan, 1.0], [np.nan, 1.0], [1500, 1.0], [1500, np.nan],
                       [np.nan, 2.0], [576, 2.0], [576, 2.0], [576, 2.0], [576, 2.0],
                       [1500, 2.0], [1500, 2.0], [1500, 2.0]])
    tel = Telemetry("h", ts, values, ["net.mtu{iface=a}", "hugepages.nr{size=2048kB}"], {})
    starts = ts[[0, 2, 3, 6, 9]]
    found = setting_changes(tel, starts, 3, set(tel.channels))
    assert not setting_changes(tel, starts, 3, {"net.mtu{iface=b}"}).shown.any()
    # windows: rows 0-2 (NaN then 1500: no change; pool 1 → 1), 2-4 (pool 1 → 2),
    # 3-5 (MTU 1500 → 576 across a NaN; pool 2 → 2 after a NaN: 1 at row 3 is NaN),
    # 6-8 (none), 9-11 (none)
    assert found.shown.tolist() == [False, True, True, False, False]
    assert [r.metric for r in found.reasons[1]] == ["hugepages.nr"]
    (mtu,) = [r for r in found.reasons[2] if r.metric == "net.mtu"]
    assert (mtu.baseline_median, mtu.value, mtu.feature) == (1500.0, 576.0, "setting")
