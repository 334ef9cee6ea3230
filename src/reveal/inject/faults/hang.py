"""The job hangs: every process of the job's own cgroup is stopped (``SIGSTOP``) and
continued (``SIGCONT``) when the fault ends, as a deadlocked collective, a stuck NFS read or
a debugger left attached leaves a tenant's job (``high``); or stopped for half of every
second (``low``), as a job that stalls on a slow peer does. Nothing is added to the host: the
job's CPU time, its traffic and its GPU work fall while everything else runs as before. A
suite killed meanwhile continues the job at exit (the undo stack)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import ClassVar

from reveal.inject.faults.base import Fault, FaultContext, register
from reveal.inject.faults.cgroup_throttle import job_cgroups
from reveal.inject.naming import owned_name
from reveal.inject.undo import UNDO


def job_processes(context: FaultContext) -> set[int]:
    """Process ids in the job's cgroups (``cgroup.procs``), this process left out."""
    pids: set[int] = set()
    for path in job_cgroups(context):
        with contextlib.suppress(OSError, ValueError):
            pids |= {int(p) for p in (path / "cgroup.procs").read_text().split()}
    pids.discard(os.getpid())
    return pids


def _signal_all(pids: set[int], signum: int) -> None:
    for pid in sorted(pids):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


@register
class JobHang(Fault):
    kind = "job_hang"
    subsystem = "cpu"
    description = "every process of the job stopped (SIGSTOP), then continued"
    #: the share of every ``period_s`` seconds the job is stopped for (1: all along)
    INTENSITIES: ClassVar = {
        "low": {"stopped_share": 0.5, "period_s": 1.0},
        "high": {"stopped_share": 1.0, "period_s": 1.0},
    }

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.stopped: set[int] = set()
        self._undo: int | None = None
        self._ending = threading.Event()
        self._stalls: threading.Thread | None = None

    def check_host(self) -> str | None:
        if not job_cgroups(self.context):
            return "the job has no cgroup to find its processes in (needs root and a job cgroup)"
        return None

    def begin(self) -> None:
        self.stopped = job_processes(self.context)
        self.params["processes"] = len(self.stopped)
        self.params["where"] = [owned_name("job")]  # what a claim should name
        stopped = set(self.stopped)
        self._undo = UNDO.push(f"continue {len(stopped)} stopped job processes",
                               lambda: _signal_all(stopped, signal.SIGCONT))
        _signal_all(self.stopped, signal.SIGSTOP)
        if float(self.params["stopped_share"]) < 1.0:
            self._ending.clear()
            self._stalls = threading.Thread(target=self._stall, name="job-hang", daemon=True)
            self._stalls.start()

    def _stall(self) -> None:
        """Stop the job for ``stopped_share`` of every ``period_s`` until the fault ends."""
        period = float(self.params["period_s"])
        stopped_s = period * float(self.params["stopped_share"])
        while not self._ending.wait(stopped_s):
            _signal_all(self.stopped, signal.SIGCONT)
            if self._ending.wait(period - stopped_s):
                break
            _signal_all(self.stopped, signal.SIGSTOP)

    def end(self) -> None:
        self._ending.set()
        if self._stalls is not None:
            self._stalls.join(timeout=5.0)
            self._stalls = None
        _signal_all(self.stopped, signal.SIGCONT)
        self.stopped.clear()
        if self._undo is not None:
            UNDO.pop(self._undo, run=False)
            self._undo = None

    def finished(self) -> bool:
        return False
