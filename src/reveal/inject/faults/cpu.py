"""CPU contention: stress-ng CPU workers competing with the workload."""

from __future__ import annotations

from typing import ClassVar

from reveal.inject.faults.base import Fault, register


@register
class CpuContention(Fault):
    kind = "cpu_contention"
    subsystem = "cpu"
    description = "stress-ng --cpu workers at a set load"
    INTENSITIES: ClassVar = {
        "low": {"workers": 1, "load_pct": 50},
        "high": {"workers": 2, "load_pct": 100},
    }
    tools = (("stress-ng", "stress-ng"),)

    def begin(self) -> None:
        self.start_process(["stress-ng", "--cpu", str(self.params["workers"]),
                            "--cpu-load", str(self.params["load_pct"]),
                            "--timeout", "600s", "--quiet"])
