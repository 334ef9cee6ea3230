"""The reference workload's own cgroup, as a container runtime would give a tenant's job.

``rvinj-<pid>-job`` is created under the CPU-accounting hierarchies only (cgroup v1 ``cpu``
and ``cpuacct``, or a cgroup v2 root where the suite itself sits at ``/``); the memory and
I/O hierarchies are left alone, so no process leaves the memory limits it was started
under. The collector's cgroup probe then records the job's CPU time, so CPU contention
shows as the job losing CPU even on a host that is already busy. Removed (after its
processes are moved back) on close; ``reveal validate --cleanup`` removes leftovers.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from reveal.inject.naming import owned_name
from reveal.inject.undo import UNDO

CGROUP_ROOT = Path("/sys/fs/cgroup")
V1_CONTROLLERS = ("cpu,cpuacct", "cpu", "cpuacct")


def cpu_hierarchies(root: Path = CGROUP_ROOT) -> list[Path]:
    """Mounted hierarchies where the job's CPU time is accounted and we may add a child."""
    found: list[Path] = []
    mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    own = Path("/proc/self/cgroup").read_text().splitlines()
    at_root = {line.split(":", 2)[1]: line.split(":", 2)[2] == "/" for line in own
               if line.count(":") >= 2}
    for line in mounts:
        fields = line.split()
        if "-" not in fields:
            continue
        sep = fields.index("-")
        fstype, options = fields[sep + 1], fields[sep + 3] if len(fields) > sep + 3 else ""
        mount = Path(fields[4])
        if not str(mount).startswith(str(root)):
            continue
        if fstype == "cgroup":
            controllers = {o for o in options.split(",") if o in ("cpu", "cpuacct")}
            key = ",".join(sorted(o for o in options.split(",")
                                  if o not in ("rw", "ro", "relatime", "noatime")
                                  and "=" not in o))
            if controllers and at_root.get(key, False):
                found.append(mount)
        elif fstype == "cgroup2" and at_root.get("", False):
            found.append(mount)
    return sorted(set(found))


class JobCgroup:
    """A per-job cgroup in every CPU hierarchy; ``add(pid)`` moves a process (and threads)."""

    def __init__(self, kind: str = "job") -> None:
        self.name = owned_name(kind)
        self.paths: list[Path] = []
        self._undo: int | None = None

    def create(self) -> JobCgroup:
        if os.geteuid() != 0:
            return self
        for hierarchy in cpu_hierarchies():
            path = hierarchy / self.name
            with contextlib.suppress(OSError):
                path.mkdir(exist_ok=True)
                self.paths.append(path)
        if self.paths:
            self._undo = UNDO.push(f"cgroup {self.name}", self.remove)
        return self

    def add(self, pid: int) -> None:
        for path in self.paths:
            with contextlib.suppress(OSError):
                (path / "cgroup.procs").write_text(f"{pid}\n")

    def remove(self) -> None:
        for path in self.paths:
            remove_cgroup(path)
        self.paths = []

    def close(self) -> None:
        if self._undo is not None:
            UNDO.pop(self._undo, run=True)
            self._undo = None


def remove_cgroup(path: Path) -> bool:
    """Move any process left in ``path`` to its parent, then remove it; True when gone."""
    procs = path / "cgroup.procs"
    with contextlib.suppress(OSError):
        for pid in procs.read_text().split():
            with contextlib.suppress(OSError):
                (path.parent / "cgroup.procs").write_text(f"{pid}\n")
    with contextlib.suppress(OSError):
        path.rmdir()
    return not path.exists()


def leftover_cgroups(root: Path = CGROUP_ROOT, prefix: str = "rvinj-") -> list[Path]:
    """Suite cgroups directly under any hierarchy root."""
    found = []
    if not root.is_dir():
        return found
    candidates = [root, *[p for p in root.iterdir() if p.is_dir() and not p.is_symlink()]]
    for hierarchy in candidates:
        with contextlib.suppress(OSError):
            found += [p for p in hierarchy.iterdir() if p.is_dir() and p.name.startswith(prefix)]
    return sorted(found)
