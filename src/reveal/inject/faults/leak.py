"""A slow memory leak: a process that allocates and touches ``rate`` bytes every second and
never frees them, up to a bound (``max_bytes``, at most half of the memory available when
it starts), then holds what it took, as a tenant's data loader that caches every batch does.
It grows too slowly for any one window to show it: only its level, minutes on, does."""

from __future__ import annotations

import sys
import time
from typing import Any, ClassVar

import psutil

from reveal.inject.faults.base import Fault, _python_argv, register

MAX_SHARE_OF_AVAILABLE = 0.5  # never take more than this share of MemAvailable
#: seconds between two allocations of the leaking process
STEP_S = 0.1
PAGE = 4096


@register
class MemoryLeak(Fault):
    kind = "memory_leak"
    subsystem = "memory"
    description = "a process allocating rate bytes/s and never freeing them (bounded)"
    INTENSITIES: ClassVar = {
        "low": {"rate_bytes_per_s": 5 << 20, "max_bytes": 2 << 30},
        "high": {"rate_bytes_per_s": 15 << 20, "max_bytes": 4 << 30},
    }

    def begin(self) -> None:
        available = int(psutil.virtual_memory().available)
        bound = int(min(self.params["max_bytes"], MAX_SHARE_OF_AVAILABLE * available))
        self.params["max_bytes_used"] = bound
        self.start_process([*_python_argv(__name__), str(int(self.params["rate_bytes_per_s"])),
                            str(bound)])

    def finished(self) -> bool:
        return False

    def detail(self) -> dict[str, Any]:
        return dict(self.params)


def leak(rate_bytes_per_s: int, max_bytes: int) -> None:
    """Allocate ``rate_bytes_per_s`` every second in steps of :data:`STEP_S`, each page
    written once, until ``max_bytes`` are held; then hold them until killed."""
    held: list[bytearray] = []
    total = 0
    step = max(PAGE, int(rate_bytes_per_s * STEP_S))
    next_at = time.monotonic()
    while total < max_bytes:
        chunk = bytearray(min(step, max_bytes - total))
        chunk[::PAGE] = b"\x01" * len(range(0, len(chunk), PAGE))  # touch every page
        held.append(chunk)
        total += len(chunk)
        next_at += STEP_S
        time.sleep(max(0.0, next_at - time.monotonic()))
    while True:
        time.sleep(3600)


if __name__ == "__main__":  # python -m reveal.inject.faults.leak RATE MAX
    leak(int(sys.argv[1]), int(sys.argv[2]))
