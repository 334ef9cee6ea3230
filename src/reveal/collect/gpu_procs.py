"""Per-process GPU usage through NVML, attributed to the process's cgroup (container),
polled off the tick path.

Per GPU, a poller thread (``reveal-gpuprocN``, on the same polling grid as the ``gpu``
probe's, :class:`~reveal.collect._gpu_poller.GridPoller`) calls, every ``interval_s``:
``nvmlDeviceGetComputeRunningProcesses`` and ``nvmlDeviceGetGraphicsRunningProcesses``
(``nvmlProcessInfo_t``: pid, used memory, MIG GPU/compute instance) and
``nvmlDeviceGetProcessUtilization`` (``nvmlProcessUtilizationSample_t`` samples newer than
the last one seen: SM, memory, encoder, decoder percent; several samples of one pid since
the previous poll are averaged). It writes the values of the channels adopted at the last
``refresh()`` into one float64 array of latest values
(:class:`~reveal.collect._gpu_board.Board`, one block per GPU). ``read(out)`` only copies
that array, and ``native_parts()`` hands the array itself to the C tick thread, so the
probe keeps the ticks in C and a slow or hung NVML call delays no probe. A GPU whose poller
has not published for ``stale_intervals`` poll periods reads NaN (the watchdog thread
``reveal-gpuproc-watch`` sets it) and the probe is ``degraded`` naming it.

Channels, labels ``{gpu, pid, comm, cgroup}`` (memory adds ``type`` = compute | graphics,
and ``gi``/``ci`` on a MIG-enabled GPU):

- ``gpu.proc.mem_used_bytes``: GPU memory the process holds (bytes; NaN when NVML reports
  it as not available, e.g. under MIG without per-instance accounting or WDDM);
- ``gpu.proc.sm_util``, ``gpu.proc.mem_util``, ``gpu.proc.enc_util``, ``gpu.proc.dec_util``:
  percent of the driver's sample period(s) since the previous poll; 0 for a listed process
  with no new sample.

The channel set changes only at ``refresh()``: processes the pollers saw since the last
refresh join then; a channel whose process has left the GPU reads NaN until it retires.
**Retirement** (at a refresh): a process's channels are removed once NVML has not listed it
for ``retire_s`` seconds (default 30), or at the first refresh after it stopped being listed
when its ``/proc/PID`` is gone (it exited). Only a listing NVML answered counts as "not
listed", so a failing query (or a GPU not answering) retires nothing. **Cap**: at most
``max_channels`` (default 2048) process channels; processes beyond it get none (counted in
``info["processes_over_cap"]``, and the probe is ``degraded`` saying so) until retirements
make room. Nothing is dropped silently: a GPU in MIG mode, or a query NVML answers
``NOT_SUPPORTED``/``NO_PERMISSION``, makes the probe ``degraded`` with the GPU and query
named in ``reason`` (``info["unsupported"]`` lists them).

The NVML module is ``pynvml`` (nvidia-ml-py) or any pynvml-shaped object given as option
``nvml`` (the tests replay recorded NVML structures this way).
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, ClassVar, NoReturn

import numpy as np

from reveal.collect._gpu_board import Board
from reveal.collect._gpu_poller import (
    GridPoller,
    NvmlPolling,
    Timing,
    Watchdog,
    nvml_options_help,
)
from reveal.collect._nvml import error_is, option_float
from reveal.collect.ebpf.targets import read_cgroup, read_comm
from reveal.collect.probe import ProbeUnavailable, register
from reveal.frame import format_channel, parse_channel

UTIL_FIELDS = (("gpu.proc.sm_util", "smUtil"), ("gpu.proc.mem_util", "memUtil"),
               ("gpu.proc.enc_util", "encUtil"), ("gpu.proc.dec_util", "decUtil"))
_NOT_AVAILABLE_U32 = 0xFFFFFFFF
_LIST_QUERIES = (("compute", "nvmlDeviceGetComputeRunningProcesses"),
                 ("graphics", "nvmlDeviceGetGraphicsRunningProcesses"))
_UTIL_QUERY = "nvmlDeviceGetProcessUtilization"


@dataclass
class _Gpu:
    """One GPU: its handle, which queries work, and the last utilisation timestamp (µs)."""

    index: int
    handle: Any
    mig: bool = False
    lists: list[tuple[str, str]] = field(default_factory=list)
    utilisation: bool = False
    last_seen_us: int = 0
    unsupported: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Plan:
    """Where a poller writes: its board block's key and each adopted channel's position."""

    key: Hashable
    positions: dict[str, int]


class _Labels:
    """``pid``, ``comm`` and ``cgroup`` labels per pid, read once from ``/proc`` (shared by
    the pollers; entries dropped when the process retires)."""

    def __init__(self, proc_root: str) -> None:
        self.proc_root = proc_root
        self._lock = threading.Lock()
        self._labels: dict[int, dict[str, str]] = {}

    def of(self, pid: int) -> dict[str, str]:
        with self._lock:
            labels = self._labels.get(pid)
        if labels is None:
            labels = {"pid": str(pid), "comm": read_comm(pid, self.proc_root),
                      "cgroup": read_cgroup(pid, self.proc_root)}
            with self._lock:
                labels = self._labels.setdefault(pid, labels)
        return labels

    def forget(self, pids: set[int]) -> None:
        with self._lock:
            for pid in pids:
                self._labels.pop(pid, None)


class _ProcPoller(GridPoller):
    """One GPU: finds which per-process queries answer, then polls them every
    ``interval_s`` and publishes the adopted channels' values into its board block."""

    def __init__(self, nvml: Any, index: int, board: Board, timing: Timing,
                 labels: _Labels) -> None:
        super().__init__(f"reveal-gpuproc{index}", timing)
        self.nvml = nvml
        self.index = index
        self.board = board
        self.labels = labels
        self.gpu: _Gpu | None = None
        self.failure = ""
        self.answered = threading.Event()  # set after discovery and the first poll
        self.plan: _Plan | None = None  # replaced by the probe at a refresh
        self.lock = threading.Lock()  # guards listed, listed_at, pending
        self.listed: set[int] = set()  # pids of the latest answered listing
        self.listed_at: dict[int, float] = {}  # pid → last time listed (monotonic s)
        self.pending: dict[str, None] = {}  # channel names seen, not in the plan (ordered)
        self.latest: tuple[int, dict[str, float]] = (0, {})  # (CLOCK_MONOTONIC ns, values)
        self.polled_ns = 0  # CLOCK_MONOTONIC at the end of the last poll

    # -- discovery -----------------------------------------------------------------------------
    def begin(self) -> bool:
        try:
            self.gpu = self._setup()
        except Exception as exc:  # one GPU failing must not stop the others
            self.failure = f"GPU {self.index}: discovery failed: {exc}"
            self.answered.set()
            return False
        return True

    def _setup(self) -> _Gpu:
        nvml = self.nvml
        index = self.index
        gpu = _Gpu(index, nvml.nvmlDeviceGetHandleByIndex(index))
        if hasattr(nvml, "nvmlDeviceGetMigMode"):
            try:
                current, _pending = nvml.nvmlDeviceGetMigMode(gpu.handle)
                gpu.mig = current == getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1)
            except nvml.NVMLError:
                gpu.mig = False  # NOT_SUPPORTED: a GPU without MIG
        for kind, query in _LIST_QUERIES:
            func = getattr(nvml, query, None)
            if func is None:
                gpu.unsupported.append(f"GPU {index}: {query} missing from the bindings")
                continue
            try:
                func(gpu.handle)
                gpu.lists.append((kind, query))
            except nvml.NVMLError as exc:
                gpu.unsupported.append(f"GPU {index}: {query}: {exc}")
        func = getattr(nvml, _UTIL_QUERY, None)
        if func is None:
            gpu.unsupported.append(f"GPU {index}: {_UTIL_QUERY} missing from the bindings")
        else:
            try:
                func(gpu.handle, 0)
                gpu.utilisation = True
            except nvml.NVMLError as exc:
                if error_is(nvml, exc, "NVML_ERROR_NOT_FOUND"):
                    gpu.utilisation = True  # supported; simply no sample yet
                else:
                    why = " (GPU in MIG mode)" if gpu.mig else ""
                    gpu.unsupported.append(f"GPU {index}: {_UTIL_QUERY}: {exc}{why}")
        return gpu

    # -- polling -------------------------------------------------------------------------------
    def poll_fast(self) -> None:
        gpu = self.gpu
        if gpu is None or not (gpu.lists or gpu.utilisation):
            self.polled_ns = time.monotonic_ns()
            self.answered.set()
            return
        values, listed = self._collect(gpu)
        taken_ns = time.monotonic_ns()
        plan = self.plan
        known = plan.positions if plan is not None else {}
        with self.lock:
            self.latest = (taken_ns, values)
            self.listed = listed
            for pid in listed:
                self.listed_at[pid] = taken_ns / 1e9
            for name in values:
                if name not in known:
                    self.pending[name] = None
        if plan is not None and plan.positions:
            out = np.full(len(plan.positions), np.nan)
            for name, value in values.items():
                at = known.get(name)
                if at is not None:
                    out[at] = value
            self.board.publish(plan.key, out, taken_ns)
        self.polled_ns = time.monotonic_ns()
        self.answered.set()

    def _collect(self, gpu: _Gpu) -> tuple[dict[str, float], set[int]]:
        """This GPU's values now (channel name → value) and the pids its listings name (the
        previous listing's when a listing query failed: nobody leaves on a failure)."""
        nvml = self.nvml
        values: dict[str, float] = {}
        listed: set[int] = set()
        failed = False
        for kind, query in gpu.lists:
            try:
                procs = getattr(nvml, query)(gpu.handle)
            except nvml.NVMLError:
                failed = True
                continue
            for proc in procs:
                pid = int(proc.pid)
                listed.add(pid)
                labels = {"gpu": str(gpu.index), **self.labels.of(pid), "type": kind}
                if gpu.mig:
                    gi, ci = getattr(proc, "gpuInstanceId", None), \
                        getattr(proc, "computeInstanceId", None)
                    labels["gi"] = "?" if gi in (None, _NOT_AVAILABLE_U32) else str(gi)
                    labels["ci"] = "?" if ci in (None, _NOT_AVAILABLE_U32) else str(ci)
                used = proc.usedGpuMemory
                name = format_channel("gpu.proc.mem_used_bytes", labels)
                values[name] = math.nan if used is None else float(used)
        if gpu.utilisation:
            self._utilisation(gpu, listed, values)
        if failed:
            with self.lock:
                listed |= self.listed
        return values, listed

    def _utilisation(self, gpu: _Gpu, listed: set[int], values: dict[str, float]) -> None:
        nvml = self.nvml
        try:
            samples = nvml.nvmlDeviceGetProcessUtilization(gpu.handle, gpu.last_seen_us)
        except nvml.NVMLError as exc:
            if not error_is(nvml, exc, "NVML_ERROR_NOT_FOUND"):
                return  # a transient failure: these channels read NaN until the next poll
            samples = []
        sums: dict[int, list[float]] = {}
        newest = gpu.last_seen_us
        for sample in samples:
            pid = int(sample.pid)
            newest = max(newest, int(sample.timeStamp))
            acc = sums.setdefault(pid, [0.0] * (len(UTIL_FIELDS) + 1))
            for i, (_, attr) in enumerate(UTIL_FIELDS):
                acc[i] += float(getattr(sample, attr))
            acc[-1] += 1
        gpu.last_seen_us = newest
        for pid in listed | set(sums):
            labels = {"gpu": str(gpu.index), **self.labels.of(pid)}
            acc = sums.get(pid)
            for i, (metric, _) in enumerate(UTIL_FIELDS):
                values[format_channel(metric, labels)] = acc[i] / acc[-1] if acc else 0.0

    def latest_values(self) -> tuple[int, dict[str, float]]:
        """The last poll's values (channel name → value) and when it took them (ns)."""
        with self.lock:
            return self.latest

    def take(self) -> tuple[set[int], dict[int, float], list[str]]:
        """Latest listed pids, when each was last listed, and the names seen since the last
        call that the plan lacks (cleared)."""
        with self.lock:
            pending, self.pending = list(self.pending), {}
            return set(self.listed), dict(self.listed_at), pending

    def forget(self, pids: set[int]) -> None:
        """Drop the listing times of ``pids`` (retired, or never given channels)."""
        with self.lock:
            for pid in pids:
                self.listed_at.pop(pid, None)


class GpuProcessProbe(NvmlPolling):
    """GPU memory and utilisation per process (NVML, polled on its own threads), labelled
    with the process's cgroup."""

    name = "gpu_procs"
    description = ("per-process GPU memory and SM/memory/encoder/decoder use (NVML, polled on "
                   "its own threads), by cgroup")
    options_help: ClassVar[dict[str, str]] = nvml_options_help({
        "proc_root": "where /proc is mounted, for comm and cgroup (default /proc)",
        "retire_s": "seconds a process may go unlisted by NVML before its channels are "
                    "removed at a refresh; an exited process goes at the next refresh "
                    "(default 30)",
        "max_channels": "most process channels kept; newer processes get none until "
                        "others retire (default 2048)",
        "interval_s": "seconds between polls of the per-process NVML queries, on one thread "
                      "per GPU (default 0.1)",
        "stale_intervals": "a GPU whose values were not refreshed for this many poll periods "
                           "reads NaN (default 3)",
    })

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._labels = _Labels(str(options.get("proc_root", "/proc")))
        self._pollers: list[_ProcPoller] = []
        self._watchdog: Watchdog | None = None
        self._names: dict[int, list[str]] = {}  # GPU → its adopted channels, in order
        self._pid_of: dict[str, int] = {}  # channel → pid
        self._generation = 0
        self._over_cap: set[int] = set()
        self.retire_s = float(options.get("retire_s", 30.0))
        self.max_channels = int(options.get("max_channels", 2048))
        self.retired = 0  # process channels removed, over the probe's life

    # -- open ------------------------------------------------------------------------------
    def open(self) -> None:
        opts = self.options
        nvml = self._start_nvml(Timing(interval_s=option_float(opts, "interval_s", 0.1)))
        try:
            count = int(nvml.nvmlDeviceGetCount())
            if count == 0:
                raise ProbeUnavailable("gpu_procs: NVML started but reports no GPU")
        except nvml.NVMLError as exc:
            self._fail(f"gpu_procs: NVML query failed at start: {exc}", exc)
        except ProbeUnavailable as exc:
            self._fail(str(exc), exc)
        for index in range(count):
            poller = _ProcPoller(nvml, index, self._board, self.timing, self._labels)
            self._pollers.append(poller)
            poller.start()
        deadline = time.monotonic() + option_float(opts, "open_timeout_s", 5.0)
        for poller in self._pollers:
            poller.answered.wait(max(0.0, deadline - time.monotonic()))
        if all(p.answered.is_set() for p in self._pollers) and not any(
                p.gpu is not None and (p.gpu.lists or p.gpu.utilisation)
                for p in self._pollers):
            why = [u for p in self._pollers for u in
                   ([p.failure] if p.gpu is None else p.gpu.unsupported)]
            self._fail("gpu_procs: no per-process NVML query is supported: " + "; ".join(why))
        self._watchdog = Watchdog(self._board, self.timing.interval_s)
        self._watchdog.name = "reveal-gpuproc-watch"
        self._watchdog.start()
        self.channels = []
        self.refresh()

    def _fail(self, reason: str, cause: Exception | None = None) -> NoReturn:
        self.status, self.reason = "unavailable", reason
        self.close()
        raise ProbeUnavailable(reason) from cause

    # -- sampling ----------------------------------------------------------------------------

    # -- refresh -----------------------------------------------------------------------------
    def refresh(self) -> bool:
        """Retire the channels of processes gone (see the module's policy), then add those
        of processes the pollers saw since the last refresh, up to ``max_channels``; lay
        out a new latest-values array when the channels changed. No NVML call."""
        listed_now: set[int] = set()
        listed_at: dict[int, float] = {}
        seen: list[tuple[int, str]] = []
        for poller in self._pollers:
            listed, times, pending = poller.take()
            listed_now |= listed
            for pid, at in times.items():
                listed_at[pid] = max(at, listed_at.get(pid, at))
            seen += [(poller.index, name) for name in pending]
        changed = self._retire(listed_now, listed_at)
        self._over_cap.clear()
        count = len(self._pid_of)
        for gpu, name in seen:
            if name in self._pid_of:
                continue
            pid = _pid_in(name)
            if pid not in listed_now and not self._alive(pid):
                continue  # seen between two refreshes and already exited
            if count >= self.max_channels:
                self._over_cap.add(pid)
                continue
            self._names.setdefault(gpu, []).append(name)
            self._pid_of[name] = pid
            count += 1
            changed = True
        unused = {pid for pid in listed_at if pid not in set(self._pid_of.values())}
        for poller in self._pollers:
            poller.forget(unused - listed_now)
        if changed or not self._board_ready():
            self._layout()
        self._describe()
        return changed

    def _alive(self, pid: int) -> bool:
        return os.path.exists(f"{self._labels.proc_root}/{pid}")

    def _retire(self, listed_now: set[int], listed_at: dict[int, float]) -> bool:
        now = time.monotonic()
        gone = set()
        for pid in set(self._pid_of.values()) - listed_now:
            unlisted_s = now - listed_at.get(pid, now)
            if unlisted_s >= self.retire_s or not self._alive(pid):
                gone.add(pid)
        if not gone:
            return False
        for gpu, names in self._names.items():
            self._names[gpu] = [n for n in names if self._pid_of[n] not in gone]
        kept = {n: p for n, p in self._pid_of.items() if p not in gone}
        self.retired += len(self._pid_of) - len(kept)
        self._pid_of = kept
        self._labels.forget(gone)
        for poller in self._pollers:
            poller.forget(gone)
        return True

    def _board_ready(self) -> bool:
        return all(p.plan is not None for p in self._pollers)

    def _layout(self) -> None:
        """A new latest-values array for the adopted channels (one block per GPU), filled
        from each GPU's last poll with that poll's time (NaN and stale when that is older
        than ``stale_intervals`` periods); then the pollers write to the new blocks."""
        self._generation += 1
        stale_s = self.stale_intervals * self.timing.interval_s
        blocks: list[tuple[Hashable, int, float]] = []
        channels: list[str] = []
        for gpu in sorted(self._names):
            names = self._names[gpu]
            if names:
                blocks.append(((gpu, self._generation), len(names), stale_s))
                channels += names
        self._board.layout(blocks)
        self.channels = channels
        for poller in self._pollers:
            names = self._names.get(poller.index, [])
            key = (poller.index, self._generation)
            taken_ns, values = poller.latest_values()
            if names and taken_ns:
                fresh = time.monotonic_ns() - taken_ns <= stale_s * 1e9
                carried = np.array([values.get(n, np.nan) if fresh else np.nan
                                    for n in names])
                self._board.publish(key, carried, taken_ns)
            poller.plan = _Plan(key, {name: i for i, name in enumerate(names)})
        self._board.expire()  # a GPU not answering stays stale in the new array

    def _describe(self) -> None:
        """Status, reason and info from discovery, staleness and the channel cap."""
        now = time.monotonic_ns()
        stale_ns = self.stale_intervals * self.timing.interval_s * 1e9 + self._board.grace_ns
        notes: list[str] = []
        unsupported: list[str] = []
        quiet: list[int] = []
        for poller in self._pollers:
            if poller.gpu is not None:
                unsupported += poller.gpu.unsupported
                if poller.polled_ns and now - poller.polled_ns > stale_ns:
                    quiet.append(poller.index)
            elif poller.failure:
                notes.append(poller.failure)
            else:
                notes.append(f"GPU {poller.index}: no answer yet; its processes join at a "
                             "refresh")
        quiet = sorted(set(quiet) | {gpu for gpu, _ in self._board.stale_keys()})
        notes = unsupported + notes
        if quiet:
            notes.append(f"GPU {', '.join(map(str, quiet))} not answering within "
                         f"{self.stale_intervals:g} poll periods; those values read NaN")
        if self._over_cap:
            notes.append(f"{len(self._over_cap)} process(es) without channels: "
                         f"max_channels={self.max_channels} reached")
        self.info["unsupported"] = unsupported
        self.info["mig_gpus"] = [p.index for p in self._pollers
                                 if p.gpu is not None and p.gpu.mig]
        self.info["processes_over_cap"] = len(self._over_cap)
        self.info["retired_channels"] = self.retired
        self.info["stale_gpus"] = quiet
        self.info["stale_expiries"] = self._board.expired
        self.info["poll_overruns"] = {p.index: p.overruns for p in self._pollers}
        self.info["rate_s"] = self.timing.interval_s
        self.status = "degraded" if notes else "ok"
        self.reason = "gpu_procs: " + "; ".join(notes) if notes else ""

    def close(self) -> None:
        self._stop_nvml([*self._pollers, self._watchdog])
        self._pollers, self._watchdog = [], None


def _pid_in(name: str) -> int:
    return int(parse_channel(name)[1]["pid"])


register(GpuProcessProbe)
