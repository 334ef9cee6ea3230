"""Memory pressure: stress-ng allocates and touches a bounded number of bytes, then holds
them (``--vm-hang 0``) so the change is in memory, not in CPU time."""

from __future__ import annotations

from typing import Any, ClassVar

import psutil

from reveal.inject.faults.base import Fault, register

MAX_SHARE_OF_AVAILABLE = 0.5  # never take more than this share of MemAvailable


@register
class MemoryPressure(Fault):
    kind = "memory_pressure"
    subsystem = "memory"
    description = "stress-ng --vm holding a bounded allocation"
    INTENSITIES: ClassVar = {
        "low": {"bytes": 1 << 30},
        "high": {"bytes": 4 << 30},
    }
    tools = (("stress-ng", "stress-ng"),)

    def _bytes(self) -> int:
        available = int(psutil.virtual_memory().available)
        return int(min(self.params["bytes"], MAX_SHARE_OF_AVAILABLE * available))

    def begin(self) -> None:
        self.params["bytes_used"] = self._bytes()
        self.start_process(["stress-ng", "--vm", "1", "--vm-bytes",
                            f"{self.params['bytes_used']}", "--vm-keep", "--vm-populate",
                            "--vm-hang", "0", "--timeout", "600s", "--quiet"])

    def detail(self) -> dict[str, Any]:
        return dict(self.params)
