"""A short per-event capture, exported as Chrome-trace JSON (opens in Perfetto / chrome://tracing).

Unlike the ``ebpf`` probe, every completed call is printed by bpftrace, so a capture is
bounded by a duration and an event count. Each CUDA/NCCL call becomes a complete event
(``"ph": "X"``) on its process and thread, with the bytes, copy kind, datatype and return
code as ``args``; block requests become complete events on a per-device track of a
``kernel`` process (pid 0) and TCP retransmissions instant events there. Timestamps are
microseconds on ``CLOCK_MONOTONIC`` (bpftrace's ``nsecs``), the clock of Reveal runs;
``otherData.wall_offset_ns`` converts them to Unix time.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reveal.collect.ebpf.environment import check_environment
from reveal.collect.ebpf.functions import FUNCTIONS, copy_kind_label, nccl_dtype
from reveal.collect.ebpf.planning import (
    ExportCache,
    ProcessLabels,
    describe_files,
    library_plans,
)
from reveal.collect.ebpf.scripts import EVENT_PREFIX, capture_program
from reveal.collect.ebpf.session import BpftraceSession
from reveal.collect.ebpf.targets import TargetSelector, scan
from reveal.errors import RevealError

CAPTURE_GROUPS = ("cuda", "nccl", "block", "tcp")
_KERNEL_PID = 0


@dataclass
class Capture:
    """Events of one capture and what limited it."""

    events: list[dict[str, Any]] = field(default_factory=list)
    lost_events: int = 0
    truncated: bool = False  # the event limit was reached
    libraries: list[dict[str, object]] = field(default_factory=list)
    selector: str = ""
    start_wall_offset_ns: int = 0

    def counts(self) -> Counter[str]:
        """Events per name (function, ``block I/O``, ``TCP retransmit``)."""
        return Counter(e["name"] for e in self.events if e.get("ph") in ("X", "i"))

    def chrome_trace(self) -> dict[str, Any]:
        return {
            "traceEvents": self.events,
            "displayTimeUnit": "ns",
            "otherData": {
                "source": "reveal trace", "clock": "CLOCK_MONOTONIC",
                "wall_offset_ns": self.start_wall_offset_ns,
                "selector": self.selector, "libraries": self.libraries,
                "lost_events": self.lost_events, "truncated": self.truncated,
            },
        }

    def write(self, path: Path) -> None:
        """Write the Chrome-trace JSON atomically (tmp + rename)."""
        tmp = path.with_name(path.name + ".tmp")
        try:
            with open(tmp, "w", encoding="utf-8") as handle:
                json.dump(self.chrome_trace(), handle)
            os.replace(tmp, path)
        except OSError as exc:
            raise RevealError(f"cannot write the trace: {exc.strerror}", str(path)) from exc


def _call_args(fid: int, value: int, aux: int, ret: int) -> tuple[str, str, dict[str, Any]]:
    fn = FUNCTIONS[fid]
    args: dict[str, Any] = {"ret": ret}
    if fn.role == "memcpy":
        args.update(bytes=value, kind=copy_kind_label(aux))
    elif fn.role in ("malloc", "free"):
        args["bytes"] = value
    elif fn.role == "nccl":
        dtype, size = nccl_dtype(aux)
        args.update(elements=value, dtype=dtype)
        if size is not None:
            args["bytes"] = value * size
    return fn.name, fn.family, args


class _Builder:
    """Accumulates Chrome-trace events from bpftrace ``E`` lines."""

    def __init__(self, labels: ProcessLabels) -> None:
        self.labels = labels
        self.events: list[dict[str, Any]] = []
        self._named_pids: set[int] = set()
        self._named_tids: set[tuple[int, int]] = set()

    def _name_process(self, pid: int, name: str) -> None:
        if pid not in self._named_pids:
            self._named_pids.add(pid)
            self.events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                                "args": {"name": name}})

    def _name_thread(self, pid: int, tid: int, name: str) -> None:
        if (pid, tid) not in self._named_tids:
            self._named_tids.add((pid, tid))
            self.events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                                "args": {"name": name}})

    def add(self, line: str) -> bool:
        parts = line.split()
        if len(parts) != 10 or parts[0] != EVENT_PREFIX:
            return False
        try:
            kind = parts[1]
            pid, tid, fid, start, end, value, aux, ret = (int(p) for p in parts[2:])
        except ValueError:
            return False
        if kind == "call" and 0 <= fid < len(FUNCTIONS):
            proc = self.labels.process(pid)
            if proc is None:
                return False
            self._name_process(pid, f"{proc['comm']} (pid {pid}, cgroup {proc['cgroup']})")
            name, cat, args = _call_args(fid, value, aux, ret)
            self.events.append({"name": name, "cat": cat, "ph": "X", "pid": pid, "tid": tid,
                                "ts": start / 1e3, "dur": max(end - start, 0) / 1e3,
                                "args": args})
            return True
        if kind == "blk":
            dev = self.labels.device(pid)
            self._name_process(_KERNEL_PID, "kernel")
            self._name_thread(_KERNEL_PID, pid, f"block {dev}")
            self.events.append({"name": "block I/O", "cat": "block", "ph": "X",
                                "pid": _KERNEL_PID, "tid": pid, "ts": start / 1e3,
                                "dur": max(end - start, 0) / 1e3,
                                "args": {"dev": dev, "bytes": value, "error": ret}})
            return True
        if kind == "tcp":
            task = self.labels.task(pid)
            self._name_process(_KERNEL_PID, "kernel")
            self.events.append({"name": "TCP retransmit", "cat": "tcp", "ph": "i", "s": "p",
                                "pid": _KERNEL_PID, "tid": 0, "ts": start / 1e3,
                                "args": {"sport": value, "dport": aux, "task_pid": pid,
                                         "task_comm": task["comm"]}})
            return True
        return False


def capture(selector: TargetSelector, duration_s: float, max_events: int = 200_000,
            groups: tuple[str, ...] = CAPTURE_GROUPS, bpftrace: str = "bpftrace",
            attach_timeout_s: float = 60.0, proc_root: str = "/proc",
            on_attached: Callable[[], None] | None = None) -> Capture:
    """Trace every call of the selected processes for ``duration_s`` seconds (at most
    ``max_events`` events); ``on_attached`` is called once every probe is in place.
    Raises :class:`RevealError` with the reason when it cannot."""
    if not 0 < duration_s <= 3600:
        raise RevealError(f"capture duration must be in (0, 3600] seconds, got {duration_s}")
    if max_events < 1:
        raise RevealError(f"the event limit must be positive, got {max_events}")
    unknown = sorted(set(groups) - set(CAPTURE_GROUPS))
    if unknown:
        raise RevealError(f"unknown capture groups {unknown}; known: {', '.join(CAPTURE_GROUPS)}")
    env = check_environment(bpftrace, mount=True)
    if not env.privileged or env.bpftrace is None or env.bpftrace_version is None:
        raise RevealError("eBPF capture impossible here: " + "; ".join(env.notes))
    tracepoints = frozenset(g for g in groups if g in ("block", "tcp")
                            and env.tracepoint_groups.get(g))
    result = scan(selector, proc_root, exclude=(os.getpid(),))
    plans = library_plans(result, groups, ExportCache())
    if not plans and not tracepoints:
        raise RevealError("nothing to capture: no selected process maps a CUDA or NCCL library "
                          f"(selection: {selector.describe()}) and no tracepoint group is on")
    labels = ProcessLabels(selector, proc_root)
    labels.learn(result, {})
    program = capture_program(tuple(p for _, p in plans), tracepoints,
                              int(duration_s * 1000), max_events)
    session = BpftraceSession(program, env.bpftrace, perf_pages=1024)
    out = Capture(libraries=describe_files(plans), selector=selector.describe(),
                  start_wall_offset_ns=time.time_ns() - time.monotonic_ns())
    builder = _Builder(labels)
    session.start()
    try:
        records = session.wait(attach_timeout_s, until_attached=True)
        if not session.attached:
            raise RevealError(f"bpftrace failed: {session.error_text() or 'no attach'}")
        if on_attached is not None:
            on_attached()
        records += session.wait(duration_s + 10.0)
    finally:
        records_tail = session.stop(5.0)
    printed = 0
    for record in [*records, *records_tail]:
        if record.get("type") == "printf":
            text = str(record.get("data", ""))
            printed += text.startswith(EVENT_PREFIX + " ")
            builder.add(text)
    out.events = builder.events
    out.lost_events = session.lost_events
    out.truncated = printed >= max_events
    return out
