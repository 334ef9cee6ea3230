"""Threads that keep the GPU probe's latest values: one poller per GPU, one XID watcher.

:class:`GridPoller` is the polling grid itself (the per-process probe,
:mod:`reveal.collect.gpu_procs`, polls on it too). A GPU poller discovers its GPU, then
polls the fast group every ``interval_s`` and the slow group every ``slow_interval_s``
(after the fast one, so a slow call never delays a fast value), on its own grid of
``CLOCK_MONOTONIC``; polls whose time passed while a call blocked are skipped and counted
(``overruns``), never replayed. It publishes each group as one block of the
:class:`~reveal.collect._gpu_board.Board`. A GPU in MIG mode is re-scanned at the slow
rate; a changed set of instances is re-discovered on the poller and posted for the probe to
adopt at its next refresh. :class:`NvmlPolling` is what both GPU probes do with NVML and
these threads: start NVML at open, stop the threads and shut NVML down at close.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from reveal.collect._gpu_board import Board, BoardReads
from reveal.collect._gpu_device import Device, GpuLayout
from reveal.collect._nvml import open_nvml, option_float
from reveal.collect.probe import Probe


@dataclass(frozen=True)
class Timing:
    """Poll periods (seconds) and how long the XID watcher waits per call (ms)."""

    interval_s: float = 0.1
    slow_interval_s: float = 1.0
    xid_wait_ms: int = 100


class GridPoller(threading.Thread):
    """A thread that starts with :meth:`begin` (discovery; False ends the thread), then
    calls :meth:`poll_fast` every ``timing.interval_s`` and :meth:`poll_slow` every
    ``timing.slow_interval_s`` (after a fast poll) on its own ``CLOCK_MONOTONIC`` grid
    until :meth:`stop`. Grid slots that passed while a call blocked are skipped and
    counted in ``overruns`` (never replayed); ``polls`` counts the fast polls made."""

    def __init__(self, name: str, timing: Timing) -> None:
        super().__init__(name=name, daemon=True)
        self.timing = timing
        self._stop_event = threading.Event()
        self.polls = 0
        self.overruns = 0

    def stop(self) -> None:
        self._stop_event.set()

    def begin(self) -> bool:
        """Runs once before the first poll; False ends the thread. Default: True."""
        return True

    def poll_fast(self) -> None:
        """One poll of the fast group (every ``interval_s``)."""

    def poll_slow(self) -> None:
        """One poll of the slow group (every ``slow_interval_s``)."""

    def run(self) -> None:
        if not self.begin():
            return
        interval = round(self.timing.interval_s * 1e9)
        slow = round(self.timing.slow_interval_s * 1e9)
        start = time.monotonic_ns()
        k = 0
        next_slow = start
        while not self._stop_event.is_set():
            deadline = start + k * interval
            now = time.monotonic_ns()
            if now < deadline and self._stop_event.wait((deadline - now) / 1e9):
                break
            self.poll_fast()
            self.polls += 1
            now = time.monotonic_ns()
            if now >= next_slow:
                self.poll_slow()
                next_slow = time.monotonic_ns() + slow
                now = time.monotonic_ns()
            after = (now - start) // interval + 1  # the first grid slot still ahead
            self.overruns += max(0, after - (k + 1))
            k = max(k + 1, after)


class GpuPoller(GridPoller):
    """Discovers one GPU, then polls it until :meth:`stop`."""

    def __init__(self, device: Device, board: Board, timing: Timing,
                 post: Callable[[int, GpuLayout | None, str], None],
                 discover: Callable[[], GpuLayout]) -> None:
        super().__init__(f"reveal-gpu{device.index}", timing)
        self.device = device
        self.board = board
        self._post = post
        self._discover = discover
        self.layout: GpuLayout | None = None

    def begin(self) -> bool:
        index = self.device.index
        try:
            self.layout = self._discover()
        except Exception as exc:  # one GPU failing must not stop the others
            self._post(index, None, f"GPU {index}: discovery failed: {exc}")
            return False
        self._post(index, self.layout, "")
        return True

    def poll_fast(self) -> None:
        self._poll("fast")

    def poll_slow(self) -> None:
        self._poll("slow")
        self._rescan_mig()

    def _poll(self, group: str) -> None:
        layout = self.layout
        if layout is None or not layout.names[group]:
            return
        values: np.ndarray = self.device.poll(layout, group)
        self.board.publish((layout.index, group), values)

    def _rescan_mig(self) -> None:
        layout = self.layout
        if layout is None or layout.mig is None:
            return
        found = self.device.mig_devices(layout.handle)
        now = [(m.gi, m.ci) for m in found] if found is not None else None
        if now != [(m.gi, m.ci) for m in layout.mig]:
            try:
                self.layout = self._discover()
            except Exception as exc:
                self._post(layout.index, None, f"GPU {layout.index}: re-discovery after a "
                                               f"MIG change failed: {exc}")
                return
            self._post(layout.index, self.layout, "")


class XidWatcher(threading.Thread):
    """Waits on an NVML event set for XID critical errors; counts them per GPU.

    Publishes every GPU's ``xid`` block (count since the probe opened, last XID code) after
    each wait, an event or a timeout, so that the block goes stale only when this thread is
    stuck.
    """

    def __init__(self, nvml: Any, event_set: Any, board: Board, timing: Timing) -> None:
        super().__init__(name="reveal-gpu-xid", daemon=True)
        self.nvml = nvml
        self.event_set = event_set
        self.board = board
        self.timing = timing
        self._stop_event = threading.Event()
        self._lock = threading.Lock()
        self.counts: dict[int, list[float]] = {}  # GPU index → [count, last code]
        self.unattributed = 0
        self.wait_errors = 0
        self._wait = getattr(nvml, "nvmlEventSetWait_v2", None) or nvml.nvmlEventSetWait

    def stop(self) -> None:
        self._stop_event.set()

    def watch(self, index: int) -> None:
        """Start counting for GPU ``index`` (registered on the event set)."""
        with self._lock:
            self.counts.setdefault(index, [0.0, 0.0])

    def run(self) -> None:
        nvml = self.nvml
        xid = int(getattr(nvml, "nvmlEventTypeXidCriticalError", 0x8))
        while not self._stop_event.is_set():
            try:
                event = self._wait(self.event_set, self.timing.xid_wait_ms)
            except nvml.NVMLError as exc:
                if not _is_timeout(nvml, exc):
                    self.wait_errors += 1
                    self._stop_event.wait(self.timing.xid_wait_ms / 1e3)
                self._publish()
                continue
            if int(event.eventType) & xid:
                self._count(event)
            self._publish()

    def _count(self, event: Any) -> None:
        nvml = self.nvml
        try:
            index = int(nvml.nvmlDeviceGetIndex(event.device))
        except (nvml.NVMLError, TypeError, ValueError):
            index = -1
        with self._lock:
            entry = self.counts.get(index)
            if entry is None:
                self.unattributed += 1
                return
            entry[0] += 1
            entry[1] = float(event.eventData)

    def _publish(self) -> None:
        with self._lock:
            items = [(i, np.array(v)) for i, v in self.counts.items()]
        for index, values in items:
            self.board.publish((index, "xid"), values)


def _is_timeout(nvml: Any, exc: Exception) -> bool:
    return getattr(exc, "value", None) == getattr(nvml, "NVML_ERROR_TIMEOUT", 10)


class Watchdog(threading.Thread):
    """Sets to NaN, every interval, the board blocks whose poller is stuck.

    It also keeps the board's :attr:`~reveal.collect._gpu_board.Board.grace_ns`: how late
    its own wakes were over the last ``memory`` intervals. When the whole process paused
    (every thread starved at once), the pollers were as late as the watchdog, and no GPU is
    judged stuck for it; a GPU stuck while the process keeps time is judged after
    ``stale_s``, as before."""

    def __init__(self, board: Board, interval_s: float, memory: int = 4) -> None:
        super().__init__(name="reveal-gpu-watch", daemon=True)
        self.board = board
        self.interval_s = interval_s
        self.memory = memory
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()

    def run(self) -> None:
        interval_ns = round(self.interval_s * 1e9)
        lateness: collections.deque[int] = collections.deque(maxlen=self.memory)
        woke = time.monotonic_ns()
        while not self._stop_event.wait(self.interval_s):
            now = time.monotonic_ns()
            lateness.append(max(0, now - woke - interval_ns))
            woke = now
            self.board.grace_ns = max(lateness)
            self.board.expire(now)


def stop_threads(threads: Iterable[Any], grace_s: float) -> list[str]:
    """Ask every thread (None entries skipped) to stop, then join them within ``grace_s``
    seconds in all; the names of those still running (stuck inside NVML)."""
    alive = [thread for thread in threads if thread is not None]
    for thread in alive:
        thread.stop()
    deadline = time.monotonic() + grace_s
    stuck = []
    for thread in alive:
        if thread.is_alive():
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                stuck.append(thread.name)
    return stuck


def nvml_options_help(own: dict[str, str]) -> dict[str, str]:
    """The help of a GPU probe's options: ``nvml``, the probe's ``own``, ``open_timeout_s``."""
    return {
        "nvml": "a pynvml-shaped object to use instead of the pynvml module (default: pynvml)",
        **own,
        "open_timeout_s": "seconds open() waits for every GPU's first answers; a GPU later "
                          "than that joins at a refresh (default 5)",
    }


class NvmlPolling(BoardReads, Probe):
    """A probe that polls NVML on threads of its own into ``self._board``: NVML started at
    open (:meth:`_start_nvml`), the threads stopped and NVML shut down at close
    (:meth:`_stop_nvml`)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._nvml: Any = None
        self._initialised = False
        self._board = Board()
        self.timing = Timing()
        self.stale_intervals = 3.0

    def _start_nvml(self, timing: Timing) -> Any:
        """Poll at ``timing``, a value stale after ``stale_intervals`` (option, default 3)
        poll periods; NVML started, or :class:`ProbeUnavailable` with the probe marked
        unavailable."""
        self.timing = timing
        self.stale_intervals = option_float(self.options, "stale_intervals", 3.0)
        nvml = self._nvml = open_nvml(self)
        self._initialised = True
        return nvml

    def _stop_nvml(self, threads: Iterable[Any],
                   release: Callable[[Any], None] | None = None) -> None:
        """Stop ``threads`` (within three fast poll periods, 1 s at least); then, unless one
        is still inside NVML (named in ``info["left_running"]``), ``release`` what the probe
        holds of NVML and shut it down."""
        stuck = stop_threads(threads, max(1.0, 3 * self.timing.interval_s))
        nvml = self._nvml
        if stuck:
            # a thread still inside NVML: shutting NVML down under it is not safe
            self.info["left_running"] = stuck
        elif self._initialised and nvml is not None:
            if release is not None:
                release(nvml)
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlShutdown()
            self._initialised = False
