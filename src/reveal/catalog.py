"""Metric metadata: subsystem, kind, unit, pruning priority and a human description.

Entries are data: one TOML file per telemetry source in ``reveal/catalog_entries/``
(``cgroup.toml``, ``procfs.toml``, ...), each line a metric's name and its fields::

    "cpu.user" = { subsystem = "cpu", kind = "counter", unit = "ticks", priority = 90 }

A name may be exact (``cpu.user``) or a glob (``vmstat.*``); lookup prefers the exact name,
then the longest matching glob, then infers the subsystem from the name, else ``unknown``.
Files are read in name order; a later file's exact name replaces an earlier one's.

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
"""

from __future__ import annotations

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
    """

    name: str
    subsystem: str
    kind: str
    unit: str = ""
    priority: int = 0
    description: str = ""
    multiplex_group: str = ""
    healthy: Healthy | None = None

    def __post_init__(self) -> None:
        if self.subsystem not in SUBSYSTEMS:
            raise ValueError(f"{self.name}: unknown subsystem {self.subsystem!r}")
        if self.kind not in KINDS:
            raise ValueError(f"{self.name}: unknown kind {self.kind!r}")
        if isinstance(self.healthy, dict):  # as read from TOML
            object.__setattr__(self, "healthy", Healthy(**self.healthy))
        elif self.healthy is not None and not isinstance(self.healthy, Healthy):
            raise ValueError(f"{self.name}: healthy must be a table, got {self.healthy!r}")

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


class Catalog:
    """Lookup of :class:`MetricInfo` by metric name (exact, glob, inferred)."""

    def __init__(self, entries: list[MetricInfo]) -> None:
        self._exact: dict[str, MetricInfo] = {}
        self._globs: list[MetricInfo] = []
        for entry in entries:
            if any(ch in entry.name for ch in "*?["):
                self._globs.append(entry)
            else:
                self._exact[entry.name] = entry
        self._globs.sort(key=lambda e: len(e.name), reverse=True)

    def __contains__(self, metric: str) -> bool:
        return metric in self._exact or any(fnmatch.fnmatchcase(metric, g.name)
                                            for g in self._globs)

    def entries(self) -> list[MetricInfo]:
        return list(self._exact.values()) + list(self._globs)

    def lookup(self, metric: str) -> MetricInfo:
        """Metadata for ``metric`` (the part of a channel name before ``{``)."""
        metric = metric.split("{", 1)[0]
        return _lookup_cached(self, metric)

    def _resolve(self, metric: str) -> MetricInfo:
        hit = self._exact.get(metric)
        if hit is not None:
            return hit
        for entry in self._globs:
            if fnmatch.fnmatchcase(metric, entry.name):
                return replace(entry, name=metric,
                               description=entry.description or _humanise(metric))
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
