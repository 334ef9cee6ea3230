"""Memory: /proc/meminfo, /proc/vmstat, per-NUMA-node meminfo and numastat, HugePages.

Channels:

- ``mem.<Field>``: every /proc/meminfo field; sizes converted from kB to **bytes**
  (``HugePages_*`` are page counts). ``Active(anon)`` is named ``mem.Active_anon``.
- ``vmstat.<field>``: every /proc/vmstat field as read (``nr_*`` are pages now in use,
  the rest cumulative event counts).
- ``numa.<Field>{node=N}``: per-node meminfo, bytes; ``numastat.<field>{node=N}``:
  per-node allocation counters (pages).
- ``buddy.free_blocks{node=N,zone=Normal,order=K}``: free blocks of 2^K pages
  (/proc/buddyinfo; few high-order blocks = fragmented memory).
- ``hugepages.nr|free|resv|surplus{size=2048kB}`` system-wide and
  ``hugepages.nr|free|surplus{node=N,size=2048kB}`` per node: page counts
  (``hugepages=False`` leaves them out).

Option ``numa``: ``"auto"`` (default) reads the per-node files only on hosts with two or
more NUMA nodes (on one node they repeat the system-wide numbers); ``True`` always,
``False`` never.
"""

from __future__ import annotations

from typing import ClassVar

from reveal.collect._procfs import (
    FileProbe,
    GroupSpec,
    Layout,
    PlanItem,
    Source,
    key_value_layout,
    list_dir,
    metric_name,
    single_value,
    sorted_numeric,
    token_lines,
)
from reveal.collect.probe import register
from reveal.frame import format_channel

_HUGE_FILES = (("nr", "nr_hugepages"), ("free", "free_hugepages"), ("resv", "resv_hugepages"),
               ("surplus", "surplus_hugepages"))


def meminfo_layout(data: bytes) -> Layout:
    return key_value_layout(data, "mem.", kb_scale=True)


def vmstat_layout(data: bytes) -> Layout:
    return key_value_layout(data, "vmstat.")


def node_meminfo_layout(node: str):
    """Layout of ``Node N Field: value kB`` lines for node ``node``."""
    labels = {"node": node}

    def layout(data: bytes) -> Layout:
        result: Layout = {}
        for base, toks in token_lines(data):
            if len(toks) >= 4 and toks[0] == b"Node" and toks[3].isdigit():
                scale = 1024.0 if len(toks) > 4 and toks[4] == b"kB" else 1.0
                result[format_channel(f"numa.{metric_name(toks[2])}", labels)] = (base + 3,
                                                                                    scale)
        return result

    return layout


def numastat_layout(node: str):
    def layout(data: bytes) -> Layout:
        return key_value_layout(data, "numastat.", {"node": node})

    return layout


def buddyinfo_layout(data: bytes) -> Layout:
    """``Node 0, zone Normal c0 c1 ...``: free blocks per order, per node and zone."""
    result: Layout = {}
    for base, toks in token_lines(data):
        if len(toks) > 4 and toks[0] == b"Node" and toks[2] == b"zone":
            node = toks[1].rstrip(b",").decode("ascii", "replace")
            zone = toks[3].decode("ascii", "replace")
            for order in range(len(toks) - 4):
                labels = {"node": node, "zone": zone, "order": str(order)}
                result[format_channel("buddy.free_blocks", labels)] = (base + 4 + order, 1.0)
    return result


def hugepage_sources(directory: str, node: str | None) -> list[Source]:
    """One source per counter of every hugepages-<size> pool under ``directory``."""
    files: list[Source] = []
    for pool in sorted(list_dir(directory)):
        if not pool.startswith("hugepages-"):
            continue
        labels = {"size": pool[len("hugepages-"):]}
        if node is not None:
            labels["node"] = node
        for short, filename in _HUGE_FILES:
            if node is not None and short == "resv":
                continue  # not kept per node by the kernel
            channel = format_channel(f"hugepages.{short}", labels)
            files.append(Source(f"{directory}/{pool}/{filename}", single_value(channel)))
    return files


@register
class MemoryProbe(FileProbe):
    """Memory usage, VM event counters, NUMA and HugePages (/proc, /sys)."""

    name = "memory"
    options_help: ClassVar[dict[str, str]] = {
        "numa": "per-NUMA-node meminfo and numastat: true, false or auto (on with two or "
                "more nodes; default: auto)",
        "hugepages": "HugePages pools of every size, host-wide and per node (default: true)",
    }
    description = "meminfo, vmstat, per-NUMA-node memory, HugePages (/proc, /sys)"

    def plan(self) -> dict[str, PlanItem]:
        proc, sys = self.proc_root, self.sys_root
        sources = [Source(f"{proc}/meminfo", meminfo_layout),
                   Source(f"{proc}/vmstat", vmstat_layout),
                   Source(f"{proc}/buddyinfo", buddyinfo_layout)]
        node_root = f"{sys}/devices/system/node"
        nodes = sorted_numeric(list_dir(node_root), "node")
        numa = self.options.get("numa", "auto")
        if numa is False or (numa == "auto" and len(nodes) < 2):
            self.info["numa"] = f"per-node files skipped ({len(nodes)} node(s), numa={numa!r})"
            nodes = []
        for entry in nodes:
            node, path = entry[4:], f"{node_root}/{entry}"
            sources.append(Source(f"{path}/meminfo", node_meminfo_layout(node)))
            sources.append(Source(f"{path}/numastat", numastat_layout(node)))
        if self.options.get("hugepages", True):
            sources += hugepage_sources(f"{sys}/kernel/mm/hugepages", None)
            for entry in nodes:
                sources += hugepage_sources(f"{node_root}/{entry}/hugepages", entry[4:])
        return {"memory": GroupSpec(tuple(sources))}

    def open(self) -> None:
        super().open()
        missing = [path for part in self._parts.values() for path in part.missing
                   if path.startswith(self.proc_root)]
        if missing:
            self.status, self.reason = "degraded", "unreadable: " + ", ".join(missing)
