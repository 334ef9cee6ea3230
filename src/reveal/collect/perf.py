"""perf_event_open counters, per CPU, system-wide (the ``perf`` probe).

Opens counting (not sampling) events with the raw ``perf_event_open`` system call through
ctypes: no ``perf`` subprocess. Events are opened in small named groups per CPU so one
``read`` per group returns every member with the group's ``time_enabled``/``time_running``.
Everything is stored raw, as read: the counts (unscaled, cumulative since the probe opened)
and the group's two times. When the kernel multiplexes hardware counters a count covers
only the time its group ran; analysis scales each interval's delta by Δenabled / Δrunning
(``reveal.analysis.derive``), which a stored running estimate cannot do (it can go down). A
group whose read fails reads NaN. Software events (task clock, context switches, migrations,
page faults) exist everywhere; hardware events (cycles, instructions, caches, branches,
stalls, LLC) only where a PMU is exposed, so a virtual machine without one gives a
``degraded`` probe whose ``info["unsupported_events"]`` lists each refused event once.

Channels: ``perf.<event>{cpu=N}`` (counts of events); ``perf.task_clock{cpu=N}`` (ns);
``perf.time_enabled_ns{cpu=N,group=G}`` and ``perf.time_running_ns{cpu=N,group=G}`` (ns)
for each opened group, ``G`` its name (``software``, ``cycles``, ``cache``, ``branches``,
``stalls``, ``llc``): the catalog's ``multiplex_group`` of its events.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from reveal.catalog import TIME_ENABLED_METRIC, TIME_RUNNING_METRIC
from reveal.collect import _procfs
from reveal.collect.hostinfo import online_cpus
from reveal.collect.probe import NativePart, Probe, ProbeUnavailable, register
from reveal.frame import format_channel

# <linux/perf_event.h>
PERF_TYPE_HARDWARE = 0
PERF_TYPE_SOFTWARE = 1
PERF_TYPE_HW_CACHE = 3
PERF_FORMAT_TOTAL_TIME_ENABLED = 1 << 0
PERF_FORMAT_TOTAL_TIME_RUNNING = 1 << 1
PERF_FORMAT_GROUP = 1 << 3
PERF_FLAG_FD_CLOEXEC = 1 << 3
_READ_FORMAT = PERF_FORMAT_GROUP | PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING

#: Read each CPU's counters on that CPU (pinned threads, C extension); REVEAL_LOCAL_READS=0
#: turns it off (every group is then read from the sampler's thread).
LOCAL_READS = os.environ.get("REVEAL_LOCAL_READS", "1") != "0"

_SYSCALL_NUMBERS = {"x86_64": 298, "aarch64": 241, "ppc64le": 319, "s390x": 331,
                    "riscv64": 241}

# HW_CACHE config: cache id | (op << 8) | (result << 16)
_LL, _OP_READ, _RESULT_ACCESS, _RESULT_MISS = 2, 0, 0, 1


@dataclass(frozen=True)
class PerfEvent:
    """One countable event: channel metric name, perf type and config."""

    metric: str
    type: int
    config: int


TASK_CLOCK = PerfEvent("perf.task_clock", PERF_TYPE_SOFTWARE, 1)


@dataclass(frozen=True)
class EventGroup:
    """Events scheduled together (one fd group per CPU), under a name that labels the
    group's ``time_enabled``/``time_running`` channels (``group=NAME``). Iterating it gives
    its events."""

    name: str
    events: tuple[PerfEvent, ...]

    def __iter__(self) -> Iterator[PerfEvent]:
        return iter(self.events)


# Each group's members are always scheduled together, so ratios inside a group (IPC, miss
# rates) compare counts taken over the same time.
HARDWARE_GROUPS: tuple[EventGroup, ...] = (
    EventGroup("cycles", (PerfEvent("perf.cycles", PERF_TYPE_HARDWARE, 0),
                          PerfEvent("perf.instructions", PERF_TYPE_HARDWARE, 1))),
    EventGroup("cache", (PerfEvent("perf.cache_references", PERF_TYPE_HARDWARE, 2),
                         PerfEvent("perf.cache_misses", PERF_TYPE_HARDWARE, 3))),
    EventGroup("branches", (PerfEvent("perf.branches", PERF_TYPE_HARDWARE, 4),
                            PerfEvent("perf.branch_misses", PERF_TYPE_HARDWARE, 5))),
    EventGroup("stalls", (PerfEvent("perf.stalled_cycles_frontend", PERF_TYPE_HARDWARE, 7),
                          PerfEvent("perf.stalled_cycles_backend", PERF_TYPE_HARDWARE, 8))),
    EventGroup("llc", (PerfEvent("perf.llc_loads", PERF_TYPE_HW_CACHE,
                                 _LL | (_OP_READ << 8) | (_RESULT_ACCESS << 16)),
                       PerfEvent("perf.llc_load_misses", PERF_TYPE_HW_CACHE,
                                 _LL | (_OP_READ << 8) | (_RESULT_MISS << 16)))),
)
# The software group's leader must be a software event: the task clock is another PMU whose
# siblings do not count. System-wide, the task clock of a CPU equals the time the group was
# enabled, so ``perf.task_clock`` is read from the group's ``time_enabled`` (no extra fd).
SOFTWARE_GROUP = EventGroup("software", (
    PerfEvent("perf.context_switches", PERF_TYPE_SOFTWARE, 3),
    PerfEvent("perf.cpu_migrations", PERF_TYPE_SOFTWARE, 4),
    PerfEvent("perf.page_faults", PERF_TYPE_SOFTWARE, 2),
    PerfEvent("perf.minor_faults", PERF_TYPE_SOFTWARE, 5),
    PerfEvent("perf.major_faults", PERF_TYPE_SOFTWARE, 6),
))


class PerfEventAttr(ctypes.Structure):
    """``struct perf_event_attr`` (PERF_ATTR_SIZE_VER8, 136 bytes)."""

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("size", ctypes.c_uint32),
        ("config", ctypes.c_uint64),
        ("sample_period", ctypes.c_uint64),
        ("sample_type", ctypes.c_uint64),
        ("read_format", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),  # bit 0 disabled, 1 inherit, 2 pinned, ...
        ("wakeup_events", ctypes.c_uint32),
        ("bp_type", ctypes.c_uint32),
        ("config1", ctypes.c_uint64),
        ("config2", ctypes.c_uint64),
        ("branch_sample_type", ctypes.c_uint64),
        ("sample_regs_user", ctypes.c_uint64),
        ("sample_stack_user", ctypes.c_uint32),
        ("clockid", ctypes.c_int32),
        ("sample_regs_intr", ctypes.c_uint64),
        ("aux_watermark", ctypes.c_uint32),
        ("sample_max_stack", ctypes.c_uint16),
        ("reserved_2", ctypes.c_uint16),
        ("aux_sample_size", ctypes.c_uint32),
        ("reserved_3", ctypes.c_uint32),
        ("sig_data", ctypes.c_uint64),
        ("config3", ctypes.c_uint64),
    ]


_libc: ctypes.CDLL | None = None


def _syscall_number() -> int:
    number = _SYSCALL_NUMBERS.get(platform.machine())
    if number is None:
        raise ProbeUnavailable(f"perf_event_open: unknown system call number on "
                               f"{platform.machine()}")
    return number


def perf_event_open(event: PerfEvent, cpu: int, group_fd: int = -1, pid: int = -1) -> int:
    """Open a counting event on ``cpu`` (``-1``: any); returns the fd or raises OSError.

    ``pid = -1`` (the probe's) counts every task on that CPU; ``0`` only the calling thread.
    """
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
    attr = PerfEventAttr()
    attr.type = event.type
    attr.size = ctypes.sizeof(PerfEventAttr)
    attr.config = event.config
    attr.read_format = _READ_FORMAT
    fd = _libc.syscall(ctypes.c_long(_syscall_number()), ctypes.byref(attr), ctypes.c_int(pid),
                       ctypes.c_int(cpu), ctypes.c_int(group_fd),
                       ctypes.c_ulong(PERF_FLAG_FD_CLOEXEC))
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return int(fd)


def _paranoid() -> str:
    value = _procfs.read_str("/proc/sys/kernel/perf_event_paranoid")
    return "?" if value is None else value


@dataclass
class _Group:
    fd: int  # leader fd (read returns every member)
    member_fds: list[int]
    events: list[PerfEvent]
    cpu: int
    name: str  # EventGroup.name: the group=NAME label of its time channels


@register
class PerfProbe(Probe):
    """Per-CPU perf_event_open counters: hardware where the PMU allows, software always."""

    name = "perf"
    description = "perf_event_open counters per CPU (cycles, instructions, caches, faults)"
    default_enabled = True

    def __init__(self, **options: object) -> None:
        super().__init__(**options)
        self._groups: list[_Group] = []
        self._cpus: list[int] = []
        self._buffer = bytearray()
        self._views: list[memoryview] = []
        self._words = np.zeros(0, dtype=np.uint64)
        self._word_idx = np.zeros(0, dtype=np.intp)  # per channel: its word of the buffer
        self._channel_group = np.zeros(0, dtype=np.intp)  # per channel: its group's index
        self._failed = np.zeros(0, dtype=bool)  # per group: this tick's read failed
        self._grid: tuple[int, int] | None = None  # the sampler's (start_ns, interval_ns)
        self._local: Any = None  # _procread.LocalReader, when running
        self._local_timeout_ns = 0

    # -- opening -------------------------------------------------------------------------
    def open(self) -> None:
        self._cpus = online_cpus()
        self._open_all()

    def _open_group(self, spec: EventGroup, cpu: int,
                    refused: dict[str, int]) -> _Group | None:
        leader = -1
        fds: list[int] = []
        opened: list[PerfEvent] = []
        for event in spec.events:
            try:
                fd = perf_event_open(event, cpu, leader)
            except OSError as exc:
                refused.setdefault(event.metric, exc.errno or 0)
                continue
            if leader < 0:
                leader = fd
            fds.append(fd)
            opened.append(event)
        if leader < 0:
            return None
        return _Group(leader, fds, opened, cpu, spec.name)

    def _open_all(self) -> None:
        refused: dict[str, int] = {}
        groups: list[_Group] = []
        for cpu in self._cpus:
            for spec in (SOFTWARE_GROUP, *HARDWARE_GROUPS):
                group = self._open_group(spec, cpu, refused)
                if group is not None:
                    groups.append(group)
        if not groups:
            self._groups = []
            codes = set(refused.values())
            if codes & {errno.EACCES, errno.EPERM}:
                raise ProbeUnavailable(
                    f"perf_event_open refused system-wide counting (perf_event_paranoid="
                    f"{_paranoid()}); run as root, grant CAP_PERFMON, or set "
                    f"kernel.perf_event_paranoid=0")
            if codes & {errno.ENOSYS}:
                raise ProbeUnavailable("perf_event_open is not available in this kernel")
            detail = ", ".join(sorted({errno.errorcode.get(c, str(c)) for c in codes}))
            raise ProbeUnavailable(f"perf_event_open refused every event ({detail})")
        self._groups = groups
        self._layout()
        opened = {event.metric for group in groups for event in group.events}
        if any(g.events[0].type == PERF_TYPE_SOFTWARE for g in groups):
            opened.add(TASK_CLOCK.metric)
        # An event is unsupported when no CPU accepted it (hybrid CPUs may accept some).
        unsupported = [e.metric for grp in ((TASK_CLOCK,), SOFTWARE_GROUP, *HARDWARE_GROUPS)
                       for e in grp if e.metric not in opened]
        self.info["unsupported_events"] = [m.removeprefix("perf.") for m in unsupported]
        if unsupported:
            codes = {errno.errorcode.get(refused[m], str(refused[m]))
                     for m in unsupported if m in refused}
            hardware = {e.metric for grp in HARDWARE_GROUPS for e in grp}
            if set(unsupported) >= hardware:
                why = "no hardware PMU exposed here (virtual machine or unsupported CPU)"
            else:
                why = "the PMU refused some events"
            self.status = "degraded"
            self.reason = (f"{why}: {len(unsupported)} events unsupported "
                           f"({', '.join(sorted(codes))}): "
                           f"{', '.join(self.info['unsupported_events'])}")
        else:
            self.status, self.reason = "ok", ""

    def _layout(self) -> None:
        """One buffer for every group read; each channel is one 64-bit word of it."""
        sizes = [8 * (3 + len(g.events)) for g in self._groups]
        self._buffer = bytearray(sum(sizes))
        whole = memoryview(self._buffer)
        self._views = []
        channels: list[str] = []
        word_idx: list[int] = []
        channel_group: list[int] = []
        offset = 0
        for g, (group, size) in enumerate(zip(self._groups, sizes, strict=True)):
            self._views.append(whole[offset:offset + size])
            word = offset // 8  # layout: nr, time_enabled, time_running, value...
            cpu = {"cpu": str(group.cpu)}
            named = {**cpu, "group": group.name}
            fields = [(format_channel(event.metric, cpu), word + 3 + i)
                      for i, event in enumerate(group.events)]
            fields += [(format_channel(TIME_ENABLED_METRIC, named), word + 1),
                       (format_channel(TIME_RUNNING_METRIC, named), word + 2)]
            if group.events[0].type == PERF_TYPE_SOFTWARE:
                fields.append((format_channel(TASK_CLOCK.metric, cpu), word + 1))
            for channel, index in fields:
                channels.append(channel)
                word_idx.append(index)
                channel_group.append(g)
            offset += size
        self._words = np.frombuffer(self._buffer, dtype=np.uint64)
        self._failed = np.zeros(len(self._groups), dtype=bool)
        order = np.argsort(channels, kind="stable")
        self.channels = [channels[i] for i in order]
        self._word_idx = np.asarray(word_idx, dtype=np.intp)[order]
        self._channel_group = np.asarray(channel_group, dtype=np.intp)[order]

    # -- reading on each CPU -------------------------------------------------------------
    def schedule(self, start_ns: int, interval_ns: int) -> None:
        """Read each CPU's groups on that CPU, at the sampler's ticks (see LocalReader).

        A read of a counter active on another CPU interrupts that CPU and spins until it
        answers: cheap on bare metal, but in a virtual machine whose other vCPUs are
        halted each read costs the host's wake-up time. Pinned threads avoid it.
        """
        self._grid = (int(start_ns), int(interval_ns))
        self._start_local()

    def _start_local(self) -> None:
        self._stop_local()
        native = _procfs._procread  # the optional C extension, None where it is not built
        if self._grid is None or not self._groups or not LOCAL_READS or native is None:
            return
        start_ns, interval_ns = self._grid
        groups, offset = [], 0
        for group, view in zip(self._groups, self._views, strict=True):
            groups.append((group.fd, group.cpu, offset, len(view)))
            offset += len(view)
        self._local = native.LocalReader(groups, start_ns, interval_ns)
        # wait for a tick's reads at most a tenth of the interval, then read directly
        self._local_timeout_ns = min(interval_ns // 10, 5_000_000)
        self.info["read_on_cpu"] = self._local.pinned()

    def native_parts(self) -> list[NativePart] | None:
        """Every group read by C into the same raw words (see ``_procread.PerfGroups``)."""
        native = _procfs._procread
        if native is None or not hasattr(native, "PerfGroups"):
            return None
        if not self._groups:
            return []
        groups = [(g.fd, len(view)) for g, view in zip(self._groups, self._views, strict=True)]
        reader = native.PerfGroups(groups, self._word_idx.tolist())
        return [NativePart(reader, 0, len(self.channels), self.read)]

    def _stop_local(self) -> None:
        if self._local is not None:
            self._local.close()
            self._local = None

    # -- sampling ------------------------------------------------------------------------
    def read(self, out: np.ndarray) -> None:
        """Raw counts and group times as read (float64); NaN for a group whose read failed."""
        failed = self._failed
        failed[:] = False
        local = self._local
        if local is not None:
            stale = local.collect(self._buffer, time.monotonic_ns(), self._local_timeout_ns)
            for i in stale:
                self._read_group(i)
        else:
            for i in range(len(self._groups)):
                self._read_group(i)
        out[:] = self._words.take(self._word_idx)
        if failed.any():
            out[failed[self._channel_group]] = np.nan

    def _read_group(self, i: int) -> None:
        view = self._views[i]
        try:
            complete = os.readv(self._groups[i].fd, [view]) == len(view)
        except OSError:
            complete = False
        self._failed[i] = not complete

    def refresh(self) -> bool:
        """Reopen every event when the set of online CPUs changed (hotplug)."""
        cpus = online_cpus()
        if cpus == self._cpus:
            return False
        before = list(self.channels)
        self.close()
        self._cpus = cpus
        try:
            self._open_all()
        except ProbeUnavailable as exc:
            self.status, self.reason, self.channels = "unavailable", str(exc), []
        self._start_local()
        return self.channels != before

    def close(self) -> None:
        self._stop_local()
        for group in self._groups:
            for fd in group.member_fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._groups = []
