"""Which channels the fleet compares: those the job's hosts share, not their neighbours'.

Peers agree where the job drives a channel: its CPU time, memory, network and its own
cgroups move together across hosts in lock-step. A host's page cache, slab, IRQ
distribution or disk queue record its own history and whatever else runs on it, and a
comparison over a thousand such columns lets chance differences outvote the one that
matters. The default set below was chosen on the tune part of a recorded fleet (see
``bench/bench_fleet.py``) and checked on the rest.

Configuration (``static``) channels are always kept: they are compared as values
(:mod:`reveal.fleet.statics`), not over windows.
"""

from __future__ import annotations

from collections.abc import Sequence

from reveal.catalog import Catalog
from reveal.frame import channel_metric, parse_channel

#: metric prefixes compared by default: CPU time and load, memory available and huge pages,
#: major faults and reclaim, pressure, network and TCP, the job's cgroups; and where a host
#: has them, its GPUs, InfiniBand ports and the job's CUDA and NCCL calls; and the derived
#: channels made from those (a source that brings them already made keeps them)
JOB_PREFIXES: tuple[str, ...] = (
    "cpu.", "loadavg.", "mem.MemAvailable", "mem.MemFree", "mem.HugePages_", "hugepages.",
    "vmstat.pgmajfault", "vmstat.pgscan", "psi.", "net.", "snmp.Tcp.", "netstat.TcpExt.",
    "cgroup.cpu.", "cgroup.cpuacct.", "cgroup.psi.", "gpu.", "ib.", "ebpf.cuda",
    "ebpf.nccl", "derived.cpu_busy_pct", "derived.mem_used_pct", "derived.net_",
    "derived.cgroup_throttled_pct")
#: network metrics: where a host has channels of a network namespace (``netns=``), the
#: job's, only those are compared (the host-wide ones also carry other tenants' traffic)
NETWORK_PREFIXES: tuple[str, ...] = ("net.", "snmp.", "netstat.")
#: never compared: a count of blocked tasks is 0 on most hosts at any moment, so the peers'
#: spread is 0, and one task blocked on another tenant's I/O reads as an unbounded z
EXCLUDED_METRICS: tuple[str, ...] = ("cpu.procs_blocked",)


def compared_channels(channels: Sequence[str], catalog: Catalog,
                      prefixes: Sequence[str] | None = JOB_PREFIXES,
                      job_network_only: bool = True) -> list[str]:
    """The channels of one host that the fleet compares, in their order.

    ``prefixes`` None keeps every channel (``--channels all``); configuration channels are
    kept whatever the prefixes.
    """
    static = {c for c in channels if catalog.lookup(channel_metric(c)).kind == "static"}
    keep = [c for c in channels if c in static or prefixes is None
            or (c.startswith(tuple(prefixes)) and channel_metric(c) not in EXCLUDED_METRICS)]
    if not job_network_only:
        return keep
    job_network = {c for c in keep
                   if c.startswith(NETWORK_PREFIXES) and "netns" in parse_channel(c)[1]}
    if not job_network:
        return keep
    return [c for c in keep if not c.startswith(NETWORK_PREFIXES) or c in static
            or c in job_network]
