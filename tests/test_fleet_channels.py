"""Which channels the fleet compares by default: the job's, configuration always."""

from __future__ import annotations

from reveal.catalog import default_catalog
from reveal.fleet.channels import compared_channels

HOST_WIDE = ["net.rx_bytes{iface=eth0}", "snmp.Tcp.RetransSegs", "netstat.TcpExt.TCPLostRetransmit"]
JOB_NET = ["net.rx_bytes{iface=eth0,netns=job-a}", "snmp.Tcp.RetransSegs{netns=job-a}"]
OTHERS = ["cpu.user", "cpu.procs_blocked", "mem.Dirty", "disk.sectors_written{dev=vda}",
          "mem.MemAvailable", "cgroup.cpu.nr_throttled{cgroup=job}", "irq.count{irq=24}"]
STATIC = ["mem.HugePages_Total", "net.speed_mbps{iface=eth0}", "mem.MemTotal"]


def test_a_hosts_job_namespaces_replace_its_host_wide_network():
    keep = compared_channels(HOST_WIDE + JOB_NET + OTHERS + STATIC, default_catalog())
    assert [c for c in keep if c.startswith(("net.rx", "snmp.", "netstat."))] == JOB_NET
    # the job's CPU, memory and cgroup are compared; a host's own history is not
    assert {"cpu.user", "mem.MemAvailable", "cgroup.cpu.nr_throttled{cgroup=job}"} <= set(keep)
    assert not {"mem.Dirty", "disk.sectors_written{dev=vda}", "irq.count{irq=24}"} & set(keep)
    assert "cpu.procs_blocked" not in keep  # 0 on most hosts: one blocked task, unbounded z
    # configuration is compared as values, whatever the set (link speed included)
    assert set(STATIC) <= set(keep)


def test_without_namespaces_the_host_wide_network_is_the_jobs():
    keep = compared_channels(HOST_WIDE + OTHERS, default_catalog())
    assert set(HOST_WIDE) <= set(keep)
    every = HOST_WIDE + JOB_NET + OTHERS + STATIC
    assert compared_channels(every, default_catalog(), None, False) == every
