"""The ``ebpf`` probe: CUDA runtime/driver, NCCL and Python calls, TCP retransmissions,
block I/O latency and run-queue latency, aggregated in the kernel by bpftrace.

Opt-in (``default_enabled = False``): it needs root (or CAP_BPF + CAP_PERFMON) and every
traced call pays a uprobe trap (microseconds; see ``docs/ebpf.md`` for measured costs).

Life cycle: ``open()`` checks the host, finds the target processes and the CUDA/NCCL
libraries they map, and starts bpftrace (waiting until its probes are attached). Each
``read()`` drains bpftrace's output without blocking and copies the latest values.
``refresh()`` rescans ``/proc`` every ``rescan_s``; when a target maps a library file not
attached yet, bpftrace is stopped (its last batch read) and restarted with the new program.
Counters stay cumulative across restarts (calls during the short restart gap are missed).

Options: ``pids`` (int list or ``"1,2"``; those processes and their descendants), ``cgroup``
and ``comm`` (globs), ``groups`` (subset of :data:`GROUPS`, default
:data:`DEFAULT_GROUPS`), ``interval_ms`` (kernel print interval, default 100),
``rescan_s`` (5), ``python_source`` (``auto`` | ``usdt`` | ``eval_frame``),
``launch_latency`` (True; False counts kernel launches at entry only, without a return
probe: about half the cost per launch, no launch latency), ``skip`` (globs of traced
function names left untraced, e.g. ``cudaLaunchKernel*,cudaMemcpy*``), ``map_keys`` (16384),
``bpftrace`` (executable), ``attach_timeout_s`` (60), ``max_pids`` (32), ``max_flows``
(64), ``hist_buckets`` (24): the bounds on channel growth (:class:`~reveal.collect.ebpf.
parse.Limits`; processes beyond ``max_pids`` are summed under ``pid=other``, exited ones
retired at the next refresh).
"""

from __future__ import annotations

import os
import time
from collections.abc import Hashable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, ClassVar

import numpy as np

from reveal.collect.ebpf.environment import Environment, check_environment
from reveal.collect.ebpf.functions import FUNCTIONS
from reveal.collect.ebpf.parse import BatchAssembler, BatchConverter, Limits, Values, new_caps
from reveal.collect.ebpf.planning import (
    ExportCache,
    ProcessLabels,
    describe_files,
    interpreter_plans,
    library_plans,
)
from reveal.collect.ebpf.scripts import TRACEPOINT_GROUPS, ProgramPlan, aggregation_program
from reveal.collect.ebpf.session import BpftraceSession
from reveal.collect.ebpf.targets import Scanner, ScanResult, TargetSelector, safe_label
from reveal.collect.probe import Probe, ProbeUnavailable, register

GROUPS = ("cuda", "nccl", "python", *TRACEPOINT_GROUPS)
DEFAULT_GROUPS = ("cuda", "nccl", *TRACEPOINT_GROUPS)
_RETRY_S = 30.0


def parse_pids(value: Any) -> frozenset[int]:
    """``[1, 2]``, ``"1,2"`` or ``None`` → a set of pids (ValueError on junk)."""
    if value is None or value == "":
        return frozenset()
    items = value.split(",") if isinstance(value, str) else list(value)
    pids = frozenset(int(str(item).strip()) for item in items)
    if any(pid <= 0 for pid in pids):
        raise ValueError(f"pids must be positive: {sorted(pids)}")
    return pids


def _flag(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() not in ("0", "false", "no", "off", "")
    return bool(value)


def parse_groups(value: Any) -> tuple[str, ...]:
    if value is None:
        return DEFAULT_GROUPS
    items = value.split(",") if isinstance(value, str) else list(value)
    groups = tuple(dict.fromkeys(str(item).strip() for item in items if str(item).strip()))
    unknown = sorted(set(groups) - set(GROUPS))
    if unknown:
        raise ValueError(f"unknown eBPF groups {unknown}; known: {', '.join(GROUPS)}")
    return groups


def parse_skip(value: Any) -> tuple[str, ...]:
    """``"cudaLaunchKernel*,cudaMemcpy*"`` or a list → globs of function names to leave
    untraced; ValueError when a glob matches no traced function (a typo traces all)."""
    if value is None or value == "":
        return ()
    items = value.split(",") if isinstance(value, str) else list(value)
    globs = tuple(dict.fromkeys(str(item).strip() for item in items if str(item).strip()))
    names = [fn.name for fn in FUNCTIONS]
    unmatched = [g for g in globs if not any(fnmatchcase(n, g) for n in names)]
    if unmatched:
        raise ValueError(f"skip {unmatched} matches no traced function")
    return globs


@dataclass(frozen=True)
class _Signature:
    """What forces a restart when it grows: attached files and active groups."""

    libraries: frozenset[tuple[tuple[int, int], int]]
    interpreters: frozenset[tuple[tuple[int, int], int]]
    groups: frozenset[str]


@register
class EbpfProbe(Probe):
    """CUDA/NCCL/Python calls and kernel tracepoints, aggregated in the kernel by bpftrace."""

    name = "ebpf"
    description = ("eBPF uprobes on CUDA runtime/driver, NCCL and Python; TCP retransmits, "
                   "block I/O and run-queue latency (bpftrace; root; opt-in)")
    default_enabled = False
    options_help: ClassVar[dict[str, str]] = {
        "pids": "trace these processes and their descendants (default: every process "
                "mapping a CUDA or NCCL library)",
        "cgroup": "only processes whose cgroup path matches this glob (default: any)",
        "comm": "only processes whose command name matches this glob (default: any)",
        "groups": f"groups to trace, of {', '.join(GROUPS)} "
                  f"(default: {','.join(DEFAULT_GROUPS)})",
        "interval_ms": "bpftrace print interval, ms (default: 100)",
        "rescan_s": "seconds between scans for new target processes (default: 5)",
        "python_source": "auto, usdt or eval_frame (default: auto)",
        "launch_latency": "time kernel launches with a return probe (default: true)",
        "skip": "traced functions to leave untraced, comma-separated globs, e.g. "
                "'cudaLaunchKernel*,cudaMemcpy*' (default: none)",
        "map_keys": "BPFTRACE_MAP_KEYS_MAX, entries per kernel map (default: 16384)",
        "bpftrace": "the bpftrace executable (default: bpftrace on PATH)",
        "attach_timeout_s": "seconds to wait for bpftrace to attach (default: 60)",
        "max_pids": "processes (and retransmitting tasks) with channels of their own; the "
                    "others are summed under pid=other (default: 32)",
        "max_flows": "TCP flows with retransmit channels of their own; the others are "
                     "summed under saddr=other (default: 64)",
        "hist_buckets": "latency histogram buckets per histogram, from 1 µs up in powers of "
                        "two, the last +Inf (default: 24)",
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        try:
            self.selector = TargetSelector(parse_pids(options.get("pids")),
                                           options.get("cgroup") or None,
                                           options.get("comm") or None)
            self.groups = parse_groups(options.get("groups"))
            self.skip = parse_skip(options.get("skip"))
            self.limits = Limits(max_pids=int(options.get("max_pids", 32)),
                                 max_flows=int(options.get("max_flows", 64)),
                                 hist_buckets=int(options.get("hist_buckets", 24)))
        except ValueError as exc:
            raise ProbeUnavailable(f"bad ebpf options: {exc}") from exc
        self.interval_ms = int(options.get("interval_ms", 100))
        self.rescan_s = float(options.get("rescan_s", 5.0))
        self.python_wanted = str(options.get("python_source", "auto"))
        self.launch_latency = _flag(options.get("launch_latency", True))
        self.map_keys = int(options.get("map_keys", 16384))
        self.bpftrace = str(options.get("bpftrace", "bpftrace"))
        self.attach_timeout_s = float(options.get("attach_timeout_s", 60.0))
        self.proc_root = str(options.get("proc_root", "/proc"))
        self.env: Environment | None = None
        self.tracepoints: frozenset[str] = frozenset()
        self.restarts = 0
        self.batches = 0  # print rounds received from bpftrace
        self._labels = ProcessLabels(self.selector, self.proc_root)
        self._exports = ExportCache()
        self._scanner = Scanner(self.proc_root)
        self._session: BpftraceSession | None = None
        self._stopping: BpftraceSession | None = None
        self._pending_plan: ProgramPlan | None = None
        self._signature: _Signature | None = None
        self._failed: tuple[_Signature, float, str] | None = None
        self._assembler = BatchAssembler()
        self._caps = new_caps(self.limits)  # which pids/flows have own channels, across runs
        self._converter = self._new_converter()
        self._last_scan = 0.0
        self._notes: list[str] = []
        # channel state: cumulative counters of finished runs + the current run's values
        self._base: dict[str, float] = {}
        self._run: dict[str, float] = {}
        self._gauge: dict[str, float] = {}
        self._index: dict[str, int] = {}
        self._values = np.zeros(0)
        self._is_gauge = np.zeros(0, dtype=bool)
        self._gauge_names: set[str] = set()

    # -- Probe contract ------------------------------------------------------------------------
    def open(self) -> None:
        env = self.env = check_environment(self.bpftrace, mount=True)
        if not env.privileged:
            raise ProbeUnavailable(env.privilege_problem or "not privileged")
        if env.bpftrace is None:
            raise ProbeUnavailable(env.notes[-1])
        if env.bpftrace_version is None:
            raise ProbeUnavailable(f"{env.bpftrace} does not run (--version failed)")
        self.bpftrace = env.bpftrace
        wanted_tp = [g for g in self.groups if g in TRACEPOINT_GROUPS]
        missing = [g for g in wanted_tp if not env.tracepoint_groups.get(g)]
        self.tracepoints = frozenset(g for g in wanted_tp if g not in missing)
        if missing:
            why = "tracefs is not available" if env.tracefs is None else \
                "the kernel lacks their tracepoints"
            self._notes.append(f"tracepoint groups {', '.join(missing)} off: {why}")
        uses_uprobes = any(g in self.groups for g in ("cuda", "nccl", "python"))
        if uses_uprobes and not env.uprobes:
            self._notes.append("uprobes unsupported by this kernel: CUDA/NCCL/Python off")
            uses_uprobes = False
        self._uprobes = uses_uprobes
        if not uses_uprobes and not self.tracepoints:
            raise ProbeUnavailable("; ".join(self._notes) or "no eBPF group selected")
        plan, signature = self._plan()
        if not plan.empty:
            self._start(plan, signature)
            assert self._session is not None
            self._session.wait(self.attach_timeout_s, until_attached=True)
            if not self._session.attached:
                error = self._session.error_text() or (
                    f"no attach within {self.attach_timeout_s:.0f} s")
                self._session.stop(2.0)
                self._session = None
                raise ProbeUnavailable(f"bpftrace failed: {error}")
            self._first_batch()
        self._update_status()
        self._adopt_channels()

    def _first_batch(self) -> None:
        """Wait (at most two print intervals) for the first batch, so that the channels
        present from the start are known at open."""
        deadline = time.monotonic() + 2 * self.interval_ms / 1e3 + 0.5
        while self.batches == 0 and time.monotonic() < deadline:
            assert self._session is not None
            self._apply(self._session.wait(0.05))

    def read(self, out: np.ndarray) -> None:
        self._pump()
        if self._session is None or not self._session.attached:
            out.fill(np.nan)
            return
        out[:] = self._values

    def refresh(self) -> bool:
        self._pump()
        now = time.monotonic()
        if self._session is not None and self._session.finished and self._stopping is None:
            self._session_died(now)
        idle = self._session is None and self._stopping is None
        if self._stopping is None and (idle or now - self._last_scan >= self.rescan_s):
            plan, signature = self._plan()
            if (idle or self._grew(signature)) and self._may_retry(signature, now):
                self._restart(plan, signature)
        self._pump()
        retired = self._retire_exited()
        self._update_status()
        return self._adopt_channels() or retired

    def _alive(self, family: str, key: Hashable) -> bool:
        """Whether a bounded key still exists: a pid in /proc (flows always do)."""
        if family in ("proc", "task") and isinstance(key, int):
            return os.path.exists(f"{self.proc_root}/{key}")
        return True

    def _retire_exited(self) -> bool:
        """Exited processes leave the channel list; pooled ones may take their slots.
        True when channels were removed."""
        gone = set(self._converter.review(self._alive))
        self.info["channel_bounds"] = {
            "max_pids": self.limits.max_pids, "max_flows": self.limits.max_flows,
            "hist_buckets": self.limits.hist_buckets,
            "own_pids": len(self._caps["proc"].own),
            "pooled_pids": len(self._caps["proc"].seen - self._caps["proc"].own
                               - self._caps["proc"].retired),
            "retired_pids": len(self._caps["proc"].retired)}
        gone &= set(self._index)
        if not gone:
            return False
        for table in (self._base, self._run, self._gauge):
            for name in gone:
                table.pop(name, None)
        keep = [i for i, name in enumerate(self.channels) if name not in gone]
        self.channels = [self.channels[i] for i in keep]
        self._index = {name: i for i, name in enumerate(self.channels)}
        self._values = self._values[keep]
        self._is_gauge = self._is_gauge[keep]
        self._gauge_names -= gone
        return True

    def close(self) -> None:
        for session in (self._stopping, self._session):
            if session is not None:
                self._apply(session.stop(5.0))
                self._retire_run()
        self._session = self._stopping = None

    @property
    def tracer_pid(self) -> int | None:
        """PID of the running bpftrace (None when none runs), e.g. to read its BPF
        programs' run time from ``/proc/PID/fdinfo``."""
        return self._session.pid if self._session is not None else None

    def snapshot(self) -> dict[str, float]:
        """The latest value of every channel seen so far, adopted by ``refresh()`` or not
        (after ``close()``: the final cumulative counters)."""
        out = {name: self._base.get(name, 0.0) + self._run.get(name, 0.0)
               for name in (*self._base, *self._run)}
        out.update(self._gauge)
        return out

    # -- planning ------------------------------------------------------------------------------
    def _plan(self) -> tuple[ProgramPlan, _Signature]:
        self._last_scan = time.monotonic()
        result = self._scanner.scan(self.selector, exclude=(os.getpid(),)) \
            if self._uprobes else ScanResult()
        libraries = library_plans(result, self.groups, self._exports, self.skip)
        interpreters = interpreter_plans(result, self._exports, self.python_wanted) \
            if "python" in self.groups and libraries else []
        self._labels.learn(result, {f.key: p.source for f, p in interpreters})
        plan = ProgramPlan(tuple(p for _, p in libraries), tuple(p for _, p in interpreters),
                           self.tracepoints, self.interval_ms, self.launch_latency)
        signature = _Signature(frozenset(f.key for f, _ in libraries),
                               frozenset(f.key for f, _ in interpreters), self.tracepoints)
        self.info["libraries"] = describe_files(libraries)
        self.info["interpreters"] = [
            {"path": safe_label(f.path, 200, keep_tail=True), "source": p.source}
            for f, p in interpreters]
        self.info["targets"] = len(result.processes)
        return plan, signature

    def _grew(self, signature: _Signature) -> bool:
        """True when ``signature`` has files or groups the running program lacks."""
        if self._signature is None:
            return True
        return not (signature.libraries <= self._signature.libraries
                    and signature.interpreters <= self._signature.interpreters
                    and signature.groups <= self._signature.groups)

    def _may_retry(self, signature: _Signature, now: float) -> bool:
        """False while the same program failed less than ``_RETRY_S`` seconds ago."""
        if self._failed is None:
            return True
        failed_sig, when, _ = self._failed
        return signature != failed_sig or now - when >= _RETRY_S

    # -- sessions ------------------------------------------------------------------------------
    def _start(self, plan: ProgramPlan, signature: _Signature) -> None:
        session = BpftraceSession(aggregation_program(plan), self.bpftrace, self.map_keys)
        session.start()
        self._session = session
        self._signature = signature
        self._assembler = BatchAssembler()
        self._converter = self._new_converter()
        self.info.update({"bpftrace_pid": session.pid, "interval_ms": self.interval_ms,
                          "map_keys": self.map_keys, "selector": self.selector.describe(),
                          "groups": sorted({*self.groups} - (set(TRACEPOINT_GROUPS)
                                                            - set(self.tracepoints)))})

    def _new_converter(self) -> BatchConverter:
        untimed = frozenset() if self.launch_latency else frozenset(
            i for i, fn in enumerate(FUNCTIONS) if fn.is_launch)
        return BatchConverter(self._labels, untimed, self.limits, self._caps)

    def _restart(self, plan: ProgramPlan, signature: _Signature) -> None:
        """Stop the running bpftrace (asynchronously) and start ``plan`` once it is gone."""
        if plan.empty:
            return
        self.restarts += 1
        if self._session is None:
            self._start(plan, signature)
            return
        self._session.interrupt()
        self._stopping, self._session = self._session, None
        self._pending_plan = plan
        self._signature = signature

    def _session_died(self, now: float) -> None:
        assert self._session is not None
        error = self._session.error_text() or f"exit code {self._session.returncode}"
        if self._signature is not None:
            self._failed = (self._signature, now, error)
        self._retire_run()
        self._session.close()
        self._session = None

    def _pump(self) -> None:
        """Read every session's output; fold a stopped run into the base; start a pending one."""
        if self._stopping is not None:
            self._apply(self._stopping.drain())
            if self._stopping.finished:
                self._retire_run()
                self._stopping.close()
                self._stopping = None
                if self._pending_plan is not None and self._signature is not None:
                    plan, self._pending_plan = self._pending_plan, None
                    self._start(plan, self._signature)
        if self._session is not None:
            self._apply(self._session.drain())
            if self._session.attached and self._failed is not None \
                    and self._failed[0] == self._signature:
                self._failed = None

    def _apply(self, records: list[dict[str, Any]]) -> None:
        for batch in self._assembler.feed(records):
            self._store(self._converter.convert(batch))

    def _store(self, values: Values) -> None:
        self.batches += 1
        self._run.update(values.counters)
        self._gauge = values.gauges
        self._gauge_names.update(values.gauges)
        if len(self._values):
            self._values[self._is_gauge] = np.nan
        for name, value in values.counters.items():
            index = self._index.get(name)
            if index is not None:
                self._values[index] = self._base.get(name, 0.0) + value
        for name, value in values.gauges.items():
            index = self._index.get(name)
            if index is not None:
                self._values[index] = value

    def _retire_run(self) -> None:
        """The current run ended: its final counters become the base of the next run."""
        for name, value in self._run.items():
            self._base[name] = self._base.get(name, 0.0) + value
        self._run = {}
        self._gauge = {}
        self._assembler = BatchAssembler()
        if len(self._values):
            self._values[self._is_gauge] = np.nan

    def _adopt_channels(self) -> bool:
        """Add channels seen in batches since the last refresh; True when any was new."""
        new = [name for name in (*self._run, *self._base, *self._gauge)
               if name not in self._index]
        if not new:
            return False
        for name in dict.fromkeys(new):
            self._index[name] = len(self.channels)
            self.channels.append(name)
        values = np.full(len(self.channels), np.nan)
        values[:len(self._values)] = self._values
        is_gauge = np.array([name in self._gauge_names for name in self.channels], dtype=bool)
        for name in dict.fromkeys(new):
            index = self._index[name]
            if name in self._gauge:
                values[index] = self._gauge[name]
            elif name in self._run or name in self._base:
                values[index] = self._base.get(name, 0.0) + self._run.get(name, 0.0)
        self._values, self._is_gauge = values, is_gauge
        return True

    # -- status --------------------------------------------------------------------------------
    def _update_status(self) -> None:
        reasons = list(self._notes)
        if self._uprobes and not (self._signature and self._signature.libraries):
            reasons.append("no selected process maps a CUDA or NCCL library "
                           f"(selection: {self.selector.describe()}; rescanning every "
                           f"{self.rescan_s:g} s)")
        if self._failed is not None:
            reasons.append(f"bpftrace failed: {self._failed[2]}")
        elif self._stopping is not None or (self._session is not None
                                            and not self._session.attached):
            reasons.append("restarting bpftrace for newly mapped libraries")
        if self._session is not None:
            self.info["lost_events"] = self._session.lost_events
            self.info["probes_attached"] = self._session.attached_probes
        self.info["restarts"] = self.restarts
        if self.env is not None:
            self.info["environment"] = self.env.as_dict()
        self.status = "degraded" if reasons else "ok"
        self.reason = "; ".join(reasons)
