"""The Fault contract and the episode runner that records ground truth.

A fault is one small class: ``kind`` (what it is), ``subsystem`` (where Reveal should
attribute it), ``INTENSITIES`` (name → parameters), ``check()`` (why it cannot run here,
or None), ``begin()`` / ``end()`` (make and undo the change; ``end`` must be idempotent and
safe after a failed ``begin``) and ``finished()`` for faults that end by themselves.
Everything is bounded: each intensity names its sizes and rates, and :func:`run_episode`
stops the fault after ``duration_s`` seconds (self-ending faults: at most ``max_s``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import psutil

from reveal.errors import RevealError
from reveal.inject import processes
from reveal.inject.groundtruth import Episode, EventLog
from reveal.inject.undo import UNDO
from reveal.inject.veth_pair import NetnsPair
from reveal.registry import Registry

#: the largest share of the free disk that a fault's scratch files may take
MAX_SHARE_OF_FREE_DISK = 0.25


@dataclass
class FaultContext:
    """Where a fault may act: a scratch directory it owns and, for network faults, the
    suite's namespace pair; on a live suite, how to restart its watch (returns once the
    new process scores)."""

    workdir: Path
    netns: NetnsPair | None = None
    restart_watch: Callable[[], None] | None = None


class Fault(ABC):
    """One injectable fault at one intensity."""

    kind: ClassVar[str] = ""
    subsystem: ClassVar[str] = ""
    description: ClassVar[str] = ""
    INTENSITIES: ClassVar[dict[str, dict[str, Any]]] = {}
    needs_netns: ClassVar[bool] = False
    self_ending: ClassVar[bool] = False
    #: commands the fault runs, each with the apt package that installs it
    tools: ClassVar[tuple[tuple[str, str], ...]] = ()

    def __init__(self, intensity: str, context: FaultContext) -> None:
        if intensity not in self.INTENSITIES:
            raise RevealError(f"fault {self.kind}: unknown intensity {intensity!r} "
                              f"(choose from {', '.join(self.INTENSITIES)})")
        self.intensity = intensity
        self.params: dict[str, Any] = dict(self.INTENSITIES[intensity])
        self.context = context
        self.procs: list[subprocess.Popen[bytes]] = []

    def check(self) -> str | None:
        """None when the fault can run here, else the reason it cannot: the suite's
        namespaces (``needs_netns``), then each of ``tools``, then :meth:`check_host`."""
        if self.needs_netns and self.context.netns is None:
            return "needs the suite's network namespaces (a distributed scenario)"
        for name, package in self.tools:
            reason = require_tool(name, package)
            if reason:
                return reason
        return self.check_host()

    def check_host(self) -> str | None:
        """What else the fault needs of this host: None when it is there, else the reason
        the fault cannot run."""
        return None

    def check_disk_room(self, size: int) -> str | None:
        """None when ``size`` bytes fit in the share of the workdir's free disk that a fault
        may take (:data:`MAX_SHARE_OF_FREE_DISK`), else the reason."""
        free = psutil.disk_usage(str(self.context.workdir)).free
        if size > MAX_SHARE_OF_FREE_DISK * free:
            return f"not enough free disk in {self.context.workdir} for {size} B"
        return None

    @abstractmethod
    def begin(self) -> None:
        """Make the change (start processes, install rules)."""

    def end(self) -> None:
        """Undo the change; the default stops the processes ``begin`` started."""
        for proc in self.procs:
            processes.stop(proc)
        self.procs.clear()

    def remove_file(self, path: Path) -> None:
        """Delete a scratch file and flush the file system, so that what the deletion sets
        off (journal commit, discards of the freed blocks) happens inside the episode."""
        path.unlink(missing_ok=True)
        os.sync()

    def finished(self) -> bool:
        """True when a self-ending fault has done its work."""
        return bool(self.procs) and all(p.poll() is not None for p in self.procs)

    def detail(self) -> dict[str, Any]:
        """Parameters recorded with the episode (sizes in bytes, rates per second)."""
        return dict(self.params)

    def start_process(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        log = self.context.workdir / f"fault-{self.kind}.log"
        self.procs.append(processes.start(argv, env=env, stdout=log))


def _python_argv(module: str) -> list[str]:
    """argv that runs ``module`` with this interpreter."""
    return [sys.executable, "-m", module]


def require_tool(name: str, package: str) -> str | None:
    """None when command ``name`` is on PATH, else a reason naming the apt ``package``."""
    return None if shutil.which(name) else f"{name} is not installed (apt-get install {package})"


def run_episode(fault: Fault, duration_s: float, log: EventLog | None,
                max_s: float | None = None, stop: threading.Event | None = None) -> Episode:
    """Inject ``fault`` for ``duration_s`` seconds and record the episode in ``log``.

    ``start_ns`` is taken just before ``begin()``, ``end_ns`` just after ``end()`` returns,
    both from ``time.monotonic_ns()``. A self-ending fault (writeback) runs until done, at
    most ``max_s`` seconds (default ``3 * duration_s``); ``stop``, once set, ends any fault
    sooner. The change is undone even when this raises or the process is told to exit
    (see :mod:`reveal.inject.cleanup`).
    """
    reason = fault.check()
    if reason:
        raise RevealError(f"fault {fault.kind}: {reason}")
    handle = UNDO.push(f"fault {fault.kind}", fault.end)
    start_ns = time.monotonic_ns()
    try:
        fault.begin()
        limit = max_s if max_s is not None else 3 * duration_s
        deadline = time.monotonic() + (limit if fault.self_ending else duration_s)
        while time.monotonic() < deadline:
            if (fault.self_ending and fault.finished()) or (stop is not None
                                                             and stop.is_set()):
                break
            time.sleep(0.05)
    finally:
        UNDO.pop(handle, run=True)
        end_ns = time.monotonic_ns()
    episode = Episode(start_ns, end_ns, fault.kind, fault.subsystem, fault.intensity,
                      fault.detail())
    if log is not None:
        log.append(episode)
    return episode


#: the fault classes by kind, in registration order (a :class:`reveal.registry.Registry`)
FAULTS: Registry[type[Fault]] = Registry("fault", Fault, key="kind")


def register(cls: type[Fault]) -> type[Fault]:
    """Class decorator: make the fault ``cls`` available under ``cls.kind``."""
    return FAULTS.register(cls)
