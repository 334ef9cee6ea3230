"""Per-cgroup (container, pod, service) CPU, memory, I/O and pressure, cgroup v2 and v1.

Hierarchies come from ``/proc/self/mountinfo`` (cgroup2 mounts and the v1 ``cpu``,
``cpuacct``, ``memory``, ``blkio``, ``pids`` controllers; hybrid hosts have both), or from
the ``cgroup_root`` option (a v2 root, or a directory holding v1 controller directories).
Cgroups are discovered again at every ``refresh()``: directories up to ``max_depth`` deep
matching ``patterns`` (globs matched segment by segment, in priority order: container and
pod patterns first), at most ``max_cgroups`` of them (the rest are counted in
``info["cgroups_dropped"]``).

Cgroup names are chosen by tenants and untrusted: they only ever appear as the value of the
``cgroup`` label, made printable, stripped of ``, = { }``, bounded to ``max_label`` characters
(a hash suffix keeps them distinct). ``info["cgroups"]`` maps each label to the escaped path.

A cgroup a container runtime, Kubernetes or systemd made also gets the labels of
:func:`reveal.collect.containers.identify`: ``container=docker:<short id>``, ``pod=<uid>``,
``service=<unit>``.

Channels (``{cgroup=LABEL}``; counters as read):

- v2: ``cgroup.cpu.usage_usec|user_usec|system_usec|nr_periods|nr_throttled|throttled_usec``
  (cpu.stat), ``cgroup.memory.current`` (bytes), ``cgroup.memory.swap_current``,
  ``cgroup.memory.stat.<key>``, ``cgroup.memory.events.<key>`` (oom, oom_kill, high, max),
  ``cgroup.io.<rbytes|wbytes|rios|wios|dbytes|dios>{dev=MAJ:MIN}``,
  ``cgroup.psi.<cpu|memory|io>.<some|full>.total`` (µs; ``psi_avgs=True`` adds avg10..300).
- v1: ``cgroup.cpu.nr_periods|nr_throttled|throttled_time`` (ns), ``cgroup.cpuacct.usage_ns``,
  ``cgroup.cpuacct.user|system`` (USER_HZ ticks), ``cgroup.memory.usage_bytes``,
  ``cgroup.memory.failcnt``, ``cgroup.memory.stat.<key>``,
  ``cgroup.blkio.bytes|ios{dev=MAJ:MIN,op=Read|Write}``.
- both: ``cgroup.pids.current``.

``memory_stat``: ``"default"`` (a dozen keys), ``"all"`` or ``"none"``. ``detail="basic"``
keeps usage, throttling, memory in use, memory events/limit hits, I/O bytes and PSI totals
(no memory.stat, swap, pids, cpuacct.stat, blkio I/O counts) for about half the cost.

Cost: every file is one ``pread`` per read (2–3 µs of kernel time each, memory.stat about
10 µs). CPU usage and throttling, CPU pressure and memory in use are read every
``tick_period_s`` (0.5 s; 0: every tick); the rest (memory.stat, memory events, I/O, pids,
memory and I/O pressure) every ``detail_period_s`` (1 s); their last values are repeated
on the ticks between, so a v2 cgroup costs about 10 µs twice a second plus 30 µs once.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
from collections.abc import Callable
from typing import ClassVar

from reveal.collect._dirwatch import DirWatch
from reveal.collect._procfs import (
    FileProbe,
    GroupSpec,
    Layout,
    PlanItem,
    Source,
    key_value_layout,
    metric_name,
    read_bytes,
    single_value,
    token_lines,
)
from reveal.collect.containers import identify
from reveal.collect.options import as_list
from reveal.collect.pressure import psi_layout, split_equals
from reveal.collect.probe import ProbeUnavailable, register
from reveal.errors import InputError
from reveal.frame import format_channel

DEFAULT_PATTERNS = (
    # containers and pods first, then VMs, then top-level groups, then system services
    "docker/*", "system.slice/docker-*.scope", "system.slice/containerd-*.scope",
    "system.slice/crio-*.scope", "kubepods/*/pod*", "kubepods/pod*",
    "kubepods.slice/*/*pod*.slice", "kubepods.slice/*pod*.slice", "machine.slice/*",
    "lxc/*", "lxc.payload.*", "*", "system.slice/*",
)
V1_CONTROLLERS = ("cpu", "cpuacct", "memory", "blkio", "pids")
MEMORY_STAT_V2 = ("anon", "file", "kernel", "sock", "shmem", "file_dirty", "file_writeback",
                  "slab", "workingset_refault_file", "pgfault", "pgmajfault", "pgscan",
                  "pgsteal")
MEMORY_STAT_V1 = ("cache", "rss", "rss_huge", "shmem", "mapped_file", "dirty", "writeback",
                  "swap", "workingset_refault_file", "pgfault", "pgmajfault", "unevictable")
_LABEL_BAD = set(",={}")


def cgroup_label(path: str, limit: int = 64) -> str:
    """A cgroup path as a label value: printable ASCII, no ``, = { }``, at most ``limit``."""
    text = "".join(ch if (" " <= ch <= "~" and ch not in _LABEL_BAD) else "_" for ch in path)
    if len(text) > limit or text != path:
        digest = hashlib.sha1(path.encode("utf-8", "surrogateescape")).hexdigest()[:8]
        if len(text) > limit:
            text = f"{text[: limit - 9]}~{digest}"
        elif text != path:
            text = f"{text[: limit - 9]}~{digest}" if len(text) + 9 > limit else \
                f"{text}~{digest}"
    return text


def path_matches(path: str, pattern: str) -> bool:
    """Glob match segment by segment (``*`` never crosses ``/``)."""
    parts, globs = path.split("/"), pattern.split("/")
    return len(parts) == len(globs) and all(
        fnmatch.fnmatchcase(p, g) for p, g in zip(parts, globs, strict=True))


def cgroup_mounts(mountinfo: bytes) -> list[tuple[str, str]]:
    """``[(kind, mount point)]``: kind ``v2`` or a v1 controller name, first mount wins."""
    found: dict[str, str] = {}
    for line in mountinfo.decode("utf-8", "surrogateescape").splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        sep = fields.index("-")
        if len(fields) < sep + 4 or len(fields) < 5:
            continue
        fstype, options = fields[sep + 1], fields[sep + 3].split(",")
        point = _unescape(fields[4])
        if fstype == "cgroup2":
            found.setdefault("v2", point)
        elif fstype == "cgroup":
            for controller in V1_CONTROLLERS:
                if controller in options:
                    found.setdefault(controller, point)
    return list(found.items())


def _unescape(field: str) -> str:
    """Undo mountinfo's octal escapes (``\\040`` is a blank)."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1: i + 4].isdigit():
            out.append(chr(int(field[i + 1: i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def _kv(prefix: str, labels: dict[str, str], keys: tuple[str, ...] | None) -> Callable[
        [bytes], Layout]:
    def layout(data: bytes) -> Layout:
        full = key_value_layout(data, prefix, labels)
        if keys is None:
            return full
        wanted = {format_channel(f"{prefix}{k}", labels) for k in keys}
        return {ch: spot for ch, spot in full.items() if ch in wanted}

    return layout


def _io_layout(labels: dict[str, str]) -> Callable[[bytes], Layout]:
    """v2 io.stat: ``8:0 rbytes 1 wbytes 2 rios 3 ...`` (after ``=`` became a blank)."""

    def layout(data: bytes) -> Layout:
        result: Layout = {}
        for base, toks in token_lines(data):
            if toks and b":" in toks[0]:
                dev = toks[0].decode("ascii", "replace")
                for i in range(1, len(toks) - 1, 2):
                    if toks[i + 1].isdigit():
                        name = f"cgroup.io.{metric_name(toks[i])}"
                        result[format_channel(name, {**labels, "dev": dev})] = (base + i + 1,
                                                                               1.0)
        return result

    return layout


def _blkio_layout(metric: str, labels: dict[str, str]) -> Callable[[bytes], Layout]:
    """v1 blkio.throttle.*: ``8:0 Read 123`` lines; Read and Write kept."""

    def layout(data: bytes) -> Layout:
        result: Layout = {}
        for base, toks in token_lines(data):
            if len(toks) == 3 and toks[1] in (b"Read", b"Write") and toks[2].isdigit():
                extra = {"dev": toks[0].decode("ascii", "replace"), "op": toks[1].decode()}
                result[format_channel(metric, {**labels, **extra})] = (base + 2, 1.0)
        return result

    return layout


#: Seconds between two reads of the :data:`EVERY_TICK` files (their last values repeated
#: on the ticks between): with 50 cgroups and 20 namespaces, the whole collector 1.33 %
#: of a core at 0.5 s against 1.52 % at every tick (bench/results/containers.json).
TICK_PERIOD_S = 0.5
#: A plan is made again from the files present at least once in this many refreshes.
REPLAN_EVERY = 6
#: Files read every ``tick_period_s``: what a CPU limit, a noisy neighbour or a memory
#: spike moves first. The rest (memory.stat alone costs more than all of these) every
#: ``detail_period_s``.
EVERY_TICK = frozenset({"cpu.stat", "cpu.pressure", "memory.current", "cpuacct.usage",
                        "memory.usage_in_bytes"})


@register
class CgroupProbe(FileProbe):
    """CPU, throttling, memory, I/O and pressure per container/cgroup (v2 and v1)."""

    name = "cgroup"
    options_help: ClassVar[dict[str, str]] = {
        "patterns": "cgroups to record, shell patterns on their paths (default: container, "
                    "pod, service and slice patterns)",
        "max_depth": "deepest cgroup level looked at (default: 4)",
        "max_cgroups": "most cgroups recorded at once (default: 16)",
        "max_label": "longest cgroup label kept, characters (default: 64)",
        "detail": "full or basic (default: full)",
        "memory_stat": "memory.stat keys: default (a dozen), all or none (default: default; "
                       "none with detail=basic)",
        "psi_avgs": "also the PSI 10/60/300 s averages (default: false)",
        "cgroup_root": "the cgroup hierarchy's mount point (default: from mountinfo)",
        "detail_period_s": "read memory.stat, memory and I/O events, I/O, pids and memory "
                           "and I/O pressure every this many seconds, their last values "
                           "repeated between; 0: every tick (default: 1; CPU usage, "
                           "throttling, CPU pressure and memory in use: tick_period_s)",
        "tick_period_s": "read CPU usage, throttling, CPU pressure and memory in use every "
                         "this many seconds, their last values repeated between; 0: every "
                         "tick (default: 0.5)",
        "watch_dirs": "hear cgroups made or removed at once (inotify on the directories "
                      "listed), a refresh within a second instead of at the next periodic "
                      "one (default: true)",
    }
    description = "per-cgroup CPU, throttling, memory, I/O, pressure (cgroup v2 and v1)"

    def __init__(self, **options):
        super().__init__(**options)
        self.patterns: tuple[str, ...] = tuple(as_list(options.get("patterns",
                                                                   DEFAULT_PATTERNS)))
        self.max_depth = int(options.get("max_depth", 4))
        self.max_cgroups = int(options.get("max_cgroups", 16))
        self.max_label = int(options.get("max_label", 64))
        self.detail = str(options.get("detail", "full"))
        if self.detail not in ("full", "basic"):
            raise InputError(f"cgroup: detail must be 'full' or 'basic', not {self.detail!r}")
        self.memory_stat = str(options.get("memory_stat",
                                           "default" if self.detail == "full" else "none"))
        self.psi_avgs = bool(options.get("psi_avgs", False))
        self._plans = 0
        self._last_plan: tuple[tuple[object, ...], dict[str, PlanItem]] | None = None
        self.detail_period_s = float(options.get("detail_period_s", 1.0))
        if not self.detail_period_s >= 0:
            raise InputError("cgroup: detail_period_s must be 0 or more seconds")
        self.tick_period_s = float(options.get("tick_period_s", TICK_PERIOD_S))
        if not self.tick_period_s >= 0:
            raise InputError("cgroup: tick_period_s must be 0 or more seconds")
        #: the directories listed at discovery, watched for cgroups made or removed
        self._listed: set[str] = set()
        self.watch_dirs = bool(options.get("watch_dirs", True))
        self._dirwatch: DirWatch | None = None  # made at the first discovery

    def hierarchies(self) -> list[tuple[str, str]]:
        """``[(kind, root directory)]`` of the cgroup hierarchies to read."""
        root = self.options.get("cgroup_root")
        if root is not None:
            root = str(root).rstrip("/")
            if os.path.exists(f"{root}/cgroup.controllers"):
                return [("v2", root)]
            return [(c, f"{root}/{c}") for c in V1_CONTROLLERS if os.path.isdir(f"{root}/{c}")]
        data = read_bytes(f"{self.proc_root}/self/mountinfo")
        return [] if data is None else [(k, p) for k, p in cgroup_mounts(data)
                                         if os.path.isdir(p)]

    def discover(self, hierarchies: list[tuple[str, str]]) -> list[str]:
        """Relative cgroup paths to follow, in pattern priority order, capped."""
        seen: set[str] = set()
        self._listed = set()
        for root in dict.fromkeys(r for _, r in hierarchies):
            self._walk(root, "", 1, seen)
        if self.watch_dirs:
            if self._dirwatch is None:
                self._dirwatch = DirWatch()
            self._dirwatch.watch(self._listed)
        chosen: list[str] = []
        taken: set[str] = set()
        for pattern in self.patterns:
            for path in sorted(p for p in seen if p not in taken and path_matches(p, pattern)):
                chosen.append(path)
                taken.add(path)
        self.info["cgroups_dropped"] = max(0, len(chosen) - self.max_cgroups)
        self.info["cgroup_count"] = min(len(chosen), self.max_cgroups)
        return chosen[: self.max_cgroups]

    def _walk(self, root: str, rel: str, depth: int, seen: set[str]) -> None:
        if depth > self.max_depth:
            return
        directory = f"{root}/{rel}" if rel else root
        try:
            entries = list(os.scandir(directory))
        except OSError:
            return
        self._listed.add(directory)
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                path = f"{rel}/{entry.name}" if rel else entry.name
                seen.add(path)
                self._walk(root, path, depth + 1, seen)

    def _labels(self, paths: list[str]) -> dict[str, str]:
        labels: dict[str, str] = {}
        used: set[str] = set()
        for path in paths:
            label = cgroup_label(path, self.max_label)
            if label in used:
                digest = hashlib.sha1(path.encode("utf-8", "surrogateescape")).hexdigest()[:8]
                label = f"{label[: self.max_label - 9]}~{digest}"
            used.add(label)
            labels[path] = label
        return labels

    def plan(self) -> dict[str, PlanItem]:
        """The files of the cgroups present now. Listing the files of every cgroup costs
        more than the rest of a refresh together, so the last plan is kept while the same
        cgroups are there, and made again every :data:`REPLAN_EVERY` plans (a controller
        enabled in a known cgroup adds its files)."""
        hierarchies = self.hierarchies()
        self.info["hierarchies"] = {k: r for k, r in hierarchies}
        paths = self.discover(hierarchies)
        key = (tuple(hierarchies), tuple(paths))
        self._plans += 1
        if self._last_plan is not None and self._last_plan[0] == key and \
                self._plans % REPLAN_EVERY:
            return self._last_plan[1]
        plan = self._plan_paths(hierarchies, paths)
        self._last_plan = (key, plan)
        return plan

    def _plan_paths(self, hierarchies: list[tuple[str, str]],
                    paths: list[str]) -> dict[str, PlanItem]:
        labels = self._labels(paths)
        self.info["cgroups"] = {labels[p]: p.encode("unicode_escape").decode("ascii")[:256]
                                for p in paths}
        counts: list[Source] = []
        decimals: list[Source] = []
        for path in paths:
            # who owns it (container, pod, service), from the path alone
            tags = {**identify(path).labels(self.max_label), "cgroup": labels[path]}
            for kind, root in hierarchies:
                directory = f"{root}/{path}"
                if os.path.isdir(directory):
                    self._plan_dir(counts, decimals, kind, directory, tags)
        fast = tuple(src for src in counts if src.path.rsplit("/", 1)[-1] in EVERY_TICK)
        slow = tuple(src for src in counts if src.path.rsplit("/", 1)[-1] not in EVERY_TICK)
        plan: dict[str, PlanItem] = {}
        if fast:
            plan["counts"] = GroupSpec(fast, period_s=self.tick_period_s)
        if slow:
            plan["detail"] = GroupSpec(slow, period_s=self.detail_period_s)
        if decimals:
            plan["pressure_avgs"] = GroupSpec(tuple(decimals), "fixed",
                                              period_s=self.detail_period_s)
        return plan

    def _stat_keys(self, default: tuple[str, ...]) -> tuple[str, ...] | None:
        return None if self.memory_stat == "all" else default

    def _plan_dir(self, counts: list[Source], decimals: list[Source], kind: str, d: str,
                  tags: dict[str, str]) -> None:
        """Append the sources of one cgroup directory of one hierarchy."""
        tag = tags["cgroup"]
        full = self.detail == "full"
        tables: list[tuple[str, Callable[[bytes], Layout]]] = []
        values: list[tuple[str, str]] = []
        if kind == "v2":
            tables.append(("cpu.stat", _kv("cgroup.cpu.", tags, None)))
            if self.memory_stat != "none":
                tables.append(("memory.stat", _kv("cgroup.memory.stat.", tags,
                                                  self._stat_keys(MEMORY_STAT_V2))))
            tables.append(("memory.events", _kv("cgroup.memory.events.", tags, None)))
            tables.append(("io.stat", _io_layout(tags)))
            values.append(("memory.current", "cgroup.memory.current"))
            if full:
                values += [("memory.swap.current", "cgroup.memory.swap_current"),
                           ("pids.current", "cgroup.pids.current")]
            for res in ("cpu", "memory", "io"):
                path = f"{d}/{res}.pressure"
                if os.path.exists(path):
                    # totals are integers (µs): parsed with the counts; averages apart
                    psi = f"cgroup.psi.{res}"
                    counts.append(Source(path, psi_layout(psi, tags, avgs=False),
                                         split_equals, tag=tag))
                    if self.psi_avgs:
                        decimals.append(Source(path, psi_layout(psi, tags, totals=False),
                                               split_equals, tag=tag))
        elif kind == "cpu":
            tables.append(("cpu.stat", _kv("cgroup.cpu.", tags, None)))
        elif kind == "cpuacct":
            if full:
                tables.append(("cpuacct.stat", _kv("cgroup.cpuacct.", tags, None)))
            values.append(("cpuacct.usage", "cgroup.cpuacct.usage_ns"))
        elif kind == "memory":
            if self.memory_stat != "none":
                tables.append(("memory.stat", _kv("cgroup.memory.stat.", tags,
                                                  self._stat_keys(MEMORY_STAT_V1))))
            values += [("memory.usage_in_bytes", "cgroup.memory.usage_bytes"),
                       ("memory.failcnt", "cgroup.memory.failcnt")]
        elif kind == "blkio":
            tables.append(("blkio.throttle.io_service_bytes",
                           _blkio_layout("cgroup.blkio.bytes", tags)))
            if full:
                tables.append(("blkio.throttle.io_serviced",
                               _blkio_layout("cgroup.blkio.ios", tags)))
        elif kind == "pids" and full:
            values.append(("pids.current", "cgroup.pids.current"))
        for filename, layout in tables:
            path = f"{d}/{filename}"
            if os.path.exists(path):
                prepare = split_equals if filename == "io.stat" else None
                counts.append(Source(path, layout, prepare, tag=tag))
        for filename, metric in values:
            path = f"{d}/{filename}"
            if os.path.exists(path):
                counts.append(Source(path, single_value(format_channel(metric, tags)), tag=tag))

    def open(self) -> None:
        hierarchies = self.hierarchies()
        if not hierarchies:
            where = self.options.get("cgroup_root") or f"{self.proc_root}/self/mountinfo"
            self.status = "unavailable"
            self.reason = f"cgroup: no cgroup hierarchy found via {where}"
            raise ProbeUnavailable(self.reason)
        self.empty_ok = True  # containers may start later: refresh() picks them up
        super().open()
        if self._dirwatch is not None and self._dirwatch.reason:
            self.info["dirwatch"] = self._dirwatch.reason
        if not self.channels:
            self.reason = (f"no cgroup matches {list(self.patterns)[:4]} yet "
                           f"(hierarchies: {', '.join(k for k, _ in hierarchies)})")

    def wants_refresh(self) -> bool:
        """A cgroup was made or removed in a directory listed at the last discovery."""
        return self._dirwatch is not None and self._dirwatch.changed()

    def close(self) -> None:
        super().close()
        if self._dirwatch is not None:
            self._dirwatch.close()
            self._dirwatch = None
