"""Practical significance: the least change of a channel that matters, against capacity.

A window is an anomaly only when its change is both surprising under the baseline (the
detectors' verdict) *and* large enough to matter in the channel's own unit. Surprise alone
is not enough: a channel that barely moved in the baseline (2 MB of file huge pages, a
dirty-page level steady to the page) turns any movement into tens of robust σ. The least
change that matters comes from the channel's catalog unit and kind, measured against the
resource's capacity on this host, never from the baseline's spread:

==============================  ===========================================================
unit (after rates)              least change that matters
==============================  ===========================================================
memory bytes (gauges)           ``memory_share`` of the host's memory (``MemTotal``)
memory pages, huge pages        the same in 4 KiB pages, or in huge pages for huge-page
                                metrics; free blocks of order *n* in blocks of 2^n pages
CPU time (ticks/s, ns/s, µs/s)  ``cpu_share`` of all CPUs for a host or cgroup total,
                                ``one_cpu_share`` of one CPU for a per-CPU channel
busy / utilisation %            the same shares in percentage points (per CPU or total)
stall time (PSI µs/s, %)        ``stall_share`` of wall time
disk bytes/s, sectors/s, KiB/s, ``disk_share`` of what the device can do: the larger of
pages dirtied, written, swapped :data:`DEFAULT_DISK_BPS` and the most the baseline showed
(a cgroup's I/O bytes too)
disk I/O time (ms/s, util %)    ``disk_share`` of wall time
disk operations/s, I/Os         ``disk_share`` of :data:`DEFAULT_DISK_IOPS`
network bytes/s                 ``link_share`` of the link (``net.speed_mbps``, else
                                :data:`DEFAULT_LINK_BPS`); packets/s in 1,500-byte packets
event rates (interrupts,        the rate that costs ``one_cpu_share`` of one CPU at the
softirqs, switches, faults,     unit's cost per event (:data:`EVENT_COST_S`), on a host
page moves, forks, ...)         of any size
UDP datagrams                   the same, or ``link_share`` of the host's fastest link
                                in 1,500-byte packets, whichever is less (one datagram is
                                one packet on the wire)
tasks (runnable, blocked, load) ``task_share`` of the number of CPUs
sockets (in use, TIME_WAIT,     ``socket_share`` of the local ports
orphans, UDP, ...)              (:data:`DEFAULT_LOCAL_PORTS`)
GPU activity % (kernels, SMs,   ``gpu_share`` of the GPU in percentage points
tensor cores, DRAM; per process)
GPU memory bytes                ``gpu_memory_share`` of that GPU's memory
                                (``gpu.mem_total_bytes``, else :data:`DEFAULT_GPU_MEMORY_BYTES`)
GPU power (mW, energy mJ/s)     ``gpu_share`` of that GPU's power limit
                                (``gpu.power_limit_mw``, else :data:`DEFAULT_GPU_POWER_MW`)
GPU temperatures (°C)           ``gpu_temp_c``
GPU clocks (MHz)                ``clock_share`` of the baseline clock (a throttle)
GPU PCIe throughput (KB/s)      ``link_share`` of the GPU's PCIe link in one direction
                                (``gpu.pcie_gen_max`` × ``gpu.pcie_width_max``, else the
                                current link, else :data:`DEFAULT_PCIE_BPS`)
other units (sockets, MHz, ...) ``relative_share`` of the baseline level
normalised units (``scaled``),  none: labelled data has no capacity, surprise alone decides
metrics not in the catalog
==============================  ===========================================================

The shares (``memory_share`` ...) and the z's below are the settings group
``significance`` (:class:`reveal.config.SignificanceConfig`): the model keeps the values it
was fitted with, so a saved model scores the same whatever the code's defaults.

Channels of the job's own cgroup or network namespace are also judged against the job's use:
the least change is at most ``job_share`` of the baseline level (a job that sends
2 MB/s loses something when it sends 1 MB/s, whatever the link can carry; not its time
spent waiting, catalog ``waiting``, judged against wall time alone); GPU channels
are judged against the GPU alone (a job's processes usually have it to themselves, and a
per-process share of a few percent is within NVML's sampling noise). A part of a
cgroup's memory (``cgroup.memory.stat.*`` bytes: anon, file, shmem, ...) is judged against
the cgroup's whole memory (``cgroup.memory.current``, catalog ``capacity =
"cgroup_memory"``), not against the part itself.

What a channel means here (the direction of a change that can hurt, a side effect, time
spent waiting, a fall that is no cause, ...) is said by its catalog entry
(:mod:`reveal.catalog`, the meanings), read through ``lookup``.

Threads that exist (a cgroup's ``pids.current``, the host's scheduling entities), running
or not, never matter on their own (catalog ``exists``): a worker pool started or a process
that exits changes them by tens at no cost; what threads cost shows in runnable tasks, CPU
time, memory and the fork rate.

Memory that moves between free and reclaimable (page cache, buffers, reclaimable slab,
free pages and free lists, catalog ``alone = false``) never matters on its own: the host
loses nothing when the page cache is dropped and refilled; what matters shows in available
and anonymous memory, dirty pages and the disk traffic of the refill. A cgroup's whole
memory (``memory.current``) holds its page cache, so it is judged by its parts the same
way: its anonymous memory against the whole, its stalls and its limit events.

Memory held (used, anonymous, dirty, ..., catalog ``hurts = "rise"``) matters only when
it rises, available memory and free swap only when they fall: memory freed costs the host
nothing. Traffic that yields when it competes (bytes, packets and TCP segments moved,
catalog ``hurts = "fall"``) matters only when it falls: more of it alone hurts no one, and
where it takes a link others need, their losses show on their own channels. UDP datagrams
matter either way. The direction applies to a window's level and trend
(:func:`matter_directions`), not to its spread.

Per feature column (:func:`feature_matters`): levels (mean, median, minimum, maximum) take
the channel's least change, the within-window spread half of it, the slope that change
over one window, an event sum that rate over the window's rows. With ``sustained``
(``DetectConfig.sustained``) a change must last through most of a window: only a window's
median (and an event count's sum) can make it significant (:data:`SUSTAINED_FEATURES`); a
burst shorter than half a window moves the mean, peak and spread but not the median.
Shape features are dimensionless and never significant. With ``past_baseline``
(``DetectConfig.past_baseline``, :func:`level_tails`) a typical level's change is measured
past the levels the baseline itself reached (its 1st and 99th percentile windows), not
from its median: page faults that rest at 0/s and burst to 57k/s in the baseline have
changed by 63k/s, not 120k/s, when they burst to 120k/s. Capacities come from the
baseline's meta data (``mem_total_bytes``, ``n_cpus``) or, where absent, from its channels.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from reveal.analysis.constants import (
    LEVEL_FEATURES,
    TAIL_QUANTILE,
    TAIL_SIGMAS,
    TYPICAL_LEVEL_FEATURES,
)
from reveal.analysis.evidence import Reason
from reveal.analysis.floors import SHAPE_FEATURES, UNFLOORED_UNITS, is_held_counter
from reveal.analysis.served import served_share
from reveal.catalog import Catalog, MetricInfo, default_catalog
from reveal.config import SignificanceConfig, significance_of
from reveal.frame import Telemetry, channel_metric, parse_channel

DEFAULT_GPU_MEMORY_BYTES = 16.0 * 2**30
DEFAULT_GPU_POWER_MW = 300e3
#: The local ports a host can hold open at once (Linux's default
#: ``net.ipv4.ip_local_port_range``, 32768–60999): what TIME_WAIT and open sockets exhaust
#: (a share of them matters, ``significance.socket_share``). A job's own sockets (its
#: network namespace) are judged against its own use.
DEFAULT_LOCAL_PORTS = 28232.0
DEFAULT_MEMORY_BYTES = 16.0 * 2**30
DEFAULT_DISK_BPS = 100e6
DEFAULT_DISK_IOPS = 1000.0
DEFAULT_LINK_BPS = 125e6  # 1 Gbit/s
#: Bytes/s one PCIe lane carries in one direction, by link generation (after line coding).
PCIE_LANE_BPS = {1: 250e6, 2: 500e6, 3: 984.6e6, 4: 1969e6, 5: 3938e6, 6: 7563e6}
DEFAULT_PCIE_BPS = 16 * PCIE_LANE_BPS[4]  # a PCIe 4.0 x16 link
PACKET_BYTES = 1500.0
PAGE_BYTES = 4096.0
HUGE_PAGE_BYTES = 2.0 * 2**20
#: CPU time one event of a unit costs (seconds), to turn a share of the CPUs into a rate.
EVENT_COST_S = {"interrupts": 2e-6, "softirqs": 2e-6, "IPIs": 2e-6, "switches": 3e-6,
                "migrations": 5e-6, "faults": 1e-6, "events": 1e-6, "pages": 1e-6,
                "entries": 1e-6, "forks": 100e-6, "count": 2e-6, "segments": 2e-6,
                "datagrams": 2e-6, "connections": 20e-6, "stalls": 20e-6,
                "failures": 20e-6, "kills": 1e-3, "hits": 1e-6, "nodes": 1e-6}
DISK_OP_UNITS = ("reads", "writes", "flushes", "discards", "I/Os")
#: Event units that are packets on a link as well: a UDP datagram is one IP packet (TCP
#: segments are not: they are counted after segmentation offload and receive coalescing).
#: Judged as the CPU time they cost or as packets against the host's fastest link, in
#: 1,500-byte packets, whichever is less.
PACKET_EVENT_UNITS = ("datagrams",)
MEMORY_BYTE_UNITS = ("bytes (kernel kB × 1024)",)
JOB_LABELS = ("cgroup", "netns", "container", "pod")
#: Features whose change lasts through most of a window: the median (and an event
#: count's sum over the window). A burst shorter than half a window (a checkpoint's
#: fsync, a compile, a cron minute) moves a window's mean, peak and spread but not its
#: median, and is no performance anomaly; a fault that holds moves the median.
SUSTAINED_FEATURES = ("median", "sum")
#: Features whose sign is the direction of a change (a window's level and its trend); a
#: spread grows whichever way a level moves.
DIRECTED_FEATURES = (*LEVEL_FEATURES, "slope", "sum")
#: The direction of a change that can matter, by the catalog's ``hurts``.
HURTS_DIRECTION = {"rise": 1, "fall": -1, "either": 0}


def _meaning(metric: str) -> MetricInfo:
    """The catalog entry of ``metric``, whose fields say what its changes mean."""
    return default_catalog().lookup(metric)


def is_waiting(metric: str) -> bool:
    """Whether ``metric`` is time spent waiting for a resource (catalog ``waiting``)."""
    return _meaning(metric).waiting


def is_side_effect(metric: str) -> bool:
    """Whether ``metric`` usually moves as a consequence of a cause elsewhere (catalog
    ``follows``)."""
    return _meaning(metric).follows


@functools.lru_cache(maxsize=4096)
def fall_is_not_cause(metric: str) -> bool:
    """Whether a fall of ``metric`` is a symptom or a relief, never the cause of a slowdown
    (catalog ``fall``)."""
    return bool(_meaning(metric).fall)


def is_bursty(metric: str) -> bool:
    """Whether ``metric`` moves in bursts as a job runs, a quiet median under a loud tail (a
    distributed job's retransmissions on a busy host): a direct sign that keeps the
    baseline's tail (catalog ``sign``'s ``tail``)."""
    sign = _meaning(metric).sign
    return sign is not None and sign.tail


def matter_direction(metric: str) -> int:
    """The direction of a change of ``metric`` that can matter (catalog ``hurts``): +1 a
    rise only (memory held), −1 a fall only (memory free; traffic that yields), 0 either."""
    return HURTS_DIRECTION[_meaning(metric).hurts]


@functools.lru_cache(maxsize=8192)
def channel_direction(channel: str) -> int:
    """The direction of a change of ``channel`` that can matter: its metric's
    (:func:`matter_direction`); for work done (catalog ``fall = "symptom"``: CPU time, busy
    %) on the host as a whole, a rise only: the host doing less is a neighbour that stopped
    as often as a job that waits, while the job's own work (a channel of its cgroup,
    namespace, container or pod) and a GPU's (a job has its GPUs to itself) matter either
    way — a job that hangs does nothing. For waiting and the kernel's memory-management
    work (catalog ``fall = "relief"``), a rise only: less of it is no slowdown, and a fault
    that ends shows it falling back."""
    metric = channel_metric(channel)
    direction = matter_direction(metric)
    fall = _meaning(metric).fall
    if direction:
        return direction
    if fall == "relief":
        return 1
    if fall != "symptom" or metric.startswith("gpu."):
        return direction
    return 0 if any(_label(channel, k) for k in JOB_LABELS) else 1


@functools.lru_cache(maxsize=32)
def matter_directions(channels: tuple[str, ...], features: tuple[str, ...]) -> np.ndarray:
    """(K,) per feature column, made once per column set: the direction of a change that
    can matter (:func:`channel_direction`) for a level or trend column
    (:data:`DIRECTED_FEATURES`), 0 (either) for the others."""
    return np.array([channel_direction(c) if f in DIRECTED_FEATURES else 0
                     for c, f in zip(channels, features, strict=True)], dtype=np.int8)


def in_direction(moved: np.ndarray, direction: np.ndarray) -> np.ndarray:
    """Where a change ``moved`` (from the baseline median) goes the way that can matter:
    ``direction`` (K,) from :func:`matter_directions` (0: either way)."""
    return (direction == 0) | (np.sign(moved) == direction)


@dataclass(frozen=True)
class Capacity:
    """What this host has: memory (bytes), CPUs, per-interface link (bytes/s, by the
    channel's labels) and per-device disk throughput (bytes/s) shown in the baseline."""

    memory_bytes: float = DEFAULT_MEMORY_BYTES
    n_cpus: int = 1
    link_bps: Mapping[str, float] | None = None
    disk_bps: Mapping[str, float] | None = None
    gpu_memory_bytes: Mapping[str, float] | None = None  # by the ``gpu`` label
    gpu_power_mw: Mapping[str, float] | None = None  # enforced power limit, by ``gpu``
    gpu_pcie_bps: Mapping[str, float] | None = None  # one direction of the link, by ``gpu``

    def to_dict(self) -> dict[str, Any]:
        return {"memory_bytes": self.memory_bytes, "n_cpus": self.n_cpus,
                "link_bytes_per_s": dict(self.link_bps or {}),
                "disk_bytes_per_s": dict(self.disk_bps or {}),
                "gpu_memory_bytes": dict(self.gpu_memory_bytes or {}),
                "gpu_power_limit_mw": dict(self.gpu_power_mw or {}),
                "gpu_pcie_bytes_per_s": dict(self.gpu_pcie_bps or {})}


def _label(channel: str, key: str) -> str:
    return parse_channel(channel)[1].get(key, "")


def host_capacity(d_base: Telemetry) -> Capacity:
    """The capacity of the baseline's host (derived telemetry: rates, not raw counters)."""
    meta = d_base.meta
    index = {c: i for i, c in enumerate(d_base.channels)}
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        memory = float(meta.get("mem_total_bytes") or 0.0)
        if memory <= 0 and "mem.MemTotal" in index:
            memory = float(np.nanmax(d_base.values[:, index["mem.MemTotal"]]))
        n_cpus = int(meta.get("n_cpus") or 0)
        if n_cpus <= 0:
            n_cpus = len({_label(c, "cpu") for c in d_base.channels
                          if channel_metric(c) == "cpu.user" and _label(c, "cpu")}) or 1
        links: dict[str, float] = {}
        disks: dict[str, float] = {}
        gpu_memory: dict[str, float] = {}
        gpu_power: dict[str, float] = {}
        pcie: dict[str, dict[str, float]] = {}  # gpu -> link capacity -> its largest value
        for channel, i in index.items():
            metric = channel_metric(channel)
            if (link := _meaning(metric).capacity) in PCIE_LINK:
                top = float(np.nanmax(d_base.values[:, i])) if d_base.n_samples else 0.0
                if math.isfinite(top) and top > 0:
                    pcie.setdefault(_label(channel, "gpu"), {})[link] = top
            elif metric in ("gpu.mem_total_bytes", "gpu.power_limit_mw"):
                top = float(np.nanmax(d_base.values[:, i])) if d_base.n_samples else 0.0
                if math.isfinite(top) and top > 0:
                    mine = gpu_memory if metric == "gpu.mem_total_bytes" else gpu_power
                    mine[_label(channel, "gpu")] = top
            elif metric == "net.speed_mbps":
                speed = float(np.nanmax(d_base.values[:, i])) if d_base.n_samples else 0.0
                if math.isfinite(speed) and speed > 0:
                    links[_label(channel, "iface")] = speed * 1e6 / 8.0
            elif metric in ("derived.disk_read_bytes_per_s", "derived.disk_write_bytes_per_s"):
                top = float(np.nanmax(d_base.values[:, i])) if d_base.n_samples else 0.0
                dev = _label(channel, "dev")
                if math.isfinite(top):
                    disks[dev] = max(disks.get(dev, 0.0), top)
    if not math.isfinite(memory) or memory <= 0:
        memory = DEFAULT_MEMORY_BYTES
    return Capacity(memory, max(n_cpus, 1), links, disks, gpu_memory, gpu_power,
                    {gpu: bps for gpu, link in pcie.items() if (bps := pcie_bps(link)) > 0})


#: The catalog ``capacity`` of the channels that describe a GPU's PCIe link.
PCIE_LINK = ("pcie_gen_max", "pcie_width_max", "pcie_gen", "pcie_width")


def pcie_bps(link: Mapping[str, float]) -> float:
    """Bytes/s of one direction of a PCIe link from its generation and width, ``link``
    keyed by the channels' catalog ``capacity`` (:data:`PCIE_LINK`): the maximum the link
    can train to where known, else its current state; 0 if unknown."""
    gen = int(link.get("pcie_gen_max") or link.get("pcie_gen") or 0)
    width = link.get("pcie_width_max") or link.get("pcie_width") or 0.0
    lane = PCIE_LANE_BPS.get(gen, PCIE_LANE_BPS[max(PCIE_LANE_BPS)] if gen > 6 else 0.0)
    return lane * float(width)


@dataclass(frozen=True)
class Matter:
    """The least change of one channel that matters, in its derived unit, and why."""

    least: float
    rule: str


#: The rule of a channel with no unit or capacity to judge it by: surprise alone decides.
NO_RULE = "none (no unit or capacity: surprise alone)"
#: How the rule of a channel whose unit has no capacity here ends: a share of its own
#: baseline level (``significance.relative_share``).
RELATIVE_RULE = "of the baseline level"


def against_capacity(rule: str) -> bool:
    """Whether a least change that matters (its ``rule``) was measured against what the
    host or the job has (memory, CPUs, a link, a disk, the job's own use, a GPU), so that a
    change past it matters on its own: not for a channel with no rule (:data:`NO_RULE`) or
    judged against its own level (:data:`RELATIVE_RULE`), where only the detectors' surprise
    says the change is unusual."""
    return not (rule.startswith(NO_RULE) or rule.split(";")[0].endswith(RELATIVE_RULE))


def _per_cpu(channel: str) -> bool:
    return bool(_label(channel, "cpu"))


def _cpu_share(channel: str, n_cpus: int, sig: SignificanceConfig) -> tuple[float, str]:
    """The share of CPU time that matters (in CPUs), and its words."""
    if _per_cpu(channel):
        return sig.one_cpu_share, f"{sig.one_cpu_share:.0%} of one CPU"
    return sig.cpu_share * n_cpus, f"{sig.cpu_share:.0%} of {n_cpus} CPUs"


def _gpu_matter(channel: str, metric: str, unit: str, kind: str, level: float,
                capacity: Capacity, sig: SignificanceConfig) -> Matter | None:
    """The least change of a GPU channel that matters, or None for the general rules."""
    gpu = _label(channel, "gpu")
    if unit == "percent" and metric != "gpu.fan_pct":
        return Matter(100.0 * sig.gpu_share, f"{sig.gpu_share:.0%} of the GPU (points)")
    if unit == "bytes" and kind == "gauge":
        total = (capacity.gpu_memory_bytes or {}).get(gpu, DEFAULT_GPU_MEMORY_BYTES)
        return Matter(sig.gpu_memory_share * total,
                      f"{sig.gpu_memory_share:.0%} of the GPU's {total / 2**30:,.0f} GiB")
    if metric in ("gpu.power_mw", "gpu.energy_mj"):
        limit = (capacity.gpu_power_mw or {}).get(gpu, DEFAULT_GPU_POWER_MW)
        return Matter(sig.gpu_share * limit,
                      f"{sig.gpu_share:.0%} of the GPU's {limit / 1e3:,.0f} W power limit")
    if metric in ("gpu.pcie_tx_kbps", "gpu.pcie_rx_kbps"):
        link = (capacity.gpu_pcie_bps or {}).get(gpu, DEFAULT_PCIE_BPS)
        return Matter(sig.link_share * link / 1e3,
                      f"{sig.link_share:.0%} of the GPU's {link / 1e9:,.1f} GB/s PCIe link")
    if unit == "°C":
        return Matter(sig.gpu_temp_c, f"{sig.gpu_temp_c:g} °C")
    if unit == "MHz" and math.isfinite(level):
        return Matter(sig.clock_share * abs(level), f"{sig.clock_share:.0%} of the baseline clock")
    return None


def channel_matter(channel: str, info: MetricInfo, level: float,
                   capacity: Capacity, job_level: float | None = None,
                   settings: SignificanceConfig | None = None) -> Matter:
    """The least change of ``channel`` that matters (see the module's table).

    ``level`` is the channel's baseline level; ``job_level`` the level of the whole its
    job-labelled share belongs to (a cgroup's memory for a part of it), else ``level``;
    ``settings`` the shares (the code's defaults when None).
    """
    sig = significance_of(settings)
    metric = channel_metric(channel)
    unit, kind = info.unit, info.kind
    memory = capacity.memory_bytes
    if unit in UNFLOORED_UNITS or kind == "static" or (not unit and not info.priority):
        # normalised data, configuration, or a metric the catalog does not know
        return Matter(0.0, NO_RULE)
    cpus, cpu_words = _cpu_share(channel, capacity.n_cpus, sig)
    out: Matter | None = None
    if not info.can_matter_alone:
        return Matter(np.inf, "never alone: memory moving between free and reclaimable"
                      if not info.alone else "never alone: threads that exist, running or not")
    if metric.startswith("gpu.") and (
            gpu := _gpu_matter(channel, metric, unit, kind, level, capacity, sig)) is not None:
        out = gpu
    elif info.judged_as == "huge_pages" and unit == "pages":
        out = Matter(max(1.0, sig.memory_share * memory / HUGE_PAGE_BYTES),
                     f"{sig.memory_share:.0%} of memory in huge pages")
    elif unit in MEMORY_BYTE_UNITS or (unit == "bytes" and kind == "gauge"
                                       and metric.startswith(("cgroup.memory", "mem."))):
        out = Matter(sig.memory_share * memory, f"{sig.memory_share:.0%} of memory")
    elif unit == "pages" and kind in ("gauge", "state"):
        out = Matter(sig.memory_share * memory / PAGE_BYTES, f"{sig.memory_share:.0%} of memory")
    elif unit == "blocks of 2^order pages":
        order = _label(channel, "order")
        blocks = 2.0 ** int(order) if order.isdigit() else 1.0
        out = Matter(sig.memory_share * memory / (PAGE_BYTES * blocks),
                     f"{sig.memory_share:.0%} of memory")
    elif unit.startswith("USER_HZ ticks"):
        out = Matter(100.0 * cpus, f"{cpu_words} (ticks/s)")
    elif metric.startswith(("psi.", "cgroup.psi.")):
        if unit == "µs":
            out = Matter(sig.stall_share * 1e6, f"{sig.stall_share:.0%} of wall time stalled")
        else:
            out = Matter(100.0 * sig.stall_share, f"{sig.stall_share:.0%} of wall time stalled")
    elif unit == "ns" and kind == "counter":
        out = Matter(1e9 * cpus, f"{cpu_words} (ns/s)")
    elif unit == "µs" and kind == "counter":
        out = Matter(1e6 * cpus, f"{cpu_words} (µs/s)")
    elif metric == "derived.cpu_busy_pct":
        one = _per_cpu(channel)
        share = sig.one_cpu_share if one else sig.cpu_share
        out = Matter(100.0 * share, f"{share:.0%} of {'one CPU' if one else 'all CPUs'} (points)")
    elif metric == "derived.mem_used_pct":
        out = Matter(100.0 * sig.memory_share, f"{sig.memory_share:.0%} of memory (points)")
    elif metric == "derived.disk_util_pct" or (unit == "ms" and metric.startswith("disk.")):
        out = Matter((100.0 if unit != "ms" else 1000.0) * sig.disk_share,
                     f"{sig.disk_share:.0%} of the device's time")
    elif metric.startswith("derived.net_") and metric.endswith("_util_pct"):
        out = Matter(100.0 * sig.link_share, f"{sig.link_share:.0%} of the link (points)")
    elif metric.startswith(("derived.disk_", "disk.sectors", "vmstat.pgpg")) or \
            info.judged_as == "disk":
        dev = _label(channel, "dev")
        device = max(DEFAULT_DISK_BPS, (capacity.disk_bps or {}).get(dev, 0.0)
                     if dev else max((capacity.disk_bps or {}).values(), default=0.0))
        scale = {"512-byte sectors": 512.0, "KiB": 1024.0, "pages": PAGE_BYTES}.get(unit, 1.0)
        out = Matter(sig.disk_share * device / scale,
                     f"{sig.disk_share:.0%} of {device / 1e6:,.0f} MB/s the device can do")
    elif unit in DISK_OP_UNITS:
        out = Matter(sig.disk_share * DEFAULT_DISK_IOPS,
                     f"{sig.disk_share:.0%} of {DEFAULT_DISK_IOPS:,.0f} operations/s")
    elif unit in ("bytes", "packets", "bytes/s", "packets/s") and (
            metric.startswith(("net.", "derived.net_", "netstat.IpExt", "qdisc."))):
        # counters (rated per second) and the derived rates already per second
        iface = _label(channel, "iface") or _label(channel, "dev")
        link = (capacity.link_bps or {}).get(iface, DEFAULT_LINK_BPS)
        per = PACKET_BYTES if unit.startswith("packets") else 1.0
        words = f"{sig.link_share:.0%} of a {link * 8 / 1e6:,.0f} Mbit/s link"
        out = Matter(sig.link_share * link / per, words + (" in packets" if per > 1 else ""))
    elif unit in EVENT_COST_S or unit == "packets":
        cost = EVENT_COST_S.get(unit, 2e-6)
        out = Matter(sig.one_cpu_share / cost,
                     f"{sig.one_cpu_share:.0%} of one CPU at {cost * 1e6:g} µs per event")
        if unit in PACKET_EVENT_UNITS:
            # each one is a packet on a link too: whichever share is reached first
            link = max((capacity.link_bps or {}).values(), default=DEFAULT_LINK_BPS)
            on_link = sig.link_share * link / PACKET_BYTES
            if on_link < out.least:
                out = Matter(on_link, f"{sig.link_share:.0%} of a {link * 8 / 1e6:,.0f} Mbit/s "
                                      "link in packets")
    elif unit == "tasks":
        out = Matter(max(1.0, sig.task_share * capacity.n_cpus),
                     f"{sig.task_share:g} task per CPU")
    elif unit == "sockets":
        out = Matter(sig.socket_share * DEFAULT_LOCAL_PORTS,
                     f"{sig.socket_share:.0%} of {DEFAULT_LOCAL_PORTS:,.0f} local ports")
    if out is None:
        level = abs(level) if math.isfinite(level) else 0.0
        out = Matter(sig.relative_share * level, f"{sig.relative_share:.0%} {RELATIVE_RULE}")
    whole = level if job_level is None else job_level
    # a GPU is judged against itself; time spent waiting is no use of the job's (its
    # stall is judged against wall time, whatever share of it the job stalled before);
    # an error or fault count (catalog kind ``event``: retransmissions, drops, OOM kills)
    # is no use either: it is judged by its cost, its sign or how rare it was
    if any(_label(channel, k) for k in JOB_LABELS) and math.isfinite(whole) and whole > 0 \
            and not metric.startswith("gpu.") and not info.waiting and kind != "event":
        job = sig.job_share * abs(whole)
        if job < out.least:
            out = Matter(job, f"{sig.job_share:.0%} of the job's own use")
    if direction := HURTS_DIRECTION[info.hurts]:
        why = ("a rise only (a fall frees memory)" if direction > 0
               else "a fall only (a rise frees memory)" if metric.startswith("mem.")
               else "a fall only (more traffic alone hurts no one)")
        out = replace(out, rule=f"{out.rule}; {why}")
    elif info.fall == "relief":
        out = replace(out, rule=f"{out.rule}; a rise only (less of it is no slowdown)")
    return out


def channel_matters(d_base: Telemetry, channels: Sequence[str],
                    catalog: Catalog | None = None,
                    settings: SignificanceConfig | None = None) -> tuple[Capacity, list[Matter]]:
    """The host's capacity and the least change that matters of each of ``channels``
    (``settings``: the shares; the code's defaults when None)."""
    catalog = catalog or default_catalog()
    capacity = host_capacity(d_base)
    wholes = [c for c in d_base.channels
              if catalog.lookup(channel_metric(c)).capacity == "cgroup_memory"]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        levels = np.nanmedian(d_base.select(list(channels)).values, axis=0) if channels else []
        held = [k for k, c in enumerate(channels) if is_held_counter(c)]
        if held:  # a held counter's level is its mean rate (its median is 0)
            levels[held] = np.nanmean(d_base.select([channels[k] for k in held]).values,
                                      axis=0)
        whole_levels = np.nanmedian(d_base.select(wholes).values, axis=0) if wholes else []
    cgroup_memory = {_label(c, "cgroup"): float(lv)
                     for c, lv in zip(wholes, whole_levels, strict=True) if math.isfinite(lv)}

    def job_level(channel: str) -> float | None:
        if channel_metric(channel).startswith("cgroup.memory.stat."):
            return cgroup_memory.get(_label(channel, "cgroup"))
        return None

    return capacity, [channel_matter(c, catalog.lookup(channel_metric(c)), float(lv), capacity,
                                     job_level(c), settings)
                      for c, lv in zip(channels, levels, strict=True)]


def feature_matters(column_channels: Sequence[str], column_features: Sequence[str],
                    matters: Mapping[str, Matter], rows_per_window: float,
                    sustained: bool = False) -> np.ndarray:
    """Per feature column, the least change that matters in the feature's units: ``inf``
    for shape features (never significant alone), 0 where the channel has no rule.
    ``sustained``: only a window's median (and an event count's sum) can matter, so
    that a change must last through most of the window (:data:`SUSTAINED_FEATURES`)."""
    rows = max(float(rows_per_window), 1.0)
    out = np.zeros(len(column_channels), dtype=np.float64)
    for k, (channel, feature) in enumerate(zip(column_channels, column_features, strict=True)):
        m = matters.get(channel)
        least = m.least if m is not None else 0.0
        if feature in SHAPE_FEATURES or (sustained and m is not None and least > 0
                                         and not lasts(channel, feature)):
            out[k] = np.inf
        elif feature == "std":
            out[k] = least / 2.0
        elif feature == "variance":
            out[k] = (least / 2.0) ** 2
        elif feature == "slope":
            out[k] = least / rows
        elif feature == "sum":
            out[k] = least * rows
        else:
            out[k] = least
    return out


def tail_matters(least: np.ndarray, column_channels: Sequence[str],
                 values: np.ndarray, reached: np.ndarray | None = None) -> np.ndarray:
    """``least`` (K,) raised, for the columns of channels that move in bursts as a job
    runs (:func:`is_bursty`), to the baseline's own upper tail: the distance of the
    :data:`TAIL_QUANTILE` quantile of its window values ``values`` (n, K) from their
    median. A burst like the baseline's own is no change that matters, whether or not the
    detectors were fitted on it. ``reached`` (K,) bool: columns whose change is measured
    past the baseline's own reach instead (``past_baseline``, :func:`level_tails`), left
    as they are so that the bursts do not count twice."""
    bursty = _columns_where(tuple(column_channels), is_bursty)
    if reached is not None:
        bursty = bursty & ~reached
    cols = np.flatnonzero(bursty)
    out = np.asarray(least, dtype=np.float64).copy()
    if not cols.size or not len(values):
        return out
    tail = _spread_from_median(values[:, cols])[0]
    out[cols] = np.maximum(out[cols], np.nan_to_num(tail, nan=0.0, posinf=0.0))
    return out


def _spread_from_median(x: np.ndarray, quantile: float = TAIL_QUANTILE
                        ) -> tuple[np.ndarray, np.ndarray]:
    """Per column of ``x`` (n, k): the ``quantile`` quantile's distance above the median
    and the opposite quantile's below it (NaN for a column with no value)."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a column with no value: none
        x = np.asarray(x, dtype=np.float64)
        mid = np.nanmedian(x, axis=0)
        return (np.nanquantile(x, quantile, axis=0) - mid,
                mid - np.nanquantile(x, 1.0 - quantile, axis=0))


def lasts(channel: str, feature: str) -> bool:
    """Whether ``feature`` of ``channel`` moves only with a change that lasts through most
    of a window (:data:`SUSTAINED_FEATURES`; for a held counter, :func:`is_held_counter`,
    its mean instead of its median)."""
    if is_held_counter(channel):
        return feature in ("mean", "sum")
    return feature in SUSTAINED_FEATURES


@functools.lru_cache(maxsize=32)
def _lasting_columns(channels: tuple[str, ...], features: tuple[str, ...]) -> np.ndarray:
    """Mask over feature columns, made once per column set: the level that lasts through
    most of a window (:func:`lasts`), sums aside."""
    return np.array([f != "sum" and lasts(c, f) for c, f in zip(channels, features,
                                                                 strict=True)], dtype=bool)


@functools.lru_cache(maxsize=32)
def _onset_partners(channels: tuple[str, ...],
                    features: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Two (K,) int arrays, made once per column set: for a window-mean column, the
    columns of the same channel's slope and of its lasting level (:func:`lasts`: its
    median, or a held counter's mean itself); −1 where there is none, and for every
    other feature."""
    slope_at: dict[str, int] = {}
    level_at: dict[str, int] = {}
    for k, (c, f) in enumerate(zip(channels, features, strict=True)):
        if f == "slope":
            slope_at[c] = k
        elif f != "sum" and lasts(c, f):
            level_at[c] = k
    pairs = [(slope_at.get(c, -1), level_at.get(c, -1)) if f == "mean" else (-1, -1)
             for c, f in zip(channels, features, strict=True)]
    both = np.array(pairs, dtype=np.int64).reshape(-1, 2)
    return both[:, 0].copy(), both[:, 1].copy()


def onset_columns(row: np.ndarray, median: np.ndarray, scale: np.ndarray,
                  least: np.ndarray, channels: Sequence[str], features: Sequence[str],
                  settings: SignificanceConfig | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A change that began within the window and holds at its end (a fault's first
    window, before its median moves): a window mean that moved by at least the least
    change of the channel's lasting level and ``significant_z`` of its own scale, while
    the channel's slope moved the same way by ``significant_z`` of its scale. Returns the
    mask over feature columns and the least change to size them by."""
    z_min = significance_of(settings).significant_z
    slope, level = _onset_partners(tuple(channels), tuple(features))
    out = np.zeros(len(slope), dtype=bool)
    sized = np.asarray(least, dtype=np.float64).copy()
    at = np.flatnonzero((slope >= 0) & (level >= 0))
    if at.size:
        s, lv = slope[at], level[at]
        with np.errstate(invalid="ignore"):
            moved = row[at] - median[at]
            rose = row[s] - median[s]
            onset = ((np.abs(moved) >= least[lv]) & np.isfinite(least[lv])
                     & (np.abs(moved) >= z_min * scale[at])
                     & (np.abs(rose) >= z_min * scale[s])
                     & (np.sign(moved) * np.sign(rose) > 0))
        out[at] = onset
        sized[at[onset]] = least[lv[onset]]
    return out, sized


def significant_cells(values: np.ndarray, median: np.ndarray, scale: np.ndarray,
                      least: np.ndarray, z_min: float | None = None,
                      direction: np.ndarray | None = None,
                      reach: np.ndarray | None = None) -> np.ndarray:
    """``(W, K)``: where a window's change from the baseline median is at least the least
    change that matters and ``z_min`` times the column's scale (None: the default
    ``significance.significant_z``; NaN: not significant),
    in the ``direction`` (K,) that can matter (:func:`matter_directions`; None: either).
    With the baseline's ``reach`` (``(2, K)``, :func:`level_tails`), the change that must
    reach the least one is measured past the level the baseline itself reached in that
    direction: a level that rests at 0 faults/s and now and then bursts to 100k/s has
    not changed by 120k/s when it bursts to 120k/s, but by 20k/s."""
    if z_min is None:
        z_min = significance_of(None).significant_z
    with np.errstate(invalid="ignore"):
        moved = values - median
        change = np.abs(moved)
        past = change
        if reach is not None:
            past = change - np.where(moved >= 0, reach[0], reach[1])
        cells = (past >= least) & (change >= z_min * scale) & (change > 0)
        if direction is not None and direction.any():
            cells &= in_direction(moved, direction)
        return cells


@functools.lru_cache(maxsize=16)
def _typical_level_columns(features: tuple[str, ...]) -> np.ndarray:
    """Indices of the feature columns of a window's typical level (mean, median)."""
    return np.flatnonzero([f in TYPICAL_LEVEL_FEATURES for f in features])


#: features whose reach the baseline's own levels set (:func:`level_tails`): a window's
#: typical level and an event count's sum over the window (a level in counts)
REACH_FEATURES = (*TYPICAL_LEVEL_FEATURES, "sum")


@functools.lru_cache(maxsize=16)
def _reach_columns(features: tuple[str, ...]) -> np.ndarray:
    """Indices of the feature columns of :data:`REACH_FEATURES`."""
    return np.flatnonzero([f in REACH_FEATURES for f in features])


def level_tails(values: np.ndarray, features: tuple[str, ...],
                quantile: float = TAIL_QUANTILE) -> np.ndarray:
    """``(2, K)``: how far the baseline's window values ``values`` (n, K) of each level
    column (:data:`REACH_FEATURES`) reach above their median (the ``quantile`` quantile,
    :data:`TAIL_QUANTILE` unless given) and below it (the opposite quantile); 0 for the
    other columns and where there is no value."""
    out = np.zeros((2, values.shape[1]))
    cols = _reach_columns(tuple(features))
    if not cols.size or not len(values):
        return out
    out[0, cols], out[1, cols] = _spread_from_median(values[:, cols], quantile)
    with np.errstate(invalid="ignore"):
        return np.nan_to_num(np.maximum(out, 0.0), nan=0.0, posinf=0.0)


def level_changes_alone(cells: np.ndarray, values: np.ndarray, median: np.ndarray,
                        scale: np.ndarray, features: tuple[str, ...],
                        tails: np.ndarray | None = None,
                        settings: SignificanceConfig | None = None) -> np.ndarray:
    """``(W,)``: windows with a change that matters (``cells``) in a column of the
    window's typical level (mean, median: not a lone sample's min or max) at least
    ``significance.level_alone_z`` robust σ (the column's ``scale``) from the baseline
    ``median``: large and far enough to count without the detectors' surprise, where their
    scores average it away (one channel among thousands: a 1 GiB huge-page pool, +4.4
    points of memory in use). With the baseline's ``tails``
    (:func:`level_tails`), the scale is at least each tail's sigmas (its distance over
    :data:`~reveal.analysis.constants.TAIL_SIGMAS`, a normal law's to that quantile) in its
    direction: a level that rests low and now and then bursts (page faults at 0/s with
    bursts to 60k/s in a tenth of the windows) counts alone only far past its own bursts.
    Reads those columns only."""
    cols = _typical_level_columns(tuple(features))
    with np.errstate(invalid="ignore"):
        moved = values[:, cols] - median[cols]
        sigma = np.broadcast_to(scale[cols], moved.shape)
        if tails is not None:
            side = np.where(moved >= 0, tails[0, cols], tails[1, cols]) / TAIL_SIGMAS
            sigma = np.maximum(sigma, side)
        far = np.abs(moved) >= significance_of(settings).level_alone_z * sigma
    return (cells[:, cols] & far).any(axis=1)


def gate_active(least: np.ndarray) -> bool:
    """Whether the model judges significance: some column has a least change that matters
    (labelled data in normalised units has none, and is judged by surprise alone)."""
    finite = least[np.isfinite(least)]
    return bool(finite.size and (finite > 0).any())


@functools.lru_cache(maxsize=16)
def _feature_kinds(features: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Masks over feature columns, made once per column set: variance, median, level."""
    return (np.array([f == "variance" for f in features], dtype=bool),
            np.array([f == "median" for f in features], dtype=bool),
            np.array([f in LEVEL_FEATURES for f in features], dtype=bool))


def change_size(row: np.ndarray, median: np.ndarray, least: np.ndarray,
                features: Sequence[str]) -> np.ndarray:
    """How many least changes that matter each column moved, in the channel's own unit:
    a variance column is compared as a spread (square roots), so that a spread does not
    outgrow a level shift by being squared."""
    variance = _feature_kinds(tuple(features))[0]
    with np.errstate(divide="ignore", invalid="ignore"):
        moved = np.where(variance, np.abs(np.sqrt(np.maximum(row, 0.0))
                                          - np.sqrt(np.maximum(median, 0.0))),
                         np.abs(row - median))
        unit = np.where(variance, np.sqrt(np.maximum(least, 0.0)), least)
        return moved / np.where(unit > 0, unit, np.nan)


@functools.lru_cache(maxsize=32)
def _columns_where(channels: tuple[str, ...], meaning: Callable[[str], bool]) -> np.ndarray:
    """Mask over feature columns, made once per column set: the channel's metric has the
    ``meaning`` (a predicate on the metric's catalog entry, such as :func:`is_waiting`)."""
    return np.array([meaning(channel_metric(c)) for c in channels], dtype=bool)


def _is_work(metric: str) -> bool:
    """Whether ``metric`` measures work done (catalog ``fall = "symptom"``)."""
    return _meaning(metric).fall == "symptom"


def attribute_to_changes(evidence: Any, sizes: Mapping[str, float]) -> Any:
    """``evidence`` attributed among the subsystems by ``sizes``: each subsystem's largest
    change that matters and names a cause, in least changes that matter (the measure the
    claim is chosen by, so the subsystem a window is named by is its claim's). Shares are
    proportional to the sizes and sum as before; subsystems without a size give up theirs.
    Unchanged when no subsystem has a size."""
    sizes = {s: float(v) for s, v in sizes.items() if v > 0 and math.isfinite(v)}
    total = sum(sizes.values())
    if total <= 0:
        return evidence
    whole = sum(evidence.subsystem_shares.values()) or 1.0
    shares = {s: whole * v / total for s, v in sizes.items()}
    order = sorted(shares, key=lambda s: -shares[s])
    return replace(evidence, subsystem_shares=shares,
                   subsystems=[*order, *(s for s in evidence.subsystems if s not in shares)])


def lead_with_cause(evidence: Any, row: np.ndarray, cells: np.ndarray, least: np.ndarray,
                    scale: np.ndarray, median: np.ndarray, channels: Sequence[str],
                    features: Sequence[str], subsystems: Sequence[str],
                    keep_first: bool = False, name: Any = None,
                    settings: SignificanceConfig | None = None, n_cpus: int = 0,
                    kernel_ticks: float = 0.0) -> Any:
    """``evidence`` (a :class:`reveal.analysis.evidence.WindowEvidence`) with the reason
    that names the cause first: among the window's changes that matter, outside the side
    effects (:func:`is_side_effect`) and, where there are others, falls that are
    no cause (:func:`fall_is_not_cause`, below the baseline; with only such falls, a fall
    of the CPU time work was done in: the job stopped or waits), those that last through
    most of the window (a median that moved; or one that began within it and holds at its
    end, :func:`onset_columns`) where there are any, the largest (:func:`change_size`, in least
    changes that matter, so comparable across subsystems), named by its level where a level
    of it matters; the window's subsystems are led by the claim's. Side effects follow it.
    ``keep_first``: the first reason is a direct sign and keeps its place. ``name``: the
    channel a reason names for a column's channel (a CPU rank's CPU in this window).
    ``settings``: the model's significance settings (the code's defaults when None).
    ``n_cpus`` and ``kernel_ticks``: the host's CPUs (0: unknown) and the rise of its
    kernel and interrupt time in the window (ticks per second,
    :func:`reveal.analysis.served.kernel_rise`): a rise of a CPU busy share is sized by
    what that rise cannot account for (:func:`reveal.analysis.served.served_share`)."""

    if not evidence.reasons:
        return evidence
    metrics = [channel_metric(c) for c in channels]
    # a change that began within the window and holds at its end matters as its level would
    sig = significance_of(settings)
    onset, least = onset_columns(row, median, scale, least, channels, features, sig)
    direction = matter_directions(tuple(channels), tuple(features))
    with np.errstate(invalid="ignore"):
        onset &= in_direction(row - median, direction)
    cause = np.array([(bool(cells[k]) or bool(onset[k])) and not is_side_effect(metrics[k])
                      and np.isfinite(least[k]) for k in range(len(channels))])
    if not cause.any():
        return evidence
    mattered = cause.copy()  # every change that matters and can be a cause, sized below
    # less work done is where the job waits, less waiting no slowdown: others go first
    with np.errstate(invalid="ignore"):
        relief = _columns_where(tuple(channels), fall_is_not_cause) & (row < median)
    if (cause & ~relief).any():
        cause &= ~relief
    else:  # only falls that are no cause matter: the job did less work, seen first as its
        # CPU time (its traffic, disk and memory traffic carry what that work produced)
        work = cause & _columns_where(tuple(channels), _is_work) \
            & (np.asarray(subsystems) == "cpu")
        if work.any():
            cause = work
    # time spent waiting follows from what uses the resource: that use goes first
    waiting = _columns_where(tuple(channels), is_waiting)
    if (cause & ~waiting).any():
        cause &= ~waiting
    size = change_size(row, median, least, features)
    # a rise of the host's CPU busy share made of kernel time served what else moved
    # (page faults, I/O, packets): it is sized by the work the tasks did themselves
    served = served_share(channels, features, kernel_ticks, n_cpus)
    with np.errstate(divide="ignore", invalid="ignore"):
        size = np.where(served > 0, np.maximum(row - median - served, 0.0) / least, size)
    size = np.where(cause, np.nan_to_num(size, nan=0.0, posinf=0.0), -1.0)
    # a change that lasts through most of the window (its median moved), or that began
    # within it and holds at its end, before a burst
    _, _, is_level = _feature_kinds(tuple(features))
    lasting = (_lasting_columns(tuple(channels), tuple(features)) | onset) & cause
    pool = lasting if lasting.any() else cause
    if not keep_first:
        # among the changes the claim is chosen from (a change that lasts through most of
        # the window outweighs a burst elsewhere), by their sizes
        largest: dict[str, float] = {}
        for k in np.flatnonzero(pool):
            largest[subsystems[k]] = max(largest.get(subsystems[k], 0.0), float(size[k]))
        evidence = attribute_to_changes(evidence, largest)
    # the largest change that matters leads, in whichever subsystem: sizes are counted in
    # each channel's own least change that matters, so they compare across subsystems
    pick = int(np.argmax(np.where(pool, size, -1.0)))
    # within the channel, a level that matters says more than a spread or a slope
    levels = (np.asarray(channels) == channels[pick]) & is_level & cause
    if levels.any():
        pick = int(np.argmax(np.where(levels, size, -1.0)))
    channel, feature = channels[pick], features[pick]
    if not keep_first and evidence.subsystems and evidence.subsystems[0] != subsystems[pick]:
        # the window is named by the subsystem its claim speaks of
        evidence = replace(evidence, subsystems=[
            subsystems[pick], *(s for s in evidence.subsystems if s != subsystems[pick])])
    if name is not None:
        channel = name(channel)
    reasons = list(evidence.reasons)
    first = reasons[:1] if keep_first else []
    rest = reasons[1:] if keep_first else reasons
    found = next((r for r in rest if r.channel == channel and r.feature == feature), None)
    if found is None:
        z = (row[pick] - median[pick]) / scale[pick] if scale[pick] > 0 else np.inf
        found = Reason(channel, metrics[pick], feature, subsystems[pick], 0.0,
                       float(row[pick]), float(median[pick]),
                       float(np.clip(z, -1000.0, 1000.0)))
    rest = [r for r in rest if r is not found]
    # every reason sized by the model that decided: in least changes that matter, where its
    # change matters; those lead the rest, the largest first
    sized = {(name(c) if name is not None else c, f): float(v)
             for c, f, v, m in zip(channels, features, np.nan_to_num(
                 change_size(row, median, least, features), nan=0.0, posinf=0.0), mattered,
                 strict=True) if m and v > 0}

    def with_size(r: Reason) -> Reason:
        return replace(r, matters=sized.get((r.channel, r.feature)))

    first = [with_size(r) for r in first]
    found = with_size(found)
    rest = [with_size(r) for r in rest]
    causes = [r for r in rest if not is_side_effect(r.metric)]
    causes = sorted((r for r in causes if r.matters is not None), key=lambda r: -r.matters) \
        + [r for r in causes if r.matters is None]
    effects = [r for r in rest if is_side_effect(r.metric)]
    return replace(evidence, reasons=[*first, found, *causes, *effects])
