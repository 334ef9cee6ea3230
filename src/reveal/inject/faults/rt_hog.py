"""A real-time CPU hog: one busy process at ``SCHED_FIFO`` priority pinned to one CPU, as a
mis-prioritised host daemon would be. Whatever else runs on that CPU waits for it; the
kernel's real-time throttling (``kernel.sched_rt_runtime_us``, 95 % by default) still leaves
the CPU to others for the rest of each second, so the host stays usable. The fault refuses
to run where that throttling is switched off (-1).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import ClassVar

from reveal.inject.faults.base import Fault, register

RT_RUNTIME = Path("/proc/sys/kernel/sched_rt_runtime_us")
#: the busy loop the hog runs (no output, ends when stopped)
BUSY_LOOP = "while True:\n    pass\n"


@register
class RealtimeHog(Fault):
    kind = "rt_hog"
    subsystem = "cpu"
    description = "a SCHED_FIFO busy loop pinned to the last CPU (chrt + taskset)"
    INTENSITIES: ClassVar = {
        "low": {"priority": 1, "cpus": 1},
        "high": {"priority": 50, "cpus": 1},
    }
    tools = (("chrt", "util-linux"), ("taskset", "util-linux"))

    def check_host(self) -> str | None:
        if os.geteuid() != 0:
            return "SCHED_FIFO needs root"
        try:
            runtime = int(RT_RUNTIME.read_text().strip())
        except (OSError, ValueError):
            return f"cannot read {RT_RUNTIME}"
        if runtime < 0:
            return "real-time throttling is off (kernel.sched_rt_runtime_us = -1)"
        return None

    def begin(self) -> None:
        cpus = sorted(os.sched_getaffinity(0))
        chosen = cpus[-int(self.params["cpus"]):]
        self.params["cpu_list"] = chosen
        self.start_process(["taskset", "-c", ",".join(map(str, chosen)), "chrt", "-f",
                            str(self.params["priority"]), sys.executable, "-c", BUSY_LOOP])
