"""Kernel memory housekeeping an administrator or a tool does now and then.

- ``page_cache_drop``: ``sync; echo 1 > /proc/sys/vm/drop_caches``. The clean page cache
  is freed host-wide; the job re-reads what it needs and the cache refills by itself.
- ``thp_compact``: ``echo 1 > /proc/sys/vm/compact_memory``. The kernel compacts free
  memory into contiguous blocks, which lets transparent huge pages be collapsed (and moves
  pages about, splitting some).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar

from reveal.inject.benign.base import BenignActivity, register

DROP_CACHES = Path("/proc/sys/vm/drop_caches")
COMPACT_MEMORY = Path("/proc/sys/vm/compact_memory")


def _writable(path: Path) -> str | None:
    if not path.exists():
        return f"{path} does not exist on this kernel"
    if not os.access(path, os.W_OK):
        return f"{path} is not writable (needs root)"
    return None


@register
class PageCacheDrop(BenignActivity):
    kind = "page_cache_drop"
    subsystem = "memory"
    description = "sync, then drop the clean page cache (the job refills it)"
    self_ending = True
    INTENSITIES: ClassVar = {"default": {"mode": 1}}  # 1: page cache only

    def check_host(self) -> str | None:
        return _writable(DROP_CACHES)

    def begin(self) -> None:
        self.start_process(["sh", "-c", f'sync && echo {int(self.params["mode"])} > "$1"',
                            "drop", str(DROP_CACHES)])


@register
class ThpCompact(BenignActivity):
    kind = "thp_compact"
    subsystem = "memory"
    description = "compact free memory (transparent huge pages collapsed or split)"
    self_ending = True
    INTENSITIES: ClassVar = {"default": {}}

    def check_host(self) -> str | None:
        return _writable(COMPACT_MEMORY)

    def begin(self) -> None:
        self.start_process(["sh", "-c", 'echo 1 > "$1"', "compact", str(COMPACT_MEMORY)])
