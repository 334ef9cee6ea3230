"""The simulated fleet: plans, a tiny fleet really recorded here (root), its alignment and
ground truth, the synthetic bootstrap hosts, and the cgroup throttling fault."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from tests.synthetic import ar1_host

from reveal.errors import RevealError
from reveal.frame import channel_metric
from reveal.inject.faults import FAULTS, FaultContext, make_fault, run_episode
from reveal.inject.groundtruth import EventLog
from reveal.inject.jobcgroup import JobCgroup

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (cgroups, namespaces)")
#: a test on the tiny fleet runs in the alone part, where the fleet is recorded (its
#: alignment needs the host to itself): so it is recorded once, not once in each part
on_the_tiny_fleet = pytest.mark.alone


def test_plan_puts_each_fault_in_its_own_host_at_its_own_time() -> None:
    from reveal.fleet.simulate import plan_fleet

    kinds = ["cpu_contention", "memory_pressure", "packet_loss", "cgroup_throttle"]
    plans = plan_fleet(kinds, 5, run_s=45.0, episode_s=12.0, seed=3, prefix="n")
    assert len(plans) == 9 and len({p.host for p in plans}) == 9
    faulty = [p for p in plans if p.kind]
    assert sorted(p.kind for p in faulty) == sorted(kinds)
    offsets = [p.offset_s for p in faulty]
    assert len(set(offsets)) == len(kinds)
    assert all(o >= 10.0 and o + 12.0 <= 45.0 for o in offsets)
    assert plan_fleet(kinds, 5, 45.0, 12.0, seed=3, prefix="n") == plans


def _busy_in(cgroup: JobCgroup) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    cgroup.add(proc.pid)
    return proc


def _cpu_stat(path: Path) -> dict[str, int]:
    return {k: int(v) for k, v in (line.split() for line in
                                   (path / "cpu.stat").read_text().splitlines())}


@needs_root
def test_cgroup_throttle_throttles_the_job_and_is_undone(tmp_path: Path) -> None:
    assert "cgroup_throttle" in FAULTS
    cgroup = JobCgroup().create()
    proc = None
    try:
        quota_files = [p for p in cgroup.paths
                       if (p / "cpu.max").is_file() or (p / "cpu.cfs_quota_us").is_file()]
        if not quota_files:
            pytest.skip("no CPU controller with a quota file here")
        path = quota_files[0]
        quota = path / ("cpu.max" if (path / "cpu.max").is_file() else "cpu.cfs_quota_us")
        before_quota = quota.read_text()
        proc = _busy_in(cgroup)
        time.sleep(0.5)
        before = _cpu_stat(path)["nr_throttled"]
        fault = make_fault("cgroup_throttle", "high", FaultContext(tmp_path))
        assert fault.check() is None
        log = EventLog(tmp_path)
        episode = run_episode(fault, 2.0, log)
        throttled = _cpu_stat(path)["nr_throttled"] - before
        # 0.2 CPU per 100 ms period against a busy loop: nearly every period throttled
        assert throttled >= 10
        assert episode.kind == "cgroup_throttle" and episode.duration_s >= 2.0
        assert quota.read_text() == before_quota
        time.sleep(0.3)  # a period under way at the end may still count once
        after = _cpu_stat(path)["nr_throttled"]
        time.sleep(1.0)
        assert _cpu_stat(path)["nr_throttled"] == after  # no longer throttled
        assert (tmp_path / "events.jsonl").is_file()
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
        cgroup.close()
    assert all(not p.exists() for p in cgroup.paths)


def test_cgroup_throttle_says_why_it_cannot_run_without_a_job_cgroup(tmp_path: Path) -> None:
    fault = make_fault("cgroup_throttle", "low", FaultContext(tmp_path))
    reason = fault.check()
    assert reason is not None and "cgroup" in reason


@pytest.fixture(scope="module")
def tiny_fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three hosts of 8 s recorded one after another: a CPU quota on one, reserved huge
    pages on another, the third clean."""
    if os.geteuid() != 0:
        pytest.skip("recording a fleet needs root")
    from reveal.fleet.simulate import HostPlan, record_fleet

    out = tmp_path_factory.mktemp("fleet")
    plans = [HostPlan("node-a", "cgroup_throttle", "high", 2.0, 3.0, "report"),
             HostPlan("node-b", "hugepages_reserved", "low", 4.0, 2.0, "report"),
             HostPlan("node-c", None, "", 0.0, 0.0, "tune")]
    record_fleet(out, plans, run_s=8.0, say=lambda _m: None)
    return out


@pytest.mark.alone  # fault offsets to half a second: a busy host starts collectors late
def test_tiny_fleet_hosts_alignment_and_ground_truth(tiny_fleet: Path) -> None:
    from reveal.fleet.simulate import load_fleet, read_manifest

    fleet = load_fleet(tiny_fleet)
    assert [h.host for h in fleet.hosts] == ["node-a", "node-b", "node-c"]
    starts = [int(h.timestamps_ns[0]) + h.wall_offset_ns for h in fleet.hosts]
    assert len(set(starts)) == 1  # aligned on their start
    recorded = [int(h.timestamps_ns[0]) + h.meta["recorded_wall_offset_ns"]
                for h in fleet.hosts]
    assert recorded[0] < recorded[1] < recorded[2]  # recorded one after another
    assert all(h.n_samples >= 60 and h.interval_s == 0.1 for h in fleet.hosts)
    truth = {e.host: e for e in fleet.truth}
    assert set(truth) == {"node-a", "node-b"} == fleet.faulty_hosts
    assert fleet.clean_hosts == ["node-c"]
    for plan in fleet.plans:
        if plan.kind is None:
            continue
        episode = truth[plan.host]
        assert episode.kind == plan.kind
        # planned from the collector's start (its meta.json), which comes up to ~1.5 s
        # before its first sample
        offset = (episode.start_ns - starts[0]) / 1e9
        assert plan.offset_s - 2.0 <= offset <= plan.offset_s + 0.5
        assert plan.duration_s <= (episode.end_ns - episode.start_ns) / 1e9 < plan.duration_s + 2
    # the quota shows in the job cgroup's counters on the throttled host only
    a, c = (next(h for h in fleet.hosts if h.host == n) for n in ("node-a", "node-c"))
    from reveal.inject.naming import PREFIX

    # the recorder's id is taken out of the job's names; other processes' job cgroups
    # (seen too on a shared machine) keep theirs
    job = f"cgroup={PREFIX}-job"
    throttled = [ch for ch in a.channels if channel_metric(ch) == "cgroup.cpu.nr_throttled"
                 and job in ch]
    assert len(throttled) == 1
    assert not any(str(os.getpid()) in ch for h in fleet.hosts for ch in h.channels)
    rise_a = np.nanmax(a.column(throttled[0])) - np.nanmin(a.column(throttled[0]))
    rise_c = np.nanmax(c.column(throttled[0])) - np.nanmin(c.column(throttled[0]))
    assert rise_a >= 5 and rise_c == 0
    # the reserved huge pages show on node-b as a configuration change
    b = next(h for h in fleet.hosts if h.host == "node-b")
    pool = b.column("mem.HugePages_Total")
    assert np.nanmax(pool) - np.nanmin(pool) >= 64 and pool[-1] == pool[0]
    manifest = read_manifest(tiny_fleet)
    assert all(len(h["loadavg_before"]) == 3 for h in manifest["hosts"])
    # resuming a finished recording records nothing and keeps the manifest
    from reveal.fleet.simulate import HostPlan, record_fleet

    before = (tiny_fleet / "fleet.json").read_bytes()
    record_fleet(tiny_fleet, [HostPlan("node-a"), HostPlan("node-c")], run_s=8.0,
                 say=lambda _m: None, resume=True)
    assert (tiny_fleet / "fleet.json").read_bytes() == before
    tune = load_fleet(tiny_fleet, split="tune")
    assert [h.host for h in tune.hosts] == ["node-c"] and tune.truth == []
    assert [h.host for h in load_fleet(tiny_fleet, clean_only=True).hosts] == ["node-c"]


@on_the_tiny_fleet
def test_recording_leaves_nothing_behind(tiny_fleet: Path) -> None:
    from reveal.inject.cleanup import netns_names
    from reveal.inject.jobcgroup import leftover_cgroups
    from reveal.inject.naming import owned_name

    mine = owned_name("")
    assert not [n for n in netns_names() if n.startswith(mine)]
    assert not [p for p in leftover_cgroups() if p.name.startswith(mine)]


@on_the_tiny_fleet
def test_bootstrap_host_from_a_recorded_clean_host(tiny_fleet: Path) -> None:
    from reveal.catalog import default_catalog
    from reveal.fleet.simulate import bootstrap_host, load_fleet

    source = load_fleet(tiny_fleet, clean_only=True).hosts[0]
    one = bootstrap_host(source, "synthetic-1", block_s=1.0, seed=1)
    assert one.host == "synthetic-1" and one.meta["simulated"] == "bootstrap"
    assert one.values.shape == source.values.shape and one.channels == source.channels
    assert np.array_equal(bootstrap_host(source, "s", 1.0, seed=1).values, one.values,
                          equal_nan=True)
    assert not np.array_equal(bootstrap_host(source, "s", 1.0, seed=2).values, one.values,
                              equal_nan=True)
    catalog = default_catalog()
    kinds = [catalog.lookup(channel_metric(c)).kind for c in source.channels]
    counters = [j for j, k in enumerate(kinds) if k == "counter"
                and np.isfinite(source.values[:, j]).all()]
    gauges = [j for j, k in enumerate(kinds) if k == "gauge"
              and np.isfinite(source.values[:, j]).all()]
    assert counters and gauges
    assert (np.diff(one.values[:, counters], axis=0) >= 0).all()
    for j in gauges[:20]:
        assert np.isin(one.values[:, j], source.values[:, j]).all()


def test_bootstrap_keeps_counters_and_blocks_on_synthetic_data() -> None:
    from reveal.fleet.simulate import bootstrap_host

    source = ar1_host(30.0, seed=4)
    out = bootstrap_host(source, "boot", block_s=2.0, seed=9)
    j = source.channels.index("net.rx_bytes{iface=eth0}")
    steps = np.diff(out.values[:, j])
    source_steps = np.diff(source.values[:, j])
    assert (steps >= 0).all()
    known = np.sort(source_steps)
    near = known[np.clip(np.searchsorted(known, steps), 0, len(known) - 1)]
    below = known[np.clip(np.searchsorted(known, steps) - 1, 0, len(known) - 1)]
    gap = np.minimum(abs(near - steps), abs(below - steps))
    assert (gap <= 1e-6 * known.max()).mean() > 0.99  # resampled increments
    # one block of 20 samples is 20 consecutive source rows (a gauge follows them)
    g = source.channels.index("mem.Dirty")
    first = int(np.flatnonzero(source.values[:, g] == out.values[0, g])[0])
    block = out.values[:20, g]
    rows = (first + np.arange(20)) % source.n_samples
    assert np.array_equal(block, source.values[rows, g])
    assert out.meta["bootstrap"]["source"] == source.host


def test_load_fleet_without_a_manifest_is_one_line(tmp_path: Path) -> None:
    from reveal.fleet.simulate import load_fleet

    with pytest.raises(RevealError) as exc:
        load_fleet(tmp_path)
    assert "\n" not in str(exc.value) and "fleet.json" in str(exc.value)


def test_synthetic_hosts_for_scale_are_named_and_distinct() -> None:
    from reveal.fleet.simulate import synthetic_hosts

    sources = [ar1_host(20.0, seed=s) for s in (1, 2)]
    hosts = synthetic_hosts(sources, 5, block_s=1.0, seed=3)
    assert [h.host for h in hosts] == [f"syn{i:03d}" for i in range(5)]
    assert all(h.meta["simulated"] == "bootstrap" for h in hosts)
    assert hosts[0].meta["bootstrap"]["source"] == sources[0].host
    assert hosts[1].meta["bootstrap"]["source"] == sources[1].host
    assert not np.array_equal(hosts[0].values, hosts[2].values)
    assert all(np.array_equal(h.timestamps_ns, hosts[0].timestamps_ns) for h in hosts)
    with pytest.raises(RevealError):
        synthetic_hosts([], 3)


@on_the_tiny_fleet
def test_default_fleet_channels_of_a_recorded_host_are_the_jobs(tiny_fleet: Path) -> None:
    """On a real recording the default set keeps the job's cgroup and the job's network
    namespaces, and leaves out the host-wide network and the host's own history."""
    from reveal.fleet.config import FleetConfig
    from reveal.fleet.engine import host_features
    from reveal.fleet.simulate import load_fleet

    fleet = load_fleet(tiny_fleet)
    host = host_features(fleet.hosts[0], FleetConfig())
    every = host_features(fleet.hosts[0], FleetConfig(channels=None, job_network_only=False))
    assert len(host.channels) < len(every.channels) / 3
    network = [c for c in host.channels if c.startswith(("net.", "snmp.", "netstat."))]
    assert network and all("netns=" in c for c in network)
    assert any(c.startswith("cgroup.cpu.") and "-job" in c for c in host.channels)
    assert not any(c.startswith(("disk.", "irq.", "mem.Dirty", "slab")) for c in host.channels)
    assert host.statics == every.statics  # configuration is compared whatever the set

