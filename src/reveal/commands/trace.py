"""``reveal trace``: what eBPF can trace here, a short aggregated trace, or a Chrome trace.

- ``reveal trace`` (or ``--status``): host checks (privilege, bpftrace, tracefs, uprobes,
  tracepoints) and the processes mapping CUDA/NCCL libraries, with the exact ``.so`` files.
- ``reveal trace --duration S``: run the ``ebpf`` probe's in-kernel aggregation for S
  seconds and print calls, latency and bytes per process and function.
- ``reveal trace --chrome-trace FILE [--duration S]``: capture every call (bounded by
  ``--max-events``) and write Chrome-trace JSON for Perfetto / chrome://tracing.

Select processes with ``--pid`` (with descendants), ``--cgroup`` and ``--comm`` (globs).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from typing import Any

from reveal.collect.ebpf.capture import CAPTURE_GROUPS, capture
from reveal.collect.ebpf.environment import check_environment
from reveal.collect.ebpf.planning import ExportCache, interpreter_plans, library_plans
from reveal.collect.ebpf.probe import EbpfProbe, parse_pids
from reveal.collect.ebpf.targets import TargetSelector, safe_label, scan
from reveal.collect.probe import ProbeUnavailable
from reveal.commands._shared_options import comma_separated
from reveal.errors import InputError, RevealError
from reveal.frame import parse_channel
from reveal.report.escape import plain


def _selector(args: argparse.Namespace) -> Any:
    try:
        pids = parse_pids(args.pid)
    except ValueError as exc:
        raise InputError(f"--pid: {exc}") from None
    return TargetSelector(pids, args.cgroup or None, args.comm or None)


def _groups(args: argparse.Namespace, default: tuple[str, ...]) -> tuple[str, ...]:
    if not args.groups:
        return default
    return tuple(comma_separated(args.groups))


# -- status ------------------------------------------------------------------------------------
def status(args: argparse.Namespace) -> dict[str, Any]:
    """Host checks and traceable processes (no privilege needed to ask)."""
    env = check_environment(mount=False)
    selector = _selector(args)
    result = scan(selector, exclude=(os.getpid(),))
    exports = ExportCache()
    plans = dict(library_plans(result, ("cuda", "nccl"), exports))
    sources = {f.key: p.source for f, p in interpreter_plans(result, exports)}
    processes = []
    for _, proc in sorted(result.processes.items()):
        processes.append({
            **proc.labels,
            "libraries": [{"kind": f.kind, "path": safe_label(f.path, 200, keep_tail=True),
                           "traced_functions": len(plans[f].functions) if f in plans else 0}
                          for f in proc.libraries],
            "python": None if proc.interpreter is None else {
                "path": safe_label(proc.interpreter.path, 200, keep_tail=True),
                "source": sources.get(proc.interpreter.key)},
        })
    return {"environment": env.as_dict(), "selector": selector.describe(),
            "processes": processes}


def render_status(report: dict[str, Any]) -> str:
    env = report["environment"]
    yes = {True: "yes", False: "no"}
    lines = [
        "eBPF tracing on this host",
        f"  privileged        {yes[env['privileged']]}",
        f"  bpftrace          {env['bpftrace'] or 'not found'} {env['bpftrace_version'] or ''}"
        .rstrip(),
        f"  tracefs           {env['tracefs'] or 'not mounted'}",
        f"  uprobes           {yes[env['uprobes']]}",
        f"  kprobes           {yes[env['kprobes']]} (not needed)",
        "  tracepoints       " + ", ".join(f"{g} {yes[ok]}"
                                          for g, ok in env["tracepoint_groups"].items()),
    ]
    lines += [f"  note: {plain(note, 300)}" for note in env["notes"]]
    procs = report["processes"]
    lines.append(f"processes ({plain(report['selector'])}): {len(procs)}")
    for proc in procs:
        lines.append(f"  pid {proc['pid']}  {plain(proc['comm'])}  cgroup "
                     f"{plain(proc['cgroup'])}")
        for lib in proc["libraries"]:
            lines.append(f"    {lib['kind']:<7} {lib['traced_functions']:>3} traced functions  "
                         f"{plain(lib['path'])}")
        if proc["python"]:
            source = proc["python"]["source"] or "not traceable"
            lines.append(f"    python  {source}  {plain(proc['python']['path'])}")
    if not procs:
        lines.append("  none maps a CUDA or NCCL library now")
    return "\n".join(lines)


# -- aggregated trace --------------------------------------------------------------------------
def aggregate(args: argparse.Namespace) -> dict[str, Any]:
    """Run the ebpf probe for ``--duration`` seconds; per process and function totals."""
    selector = _selector(args)
    options: dict[str, Any] = {"pids": sorted(selector.pids), "cgroup": selector.cgroup,
                               "comm": selector.comm, "rescan_s": 1.0}
    if args.groups:
        options["groups"] = _groups(args, ())
    try:
        probe = EbpfProbe(**options)
        probe.open()
    except ProbeUnavailable as exc:
        raise RevealError(f"eBPF tracing unavailable: {exc}") from None
    try:
        deadline = time.monotonic() + float(args.duration)
        while time.monotonic() < deadline:
            time.sleep(min(0.5, max(deadline - time.monotonic(), 0.0)))
            probe.refresh()
    finally:
        probe.close()
    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    host: dict[str, float] = {}
    for name, value in sorted(probe.snapshot().items()):
        metric, labels = parse_channel(name)
        if "fn" in labels and "pid" in labels:
            row = rows.setdefault((labels["pid"], labels["fn"], metric.split(".")[1]),
                                  {"pid": labels["pid"], "comm": labels.get("comm", "?"),
                                   "cgroup": labels.get("cgroup", "?"), "fn": labels["fn"]})
            leaf = metric.rsplit(".", 1)[1]
            if leaf in ("calls", "latency_ns_total", "memcpy_bytes", "alloc_bytes", "bytes",
                        "free_bytes", "errors"):
                row[leaf] = row.get(leaf, 0.0) + (0.0 if math.isnan(value) else value)
        elif metric in ("ebpf.sched.runq_waits", "ebpf.sched.runq_latency_ns_total") or \
                metric.startswith(("ebpf.block.ios", "ebpf.tcp.retransmits{")):
            host[name] = value
    for row in rows.values():
        calls = row.get("calls", 0.0)
        row["mean_latency_us"] = row.get("latency_ns_total", 0.0) / calls / 1e3 if calls else None
    return {"duration_s": float(args.duration), "status": probe.status, "reason": probe.reason,
            "calls": sorted(rows.values(), key=lambda r: (r["pid"], r["fn"])),
            "host": host, "info": {k: v for k, v in probe.info.items() if k != "environment"}}


def render_aggregate(report: dict[str, Any]) -> str:
    lines = [f"eBPF trace over {report['duration_s']:g} s: {report['status']}"
             + (f" ({plain(report['reason'], 300)})" if report["reason"] else "")]
    head = f"  {'pid':>7}  {'comm':<16} {'function':<28} {'calls':>9} {'mean µs':>10} " \
           f"{'bytes':>14} {'errors':>7}"
    lines.append(head)
    for row in report["calls"]:
        mean = row["mean_latency_us"]
        moved = sum(row.get(k, 0.0) for k in ("memcpy_bytes", "bytes", "alloc_bytes",
                                                "free_bytes"))
        lines.append(f"  {row['pid']:>7}  {plain(row['comm'], 16):<16} {row['fn']:<28} "
                     f"{row.get('calls', 0):>9.0f} "
                     f"{'-' if mean is None else f'{mean:.1f}':>10} {moved:>14.0f} "
                     f"{row.get('errors', 0):>7.0f}")
    if not report["calls"]:
        lines.append("  no CUDA or NCCL call traced")
    for name, value in sorted(report["host"].items()):
        lines.append(f"  {plain(name)} = {value:.0f}")
    return "\n".join(lines)


# -- capture -----------------------------------------------------------------------------------
def chrome_capture(args: argparse.Namespace) -> dict[str, Any]:
    duration = 5.0 if args.duration is None else float(args.duration)
    result = capture(_selector(args), duration, int(args.max_events),
                     _groups(args, CAPTURE_GROUPS))
    result.write(args.chrome_trace)
    return {"file": str(args.chrome_trace), "events": dict(result.counts()),
            "lost_events": result.lost_events, "truncated": result.truncated,
            "libraries": result.libraries}


def run(args: argparse.Namespace) -> int:
    if args.duration is not None and not args.duration > 0:
        raise InputError(f"--duration must be positive, got {args.duration}")
    if args.chrome_trace is not None and not args.status:
        report = chrome_capture(args)
        if args.json:
            print(json.dumps(report, indent=2))
        else:
            total = sum(report["events"].values())
            print(f"wrote {total} events to {plain(report['file'])}"
                  + (" (event limit reached)" if report["truncated"] else "")
                  + (f"; {report['lost_events']} lost" if report["lost_events"] else ""))
            for name, count in sorted(report["events"].items()):
                print(f"  {name:<28} {count}")
        return 0
    if args.duration is not None and not args.status:
        report = aggregate(args)
        print(json.dumps(report, indent=2) if args.json else render_aggregate(report))
        return 0
    report = status(args)
    print(json.dumps(report, indent=2) if args.json else render_status(report))
    return 0
