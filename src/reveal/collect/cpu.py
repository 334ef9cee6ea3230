"""CPU time, scheduler counts, load average and softirqs from /proc.

Channels (values as the kernel gives them):

- ``cpu.<field>`` (all CPUs) and ``cpu.<field>{cpu=N}`` for ``user nice system idle iowait
  irq softirq steal guest guest_nice``: cumulative time in USER_HZ ticks (1/100 s).
- ``cpu.intr`` (interrupts serviced, total only), ``cpu.ctxt`` (context switches),
  ``cpu.processes`` (forks): cumulative counts; ``cpu.procs_running``,
  ``cpu.procs_blocked``: tasks now runnable / blocked on I/O.
- ``loadavg.load1|load5|load15`` (run-queue averages), ``loadavg.runnable``,
  ``loadavg.tasks`` (scheduling entities now runnable / existing).
- ``softirq.count{cpu=N,type=NET_RX}``: cumulative softirqs per type per CPU.
"""

from __future__ import annotations

import os

from reveal.collect._procfs import (
    FileProbe,
    GroupSpec,
    Layout,
    PlanItem,
    Source,
    native_prepare,
    token_lines,
)
from reveal.collect.probe import register
from reveal.frame import format_channel

CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest",
              "guest_nice")
_SCALARS = (b"intr", b"ctxt", b"processes", b"procs_running", b"procs_blocked")


@native_prepare(code=1)
def compact_stat(data: bytes) -> bytes:
    """/proc/stat with the ``intr`` line cut to its total (it lists every IRQ number)."""
    start = data.find(b"\nintr ")
    if start < 0:
        return data
    first = data.find(b" ", start + 6)
    end = data.find(b"\n", start + 6)
    if first < 0 or end < 0 or first > end:
        return data
    return data[:first] + data[end:]


def stat_layout(data: bytes) -> Layout:
    """Layout of (compacted) /proc/stat."""
    layout: Layout = {}
    for base, toks in token_lines(data):
        if toks:
            key = toks[0]
            if key == b"cpu":
                for i, field in enumerate(CPU_FIELDS[: len(toks) - 1]):
                    layout[f"cpu.{field}"] = (base + 1 + i, 1.0)
            elif key.startswith(b"cpu") and key[3:].isdigit():
                labels = {"cpu": key[3:].decode()}
                for i, field in enumerate(CPU_FIELDS[: len(toks) - 1]):
                    layout[format_channel(f"cpu.{field}", labels)] = (base + 1 + i, 1.0)
            elif key in _SCALARS and len(toks) >= 2:
                layout[f"cpu.{key.decode()}"] = (base + 1, 1.0)
    return layout


def loadavg_layout(data: bytes) -> Layout:
    """Layout of /proc/loadavg (``0.01 0.12 0.07 3/97 5669``), after ``/`` became a blank."""
    names = ("load1", "load5", "load15", "runnable", "tasks")
    count = min(len(names), len(data.split()))
    return {f"loadavg.{names[i]}": (i, 1.0) for i in range(count)}


@native_prepare(split=b"/")
def split_slash(data: bytes) -> bytes:
    return data.replace(b"/", b" ")


def per_cpu_table_layout(data: bytes, metric: str, label: str) -> Layout:
    """Layout of a ``CPU0 CPU1 ...`` header table (/proc/softirqs, /proc/interrupts).

    Rows are ``NAME: count_cpu0 count_cpu1 ... [description]``; a row with a single count
    (``ERR:``, ``MIS:``) becomes one channel without a ``cpu`` label.
    """
    lines = data.split(b"\n")
    header = lines[0].split() if lines else []
    cpus = [t[3:].decode() for t in header if t.startswith(b"CPU") and t[3:].isdigit()]
    layout: Layout = {}
    base = len(header)
    for line in lines[1:]:
        toks = line.split()
        if toks and toks[0].endswith(b":"):
            name = toks[0][:-1].decode("ascii", "replace")
            count = 0
            while count < len(cpus) and count + 1 < len(toks) and toks[count + 1].isdigit():
                count += 1
            if count == len(cpus):
                # one format_channel per row (it sanitises the name); CPU ids are digits
                head, _, tail = format_channel(metric, {"cpu": "\0", label: name}).partition(
                    "\0")
                for i, cpu in enumerate(cpus):
                    layout[f"{head}{cpu}{tail}"] = (base + 1 + i, 1.0)
            elif count == 1 and len(toks) == 2:
                layout[format_channel(metric, {label: name})] = (base + 1, 1.0)
        base += len(toks)
    return layout


def softirq_layout(data: bytes) -> Layout:
    return per_cpu_table_layout(data, "softirq.count", "type")


@register
class CpuProbe(FileProbe):
    """CPU time per CPU, scheduler counts, load average, softirqs (/proc)."""

    name = "cpu"
    description = "CPU time per CPU, context switches, load average, softirqs (/proc)"

    def plan(self) -> dict[str, PlanItem]:
        proc = self.proc_root
        return {
            "counts": GroupSpec((Source(f"{proc}/stat", stat_layout, compact_stat),
                                 Source(f"{proc}/softirqs", softirq_layout))),
            "loadavg": GroupSpec((Source(f"{proc}/loadavg", loadavg_layout, split_slash),),
                                 "fixed"),  # "%lu.%02lu"
        }

    def open(self) -> None:
        super().open()
        missing = [path for part in self._parts.values() for path in part.missing]
        missing += [f"{self.proc_root}/{k}" for k in ("loadavg",) if k in self.skipped]
        if "counts" in self.skipped:
            missing += [f"{self.proc_root}/stat", f"{self.proc_root}/softirqs"]
        if missing:
            self.status, self.reason = "degraded", "unreadable: " + ", ".join(missing)
        self.info["user_hz"] = os.sysconf("SC_CLK_TCK")
