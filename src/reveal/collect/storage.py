"""Block devices from /proc/diskstats.

Channels ``disk.<field>{dev=NAME}`` with the kernel's fields (Documentation/admin-guide/
iostats.rst): completed/merged reads and writes, sectors (512 bytes each, whatever the
device's sector size), milliseconds spent, I/Os in flight, discards and flushes (the last
six only on kernels that report them). Whole devices only by default; options:
``partitions=True`` adds partitions, ``virtual=True`` adds loop and ram devices,
``devices=[glob, ...]`` keeps only matching names.
"""

from __future__ import annotations

import fnmatch
import os
from typing import ClassVar

from reveal.collect._procfs import FileProbe, GroupSpec, Layout, PlanItem, Source, token_lines
from reveal.collect.options import as_list
from reveal.collect.probe import register
from reveal.frame import format_channel

DISK_FIELDS = (
    "reads_completed", "reads_merged", "sectors_read", "time_reading_ms",
    "writes_completed", "writes_merged", "sectors_written", "time_writing_ms",
    "ios_in_progress", "time_io_ms", "weighted_time_io_ms",
    "discards_completed", "discards_merged", "sectors_discarded", "time_discarding_ms",
    "flushes_completed", "time_flushing_ms",
)
_VIRTUAL = ("loop", "ram")


@register
class StorageProbe(FileProbe):
    """Per-device block I/O counters (/proc/diskstats)."""

    name = "storage"
    options_help: ClassVar[dict[str, str]] = {
        "devices": "only devices matching these shell patterns, e.g. nvme*,sd* (default: "
                   "every whole, non-virtual device)",
        "virtual": "also loop, ram, dm and other virtual devices (default: false)",
        "partitions": "also partitions (default: false)",
    }
    description = "block device I/O counters (/proc/diskstats)"

    def _keep(self, dev: str) -> bool:
        patterns = as_list(self.options.get("devices"))
        if patterns:
            return any(fnmatch.fnmatchcase(dev, p) for p in patterns)
        if not self.options.get("virtual", False) and dev.startswith(_VIRTUAL):
            return False
        if not self.options.get("partitions", False):
            sysname = dev.replace("/", "!")
            if os.path.exists(f"{self.sys_root}/class/block/{sysname}/partition"):
                return False
        return True

    def _layout(self, data: bytes) -> Layout:
        layout: Layout = {}
        for base, toks in token_lines(data):
            if len(toks) >= 4:
                dev = toks[2].decode("ascii", "replace")
                if self._keep(dev):
                    for i, field in enumerate(DISK_FIELDS[: len(toks) - 3]):
                        layout[format_channel(f"disk.{field}", {"dev": dev})] = (base + 3 + i,
                                                                                  1.0)
        return layout

    def plan(self) -> dict[str, PlanItem]:
        return {"diskstats": GroupSpec((Source(f"{self.proc_root}/diskstats", self._layout),))}

    def open(self) -> None:
        try:
            super().open()
        except Exception:
            if os.path.exists(f"{self.proc_root}/diskstats"):
                self.reason = f"{self.proc_root}/diskstats lists no block device kept by the " \
                              "filters (partitions/virtual/devices options)"
            raise
