"""Metric metadata: subsystem, kind, unit, pruning priority and a human description.

Entries are data: one TOML file per telemetry source in ``reveal/catalog_entries/``
(``cgroup.toml``, ``procfs.toml``, ...), each line a metric's name and its fields::

    "cpu.user" = { subsystem = "cpu", kind = "counter", unit = "ticks", priority = 90 }

A name may be exact (``cpu.user``) or a glob (``vmstat.*``); lookup prefers the exact name,
then the longest matching glob, then infers the subsystem from the name, else ``unknown``.
Files are read in name order; a later file's exact name replaces an earlier one's. An
entry without a description is described by the metric's name.

Kinds:
- ``gauge``: a level (utilisation, bytes used, temperature); features on values.
- ``counter``: monotonic cumulative count; rated to per-second at analysis time.
- ``event``: cumulative error/fault count; rated, then summed per window.
- ``state``: a slow memory-layout level that records the host's history rather than its
  current load (free-list fragmentation from /proc/buddyinfo): a fault reshapes it and it
  stays reshaped long after. Only its changes within a window are evidence (spread, trend,
  shape), not its level (mean, median, minimum, maximum).
- ``static``: configuration-like (sizes, limits); excluded from single-host detection.
- ``smoothed``: a kernel-side moving average of another channel (load averages, PSI
  avg10/60/300). Kept for display, excluded from detection: its lag would stretch every
  anomaly by tens of seconds, and the underlying counter (``psi.*.total``,
  ``loadavg.runnable``) carries the same evidence at once.

``healthy`` (optional): the range of the channel's level a healthy host or job stays in,
as a table (:class:`Healthy`), e.g. ``healthy = { max = 25.0 }``: a channel of it whose
level lies outside through much of a baseline warns that a fault present during the
learn is learned as normal (:mod:`reveal.analysis.baseline_health`).

Meanings: what a change of the channel says when the analysis asks whether it matters and
what it names (:mod:`reveal.analysis.significance` and its neighbours). Each is optional;
an entry without it takes the default, which says nothing special:

- ``hurts`` (``"either"``): the direction of a change of the channel's level or trend that
  can hurt. ``"rise"`` for memory held (used, anonymous, shared, locked, unreclaimable
  kernel memory, dirty and writeback pages of the host, a NUMA node, a cgroup): memory
  freed costs the host nothing, and a job that releases memory shows what it lost in its
  work done. ``"fall"`` for their mirrors, available memory and free swap, and for traffic
  that yields when it competes (bytes, packets and TCP segments moved per interface,
  namespace, queueing discipline, softnet, InfiniBand port or collective): more of it
  alone hurts no one, and where it takes a link others need, their losses show on their own
  channels. UDP datagrams do not yield (no congestion control) and stay ``"either"``. The
  spread of a window may matter either way.
- ``rare`` (true): for an ``event`` channel counted in whole events, each one is rare on a
  healthy host and is judged by how rare it was in the baseline, one event where the
  baseline had none being a change that matters (:mod:`reveal.analysis.rare_events`).
  False for event counts that are the ordinary life of a busy host: major page faults (a
  file page read from disk as a job maps its files), huge-page fault fallbacks, and the
  resets, refused and aborted connections and datagrams to closed ports that clients,
  health checks and scanners cause on any networked host; they are judged by their cost.
- ``follows`` (false): the channel moves as a side effect of a cause elsewhere: CPUs
  entering idle states, idle CPU time (it falls as much as another state's time rises:
  that state names the use), interrupts and softirqs and the CPU time spent on them (the
  device or traffic that raised them names the cause), packet-processing counters,
  refaults and LRU shuffles, context switches and migrations, load averages, CPU
  frequency. A claim names it after the cause ("also").
- ``waiting`` (false): time spent waiting for a resource (pressure stall information, CPU
  time idle while I/O is outstanding, a virtual CPU's runnable time the hypervisor gave to
  another guest). It rises because something uses the resource, and a claim names that
  use first where it matters too; it is judged against wall time, never against the job's
  own use.
- ``fall`` (``""``: a fall may be a cause): a fall of the channel is never the cause of a
  slowdown. ``"symptom"``: work done (CPU busy and CPU time, instructions and cycles, bytes
  and packets moved, disk throughput and operations, GPU activity and power): less of it is
  where a job waits, not why (a cgroup v1 file as its v2 twin). ``"relief"``: waiting
  (stall pressure, retransmits, throttling, run and blocked queues) and the kernel's
  memory-management work (page faults, page allocations and frees, reclaim scans,
  refaults of evicted pages, swap: ``vmstat`` counters and page-fault counts): less of it
  is no slowdown, so only a rise of its level or trend can matter (a fault that ends
  shows it falling back; a job that stops stops faulting and freeing pages, seen in its
  work done). A claim leads with a fall of work done only when the window holds no other
  change that matters.
- ``alone`` (true): false for memory that moves between free and reclaimable (free pages
  and free lists, page cache, buffers, reclaimable slab, mapped files, file huge pages,
  virtual commitments; a cgroup's file pages and its whole memory, which holds its page
  cache): it never matters on its own, the host losing nothing when the page cache is
  dropped and refilled. What matters shows in available and anonymous memory, dirty
  pages, stalls, limit events and the disk traffic of the refill.
- ``exists`` (false): a count of threads that exist, running or sleeping (a cgroup's
  ``pids.current``, the host's scheduling entities): never a cost on its own (a worker
  pool started changes it by tens); what threads cost shows in runnable tasks, CPU time,
  memory and the fork rate.
- ``judged_as`` (``""``: by its unit): ``"disk"`` for page counters and a cgroup's byte
  counters that are disk traffic (pages dirtied and written back, swapped, paged in and
  out; a cgroup's I/O bytes): judged against the disk's throughput, not as CPU work.
  ``"huge_pages"`` for huge-page counts (unit ``pages``): judged in huge pages of memory.
- ``capacity`` (``""``): the channel records a capacity other channels are judged
  against. ``"cgroup_memory"``: a cgroup's whole memory, against which the parts of its
  memory (``cgroup.memory.stat.*`` bytes) are judged. ``"pcie_gen"``, ``"pcie_width"``
  (the PCIe link's current generation and lane count), ``"pcie_gen_max"``,
  ``"pcie_width_max"`` (the most it can train to): a GPU's PCIe link, against which its
  PCIe throughput is judged.
- ``repeated`` (``""``: read every sample): the collector reads the channel less often
  than every sample and repeats the last read in between. ``"always"``: a cgroup's files
  (every 0.5 s or 1 s); ``"in_netns"``: a network namespace's protocol counters (every
  1 s), the host's own read every sample. A counter's rate is then 0 between reads and the
  whole period's on the read, so a window's median is 0 whatever it counts: its window mean
  takes the median's place as the level that lasts.
- ``rate`` (false): a gauge that is a rate or a share of time in disguise (busy and
  utilisation percentages, throughput, ratios, pressure, run queues, load averages, clock
  frequencies, GPU readings, queue backlogs): a level of it that stays different is the
  job running differently, never adopted as a new steady state
  (:mod:`reveal.analysis.steady`).
- ``configuration`` (false): a setting or size (a huge-page pool, memory and swap size,
  link speed and MTU, TCP timers, GPU power limit, PCIe link maximum): compared on its own
  between baseline and run, and a change of it is a direct sign
  (:mod:`reveal.analysis.hostconfig`). Not every ``static`` channel: the dirty thresholds,
  DirectMap and CommitLimit are recomputed by the kernel as memory moves.
- ``jiffy_percent`` (false): a percentage computed from ``/proc/stat`` jiffies; one
  USER_HZ tick in one sample is its granule (:mod:`reveal.analysis.floors`).
- ``level_granule`` (0): the least change of the level that counts, in the metric's unit:
  a gauge the kernel keeps in batches (a protocol's socket memory, charged through per-CPU
  reserves of 256 pages), or one that moves in whole tasks.
- ``spike_granule`` (0): the least burst within one sample that counts, in the metric's
  unit, where that is more than 3 granules: page counters a process's start or exit moves
  in bulk (copy-on-write reuse after a fork, pages mlocked by start-up code), 256 pages.
- ``stall_total`` (false): a pressure stall total (µs), whose rate cannot exceed the time
  that passed; a stall above one second per second (a total read less often than every
  sample) is moved back to the samples before it (:mod:`reveal.analysis.derive`).
- ``sign`` (none): a direct sign (:mod:`reveal.analysis.direct`), a table
  (:class:`DirectSign`): a window mean at or above ``least`` (the level's unit) and far
  above the baseline's is evidence without a model, named in the entry's subsystem;
  ``cause`` (true): it says what holds the job back rather than how the job suffers from
  it, and leads before symptoms; ``tail`` (false): the channel moves in bursts as a job
  runs (a quiet median under a loud tail), and a change of it matters only beyond the
  baseline's own upper tail.

An entry that gives neither ``subsystem`` nor ``kind`` gives meanings alone, e.g.
``"psi.*" = { waiting = true }``: for the metrics of a family no other entry describes (a
pressure resource or an NVML field added later). Such a metric stays uncatalogued (its
subsystem inferred from its name, kind ``gauge``, no unit) and takes the meanings of the
matching meanings-only entry: the exact name, else the longest glob.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import tomllib
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources

SUBSYSTEMS = ("cpu", "gpu", "memory", "network", "storage", "software", "unknown")
KINDS = ("gauge", "counter", "event", "state", "static", "smoothed")
NOT_DETECTED = ("static", "smoothed")  # kinds left out of detection
#: The per-group channels that scale a multiplexed counter (``MetricInfo.multiplex_group``):
#: nanoseconds its event group was enabled and actually counting, labelled ``group=NAME``.
TIME_ENABLED_METRIC = "perf.time_enabled_ns"
TIME_RUNNING_METRIC = "perf.time_running_ns"


@dataclass(frozen=True)
class Healthy:
    """The healthy range of a channel's level, from its catalog entry's ``healthy`` table.

    The level is the channel's window mean in its derived unit (a counter or event rated
    per second) times ``scale``, in ``unit`` (empty: the derived unit). With ``per``, it is
    instead the window's sum of this channel over that of the ``per`` metric's channel with
    the same labels, times ``scale`` (retransmitted over sent segments, × 100: percent),
    judged only in windows where the ``per`` channel's mean is at least ``least`` (its unit
    per second): a share of a handful is no share. ``min`` and ``max`` bound the range
    (either may be absent). ``share``: the share of a baseline's windows outside the range
    beyond which the baseline is unhealthy (None: the analysis setting
    ``baseline_unhealthy_share``; 0: any window, for a rare event such as an OOM kill).
    """

    max: float | None = None
    min: float | None = None
    per: str = ""
    scale: float = 1.0
    unit: str = ""
    least: float = 0.0
    share: float | None = None

    def __post_init__(self) -> None:
        if self.max is None and self.min is None:
            raise ValueError("healthy: give max, min or both")
        for name in ("max", "min", "scale", "least", "share"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool)
                                      or not isinstance(value, int | float)
                                      or value != value):
                raise ValueError(f"healthy: {name} must be a number, got {value!r}")
        if self.max is not None and self.min is not None and self.min > self.max:
            raise ValueError(f"healthy: min {self.min} above max {self.max}")
        if not self.scale > 0:
            raise ValueError(f"healthy: scale must be positive, got {self.scale}")
        if self.share is not None and not 0.0 <= self.share < 1.0:
            raise ValueError(f"healthy: share must be in [0, 1), got {self.share}")
        if self.per and not self.unit:
            raise ValueError("healthy: a level per another metric needs its unit")


#: Values of the meanings that take a word (see the module's docstring); the first is the
#: default.
HURTS = ("either", "rise", "fall")
FALLS = ("", "symptom", "relief")
JUDGED_AS = ("", "disk", "huge_pages")
CAPACITIES = ("", "cgroup_memory", "pcie_gen", "pcie_width", "pcie_gen_max", "pcie_width_max")
REPEATED = ("", "always", "in_netns")
_WORDS = {"hurts": HURTS, "fall": FALLS, "judged_as": JUDGED_AS, "capacity": CAPACITIES,
          "repeated": REPEATED}
_FLAGS = ("follows", "waiting", "alone", "exists", "rate", "configuration", "jiffy_percent",
          "stall_total", "rare")
_GRANULES = ("level_granule", "spike_granule")
#: The fields of :class:`MetricInfo` that are meanings.
MEANINGS = ("hurts", "follows", "waiting", "fall", "alone", "exists", "judged_as", "capacity",
            "repeated", "rate", "configuration", "jiffy_percent", "level_granule",
            "spike_granule", "stall_total", "sign", "rare")


def _number(value: object) -> bool:
    """Whether ``value`` is a finite int or float (not a bool)."""
    return (not isinstance(value, bool) and isinstance(value, int | float)
            and value == value and abs(value) != float("inf"))


@dataclass(frozen=True)
class DirectSign:
    """A direct sign, from a catalog entry's ``sign`` table: a window mean of the channel at
    or above ``least`` (the level's unit: per second for a counter or event) is evidence
    without a model (:mod:`reveal.analysis.direct`). ``cause``: it says what holds the job
    back (a quota, a queueing discipline), not how the job suffers from it (retransmissions),
    and leads before symptoms. ``tail``: the channel moves in bursts as a job runs, and its
    scale is at least the baseline's upper tail's."""

    least: float
    cause: bool = True
    tail: bool = False

    def __post_init__(self) -> None:
        if not _number(self.least) or not self.least > 0:
            raise ValueError(f"sign: least must be a positive number, got {self.least!r}")
        for name in ("cause", "tail"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"sign: {name} must be true or false, "
                                 f"got {getattr(self, name)!r}")


@dataclass(frozen=True)
class MetricInfo:
    """Metadata of one metric (or a glob family of metrics).

    ``priority``: higher is kept first when pruning correlated metrics (utilisation and
    throughput metrics rank highest). ``description``: a noun phrase used in claims,
    e.g. "CPU busy percentage". ``multiplex_group``: for a counter the kernel may
    time-multiplex (perf), the name of its event group; its raw count is scaled per interval
    by the channels ``TIME_ENABLED_METRIC`` / ``TIME_RUNNING_METRIC`` with the same labels
    plus ``group=NAME`` (see ``reveal.analysis.derive``). ``healthy``: the range of its
    level a healthy host stays in (:class:`Healthy`; None: no such range).

    The fields from ``hurts`` on are the channel's meanings, each described with its
    default in the module's docstring. With neither ``subsystem`` nor ``kind`` the entry
    gives meanings alone (:attr:`meanings_only`).
    """

    name: str
    subsystem: str = ""
    kind: str = ""
    unit: str = ""
    priority: int = 0
    description: str = ""
    multiplex_group: str = ""
    healthy: Healthy | None = None
    hurts: str = "either"
    follows: bool = False
    waiting: bool = False
    fall: str = ""
    alone: bool = True
    exists: bool = False
    judged_as: str = ""
    capacity: str = ""
    repeated: str = ""
    rate: bool = False
    configuration: bool = False
    jiffy_percent: bool = False
    level_granule: float = 0.0
    spike_granule: float = 0.0
    stall_total: bool = False
    sign: DirectSign | None = None
    rare: bool = True

    def __post_init__(self) -> None:
        if self.meanings_only:
            if (self.unit or self.priority or self.description or self.multiplex_group
                    or self.healthy is not None):
                raise ValueError(f"{self.name}: an entry without subsystem and kind gives "
                                 "meanings alone (no unit, priority, description, "
                                 "multiplex_group or healthy)")
        elif self.subsystem not in SUBSYSTEMS:
            raise ValueError(f"{self.name}: unknown subsystem {self.subsystem!r}"
                             + ("" if self.subsystem else " (give subsystem and kind, or "
                                "neither for meanings alone)"))
        elif self.kind not in KINDS:
            raise ValueError(f"{self.name}: unknown kind {self.kind!r}")
        if isinstance(self.healthy, dict):  # as read from TOML
            object.__setattr__(self, "healthy", Healthy(**self.healthy))
        elif self.healthy is not None and not isinstance(self.healthy, Healthy):
            raise ValueError(f"{self.name}: healthy must be a table, got {self.healthy!r}")
        self._check_meanings()

    def _check_meanings(self) -> None:
        for name, allowed in _WORDS.items():
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(f"{self.name}: {name} must be one of "
                                 f"{', '.join(repr(a) for a in allowed if a)}, got {value!r}")
        for name in _FLAGS:
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{self.name}: {name} must be true or false, "
                                 f"got {getattr(self, name)!r}")
        for name in _GRANULES:
            value = getattr(self, name)
            if not _number(value) or value < 0:
                raise ValueError(f"{self.name}: {name} must be a number at least 0, "
                                 f"got {value!r}")
        if isinstance(self.sign, dict):  # as read from TOML
            try:
                object.__setattr__(self, "sign", DirectSign(**self.sign))
            except TypeError as exc:
                raise ValueError(f"sign: {exc}") from exc
        elif self.sign is not None and not isinstance(self.sign, DirectSign):
            raise ValueError(f"{self.name}: sign must be a table, got {self.sign!r}")
        if self.meanings_only and all(getattr(self, f.name) == f.default
                                      for f in dataclasses.fields(self) if f.name in MEANINGS):
            raise ValueError(f"{self.name}: give subsystem and kind, or a meaning")

    @property
    def meanings_only(self) -> bool:
        """Whether the entry gives meanings alone (neither subsystem nor kind): for metrics
        of its family that no other entry describes."""
        return not self.subsystem and not self.kind

    @property
    def counts_rare_events(self) -> bool:
        """Whether the metric counts rare error or fault events: kind ``event`` and
        ``rare``, in whole events (its unit neither a share nor bytes), no direct sign of
        its own (those keep their own rule) and no side effect (``follows``: a softirq run
        cut short follows from the traffic that filled it)."""
        return (self.kind == "event" and self.rare and self.sign is None and not self.follows
                and not any(w in self.unit for w in ("%", "byte")))

    @property
    def can_matter_alone(self) -> bool:
        """Whether a change of the metric can matter on its own: not memory moving between
        free and reclaimable (``alone = false``), not threads that exist (``exists``)."""
        return self.alone and not self.exists

    @property
    def level_unit(self) -> str:
        """The unit of the channel's level after derive: per second for a counter or
        event (``pages/s``), else its own."""
        if self.kind in ("counter", "event"):
            return f"{self.unit}/s" if self.unit else "per s"
        return self.unit

    @property
    def healthy_unit(self) -> str:
        """The unit of :attr:`healthy`'s bounds (empty without a range)."""
        if self.healthy is None:
            return ""
        return self.healthy.unit or self.level_unit


# Name fragments that reveal a subsystem, checked in order, for metrics no entry describes.
_INFER = (
    ("gpu", "gpu"), ("nvml", "gpu"), ("cuda", "gpu"), ("nccl", "network"),
    ("net", "network"), ("tcp", "network"), ("udp", "network"), ("eth", "network"),
    ("ib.", "network"), ("snmp", "network"), ("sock", "network"), ("retrans", "network"),
    ("disk", "storage"), ("block", "storage"), ("io.", "storage"), ("nvme", "storage"),
    ("mem", "memory"), ("vmstat", "memory"), ("swap", "memory"), ("huge", "memory"),
    ("numa", "memory"), ("page", "memory"),
    ("cpu", "cpu"), ("irq", "cpu"), ("sched", "cpu"), ("load", "cpu"), ("perf", "cpu"),
    ("freq", "cpu"), ("rapl", "cpu"), ("thermal", "cpu"),
    ("python", "software"), ("ebpf", "software"), ("proc", "software"),
)


def _is_glob(name: str) -> bool:
    return any(ch in name for ch in "*?[")


class Catalog:
    """Lookup of :class:`MetricInfo` by metric name (exact, glob, inferred); an inferred
    one takes the meanings of its meanings-only entry, if any."""

    def __init__(self, entries: list[MetricInfo]) -> None:
        self._exact: dict[str, MetricInfo] = {}
        self._globs: list[MetricInfo] = []
        self._meanings_exact: dict[str, MetricInfo] = {}
        self._meanings_globs: list[MetricInfo] = []
        for entry in entries:
            if entry.meanings_only:
                if _is_glob(entry.name):
                    self._meanings_globs.append(entry)
                else:
                    self._meanings_exact[entry.name] = entry
            elif _is_glob(entry.name):
                self._globs.append(entry)
            else:
                self._exact[entry.name] = entry
        self._globs.sort(key=lambda e: len(e.name), reverse=True)
        self._meanings_globs.sort(key=lambda e: len(e.name), reverse=True)

    def __contains__(self, metric: str) -> bool:
        return metric in self._exact or any(fnmatch.fnmatchcase(metric, g.name)
                                            for g in self._globs)

    def entries(self) -> list[MetricInfo]:
        """The entries that describe metrics (meanings-only entries aside)."""
        return list(self._exact.values()) + list(self._globs)

    def meanings_only(self) -> list[MetricInfo]:
        """The entries that give meanings alone, for metrics no other entry describes."""
        return list(self._meanings_exact.values()) + list(self._meanings_globs)

    def lookup(self, metric: str) -> MetricInfo:
        """Metadata for ``metric`` (the part of a channel name before ``{``)."""
        metric = metric.split("{", 1)[0]
        return _lookup_cached(self, metric)

    def _resolve(self, metric: str) -> MetricInfo:
        hit = self._exact.get(metric)
        if hit is not None:
            return hit if hit.description else replace(hit, description=_humanise(metric))
        for entry in self._globs:
            if fnmatch.fnmatchcase(metric, entry.name):
                return replace(entry, name=metric,
                               description=entry.description or _humanise(metric))
        family = self._meanings_exact.get(metric) or next(
            (e for e in self._meanings_globs if fnmatch.fnmatchcase(metric, e.name)), None)
        if family is not None:
            return replace(family, name=metric, subsystem=infer_subsystem(metric), kind="gauge",
                           description=_humanise(metric))
        return MetricInfo(metric, infer_subsystem(metric), "gauge", "", 0, _humanise(metric))


@lru_cache(maxsize=65536)
def _lookup_cached(catalog: Catalog, metric: str) -> MetricInfo:
    return catalog._resolve(metric)


def infer_subsystem(metric: str) -> str:
    """Guess a subsystem from a metric name, else ``unknown``."""
    low = metric.lower()
    for fragment, subsystem in _INFER:
        if fragment in low:
            return subsystem
    return "unknown"


def _humanise(metric: str) -> str:
    return metric.replace("_", " ").replace(".", " ")


ENTRIES_PACKAGE = "reveal.catalog_entries"  #: the package whose ``*.toml`` files hold the entries


def catalog_sources(package: str = ENTRIES_PACKAGE) -> list[str]:
    """Names of the catalog's source files (``procfs`` for ``procfs.toml``), in load order."""
    folder = resources.files(package)
    return sorted(item.name.removesuffix(".toml") for item in folder.iterdir()
                  if item.name.endswith(".toml"))


def source_entries(source: str, package: str = ENTRIES_PACKAGE) -> list[MetricInfo]:
    """The entries of one source file (``reveal/catalog_entries/SOURCE.toml``), in file order.

    Raises ``ValueError`` naming the file and the entry for bad TOML, an unknown field or an
    unknown subsystem or kind.
    """
    file_name = f"{source}.toml"
    text = resources.files(package).joinpath(file_name).read_text(encoding="utf-8")
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"catalog file {file_name}: {exc}") from exc
    entries = []
    for name, fields in table.items():
        try:
            entries.append(MetricInfo(name, **fields))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"catalog file {file_name}: {name}: {exc}") from exc
    return entries


@lru_cache(maxsize=1)
def default_catalog() -> Catalog:
    """The catalog built from every source file in ``reveal/catalog_entries/``."""
    entries: list[MetricInfo] = []
    for source in catalog_sources():
        entries.extend(source_entries(source))
    return Catalog(entries)
