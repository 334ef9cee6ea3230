"""What every benign activity shares: the Fault contract, marked benign, with owned names.

A benign activity is ordinary host work that is not a fault (a commit, a login, a cache
drop). It follows :class:`reveal.inject.faults.base.Fault` exactly, so the scenario
machinery runs it and records its ground truth in ``events.jsonl`` like a fault's, and adds
two marks: ``benign`` (always True) and ``informational`` (True where an operator would
want a note rather than silence: a container appeared, a new interface).

Everything an activity creates is named with :data:`PREFIX` and the owner's pid:
``rvbenign-<pid>-<what>`` for directories, namespaces, cgroups and state files, and
``rvbenign<pid in base 36, 5 chars><role><n>`` (15 characters, the kernel's limit) for
interfaces, so :mod:`reveal.inject.benign.leftovers` can find what a killed run left.
"""

from __future__ import annotations

import itertools
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

from reveal.inject import processes
from reveal.inject.faults.base import Fault
from reveal.registry import Registry

PREFIX = "rvbenign"
#: The stdlib-only helper that does the file and process work of several activities.
WORK_SCRIPT = Path(__file__).with_name("work.py")
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"
_SERIAL = itertools.count()


def benign_name(what: str, pid: int | None = None) -> str:
    """``rvbenign-<pid>-<what>``: a name for a directory, namespace, cgroup or state file."""
    return f"{PREFIX}-{pid if pid is not None else os.getpid()}-{what}"


def base36(number: int, width: int = 5) -> str:
    digits = ""
    while number:
        number, rest = divmod(number, 36)
        digits = _DIGITS[rest] + digits
    return digits.rjust(width, "0")


def benign_ifname(role: str, pid: int | None = None) -> str:
    """An interface name ``rvbenign`` + pid (base 36, 5 chars) + ``role`` (one letter) +
    a serial (one base-36 char): 15 characters, unique within this process."""
    serial = _DIGITS[next(_SERIAL) % 36]
    return f"{PREFIX}{base36(pid if pid is not None else os.getpid())}{role[:1]}{serial}"


def ifname_owner(name: str) -> int | None:
    """The owner pid encoded in :func:`benign_ifname`'s name, else None (not ours)."""
    if len(name) != 15 or not name.startswith(PREFIX):
        return None
    try:
        return int(name[len(PREFIX):len(PREFIX) + 5], 36)
    except ValueError:
        return None


class BenignActivity(Fault):
    """A Fault that is not one: ordinary host activity, bounded in size and time.

    ``hold_s`` (in an intensity) makes a timed activity self-ending: it is finished
    ``hold_s`` seconds after ``begin()``. Scratch files live in :attr:`scratch`, a
    directory of the context's workdir that ``end()`` removes.
    """

    benign: ClassVar[bool] = True
    informational: ClassVar[bool] = False
    INTENSITIES: ClassVar[dict[str, dict[str, Any]]] = {"default": {}}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.began: float | None = None  # time.monotonic() at begin(), for hold_s

    @property
    def scratch(self) -> Path:
        """``WORKDIR/rvbenign-<kind>``: this activity's own files (created on demand)."""
        return self.context.workdir / f"{PREFIX}-{self.kind}"

    def make_scratch(self) -> Path:
        self.scratch.mkdir(parents=True, exist_ok=True)
        return self.scratch

    def remove_scratch(self) -> None:
        """Delete the scratch directory and flush, so the freed blocks' journal commit and
        discards fall inside the episode."""
        if self.scratch.exists():
            shutil.rmtree(self.scratch, ignore_errors=True)
            os.sync()

    def start_process(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        """Start a tagged child (see :mod:`reveal.inject.processes`), its output logged in
        the scratch directory."""
        log = self.make_scratch() / "activity.log"
        self.procs.append(processes.start(argv, env=env, stdout=log, cwd=self.scratch))

    def start_work(self, task: str, *args: str) -> None:
        """Run ``work.py TASK ARGS`` (stdlib only, so no package import) as a child."""
        self.start_process([sys.executable, str(WORK_SCRIPT), task, *args])

    def end(self) -> None:
        """Stop the children (their exit codes go into the episode's detail), then remove
        the scratch directory. Safe to call twice and after a failed ``begin``."""
        codes = [p.poll() for p in self.procs]
        if codes:
            self.params["exit_codes"] = codes
        super().end()
        self.remove_scratch()

    def mark_begun(self) -> None:
        self.began = time.monotonic()

    def finished(self) -> bool:
        hold = self.params.get("hold_s")
        if hold is not None and self.began is not None and not self.procs:
            return time.monotonic() - self.began >= float(hold)
        return super().finished()


#: the benign activity classes by kind, in registration order
#: (a :class:`reveal.registry.Registry`)
BENIGN: Registry[type[Fault]] = Registry("benign activity", BenignActivity, key="kind")


def register(cls: type[BenignActivity]) -> type[BenignActivity]:
    """Class decorator: make the benign activity ``cls`` available under ``cls.kind``."""
    return BENIGN.register(cls)
