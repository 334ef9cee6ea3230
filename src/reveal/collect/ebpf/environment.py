"""What this host allows for eBPF tracing, each finding with a reason an operator can act on.

Checks: privilege (root, or CAP_BPF + CAP_PERFMON), the bpftrace executable and version,
tracefs (mounted at ``/sys/kernel/tracing`` when missing and we may), uprobe and kprobe
support, and which tracepoint groups the kernel has.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from functools import lru_cache

TRACEFS_DIRS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")

#: group → tracepoints it needs (``category/name`` under tracefs ``events/``)
TRACEPOINTS = {
    "tcp": ("tcp/tcp_retransmit_skb",),
    "block": ("block/block_rq_issue", "block/block_rq_complete"),
    "sched": ("sched/sched_switch", "sched/sched_wakeup", "sched/sched_wakeup_new"),
}

_CAP_SYS_ADMIN, _CAP_PERFMON, _CAP_BPF = 21, 38, 39


def effective_caps(status_path: str = "/proc/self/status") -> int:
    """The CapEff bit mask of this process (0 when unreadable)."""
    try:
        with open(status_path) as handle:
            for line in handle:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except (OSError, ValueError, IndexError):
        pass
    return 0


def privilege_problem() -> str | None:
    """None when we may load BPF programs and attach probes, else why not."""
    if os.geteuid() == 0:
        return None
    caps = effective_caps()
    if caps >> _CAP_SYS_ADMIN & 1 or (caps >> _CAP_BPF & 1 and caps >> _CAP_PERFMON & 1):
        return None
    return (f"needs root or CAP_BPF+CAP_PERFMON (running as uid {os.geteuid()} without them); "
            "run the collector as root to enable eBPF tracing")


@lru_cache(maxsize=8)
def bpftrace_version(path: str) -> str | None:
    """``v0.17.0`` style version text of the bpftrace at ``path`` (None if it does not run)."""
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (done.stdout or done.stderr).strip().split()
    return text[-1] if done.returncode == 0 and text else None


def find_tracefs() -> str | None:
    """The tracefs mount point in use, or None."""
    for path in TRACEFS_DIRS:
        if os.path.isdir(os.path.join(path, "events")):
            return path
    return None


def mount_tracefs(target: str = TRACEFS_DIRS[0]) -> str | None:
    """Mount tracefs at ``target``; None on success, else the error text."""
    if not os.path.isdir(target):
        return f"{target} does not exist"
    mount = shutil.which("mount")
    if mount is None:
        return "no mount command"
    try:
        done = subprocess.run([mount, "-t", "tracefs", "nodev", target], capture_output=True,
                              text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None if done.returncode == 0 else (done.stderr.strip() or f"exit {done.returncode}")


@dataclass
class Environment:
    """Findings about this host; ``notes`` explain anything missing."""

    privileged: bool = False
    privilege_problem: str | None = None
    bpftrace: str | None = None
    bpftrace_version: str | None = None
    tracefs: str | None = None
    tracefs_mounted_now: bool = False
    uprobes: bool = False
    kprobes: bool = False
    tracepoint_groups: dict[str, bool] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "privileged": self.privileged, "bpftrace": self.bpftrace,
            "bpftrace_version": self.bpftrace_version, "tracefs": self.tracefs,
            "tracefs_mounted_now": self.tracefs_mounted_now, "uprobes": self.uprobes,
            "kprobes": self.kprobes, "tracepoint_groups": dict(self.tracepoint_groups),
            "notes": list(self.notes),
        }


def check_environment(bpftrace: str = "bpftrace", mount: bool = True) -> Environment:
    """Inspect this host; with ``mount``, mount a missing tracefs when privileged."""
    env = Environment()
    env.privilege_problem = privilege_problem()
    env.privileged = env.privilege_problem is None
    if not env.privileged:
        env.notes.append(env.privilege_problem or "")
    env.bpftrace = shutil.which(bpftrace)
    if env.bpftrace is None:
        env.notes.append(f"bpftrace not found ({bpftrace!r} on PATH); install the Debian "
                         "package bpftrace")
    else:
        env.bpftrace_version = bpftrace_version(env.bpftrace)
        if env.bpftrace_version is None:
            env.notes.append(f"{env.bpftrace} --version failed")
    env.tracefs = find_tracefs()
    if env.tracefs is None and mount and env.privileged:
        error = mount_tracefs()
        env.tracefs = find_tracefs()
        env.tracefs_mounted_now = env.tracefs is not None
        if env.tracefs is None:
            env.notes.append(f"tracefs is not mounted and mounting it at {TRACEFS_DIRS[0]} "
                             f"failed: {error}")
    elif env.tracefs is None:
        env.notes.append(f"tracefs is not mounted (mount -t tracefs nodev {TRACEFS_DIRS[0]})")
    env.uprobes = os.path.isdir("/sys/bus/event_source/devices/uprobe") or bool(
        env.tracefs and os.path.exists(os.path.join(env.tracefs, "uprobe_events")))
    env.kprobes = os.path.isdir("/sys/bus/event_source/devices/kprobe") and bool(
        env.tracefs and os.path.exists(os.path.join(env.tracefs, "kprobe_events")))
    if not env.uprobes:
        env.notes.append("the kernel has no uprobe support (CONFIG_UPROBE_EVENTS)")
    for group, points in TRACEPOINTS.items():
        env.tracepoint_groups[group] = bool(env.tracefs) and all(
            os.path.isdir(os.path.join(str(env.tracefs), "events", point)) for point in points)
    return env
