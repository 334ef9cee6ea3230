"""OOM kills: a process of the job outgrows a memory limit and the kernel's OOM killer ends
it, ``kills`` times, ``every_s`` seconds apart, as a data loader that outgrows its
container's limit does. Each victim runs in the suite's own memory cgroup
(``rvinj-<pid>-oom``, cgroup v1 ``memory`` or a cgroup v2 root that delegates ``memory``)
whose limit is ``limit_bytes`` (swap included where v1 accounts it), and allocates until it
is killed. The cgroup is removed when the fault ends."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

from reveal.inject import processes
from reveal.inject.faults.base import Fault, _python_argv, register
from reveal.inject.jobcgroup import CGROUP_ROOT, remove_cgroup
from reveal.inject.naming import owned_name

#: seconds a victim may take to be killed before it is stopped by hand
KILL_WAIT_S = 10.0
PAGE = 4096
#: bytes a victim allocates per step (it stops at most at 16 × the limit)
STEP_BYTES = 8 << 20


def memory_hierarchy(root: Path = CGROUP_ROOT) -> tuple[Path, str] | None:
    """Where a memory cgroup can be made: (the hierarchy's root, ``"v1"`` or ``"v2"``)."""
    v1 = root / "memory"
    if (v1 / "memory.limit_in_bytes").is_file():
        return v1, "v1"
    controllers = root / "cgroup.subtree_control"
    with contextlib.suppress(OSError):
        if "memory" in controllers.read_text().split():
            return root, "v2"
    return None


def limited_cgroup(kind: str, limit_bytes: int, swap: bool) -> Path:
    """A memory cgroup of this suite (``rvinj-<pid>-<kind>``) limited to ``limit_bytes``:
    with ``swap``, its pages may be swapped out beyond the limit (and are, first: v1's
    swappiness 100); without, the limit holds swap too, where it is accounted."""
    found = memory_hierarchy()
    assert found is not None
    root, version = found
    cgroup = root / owned_name(kind)
    cgroup.mkdir(exist_ok=True)
    limit = str(int(limit_bytes))
    if version == "v1":
        (cgroup / "memory.limit_in_bytes").write_text(limit)
        extra = ("memory.swappiness", "100") if swap else ("memory.memsw.limit_in_bytes", limit)
    else:
        (cgroup / "memory.max").write_text(limit)
        extra = ("memory.swap.max", "max" if swap else "0")
    with contextlib.suppress(OSError):  # no swap accounting here: nothing to set
        (cgroup / extra[0]).write_text(extra[1])
    return cgroup


@register
class OomKill(Fault):
    kind = "oom_kill"
    subsystem = "memory"
    description = "a job process killed by the OOM killer in its memory cgroup (bounded)"
    INTENSITIES: ClassVar = {
        "low": {"kills": 1, "every_s": 5.0, "limit_bytes": 64 << 20},
        "high": {"kills": 3, "every_s": 5.0, "limit_bytes": 64 << 20},
    }

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.cgroup: Path | None = None
        self._ending = threading.Event()
        self._killer: threading.Thread | None = None
        self.killed = 0

    def check_host(self) -> str | None:
        if os.geteuid() != 0:
            return "a memory cgroup needs root"
        if memory_hierarchy() is None:
            return "no cgroup memory controller to limit a process with"
        return None

    def begin(self) -> None:
        self.cgroup = limited_cgroup("oom", int(self.params["limit_bytes"]), swap=False)
        self.params["where"] = [self.cgroup.name]
        self._ending.clear()
        self._killer = threading.Thread(target=self._kill_every, name="oom-kill", daemon=True)
        self._killer.start()

    def _kill_every(self) -> None:
        """Start one victim every ``every_s`` seconds (the first at once), ``kills`` in all,
        each waited for until the kernel kills it."""
        assert self.cgroup is not None
        for _ in range(int(self.params["kills"])):
            proc = processes.start([*_python_argv(__name__), str(self.cgroup / "cgroup.procs"),
                                    str(16 * int(self.params["limit_bytes"]))],
                                   stdout=self.context.workdir / f"fault-{self.kind}.log")
            self.procs.append(proc)
            deadline = time.monotonic() + KILL_WAIT_S
            while proc.poll() is None and time.monotonic() < deadline:
                if self._ending.wait(0.05):
                    return
            if proc.poll() is None:
                processes.stop(proc)
            elif proc.returncode == -9:
                self.killed += 1
            if self._ending.wait(float(self.params["every_s"])):
                return

    def end(self) -> None:
        self._ending.set()
        if self._killer is not None:
            self._killer.join(timeout=KILL_WAIT_S + 5.0)
            self._killer = None
        super().end()
        if self.cgroup is not None:
            remove_cgroup(self.cgroup)
            self.cgroup = None

    def finished(self) -> bool:
        return False

    def detail(self) -> dict[str, Any]:
        return {**self.params, "killed": self.killed}


def outgrow(procs_file: str, most_bytes: int) -> None:
    """Join the cgroup whose ``cgroup.procs`` is ``procs_file``, then allocate and touch
    memory until the OOM killer ends this process (or ``most_bytes`` are held)."""
    Path(procs_file).write_text(f"{os.getpid()}\n")
    held: list[bytearray] = []
    total = 0
    while total < most_bytes:
        chunk = bytearray(STEP_BYTES)
        chunk[::PAGE] = b"\x01" * len(range(0, STEP_BYTES, PAGE))
        held.append(chunk)
        total += STEP_BYTES
    time.sleep(KILL_WAIT_S)


if __name__ == "__main__":  # python -m reveal.inject.faults.oom PROCS_FILE MOST_BYTES
    outgrow(sys.argv[1], int(sys.argv[2]))
