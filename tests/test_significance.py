"""Practical significance: a window is an anomaly only when a change in it matters in its
unit against the host's capacity, and the claim leads with the change that names the cause."""

from __future__ import annotations

import numpy as np
import pytest

from reveal.analysis.significance import (
    Capacity,
    Matter,
    change_size,
    channel_matter,
    channel_matters,
    feature_matters,
    host_capacity,
)
from reveal.catalog import default_catalog
from reveal.frame import Telemetry
from reveal.model import Reveal
from synthetic import ar1_host

GIB = 2.0**30
HOST = Capacity(memory_bytes=24 * GIB, n_cpus=4)


def _matter(channel: str, level: float = 0.0, capacity: Capacity = HOST) -> Matter:
    return channel_matter(channel, default_catalog().lookup(channel.split("{")[0]), level,
                          capacity)


def test_memory_is_judged_against_the_hosts_memory_not_the_baseline_level():
    huge = _matter("mem.AnonHugePages", level=2 * 2**20)
    assert huge.least == pytest.approx(0.01 * 24 * GIB)  # 2 MB of 24 GiB does not matter
    assert "memory" in huge.rule
    small_host = _matter("mem.AnonHugePages", capacity=Capacity(memory_bytes=2 * GIB))
    assert small_host.least == pytest.approx(0.01 * 2 * GIB)
    pages = _matter("vmstat.nr_dirty")
    assert pages.least == pytest.approx(0.01 * 24 * GIB / 4096)


def test_memory_moving_between_free_and_cache_never_matters_alone():
    for metric in ("mem.Cached", "mem.MemFree", "mem.FileHugePages",
                   "buddy.free_blocks{node=0,order=3,zone=Normal}"):
        assert np.isinf(_matter(metric, level=8 * GIB).least), metric
    assert np.isfinite(_matter("mem.MemAvailable").least)
    assert np.isfinite(_matter("mem.Dirty").least)


def test_sockets_are_judged_against_the_local_ports_even_from_a_flat_zero():
    """A few sockets in TIME_WAIT (a webhook post leaves some for 60 s) never matter on a
    host; a job's own sockets are judged against the job's own use."""
    tw = _matter("sockstat.TCP.tw", level=0.0)
    assert tw.least == pytest.approx(0.05 * 28232) and "local ports" in tw.rule
    assert _matter("sockstat.TCP.inuse", level=4000.0).least == pytest.approx(tw.least)
    job = _matter("sockstat.TCP.inuse{netns=job}", level=12.0)
    assert job.least == pytest.approx(3.0) and "job" in job.rule


def test_cpu_time_is_judged_against_the_cpus_there_are():
    total = _matter("derived.cpu_busy_pct")
    one = _matter("derived.cpu_busy_pct{cpu=3}")
    assert total.least == pytest.approx(5.0) and one.least == pytest.approx(10.0)
    ticks_total, ticks_one = _matter("cpu.user"), _matter("cpu.user{cpu=1}")
    assert ticks_total.least == pytest.approx(0.05 * 4 * 100)  # ticks/s of 4 CPUs
    assert ticks_one.least == pytest.approx(10.0)  # a tenth of one CPU


def test_event_rates_cost_cpu_time_and_links_carry_bytes():
    irq = _matter("irq.count{cpu=0,irq=RES}")
    assert irq.least == pytest.approx(0.10 / 2e-6)  # a tenth of a CPU at 2 µs each
    link = _matter("net.rx_bytes{iface=eth0}",
                   capacity=Capacity(n_cpus=4, link_bps={"eth0": 10e9 / 8}))
    assert link.least == pytest.approx(0.01 * 10e9 / 8)
    unknown_link = _matter("net.rx_bytes{iface=veth9}")
    assert unknown_link.least == pytest.approx(0.01 * 125e6)
    # the derived throughput is already per second: judged against the link too, even on
    # a loopback that carried nothing in the baseline
    derived = _matter("derived.net_bytes_per_s{iface=lo}", level=0.0)
    assert derived.least == pytest.approx(0.01 * 125e6) and "link" in derived.rule
    # a cgroup's disk bytes are judged against the device, as the host's are
    io = _matter("cgroup.io.wbytes{cgroup=job,dev=253:0}", level=0.0)
    assert io.least == pytest.approx(0.05 * 100e6) and "device" in io.rule


def test_a_datagram_is_a_packet_on_the_link_as_well_as_cpu_work():
    """20k UDP datagrams/s cost a few percent of a CPU, yet put 20k packets/s on a
    1 Gbit/s link: they matter as packets. On a 100 Gbit/s host the CPU cost is reached
    first. TCP segments are counted after offload and stay CPU work."""
    udp = _matter("snmp.Udp.OutDatagrams{netns=job}")
    assert udp.least == pytest.approx(0.01 * 125e6 / 1500) and "link" in udp.rule
    fast = _matter("snmp.Udp.InDatagrams", capacity=Capacity(n_cpus=4,
                                                              link_bps={"eth0": 12.5e9}))
    assert fast.least == pytest.approx(0.10 / 2e-6) and "CPU" in fast.rule
    assert _matter("snmp.Tcp.OutSegs").least == pytest.approx(0.10 / 2e-6)


def test_the_jobs_own_channels_are_also_judged_against_the_jobs_use():
    job = _matter("net.rx_bytes{iface=veth0,netns=job}", level=2e6)
    assert job.least == pytest.approx(0.25 * 2e6) and "job" in job.rule
    # waiting is no use: a job stalled 0.1 % of the time is judged against wall time
    stall = _matter("cgroup.psi.io.some.total{cgroup=job}", level=1_000.0)
    assert stall.least == pytest.approx(0.05 * 1e6) and "job" not in stall.rule
    # nor is an error or fault count: a job that retransmits 57 segments/s has no "use" of
    # retransmissions a quarter of which matters; they are judged by their cost, sign or
    # rarity, as the host's are
    for event in ("snmp.Tcp.RetransSegs{netns=job}", "netstat.TcpExt.TCPLostRetransmit{netns=job}",
                  "cgroup.memory.events.high{cgroup=job}"):
        on_job = _matter(event, level=57.0)
        on_host = _matter(event.split("{")[0], level=57.0)
        assert on_job == on_host and "job" not in on_job.rule, (event, on_job)


def test_labelled_data_has_no_capacity_and_shapes_never_matter_alone():
    assert _matter("smd.cpu_r", level=0.5).least == 0.0
    features = ["mean", "std", "slope", "sum", "kurtosis", "median", "max"]
    every = feature_matters(["a"] * 7, features, {"a": Matter(10.0, "")}, rows_per_window=30,
                            sustained=False)
    assert every[[0, 1, 2, 3, 5, 6]] == pytest.approx([10.0, 5.0, 10.0 / 30, 300.0, 10.0, 10.0])
    assert np.isinf(every[4])
    # sustained: a change must last, only the median and an event count's sum can matter
    sustained = feature_matters(["a"] * 7, features, {"a": Matter(10.0, "")},
                                rows_per_window=30, sustained=True)
    assert sustained[[3, 5]] == pytest.approx([300.0, 10.0])
    assert np.isinf(sustained[[0, 1, 2, 4, 6]]).all()


def test_capacity_comes_from_the_runs_meta_or_its_channels():
    tel = ar1_host(5.0, seed=1)
    tel.meta.update(mem_total_bytes=8 * GIB, n_cpus=6)
    cap = host_capacity(tel)
    assert cap.memory_bytes == 8 * GIB and cap.n_cpus == 6
    bare = Telemetry("h", tel.timestamps_ns,
                     np.column_stack([np.full(tel.n_samples, 4 * GIB)]),
                     ["mem.MemTotal"], {})
    assert host_capacity(bare).memory_bytes == 4 * GIB


def test_a_gpu_is_judged_against_its_own_memory_power_and_time():
    """GPU activity in points of the GPU, memory against that GPU's memory and power against
    its power limit (both from the baseline's static channels), a process's share against
    the GPU rather than its own small level."""
    n = 50
    channels = {"gpu.mem_total_bytes{gpu=0}": 141e9, "gpu.power_limit_mw{gpu=0}": 700e3,
                "gpu.mem_total_bytes{gpu=1}": 80e9}
    tel = Telemetry("h", np.arange(n, dtype=np.int64) * 100_000_000,
                    np.column_stack([np.full(n, v) for v in channels.values()]),
                    list(channels), {"mem_total_bytes": 24 * GIB, "n_cpus": 4})
    cap = host_capacity(tel)
    assert cap.gpu_memory_bytes == {"0": 141e9, "1": 80e9} and cap.gpu_power_mw == {"0": 700e3}
    assert _matter("gpu.kernel_active_pct{gpu=0}", 4.0, cap).least == pytest.approx(5.0)
    assert _matter("gpu.mem_used_bytes{gpu=1}", 1e9, cap).least == pytest.approx(0.8e9)
    assert _matter("gpu.power_mw{gpu=0}", 127e3, cap).least == pytest.approx(35e3)
    assert _matter("gpu.temp_c{gpu=0}", 34.0, cap).least == pytest.approx(5.0)
    assert _matter("gpu.sm_clock_mhz{gpu=0}", 1980.0, cap).least == pytest.approx(99.0)
    process = _matter("gpu.proc.sm_util{cgroup=/job,comm=python3,gpu=0,pid=7}", 3.0, cap)
    assert process.least == pytest.approx(5.0)  # not 25 % of its 3 %


def test_gpu_pcie_throughput_is_judged_against_the_link_not_its_baseline_level():
    """A real H200 training job moved 16 MB/s over PCIe and 28.7 MB/s a few seconds later:
    a +75 % change of a level, but 0.05 % of the PCIe 5.0 x16 link, which does not matter.
    The link comes from the baseline's generation and width (the largest it can train
    to, else the current state), else a PCIe 4.0 x16 link is assumed."""
    n = 20
    channels = {"gpu.pcie_gen_max{gpu=0}": 5.0, "gpu.pcie_width_max{gpu=0}": 16.0,
                "gpu.pcie_gen{gpu=1}": 3.0, "gpu.pcie_width{gpu=1}": 8.0}
    tel = Telemetry("h", np.arange(n, dtype=np.int64) * 100_000_000,
                    np.column_stack([np.full(n, v) for v in channels.values()]),
                    list(channels), {"mem_total_bytes": 24 * GIB, "n_cpus": 4})
    cap = host_capacity(tel)
    assert cap.gpu_pcie_bps == pytest.approx({"0": 16 * 3938e6, "1": 8 * 984.6e6})
    least = _matter("gpu.pcie_tx_kbps{gpu=0}", 16.3e3, cap).least  # KB/s
    assert least == pytest.approx(0.01 * 16 * 3938e6 / 1e3)
    assert 28.7e3 - 16.3e3 < least < 6e6  # a 6 GB/s loader would matter
    assert _matter("gpu.pcie_rx_kbps{gpu=1}", 1e3, cap).least == pytest.approx(
        0.01 * 8 * 984.6e6 / 1e3)
    assert _matter("gpu.pcie_rx_kbps{gpu=7}", 1e3, cap).least == pytest.approx(
        0.01 * 16 * 1969e6 / 1e3)


def test_threads_that_exist_never_matter_alone():
    """A collector's 26 threads leaving a container's cgroup (122 → 96 tasks) is no cost;
    runnable tasks still are judged against the CPUs."""
    assert _matter("cgroup.pids.current{cgroup=/job}", 122.0).least == np.inf
    assert _matter("loadavg.tasks", 900.0).least == np.inf
    assert _matter("cpu.procs_running", 2.0).least == pytest.approx(2.0)


def test_a_part_of_a_cgroups_memory_is_judged_against_the_cgroups_whole_memory():
    n = 50
    channels = {"cgroup.memory.current{cgroup=job}": 8 * GIB,
                "cgroup.memory.stat.shmem{cgroup=job}": 20e6,
                "cgroup.memory.stat.shmem{cgroup=other}": 20e6}
    tel = Telemetry("h", np.arange(n, dtype=np.int64) * 100_000_000,
                    np.column_stack([np.full(n, v) for v in channels.values()]),
                    list(channels), {"mem_total_bytes": 24 * GIB, "n_cpus": 4})
    _, matters = channel_matters(tel, list(channels))
    current, shmem, lone = matters
    assert shmem.least == pytest.approx(0.01 * 24 * GIB)  # 1 % of 24 GiB, under 25 % of 8 GiB
    assert current.least == np.inf  # the whole holds the page cache: judged by its parts
    assert shmem.least > 100 * 20e6 * 0.25 / 100 and "memory" in shmem.rule
    assert lone.least == pytest.approx(0.25 * 20e6)  # no whole on record: its own level


def test_a_spread_is_sized_as_a_spread_not_squared():
    """A variance column moves by the square of its spread: sized by its square root, a
    spread from ±2 to ±18 (8 least changes of ±2) ranks below a level shift of 19 least."""
    row, median = np.array([18.0**2, 98.0]), np.array([2.0**2, 4.0])
    least = np.array([(5.0 / 2) ** 2, 5.0])
    sizes = change_size(row, median, least, ["variance", "mean"])
    assert sizes[0] == pytest.approx((18 - 2) / 2.5) and sizes[1] == pytest.approx(94 / 5)


def _with(tel: Telemetry, channels: dict[str, np.ndarray]) -> Telemetry:
    meta = dict(tel.meta, mem_total_bytes=24 * GIB, n_cpus=2)
    return Telemetry(tel.host, tel.timestamps_ns,
                     np.column_stack([tel.values, *channels.values()]),
                     list(tel.channels) + list(channels), meta)


def _flagged(base: Telemetry, run: Telemetry, significance: bool,
             **settings: object) -> tuple[int, object]:
    """Windows flagged and the report; ``settings``: ``detect.*`` by name, or a dotted
    name of another group."""
    model = Reveal(overrides={"detect.significance": significance,
                              **{k if "." in k else f"detect.{k}": v
                                 for k, v in settings.items()}}).fit(base)
    report = model.report(run)
    return int(np.asarray(report.windows.flagged).sum()), report


def test_a_flat_channel_that_moves_by_what_does_not_matter_flags_nothing():
    """2 MB of transparent huge pages gone on a 24 GiB host: surprise alone flags it (the
    baseline never moved), the least change that matters does not."""
    base = ar1_host(120.0, seed=3)
    run = ar1_host(60.0, seed=4, start_s=200.0)
    base = _with(base, {"mem.AnonHugePages": np.full(base.n_samples, 2.0 * 2**20)})
    run = _with(run, {"mem.AnonHugePages": np.zeros(run.n_samples)})
    surprise, _ = _flagged(base, run, significance=False)
    matters, _ = _flagged(base, run, significance=True)
    assert surprise > 20  # the gate is what keeps it quiet
    assert matters == 0


def test_a_change_that_matters_is_flagged_and_leads_the_claim_before_its_side_effects():
    """CPU contention: busy % up 45 points, and the idle-state entries it causes leave a
    flat baseline. The claim names the CPU time; the idle-state entries come after."""
    base = ar1_host(120.0, seed=5)
    run = ar1_host(60.0, seed=6, fault=(20.0, 40.0), start_s=200.0)
    idle_base = np.cumsum(np.full(base.n_samples, 16.0))
    rate = np.full(run.n_samples, 16.0)
    rate[200:400] = 900.0  # entries per 100 ms sample while contended
    base = _with(base, {"cpuidle.usage{cpu=0,state=C1}": idle_base})
    run = _with(run, {"cpuidle.usage{cpu=0,state=C1}": np.cumsum(rate) + idle_base[-1]})
    flagged, report = _flagged(base, run, significance=True)
    assert flagged > 5
    inside = [a for a in report.anomalies if 21e9 + 200e9 <= a.start_ns < 38e9 + 200e9]
    assert inside
    leads = [a.reasons[0].metric for a in inside]
    assert all(m == "derived.cpu_busy_pct" for m in leads), leads
    clean = [a for a in report.anomalies if a.end_ns <= 200e9 + 19e9]
    assert not clean


def test_a_gpu_taken_by_another_process_is_named_by_the_gpus_time_not_a_process_spread():
    """A second process fills the GPU (kernel-active 5 % → 98 %) while the tenant's own
    per-process SM share, steady at 3 % ± 0.5, jumps about under NVML's time slicing. The
    claim names the GPU's kernel-active time by its level, not the process's spread."""
    base = ar1_host(120.0, seed=7)
    run = ar1_host(60.0, seed=8, start_s=200.0)
    rng = np.random.default_rng(9)
    proc = "gpu.proc.sm_util{cgroup=/job,comm=python3,gpu=0,pid=7}"
    busy = 5.0 + rng.normal(0, 1, run.n_samples)
    busy[200:400] = 98.0 + rng.normal(0, 0.5, 200)
    share = 3.0 + rng.normal(0, 0.5, run.n_samples)
    share[200:400] = rng.choice([3.0, 40.0, 98.0], 200)
    base = _with(base, {"gpu.kernel_active_pct{gpu=0}": 5.0 + rng.normal(0, 1, base.n_samples),
                        proc: 3.0 + rng.normal(0, 0.5, base.n_samples)})
    run = _with(run, {"gpu.kernel_active_pct{gpu=0}": busy, proc: share})
    flagged, report = _flagged(base, run, significance=True)
    assert flagged > 5
    inside = [a for a in report.anomalies if 23e9 + 200e9 <= a.start_ns < 37e9 + 200e9]
    assert inside
    leads = [(a.reasons[0].metric, a.reasons[0].feature) for a in inside]
    assert all(m == "gpu.kernel_active_pct" and f in ("mean", "median", "min", "max")
               for m, f in leads), leads


def test_a_level_that_settles_after_a_change_is_a_new_steady_state_named_once():
    """A process takes 3 GiB of anonymous memory at 20 s and keeps it: the change is
    flagged until it has held still for ``settle_s`` (here 20 s; by default five minutes,
    so that a fault holding memory keeps its episode), then named once as a new steady
    state."""
    base = ar1_host(120.0, seed=7)
    run = ar1_host(90.0, seed=8, start_s=200.0)
    rng = np.random.default_rng(9)
    anon_base = 8 * GIB + rng.normal(0, 2e6, base.n_samples)
    anon_run = 8 * GIB + rng.normal(0, 2e6, run.n_samples)
    anon_run[200:] += 3 * GIB
    base = _with(base, {"mem.AnonPages": anon_base})
    run = _with(run, {"mem.AnonPages": anon_run})
    _, held = _flagged(base, run, significance=True)  # the default: held, not adopted
    start = (np.asarray(held.windows.start_ns) - 200e9) / 1e9
    assert np.asarray(held.windows.flagged)[start >= 23].all() and not held.steady_states
    _, report = _flagged(base, run, significance=True, settle_s=20.0)
    flagged = np.asarray(report.windows.flagged)
    assert flagged[(start >= 18) & (start < 30)].any()  # the change itself is flagged
    assert not flagged[start >= 45].any()  # once settled, nothing more
    assert len(report.steady_states) == 1
    note = report.steady_states[0]
    assert note.changes[0][0] == "mem.AnonPages"
    assert "more than in the baseline" in note.claim and "steady since" in note.claim
    assert 17 <= (note.since_ns - 200e9) / 1e9 <= 24  # the first window that holds it
    again = type(report).from_dict(report.to_dict())
    assert again.steady_states[0].claim == note.claim


def test_a_rate_that_stays_different_is_never_adopted():
    """CPU busy 45 points higher from 20 s to the end: the job running differently stays
    flagged, however long it holds still."""
    base = ar1_host(120.0, seed=10)
    run = ar1_host(90.0, seed=11, fault=(20.0, 90.0), start_s=200.0)
    _, report = _flagged(_with(base, {}), _with(run, {}), significance=True)
    flagged = np.asarray(report.windows.flagged)
    start = (np.asarray(report.windows.start_ns) - 200e9) / 1e9
    assert flagged[start >= 45].mean() > 0.9
    assert not report.steady_states


def _window(reasons):
    from reveal.analysis.evidence import WindowEvidence

    return WindowEvidence(0, 0, 1, 10.0, ["Z"], ["cpu", "network"],
                          {"cpu": 0.6, "network": 0.4}, reasons)


def _reason(channel, feature, subsystem, value, median, z, contribution=0.1):
    from reveal.analysis.evidence import Reason
    from reveal.frame import channel_metric

    return Reason(channel, channel_metric(channel), feature, subsystem, contribution,
                  value, median, z)


BUSY, RETRANS = "derived.cpu_busy_pct{cpu=1}", "snmp.Tcp.RetransSegs{netns=job}"


def test_less_work_done_is_no_cause_when_a_rise_also_matters():
    """A job's CPU busy falling (where it waits) and retransmits rising (why), both
    changes that matter: the claim leads with the retransmits, in a CPU-led window."""
    from reveal.analysis.significance import lead_with_cause

    channels, features = [BUSY, RETRANS], ["median", "sum"]
    row = np.array([18.0, 3000.0])
    median = np.array([89.0, 500.0])
    least = np.array([5.0, 100.0])
    scale = np.array([10.0, 100.0])
    evidence = _window([_reason(BUSY, "median", "cpu", 18.0, 89.0, -7.1, 0.5),
                        _reason(RETRANS, "sum", "network", 3000.0, 500.0, 25.0, 0.2)])
    led = lead_with_cause(evidence, row, np.array([True, True]), least, scale, median,
                          channels, features, ["cpu", "network"])
    assert led.reasons[0].channel == RETRANS
    # CPU busy rising (another process took the CPU) stays a cause and leads its window
    row_up = np.array([100.0, 3000.0])
    evidence_up = _window([_reason(BUSY, "median", "cpu", 100.0, 89.0, 4.0, 0.5),
                           _reason(RETRANS, "sum", "network", 3000.0, 500.0, 25.0, 0.2)])
    led = lead_with_cause(evidence_up, row_up, np.array([True, True]), least, scale, median,
                          channels, features, ["cpu", "network"])
    assert led.reasons[0].channel == BUSY


def test_a_surprise_that_does_not_matter_does_not_lead_a_fall_that_does():
    """Only the CPU busy fall matters; the retransmit rate rose 5.9 robust sigmas but
    below its least change that matters, and a spread rose too. Neither names the cause:
    the fall leads (the job waits and nothing that matters shows why), the others follow
    in their order."""
    from reveal.analysis.significance import lead_with_cause

    channels, features = [BUSY, RETRANS], ["median", "mean"]
    row, median = np.array([18.0, 246.0]), np.array([89.0, 47.7])
    least, scale = np.array([5.0, 1e6]), np.array([10.0, 33.0])
    cells = np.array([True, False])
    spread = _reason("psi.cpu.some.total", "variance", "cpu", 1e10, 1e9, 24.0, 0.3)
    fall = _reason(BUSY, "median", "cpu", 18.0, 89.0, -7.1, 0.0)
    rise = _reason(RETRANS, "mean", "network", 246.0, 47.7, 5.9, 0.0)
    led = lead_with_cause(_window([rise, spread, fall]), row, cells, least, scale, median,
                          channels, features, ["cpu", "network"])
    assert [r.channel for r in led.reasons] == [BUSY, RETRANS, "psi.cpu.some.total"]
    assert led.subsystems[0] == "cpu"
    # the same rise where it matters is a cause and leads
    led = lead_with_cause(_window([fall, spread, rise]), row, np.array([True, True]),
                          np.array([5.0, 10.0]), scale, median, channels, features,
                          ["cpu", "network"])
    assert led.reasons[0].channel == RETRANS and led.subsystems[0] == "network"


def test_a_job_that_stopped_is_named_by_its_cpu_time_not_what_its_work_carried():
    """A hung job: its CPU time and its traffic both fall, both changes that matter, and
    nothing rose. The traffic fell further in least changes that matter, yet it only
    carried the work: the claim names the job's CPU time, and so does the window, even
    beside a rise that surprises but does not matter; with no CPU work among the falls,
    the largest leads."""
    from reveal.analysis.significance import lead_with_cause

    job, traffic = "cgroup.cpu.usage_usec{cgroup=job}", "net.rx_bytes{iface=eth0}"
    channels, features = [job, traffic], ["mean", "median"]  # each one's lasting level
    row, median = np.array([2e3, 1e5]), np.array([6e5, 1e8])
    least, scale = np.array([1e5, 1e7]), np.array([5e4, 5e6])
    cells = np.array([True, True])
    subsystems = ["cpu", "network"]
    cpu_fall = _reason(job, "mean", "cpu", 2e3, 6e5, -12.0, 0.2)
    net_fall = _reason(traffic, "median", "network", 1e5, 1e8, -19.0, 0.8)
    led = lead_with_cause(_window([net_fall, cpu_fall]), row, cells, least, scale, median,
                          channels, features, subsystems)
    assert led.reasons[0].channel == job and led.subsystems[0] == "cpu"
    assert led.subsystem_shares == {"cpu": 1.0}
    # a rise that surprises but does not matter (no column of it) names nothing
    rise = _reason(RETRANS, "mean", "network", 246.0, 47.7, 5.9, 0.0)
    led = lead_with_cause(_window([rise, net_fall, cpu_fall]), row, cells, least, scale,
                          median, channels, features, subsystems)
    assert led.reasons[0].channel == job
    led = lead_with_cause(_window([net_fall]), row[1:], cells[1:], least[1:], scale[1:],
                          median[1:], channels[1:], features[1:], subsystems[1:])
    assert led.reasons[0].channel == traffic


def test_a_stopped_job_on_a_cgroup_v1_host_is_named_by_its_cpu_time():
    """A hung job on a cgroup v1 host: its CPU time (``cpuacct``, as its v2 twin a fall of
    work), the host's page faults and page frees (a fall of memory-management work, a
    relief) all fall; the page cache's huge pages rise, surprising (a constant baseline)
    but never a cost on their own. The claim names the job's CPU time, not the largest
    fall and not the page cache; memory used rising where it matters goes first."""
    from reveal.analysis.significance import lead_with_cause

    job = "cgroup.cpuacct.usage_ns{cgroup=job}"
    channels = [job, "vmstat.pgfault", "vmstat.pgfree", "mem.FileHugePages"]
    features = ["mean", "median", "median", "mean"]
    row, median = np.array([3e8, 0.0, 0.0, 6.3e6]), np.array([1e9, 1.2e5, 1.2e5, 0.0])
    least, scale = np.array([1e8, 1e4, 1e4, np.inf]), np.array([5e7, 5e3, 5e3, 1.0])
    cells = np.array([True, True, True, False])
    subsystems = ["cpu", "memory", "memory", "memory"]
    cpu_fall = _reason(job, "mean", "cpu", 3e8, 1e9, -9.0, 0.2)
    faults = _reason("vmstat.pgfault", "median", "memory", 0.0, 1.2e5, -16.0, 0.3)
    frees = _reason("vmstat.pgfree", "median", "memory", 0.0, 1.2e5, -16.0, 0.3)
    cache = _reason("mem.FileHugePages", "mean", "memory", 6.3e6, 0.0, 1e6, 0.2)
    led = lead_with_cause(_window([cache, frees, faults, cpu_fall]), row, cells, least,
                          scale, median, channels, features, subsystems)
    assert led.reasons[0].channel == job and led.subsystems[0] == "cpu"
    # memory taken (a populating allocation starves the job of CPU too): a rise that
    # matters, and it leads
    used = _reason("derived.mem_used_pct", "median", "memory", 9.3, 4.3, 23.8, 0.1)
    led = lead_with_cause(_window([cache, frees, faults, cpu_fall, used]),
                          np.append(row, 9.3), np.append(cells, True), np.append(least, 1.0),
                          np.append(scale, 0.2), np.append(median, 4.3),
                          [*channels, "derived.mem_used_pct"], [*features, "median"],
                          [*subsystems, "memory"])
    assert led.reasons[0].channel == "derived.mem_used_pct" and led.subsystems[0] == "memory"


def test_a_window_is_attributed_among_the_subsystems_whose_change_matters():
    """The CPU fall is no cause while the retransmits rise: the window the detectors gave
    60 % to CPU is attributed to the network, where its claim is, and its shares still sum
    as before. Changes that last through the window (medians) outweigh bursts (sums); where
    several subsystems hold lasting changes, each takes a share by the size of its largest
    in least changes that matter, so the subsystem named is the claim's; a window where
    nothing has a size keeps the detectors' shares."""
    from reveal.analysis.significance import attribute_to_changes, lead_with_cause

    channels, features = [BUSY, RETRANS], ["median", "sum"]
    row, median = np.array([18.0, 3000.0]), np.array([89.0, 500.0])
    least, scale = np.array([5.0, 100.0]), np.array([10.0, 100.0])
    evidence = _window([_reason(BUSY, "median", "cpu", 18.0, 89.0, -7.1, 0.5),
                        _reason(RETRANS, "sum", "network", 3000.0, 500.0, 25.0, 0.2)])
    led = lead_with_cause(evidence, row, np.array([True, True]), least, scale, median,
                          channels, features, ["cpu", "network"])
    assert led.subsystems[0] == "network" and led.reasons[0].subsystem == "network"
    assert sum(led.subsystem_shares.values()) == pytest.approx(1.0)
    assert set(led.subsystem_shares) == {"network"}
    row_up = np.array([100.0, 3000.0])
    led = lead_with_cause(evidence, row_up, np.array([True, True]), least, scale, median,
                          channels, features, ["cpu", "network"])
    assert led.subsystems == ["cpu", "network"] and led.reasons[0].channel == BUSY
    # a busy CPU all window long outweighs the retransmits' burst (a sum, no median)
    assert led.subsystem_shares == {"cpu": 1.0}
    # the retransmits are read once a second: their mean is the level that lasts
    both = lead_with_cause(evidence, row_up, np.array([True, True]), least, scale, median,
                           channels, ["median", "mean"], ["cpu", "network"])
    # CPU busy 11 points over a least change of 5, retransmits 2,500 over 100: 2.2 and 25
    assert both.subsystem_shares == pytest.approx({"cpu": 2.2 / 27.2, "network": 25 / 27.2})
    assert both.subsystems[0] == both.reasons[0].subsystem == "network"
    held_median = lead_with_cause(evidence, row_up, np.array([True, True]), least, scale,
                                  median, channels, ["median", "median"], ["cpu", "network"])
    assert held_median.subsystem_shares == {"cpu": 1.0}  # 0 between reads: says nothing
    assert attribute_to_changes(evidence, {"gpu": 0.0}) is evidence


DIRTIED = "vmstat.nr_dirtied"
LOST = "netstat.TcpExt.TCPLostRetransmit{netns=job}"


def test_a_change_that_begins_within_the_window_and_holds_is_a_lasting_one():
    """A fault's first window: the pages dirtied ramp up through it (the mean moved by
    more than the channel's median must, and the slope the same way; the median not yet,
    and under sustained significance only the median may matter), while a lost
    retransmission count, read once a second, moved its mean: the ramp leads in the
    subsystem it weighs most, as a change that lasts would. A mean that rose while the
    slope fell (a burst that is over) is no onset and yields to the lasting count."""
    from reveal.analysis.evidence import WindowEvidence
    from reveal.analysis.significance import lead_with_cause, onset_columns

    channels = [DIRTIED, DIRTIED, DIRTIED, LOST]
    features = ["mean", "slope", "median", "mean"]
    subsystems = ["memory", "memory", "memory", "network"]
    median = np.array([30.0, 0.0, 0.0, 0.0])
    least = np.array([np.inf, np.inf, 2500.0, 1.0])
    scale = np.array([100.0, 5.0, 100.0, 0.5])
    cells = np.array([False, False, False, True])
    evidence = WindowEvidence(0, 0, 1, 10.0, ["Z"], ["memory", "network"],
                              {"memory": 0.8, "network": 0.2},
                              [_reason(LOST, "mean", "network", 15.0, 0.0, 30.0, 0.1),
                               _reason(DIRTIED, "mean", "memory", 59300.0, 30.0, 1000.0)])
    ramp = np.array([59300.0, 5530.0, 160.0, 15.0])
    onset, sized = onset_columns(ramp, median, scale, least, channels, features)
    assert onset.tolist() == [True, False, False, False]
    assert sized[0] == 2500.0 and np.isinf(sized[1])  # the mean sized as the median
    led = lead_with_cause(evidence, ramp, cells, least, scale, median, channels, features,
                          subsystems)
    assert (led.reasons[0].channel, led.reasons[0].feature) == (DIRTIED, "mean")
    assert led.subsystems[0] == "memory"
    for over in (np.array([59300.0, -5530.0, 160.0, 15.0]),  # the slope fell: it is over
                 np.array([2000.0, 5530.0, 160.0, 15.0])):  # less than the median must
        assert not onset_columns(over, median, scale, least, channels, features)[0].any()
        led = lead_with_cause(evidence, over, cells, least, scale, median, channels,
                              features, subsystems)
        assert led.reasons[0].channel == LOST and led.subsystems[0] == "network"


def test_idle_time_falls_as_another_state_rises_and_never_names_the_cause():
    """A disk burst's writer: CPU 0's idle time falls to 0 while its iowait and its time
    in softirqs rise (all by more than matters) and the disk's writes rise: the writes
    lead; the waiting, then the idle and softirq time follow."""
    from reveal.analysis.evidence import WindowEvidence
    from reveal.analysis.significance import lead_with_cause

    idle, iowait, soft = "cpu.idle{cpu=0}", "cpu.iowait{cpu=0}", "cpu.softirq{cpu=0}"
    writes = "disk.writes_completed{dev=vda}"
    channels, features = [idle, iowait, soft, writes], ["median"] * 4
    row, median = np.array([0.0, 80.0, 15.0, 3600.0]), np.array([100.0, 0.0, 0.0, 0.0])
    least, scale = np.array([5.0, 5.0, 5.0, 50.0]), np.array([10.0, 1.0, 1.0, 10.0])
    evidence = WindowEvidence(0, 0, 1, 10.0, ["Z"], ["cpu", "storage"],
                              {"cpu": 0.7, "storage": 0.3},
                              [_reason(idle, "median", "cpu", 0.0, 100.0, -10.0, 0.4),
                               _reason(soft, "median", "cpu", 15.0, 0.0, 15.0, 0.35),
                               _reason(iowait, "median", "cpu", 80.0, 0.0, 80.0, 0.3),
                               _reason(writes, "median", "storage", 3600.0, 0.0, 360.0)])
    led = lead_with_cause(evidence, row, np.ones(4, dtype=bool), least, scale, median,
                          channels, features, ["cpu", "cpu", "cpu", "storage"])
    assert [r.channel for r in led.reasons] == [writes, iowait, idle, soft]
    assert led.subsystems[0] == "storage"


def test_time_stolen_by_the_hypervisor_is_waiting_and_follows_the_use():
    """A flood of datagrams keeps a virtual CPU busy and the hypervisor takes some of its
    runnable time: the datagrams lead, the stolen time follows. Stolen time alone (a
    neighbour on the physical host) still leads."""
    from reveal.analysis.evidence import WindowEvidence
    from reveal.analysis.significance import is_waiting, lead_with_cause

    assert is_waiting("cpu.steal")
    steal, udp = "cpu.steal{cpu=1}", "snmp.Udp.OutDatagrams{netns=job}"
    channels, features = [steal, udp], ["median", "mean"]
    row, median = np.array([12.0, 20_000.0]), np.array([0.3, 0.0])
    least, scale = np.array([10.0, 833.0]), np.array([1.0, 1.0])
    evidence = WindowEvidence(0, 0, 1, 10.0, ["Z"], ["cpu", "network"],
                              {"cpu": 0.8, "network": 0.2},
                              [_reason(steal, "median", "cpu", 12.0, 0.3, 11.7, 0.8),
                               _reason(udp, "mean", "network", 20_000.0, 0.0, 1000.0, 0.2)])
    led = lead_with_cause(evidence, row, np.ones(2, dtype=bool), least, scale, median,
                          channels, features, ["cpu", "network"])
    assert [r.channel for r in led.reasons] == [udp, steal]
    assert led.subsystems[0] == "network"
    alone = lead_with_cause(evidence, row, np.array([True, False]), least, scale, median,
                            channels, features, ["cpu", "network"])
    assert alone.reasons[0].channel == steal and alone.subsystems[0] == "cpu"


@pytest.mark.parametrize("kernel", [True, False])
def test_a_busy_rise_made_of_kernel_time_is_the_memory_s_it_served(kernel):
    """A process populates 4 GiB on a 2-CPU host: one CPU is busy for seconds zeroing pages
    in kernel mode (host busy 50 -> 100 %, the second CPU 0 -> 100 %, kernel time up 100
    ticks/s) while memory used climbs 3.3 of its least changes. Kernel time follows what
    it serves (catalog ``follows``): memory leads, the CPUs' rise is sized by the tasks'
    own work (none). The same rise in user mode (kernel time as before) is the CPU's (a
    hog), and leads."""
    from reveal.analysis.evidence import WindowEvidence
    from reveal.analysis.served import served_share
    from reveal.analysis.significance import lead_with_cause

    host, one, used = "derived.cpu_busy_pct", "derived.cpu_busy_pct{cpu=r1}", \
        "derived.mem_used_pct"
    channels, features = [host, one, used], ["median"] * 3
    row, median = np.array([100.0, 100.0, 7.3]), np.array([50.0, 0.0, 4.0])
    least, scale = np.array([5.0, 10.0, 1.0]), np.array([5.0, 5.0, 0.4])
    evidence = WindowEvidence(0, 0, 1, 10.0, ["Z"], ["cpu", "memory"],
                              {"cpu": 0.7, "memory": 0.3},
                              [_reason(host, "median", "cpu", 100.0, 50.0, 10.0, 0.4),
                               _reason(one, "median", "cpu", 100.0, 0.0, 20.0, 0.3),
                               _reason(used, "median", "memory", 7.3, 4.0, 8.2, 0.2)])
    cells, subsystems = np.ones(3, dtype=bool), ["cpu", "cpu", "memory"]
    ticks = 100.0 if kernel else 0.0
    served = served_share(channels, features, ticks, n_cpus=2)
    assert served.tolist() == ([50.0, 100.0, 0.0] if kernel else [0.0] * 3)
    led = lead_with_cause(evidence, row, cells, least, scale, median, channels, features,
                          subsystems, n_cpus=2, kernel_ticks=ticks)
    assert led.subsystems[0] == ("memory" if kernel else "cpu")
    assert led.reasons[0].channel == (used if kernel else host)
    # the host's CPU count unknown: the rise cannot be split, and the CPU leads as before
    unknown = lead_with_cause(evidence, row, cells, least, scale, median, channels,
                              features, subsystems, kernel_ticks=ticks)
    assert unknown.subsystems[0] == "cpu"


def test_the_kernel_time_s_rise_is_read_from_the_run_whatever_columns_the_model_kept():
    """The baseline's level of kernel and interrupt time (host-wide ``cpu.system``,
    ``cpu.irq``, ``cpu.softirq``: the busy states the catalog says follow) is the median of
    its window means; a window's rise is its mean over that, never below 0. Per-CPU states
    and user time are not part of it."""
    from reveal.analysis.served import kernel_level, kernel_rise, kernel_states
    from reveal.frame import Telemetry

    assert set(kernel_states()) == {"cpu.system", "cpu.irq", "cpu.softirq"}
    n = 60
    system = np.full(n, 10.0)
    system[30:40] = 110.0  # 1 s of a CPU in kernel mode
    channels = ["cpu.system", "cpu.softirq", "cpu.user", "cpu.system{cpu=0}"]
    values = np.column_stack([system, np.full(n, 2.0), np.full(n, 90.0), system])
    tel = Telemetry("h", np.arange(n, dtype=np.int64) * 100_000_000, values, channels)
    starts = tel.timestamps_ns[::10]
    level = kernel_level(tel, starts, 10)
    assert level == 12.0
    rise = kernel_rise(tel, starts, 10, level)
    assert rise.tolist() == [0.0, 0.0, 0.0, 100.0, 0.0, 0.0]
    quiet = kernel_rise(tel, starts, 10, 200.0)
    assert quiet.tolist() == [0.0] * 6
    assert kernel_rise(tel, starts, 10, None).tolist() == [0.0] * 6
    none = Telemetry("h", tel.timestamps_ns, values[:, 2:3], ["cpu.user"])
    assert kernel_level(none, starts, 10) is None


def _held(rate_per_s: np.ndarray, every: int, start: float = 0.0) -> np.ndarray:
    """A counter at ``rate_per_s`` (per 100 ms sample) read every ``every`` samples and
    repeated between reads, as the collector records a cgroup's or a namespace's files."""
    true = start + np.cumsum(rate_per_s * 0.1)
    read = np.arange(true.size) // every * every
    return true[read]


def test_counters_read_less_often_than_every_sample_are_known_by_name():
    from reveal.analysis.significance import is_held_counter

    assert is_held_counter("snmp.Udp.OutDatagrams{netns=job}")
    assert is_held_counter("netstat.TcpExt.TCPFastRetrans{netns=job}")
    assert is_held_counter("cgroup.cpu.usage_usec{cgroup=job}")
    assert not is_held_counter("snmp.Udp.OutDatagrams")  # the host's: every tick
    assert not is_held_counter("cgroup.memory.current{cgroup=job}")  # a gauge repeats well
    assert not is_held_counter("net.tx_packets{iface=eth0}")


def test_a_held_counters_mean_is_its_lasting_level_under_sustained():
    features = ["mean", "median", "sum", "max"]
    channel = "snmp.Udp.OutDatagrams{netns=job}"
    least = feature_matters([channel] * 4, features, {channel: Matter(10.0, "")},
                            rows_per_window=30, sustained=True)
    assert least[[0, 2]] == pytest.approx([10.0, 300.0])  # its median is 0 between reads
    assert np.isinf(least[[1, 3]]).all()
    plain = feature_matters(["a"] * 4, features, {"a": Matter(10.0, "")},
                            rows_per_window=30, sustained=True)
    assert np.isinf(plain[[0, 3]]).all() and plain[1] == pytest.approx(10.0)


def test_a_flood_on_a_counter_read_every_second_is_named_by_that_counter():
    """A UDP flood out of the job's network namespace, whose counters the collector reads
    once a second: the rate is 0 on nine samples of ten, so the window's median never
    moves. The flood is still the change that matters and leads the claim; the CPU time
    it costs follows."""
    base = ar1_host(120.0, seed=7)
    run = ar1_host(60.0, seed=8, fault=(20.0, 40.0), start_s=200.0)
    flood = np.zeros(run.n_samples)
    flood[200:400] = 200_000.0  # datagrams per second
    channel = "snmp.Udp.OutDatagrams{netns=job}"
    base = _with(base, {channel: _held(np.zeros(base.n_samples), 10)})
    run = _with(run, {channel: _held(flood, 10)})
    flagged, report = _flagged(base, run, significance=True)
    assert flagged > 5
    inside = [a for a in report.anomalies if 22e9 + 200e9 <= a.start_ns < 37e9 + 200e9]
    assert inside
    assert sum(a.reasons[0].channel == channel for a in inside) >= len(inside) / 2, \
        [a.reasons[0].channel for a in inside]
    assert any("datagrams" in e.claim for e in report.episodes)


def test_a_burst_like_the_baselines_own_is_no_change_that_matters():
    """A distributed job's retransmissions on a busy host: 3/s most of the time, bursts of
    120/s now and then. Where the learn's bursts are left out of the fit (the watch's
    trim) the detectors find the next burst surprising; one no larger than the learn's is
    no change that matters. Loss beyond the baseline's tail still is."""
    from reveal.analysis.pipeline import significant_cells_of
    from reveal.analysis.significance import tail_matters

    channel = "snmp.Tcp.RetransSegs{netns=job}"
    values = np.column_stack([np.r_[np.full(95, 3.0), np.full(5, 60.0)], np.zeros(100)])
    least = tail_matters(np.array([1.0, 1.0]), [channel, "snmp.Tcp.OutSegs{netns=job}"],
                         values)
    assert least[0] == pytest.approx(57.0, abs=0.1) and least[1] == 1.0

    def retransmits(seconds: float, bursts: list[tuple[float, float, float]]) -> np.ndarray:
        rate = np.full(int(seconds * 10), 3.0)
        for start, end, level in bursts:
            rate[int(start * 10):int(end * 10)] = level
        return _held(rate, 10)

    base = ar1_host(240.0, seed=11)
    base = _with(base, {channel: retransmits(240.0, [(s, s + 1.0, 120.0)
                                                       for s in (40.0, 100.0, 160.0, 220.0)])})
    model = Reveal(overrides={"detect.significance": True}).fit(base)
    columns = np.array([c == channel for c in model.fitted_.column_channels])

    def mattering(run: Telemetry) -> int:
        cells = significant_cells_of(model.fitted_, model.score_windows(run).features.values)
        return int(cells[:, columns].any(axis=1).sum())

    def flagged_by_it(run: Telemetry) -> int:
        """Flagged windows (anomalies) with the retransmissions among their reasons."""
        return sum(any(r.channel == channel for r in a.reasons)
                   for a in model.report(run).anomalies)

    like = _with(ar1_host(60.0, seed=12, start_s=300.0),
                 {channel: retransmits(60.0, [(20.0, 21.0, 100.0)])})
    assert mattering(like) == 0 and flagged_by_it(like) == 0
    loss = _with(ar1_host(60.0, seed=13, start_s=400.0),
                 {channel: retransmits(60.0, [(20.0, 40.0, 400.0)])})
    # an error count is no use of the job's: as a level it never matters alone (its cost
    # is CPU time), and its sign, past the baseline's own bursts, flags the loss
    assert mattering(loss) == 0
    assert flagged_by_it(loss) > 10


def test_memory_freed_is_no_change_that_matters_and_memory_taken_is():
    """The job releases 2 GiB of anonymous memory for 20 s (8 % of a 24 GiB host): the
    host loses nothing, so nothing is flagged; 2 GiB taken is flagged and named."""
    rng = np.random.default_rng(21)

    def memory(tel: Telemetry, change: float) -> Telemetry:
        step = np.zeros(tel.n_samples)
        step[200:400] = change  # 20 s to 40 s into the run
        return _with(tel, {"mem.AnonPages": 2 * GIB + step
                           + rng.normal(0.0, 4e6, tel.n_samples)})

    base = memory(ar1_host(120.0, seed=21), 0.0)
    freed = memory(ar1_host(60.0, seed=22, start_s=200.0), -2 * GIB)
    taken = memory(ar1_host(60.0, seed=23, start_s=300.0), 2 * GIB)
    assert _matter("mem.AnonPages").rule.endswith("a rise only (a fall frees memory)")
    assert _matter("mem.MemAvailable").rule.endswith("a fall only (a rise frees memory)")
    surprise, _ = _flagged(base, freed, significance=False)
    assert surprise > 10  # 2 GiB gone is surprising; it does not matter
    flagged, _ = _flagged(base, freed, significance=True)
    assert flagged == 0
    flagged, report = _flagged(base, taken, significance=True)
    assert flagged > 10
    assert {a.reasons[0].metric for a in report.anomalies} == {"mem.AnonPages"}


def test_an_allocation_is_named_by_its_memory_not_the_kernel_time_that_zeroes_it():
    """A process takes 4 GiB over 10 s (17 % of a 24 GiB host) and keeps it; while its pages
    are faulted in, the kernel spends one of the two CPUs zeroing them. Kernel time follows
    what the kernel serves, as interrupt time does: every window of the allocation is named
    by its memory, the kernel time among its reasons."""
    rng = np.random.default_rng(31)

    def host(tel: Telemetry, taken: bool) -> Telemetry:
        n = tel.n_samples
        anon = np.full(n, 2.0 * GIB)
        kernel = np.full(n, 2.0)  # USER_HZ ticks per 100 ms sample: 20 % of a CPU
        if taken:
            anon[200:300] += np.linspace(0.0, 4.0 * GIB, 100)
            anon[300:] += 4.0 * GIB
            kernel[200:300] = 12.0  # 1.2 CPUs
        return _with(tel, {"mem.AnonPages": anon + rng.normal(0.0, 4e6, n),
                           "cpu.system": np.cumsum(kernel + rng.normal(0.0, 0.3, n))})

    base = host(ar1_host(120.0, seed=31), taken=False)
    run = host(ar1_host(60.0, seed=32, start_s=200.0), taken=True)
    flagged, report = _flagged(base, run, significance=True)
    assert flagged > 5
    growing = [a for a in report.anomalies if a.start_ns < 230e9]
    assert growing
    assert {a.reasons[0].metric for a in growing} == {"mem.AnonPages"}
    assert all(a.subsystems[0] == "memory" for a in growing)
    assert any(r.metric == "cpu.system" for a in growing for r in a.reasons)


def test_the_direction_that_matters_applies_to_levels_and_trends_not_spreads():
    from reveal.analysis.significance import matter_directions, significant_cells

    channels = ("mem.AnonPages", "mem.AnonPages", "mem.AnonPages", "mem.MemAvailable",
                "derived.cpu_busy_pct")
    features = ("median", "slope", "variance", "median", "median")
    direction = matter_directions(channels, features)
    # the host's own work done matters when it rises (a neighbour that stopped is no
    # fault); the job's own and a GPU's either way
    assert direction.tolist() == [1, 1, 0, -1, 1]
    assert matter_directions(("derived.cpu_busy_pct{cgroup=job}", "gpu.sm_active_pct{gpu=0}",
                              "cgroup.cpu.usage_usec{cgroup=job}"),
                             ("median",) * 3).tolist() == [0, 0, 0]
    # traffic that yields when it competes: only less of it matters; datagrams either way
    traffic = matter_directions(("derived.net_bytes_per_s{iface=eth0,netns=job}",
                                 "net.tx_bytes{iface=eth0}", "snmp.Tcp.OutSegs{netns=job}",
                                 "snmp.Udp.OutDatagrams{netns=job}",
                                 "snmp.Tcp.RetransSegs{netns=job}"), ("median",) * 5)
    assert traffic.tolist() == [-1, -1, -1, 0, 1]
    assert _matter("net.tx_bytes{iface=eth0}").rule.endswith(
        "a fall only (more traffic alone hurts no one)")
    # waiting and the kernel's memory-management work (catalog fall = "relief"): less of it
    # is no slowdown, so only a rise matters, a level's and a trend's; a spread either way
    relief = ("psi.cpu.some_avg10", "cgroup.cpu.nr_throttled{cgroup=job}",
              "vmstat.pgmajfault", "psi.cpu.some_avg10")
    assert matter_directions(relief, ("median", "median", "slope", "variance")).tolist() \
        == [1, 1, 1, 0]
    assert _matter("vmstat.pgmajfault").rule.endswith(
        "a rise only (less of it is no slowdown)")
    median = np.array([10.0, 0.0, 1.0, 10.0, 10.0])
    least = np.ones(5)
    fell = np.array([[5.0, -5.0, 9.0, 5.0, 5.0]])
    rose = np.array([[15.0, 5.0, 9.0, 15.0, 15.0]])
    assert significant_cells(fell, median, np.zeros(5), least,
                             direction=direction)[0].tolist() == [False, False, True, True, False]
    assert significant_cells(rose, median, np.zeros(5), least,
                             direction=direction)[0].tolist() == [True, True, True, False, True]


def test_the_floors_table_shows_where_the_baselines_bursts_raised_the_least_change():
    from reveal.report.floors_text import render_floors

    channel = "snmp.Tcp.RetransSegs{netns=job}"
    rate = np.full(2400, 3.0)
    for start in (400, 1000, 1600, 2200):
        rate[start:start + 10] = 120.0
    base = _with(ar1_host(240.0, seed=11), {channel: _held(rate, 10)})
    # a retransmission's CPU cost set so small that the least change (5/s) lies under the
    # baseline's bursts (120/s): the table says the bursts raised it
    cheap = {"significance.one_cpu_share": 1e-5}
    text = render_floors(Reveal(overrides={"detect.past_baseline": False, **cheap})
                         .fit(base).fitted_)
    line = next(x for x in text.splitlines() if channel in x)
    assert "raised to" in line and "baseline's own bursts" in line
    assert not any("raised to" in x for x in text.splitlines() if "mem." in x)
    # measured past the baseline's reach, the bursts are that reach, not a raised least
    text = render_floors(Reveal(overrides=cheap).fit(base).fitted_)
    line = next(x for x in text.splitlines() if channel in x)
    assert "raised to" not in line and "past the baseline's reach +" in line
    dirty = next(x for x in text.splitlines() if x.split()[0] == "mem.Dirty")
    assert "past the baseline's reach +" in dirty  # the levels its AR(1) wander reached


def test_a_level_that_matters_is_flagged_where_the_detectors_average_it_away():
    """1 GiB taken for 20 s (4 % of a 24 GiB host) in one channel among hundreds of noisy
    ones: the detectors' scores average its 20+ σ away in part of the windows, yet the
    change matters and stands far from the baseline, so every window inside the step is
    flagged and named by it."""

    rng = np.random.default_rng(31)

    def host(tel: Telemetry, change: float) -> Telemetry:
        step = np.zeros(tel.n_samples)
        step[200:400] = change  # 20 s to 40 s into the run
        noise = {f"tenant.noise{{i={i}}}": rng.normal(0.0, 1.0, tel.n_samples)
                 for i in range(300)}
        return _with(tel, {"mem.AnonPages": 2 * GIB + step
                           + rng.normal(0.0, 4e6, tel.n_samples), **noise})

    def inside(report) -> list:
        return [a for a in report.anomalies
                if a.start_ns >= 200e9 + 20e9 and a.end_ns <= 200e9 + 40e9]

    base = host(ar1_host(120.0, seed=31), 0.0)
    run = host(ar1_host(60.0, seed=32, start_s=200.0), 1 * GIB)
    _, report = _flagged(base, run, significance=True)
    assert len(inside(report)) >= 15  # windows of 3 s every 1 s wholly inside the 20 s
    assert {a.reasons[0].metric for a in inside(report)} == {"mem.AnonPages"}
    assert not [a for a in report.anomalies if a.end_ns <= 200e9 + 19e9]
    # the detectors alone (the rule before a change that matters decided on its own,
    # with no level that stands alone either)
    _, averaged = _flagged(base, run, significance=True, matters_alone=False,
                           **{"significance.level_alone_z": 1e9})
    assert len(inside(averaged)) < len(inside(report)) - 5


def test_level_tails_reach_from_the_median_to_the_baselines_own_quantiles():
    from reveal.analysis.significance import level_tails

    values = np.zeros((200, 3))
    values[:10, 0] = 50.0  # a level resting at 0 that bursts in 5 % of the windows
    values[:, 1] = np.linspace(-1.0, 1.0, 200)
    values[:10, 2] = 50.0  # the same, in a column that is not a typical level
    tails = level_tails(values, ("median", "mean", "max"))
    assert tails[0, 0] == 50.0 and tails[1, 0] == 0.0
    assert tails[0, 1] == pytest.approx(0.98, abs=0.01) == tails[1, 1]
    assert tails[:, 2].tolist() == [0.0, 0.0]


def test_a_change_is_measured_past_the_level_the_baseline_itself_reached():
    from reveal.analysis.significance import significant_cells

    median, scale, least = np.zeros(2), np.full(2, 1_000.0), np.full(2, 100_000.0)
    reach = np.array([[100_000.0, 100_000.0], [0.0, 0.0]])  # bursts to 100k in the baseline
    values = np.array([[120_000.0, 0.0], [210_000.0, 0.0], [0.0, -150_000.0]])
    from_median = significant_cells(values, median, scale, least)
    past = significant_cells(values, median, scale, least, reach=reach)
    assert from_median[:, 0].tolist() == [True, True, False]
    assert past[:, 0].tolist() == [False, True, False]  # 20k past its bursts; 110k past
    assert past[2, 1] and from_median[2, 1]  # the baseline never went below: from the median


def test_a_level_that_bursts_in_the_baseline_is_no_change_until_it_goes_far_past_its_bursts():
    """Page faults resting at 0/s that burst to 60k/s for 3 s in about one window in ten
    of the baseline: a 10 s burst to 120k/s, among hundreds of noisy channels, is 60k/s
    past the baseline's own bursts, less than the least rate that matters (the faults
    that cost a tenth of a CPU); measured from the baseline's median (0/s) it is more."""
    rng = np.random.default_rng(41)

    def host(tel: Telemetry, bursts: list[tuple[int, float]]) -> Telemetry:
        rate = np.zeros(tel.n_samples)
        for start, level in bursts:
            rate[start:start + (30 if level < 1e5 else 100)] = level
        noise = {f"tenant.noise{{i={i}}}": rng.normal(0.0, 1.0, tel.n_samples)
                 for i in range(300)}
        return _with(tel, {"vmstat.pgfault": np.cumsum(rate * 0.1), **noise})

    base = host(ar1_host(300.0, seed=41), [(s, 60_000.0) for s in range(100, 3000, 300)])
    run = host(ar1_host(60.0, seed=42, start_s=300.0), [(200, 120_000.0)])

    def by_faults(past: bool) -> list:
        model = Reveal(overrides={"detect.past_baseline": past}).fit(base)
        return [a for a in model.report(run).anomalies
                if a.reasons[0].metric == "vmstat.pgfault"]

    assert len(by_faults(False)) >= 5  # from the median: the burst is a change that matters
    assert by_faults(True) == []


def test_a_count_the_baseline_reached_now_and_then_is_no_change_in_a_surprising_window():
    """A job's namespace sends 45 UDP datagrams at once every minute or so (a heartbeat),
    in the baseline as in the run; in the run one such burst falls in windows that are
    surprising for a reason that does not matter (2 MB of huge pages gone). Counted from
    the baseline's median (0) the 45 sent are a change that matters (a quarter of the
    job's own use) and those windows are flagged; counted past the baseline's own reach
    (45 in a window) they are not."""
    channel = "snmp.Udp.OutDatagrams{netns=job}"

    def losses(seconds: float, at: list[float]) -> np.ndarray:
        rate = np.zeros(int(seconds * 10))
        for t in at:
            rate[int(t * 10)] = 450.0  # 45 in one 100 ms sample
        return _held(rate, 10)

    base = ar1_host(600.0, seed=51)
    base = _with(base, {channel: losses(600.0, list(np.arange(20.0, 590.0, 53.0))),
                        "mem.AnonHugePages": np.full(base.n_samples, 2.0 * 2**20)})
    run = ar1_host(60.0, seed=52, start_s=700.0)
    run = _with(run, {channel: losses(60.0, [30.0]),
                      "mem.AnonHugePages": np.zeros(run.n_samples)})

    def flagged(past: bool) -> int:
        model = Reveal(overrides={"detect.past_baseline": past}).fit(base)
        return int(np.asarray(model.report(run).windows.flagged).sum())

    assert flagged(False) >= 1
    assert flagged(True) == 0


def test_every_reason_is_sized_by_the_model_that_decided():
    """The claim's change, absent from the detectors' top reasons (share 0), leads and is
    sized in least changes that matter, as is every other change that matters, largest
    first; a change that does not matter keeps its share of the surprise only. Text and
    HTML show the size where there is one."""
    from reveal.analysis.significance import lead_with_cause
    from reveal.report.html_cards import gather
    from reveal.report.schema import Anomaly
    from reveal.report.text import evidence as evidence_text

    disk, discard = "derived.disk_util_pct{dev=vda}", "disk.time_discarding_ms{dev=vda}"
    channels = [disk, discard, BUSY, RETRANS]
    features = ["median", "variance", "median", "sum"]
    row = np.array([72.0, 9.0, 60.0, 900.0])
    median = np.array([0.0, 1.0, 40.0, 500.0])
    least = np.array([5.0, 25.0, 10.0, 100.0])
    scale = np.array([1.0, 1.0, 5.0, 50.0])
    cells = np.array([True, False, True, True])  # the discards' spread is no change that matters
    evidence = _window([_reason(discard, "variance", "storage", 9.0, 1.0, 30.0, 0.6),
                        _reason(RETRANS, "sum", "network", 900.0, 500.0, 8.0, 0.1),
                        _reason(BUSY, "median", "cpu", 60.0, 40.0, 4.0, 0.3)])
    led = lead_with_cause(evidence, row, cells, least, scale, median, channels, features,
                          ["storage", "storage", "cpu", "network"])
    sizes = [(r.channel, r.matters) for r in led.reasons]
    assert sizes[0] == (disk, pytest.approx(72.0 / 5.0))  # the claim's, though share 0
    assert [c for c, _ in sizes] == [disk, RETRANS, BUSY, discard]  # 14.4, 4, 2, none
    assert sizes[1][1] == pytest.approx(4.0) and sizes[2][1] == pytest.approx(2.0)
    assert sizes[3][1] is None
    anomaly = Anomaly(0, 0, 1, 10.0, ["Z"], led.subsystems, led.subsystem_shares,
                      led.reasons, "claim")
    shown = evidence_text(anomaly, n=4)
    assert shown[0].endswith("(14× what matters)") and shown[1].endswith("(4× what matters)")
    assert shown[3].endswith("(60% of the surprise)")
    assert [r.channel for r, _ in gather([anomaly])] == [disk, RETRANS, BUSY, discard]


def test_a_hung_job_is_flagged_by_its_cpu_time_read_twice_a_second():
    """A job busy on one CPU whose processes all stop for 40 s: its cgroup's CPU time, read
    every 0.5 s and repeated between reads, falls to zero. Judged by chance over a window's
    30 samples (σ/√n of 0 between reads and 5 CPUs' worth on them) the fall stood under
    3 σ and was never flagged on a 90 s baseline; one read's worth is the floor of such a
    mean, and the hang is flagged throughout. A window that loses one read at its edge (a
    read late by a sample) is no hang."""
    channel = "cgroup.cpuacct.usage_ns{cgroup=job}"
    base = ar1_host(90.0, seed=21)
    run = ar1_host(90.0, seed=22, start_s=200.0)
    late = _held(np.full(run.n_samples, 1e9), 5)  # ns per second: one CPU
    late[301:306] = late[300]  # one read 0.1 s late, twice: no hang
    late[601:606] = late[600]
    clean = _with(run, {channel: late})
    hung_rate = np.full(run.n_samples, 1e9)
    hung_rate[300:700] = 0.0  # 30 s to 70 s
    hung = _with(run, {channel: _held(hung_rate, 5)})
    base = _with(base, {channel: _held(np.full(base.n_samples, 1e9), 5)})
    model = Reveal(overrides={"detect.significance": True}).fit(base)
    assert not np.asarray(model.report(clean).windows.flagged).any()
    report = model.report(hung)
    start = (np.asarray(report.windows.start_ns) - 200e9) / 1e9
    flagged = np.asarray(report.windows.flagged)
    inside = (start >= 30.0) & (start + 3.0 <= 70.0)
    assert flagged[inside].mean() >= 0.9, flagged[inside].astype(int)
    assert not flagged[start + 3.0 < 30.0].any()
    assert report.episodes and report.episodes[0].subsystem == "cpu"
