"""The job squeezed onto fewer CPUs: every thread of the job's own cgroup gets a CPU
affinity of one CPU (high) or half the CPUs (low), as a mis-set cpuset, ``taskset`` or
NUMA binding leaves a tenant's job. Nothing else on the host changes: the job's threads
queue for the CPUs they are left while the others idle. Each thread's own affinity is
restored when the fault ends; a thread the job started meanwhile (it inherited the narrow
one) gets the widest affinity the job had.
"""

from __future__ import annotations

import contextlib
import os
from typing import ClassVar

from reveal.inject.faults.base import Fault, FaultContext, register
from reveal.inject.faults.cgroup_throttle import job_cgroups
from reveal.inject.naming import owned_name


def job_threads(context: FaultContext) -> set[int]:
    """Thread ids in the job's cgroups (v1 ``tasks``, v2 ``cgroup.threads``)."""
    tids: set[int] = set()
    for path in job_cgroups(context):
        for name in ("cgroup.threads", "tasks"):
            with contextlib.suppress(OSError, ValueError):
                tids |= {int(t) for t in (path / name).read_text().split()}
    return tids


def squeezed_cpus(allowed: set[int], share: float) -> set[int]:
    """The highest-numbered ``share`` of ``allowed`` CPUs, at least one."""
    keep = max(1, int(len(allowed) * share))
    return set(sorted(allowed)[-keep:])


@register
class AffinitySqueeze(Fault):
    kind = "affinity_squeeze"
    subsystem = "cpu"
    description = "the job's threads pinned to fewer CPUs (sched_setaffinity), restored"
    INTENSITIES: ClassVar = {
        "low": {"cpu_share": 0.5},
        "high": {"cpu_share": 0.0},  # one CPU
    }

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.saved: dict[int, set[int]] = {}

    def check_host(self) -> str | None:
        if not job_cgroups(self.context):
            return "the job has no cgroup to find its threads in (needs root and a job cgroup)"
        if len(os.sched_getaffinity(0)) < 2:
            return "one CPU: there is nothing to squeeze the job onto"
        return None

    def begin(self) -> None:
        target = squeezed_cpus(os.sched_getaffinity(0), float(self.params["cpu_share"]))
        self.params["cpu_list"] = sorted(target)
        self.params["where"] = [owned_name("job")]  # what a claim should name
        for tid in sorted(job_threads(self.context)):
            with contextlib.suppress(OSError):  # a thread that ended meanwhile
                before = os.sched_getaffinity(tid)
                os.sched_setaffinity(tid, target)
                self.saved[tid] = before
        self.params["threads"] = len(self.saved)

    def end(self) -> None:
        widest = set().union(*self.saved.values()) if self.saved else os.sched_getaffinity(0)
        for tid in sorted(job_threads(self.context) | set(self.saved)):
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, self.saved.get(tid, widest))
        self.saved.clear()

    def finished(self) -> bool:
        return False
