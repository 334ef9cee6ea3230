"""Swap thrash of the job: a process of the job whose working set outgrows its container's
memory limit on a host with swap, so that the kernel swaps its pages out and back in on
every pass over them, as a tenant's job squeezed below its working set does.

The process runs in the suite's own memory cgroup (``rvinj-<pid>-swap``, cgroup v1
``memory`` or a cgroup v2 root that delegates ``memory``) whose memory limit is
``limit_bytes`` with swap allowed, and writes one byte to every page of its
``working_bytes`` over and over. A host without swap gets a swap file for the fault's
length (``/tmp/rvinj-<pid>-swap-swapfile``: made, switched on, switched off and deleted when the
fault ends; ``reveal validate --cleanup`` does the same after a SIGKILL); a host that has
swap keeps its own. The cgroup is removed when the fault ends."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

from reveal.inject.cleanup import SWAPFILE_SUFFIX, active_swaps, switch_off
from reveal.inject.faults.base import Fault, _python_argv, register
from reveal.inject.faults.oom import limited_cgroup, memory_hierarchy
from reveal.inject.jobcgroup import remove_cgroup
from reveal.inject.naming import owned_name, temp_root
from reveal.inject.undo import UNDO

PAGE = 4096
#: swap the file holds beyond the working set, bytes
SWAP_MARGIN_BYTES = 256 << 20


@register
class SwapThrash(Fault):
    kind = "swap_thrash"
    subsystem = "memory"
    description = "a job process whose working set outgrows its cgroup's limit, with swap"
    tools: ClassVar = (("mkswap", "util-linux"), ("swapon", "mount"), ("swapoff", "mount"))
    INTENSITIES: ClassVar = {
        "low": {"working_bytes": 384 << 20, "limit_bytes": 256 << 20},
        "high": {"working_bytes": 768 << 20, "limit_bytes": 256 << 20},
    }

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.cgroup: Path | None = None
        self.swapfile: Path | None = None
        self._undo: int | None = None

    def check_host(self) -> str | None:
        if os.geteuid() != 0:
            return "a memory cgroup and a swap file need root"
        if memory_hierarchy() is None:
            return "no cgroup memory controller to limit a process with"
        if not active_swaps():
            return self.check_disk_room(self._swap_bytes())
        return None

    def _swap_bytes(self) -> int:
        return int(self.params["working_bytes"]) + SWAP_MARGIN_BYTES

    def begin(self) -> None:
        if not active_swaps():
            self._make_swapfile()
        self.cgroup = limited_cgroup("swap", int(self.params["limit_bytes"]), swap=True)
        self.params["where"] = [self.cgroup.name]
        self.params["swap_file"] = str(self.swapfile) if self.swapfile else None
        self.start_process([*_python_argv(__name__), str(self.cgroup / "cgroup.procs"),
                            str(int(self.params["working_bytes"]))])

    def _make_swapfile(self) -> None:
        path = temp_root() / (owned_name("swap") + SWAPFILE_SUFFIX)
        self.swapfile = path
        self._undo = UNDO.push(f"swap file {path}", lambda: switch_off(path))
        with open(path, "wb") as handle:
            os.posix_fallocate(handle.fileno(), 0, self._swap_bytes())
        path.chmod(0o600)
        for argv in (["mkswap", str(path)], ["swapon", str(path)]):
            done = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                                  check=False)
            if done.returncode != 0:
                raise OSError(f"{argv[0]} {path}: {done.stderr.strip() or done.returncode}")

    def end(self) -> None:
        super().end()
        if self.cgroup is not None:
            remove_cgroup(self.cgroup)
            self.cgroup = None
        if self._undo is not None:
            UNDO.pop(self._undo, run=True)
            self._undo = None

    def finished(self) -> bool:
        return False

    def detail(self) -> dict[str, Any]:
        return dict(self.params)


def thrash(procs_file: str, working_bytes: int) -> None:
    """Join the cgroup whose ``cgroup.procs`` is ``procs_file``, take ``working_bytes`` and
    write one byte to each of its pages, pass after pass, until stopped."""
    Path(procs_file).write_text(f"{os.getpid()}\n")
    held = bytearray(working_bytes)
    value = 0
    while True:
        value = (value + 1) & 0xFF
        held[::PAGE] = bytes([value]) * len(range(0, working_bytes, PAGE))
        time.sleep(0.01)


if __name__ == "__main__":  # python -m reveal.inject.faults.swap PROCS_FILE WORKING_BYTES
    thrash(sys.argv[1], int(sys.argv[2]))
