"""A brief wall-clock step, as a time daemon makes after a resume: CLOCK_REALTIME forward
by ``step_s`` seconds, then back by the same amount ``hold_s`` seconds later.

The collector's timestamps come from CLOCK_MONOTONIC, which a step does not move. The
step is written to ``/tmp/rvbenign-<pid>-clock.json`` before it is made, so
``reveal validate --cleanup`` can take it back after a SIGKILL.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import ClassVar

from reveal.inject.benign.base import BenignActivity, benign_name, register
from reveal.inject.naming import temp_root

CAP_SYS_TIME = 25


def step_realtime(step_s: float) -> None:
    """Move CLOCK_REALTIME by ``step_s`` seconds (negative: back)."""
    now = time.clock_gettime_ns(time.CLOCK_REALTIME)
    time.clock_settime_ns(time.CLOCK_REALTIME, now + round(step_s * 1e9))


def state_file(pid: int | None = None) -> Path:
    return temp_root() / f"{benign_name('clock', pid)}.json"


def _has_cap_sys_time() -> bool:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> CAP_SYS_TIME & 1)
    return False


@register
class ClockStep(BenignActivity):
    kind = "clock_step"
    subsystem = "software"
    description = "wall clock stepped forward 0.5 s and back a few seconds later"
    self_ending = True
    INTENSITIES: ClassVar = {"default": {"step_s": 0.5, "hold_s": 3.0}}

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.stepped = 0.0  # seconds the clock is ahead because of this activity
        self.state = state_file()

    def check_host(self) -> str | None:
        if os.geteuid() != 0 or not _has_cap_sys_time():
            return "setting the clock needs CAP_SYS_TIME (root)"
        return None

    def begin(self) -> None:
        step = float(self.params["step_s"])
        self.state.write_text(json.dumps({"step_s": step}))
        step_realtime(step)
        self.stepped = step
        self.mark_begun()

    def end(self) -> None:
        if self.stepped:
            step_realtime(-self.stepped)
            self.stepped = 0.0
        self.state.unlink(missing_ok=True)
        super().end()
