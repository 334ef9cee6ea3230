"""Prometheus metric names → Reveal channels: node_exporter's names where they mean what a
catalog metric means, and the host channels ``reveal watch`` exports (``reveal_host_*``).

Each :class:`Rule` matches a Prometheus metric name (a regular expression whose groups fill
``target``), renames labels, keeps only some label values, and scales the value into the
catalog's unit (node_exporter speaks seconds and bytes; the catalog stores what the kernel
gives: USER_HZ ticks, 512-byte sectors, milliseconds, microseconds). A rule with ``total``
also adds the sum over one label (``cpu.user`` from ``cpu.user{cpu=N}``), as our collector
records both. Unmatched metrics keep their Prometheus name.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

#: USER_HZ: the tick the catalog's CPU-time channels count in (1/100 s on Linux).
TICK_HZ = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0
SECTOR_BYTES = 512.0

CPU_MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest",
             "guest_nice")


@dataclass(frozen=True)
class Rule:
    """``pattern`` (full match on the metric name) → ``target`` (``{1}`` … from the groups,
    ``{label}`` from a label's value), labels renamed by ``labels`` (others dropped unless
    ``keep_labels``), values × ``scale``; ``only`` restricts label values; ``total`` names
    a label summed over into an extra channel without it."""

    pattern: str
    target: str
    scale: float = 1.0
    labels: dict[str, str] = field(default_factory=dict)
    only: dict[str, tuple[str, ...]] = field(default_factory=dict)
    total: str | None = None
    keep_labels: bool = False


_NET = {"receive": "rx", "transmit": "tx"}
_NET_FIELDS = ("bytes", "packets", "errs", "drop", "fifo", "frame", "compressed", "multicast",
               "colls", "carrier")

_DISK_SECONDS = {
    "read_time_seconds_total": "time_reading_ms",
    "write_time_seconds_total": "time_writing_ms",
    "io_time_seconds_total": "time_io_ms",
    "io_time_weighted_seconds_total": "weighted_time_io_ms",
    "discard_time_seconds_total": "time_discarding_ms",
    "flush_requests_time_seconds_total": "time_flushing_ms",
}
_DISK_COUNTS = {
    "reads_completed_total": "reads_completed",
    "reads_merged_total": "reads_merged",
    "writes_completed_total": "writes_completed",
    "writes_merged_total": "writes_merged",
    "discards_completed_total": "discards_completed",
    "discards_merged_total": "discards_merged",
    "discarded_sectors_total": "sectors_discarded",
    "flush_requests_total": "flushes_completed",
    "io_now": "ios_in_progress",
}
_DEV = {"device": "dev"}
_IFACE = {"device": "iface"}


def _named_alike(prefix: str) -> tuple[Rule, ...]:
    """Rules for the metrics that node_exporter and ``reveal watch`` name alike after their
    prefix (``node`` / ``reveal_host``)."""
    return (
        Rule(rf"{prefix}_context_switches_total", "cpu.ctxt"),
        Rule(rf"{prefix}_forks_total", "cpu.processes"),
        Rule(rf"{prefix}_procs_running", "cpu.procs_running"),
        Rule(rf"{prefix}_procs_blocked", "cpu.procs_blocked"),
        Rule(rf"{prefix}_pressure_(cpu|memory|io)_waiting_seconds_total", "psi.{1}.some.total",
             1e6),
        Rule(rf"{prefix}_disk_read_bytes_total", "disk.sectors_read", 1 / SECTOR_BYTES, _DEV),
        Rule(rf"{prefix}_disk_written_bytes_total", "disk.sectors_written", 1 / SECTOR_BYTES,
             _DEV),
    )


NODE_EXPORTER: tuple[Rule, ...] = (
    Rule(r"node_cpu_seconds_total", "cpu.{mode}", TICK_HZ, {"cpu": "cpu"},
         {"mode": CPU_MODES}, total="cpu"),
    Rule(r"node_cpu_guest_seconds_total", "cpu.guest_{mode}", TICK_HZ, {"cpu": "cpu"},
         {"mode": ("nice",)}, total="cpu"),
    *_named_alike("node"),
    Rule(r"node_intr_total", "cpu.intr"),
    Rule(r"node_load(1|5|15)", "loadavg.load{1}"),
    Rule(r"node_cpu_scaling_frequency_hertz", "cpufreq.cur_mhz", 1e-6, {"cpu": "cpu"}),
    Rule(r"node_memory_(HugePages_\w+)", "mem.{1}"),
    Rule(r"node_memory_(\w+)_bytes", "mem.{1}"),
    Rule(r"node_vmstat_(\w+)", "vmstat.{1}"),
    Rule(r"node_pressure_(cpu|memory|io)_stalled_seconds_total", "psi.{1}.full.total", 1e6),
    *(Rule(rf"node_network_{way}_{name}_total", f"net.{short}_{name}", 1.0, _IFACE)
      for way, short in _NET.items() for name in _NET_FIELDS),
    Rule(r"node_network_speed_bytes", "net.speed_mbps", 8e-6, _IFACE),
    Rule(r"node_network_mtu_bytes", "net.mtu", 1.0, _IFACE),
    *(Rule(rf"node_disk_{name}", f"disk.{ours}", 1e3, _DEV)
      for name, ours in _DISK_SECONDS.items()),
    *(Rule(rf"node_disk_{name}", f"disk.{ours}", 1.0, _DEV)
      for name, ours in _DISK_COUNTS.items()),
    Rule(r"node_netstat_(TcpExt|IpExt|MPTcpExt)_(\w+)", "netstat.{1}.{2}"),
    Rule(r"node_netstat_(Ip6|Icmp6|Udp6|UdpLite6)_(\w+)", "snmp6.{1}{2}"),
    Rule(r"node_netstat_([A-Za-z]+)_(\w+)", "snmp.{1}.{2}"),
    Rule(r"node_sockstat_(sockets)_(used)", "sockstat.{1}.{2}"),
    Rule(r"node_sockstat_([A-Z0-9]+)_(inuse|orphan|tw|alloc|mem|memory)", "sockstat.{1}.{2}"),
    Rule(r"node_softnet_processed_total", "softnet.processed", 1.0, {"cpu": "cpu"}),
    Rule(r"node_softnet_dropped_total", "softnet.dropped", 1.0, {"cpu": "cpu"}),
    Rule(r"node_softnet_times_squeezed_total", "softnet.time_squeeze", 1.0, {"cpu": "cpu"}),
)

#: The host channels of :mod:`reveal.live.exporter` (``reveal_host_*``), read back natively.
REVEAL_EXPORTER: tuple[Rule, ...] = (
    Rule(r"reveal_host_cpu_seconds_total", "cpu.{mode}", TICK_HZ, {},
         {"mode": CPU_MODES}),
    *_named_alike("reveal_host"),
    Rule(r"reveal_host_load1", "loadavg.load1"),
    Rule(r"reveal_host_memory_total_bytes", "mem.MemTotal"),
    Rule(r"reveal_host_memory_available_bytes", "mem.MemAvailable"),
    Rule(r"reveal_host_memory_dirty_bytes", "mem.Dirty"),
    Rule(r"reveal_host_disk_io_time_seconds_total", "disk.time_io_ms", 1e3, _DEV),
    Rule(r"reveal_host_network_receive_bytes_total", "net.rx_bytes", 1.0, _IFACE),
    Rule(r"reveal_host_network_transmit_bytes_total", "net.tx_bytes", 1.0, _IFACE),
    Rule(r"reveal_host_gpu_utilization_ratio", "gpu.sm_util", 100.0, {"gpu": "gpu"}),
    Rule(r"reveal_host_gpu_memory_used_bytes", "gpu.mem_used_bytes", 1.0, {"gpu": "gpu"}),
)

RULES: tuple[Rule, ...] = NODE_EXPORTER + REVEAL_EXPORTER
_COMPILED = [(re.compile(rule.pattern), rule) for rule in RULES]
_FIELD = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True)
class Mapped:
    """Where one Prometheus series goes: ``metric`` with ``labels``, values × ``scale``;
    ``total`` names the label to sum over for the extra total channel (or None)."""

    metric: str
    labels: dict[str, str]
    scale: float
    total: str | None


def map_series(name: str, labels: dict[str, str]) -> Mapped | None:
    """The catalog channel for Prometheus series ``name{labels}`` (host and ``job`` labels
    already removed), or None when no rule knows the name or its labels are filtered out."""
    for pattern, rule in _COMPILED:
        found = pattern.fullmatch(name)
        if found is None:
            continue
        if any(labels.get(key) not in allowed for key, allowed in rule.only.items()):
            return None
        groups = {str(i): g for i, g in enumerate(found.groups(), 1)}

        def fill(match: re.Match[str], groups: dict[str, str] = groups) -> str:
            key = match.group(1)
            return groups.get(key) or labels.get(key, key)

        metric = _FIELD.sub(fill, rule.target)
        if rule.keep_labels:
            out = {k: v for k, v in labels.items() if k not in rule.only}
        else:
            out = {ours: labels[theirs] for theirs, ours in rule.labels.items()
                   if theirs in labels}
        return Mapped(metric, out, rule.scale, rule.labels.get(rule.total, None)
                      if rule.total else None)
    return None
