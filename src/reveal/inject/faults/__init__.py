"""Fault injectors with ground truth. See :mod:`reveal.inject.faults.base` for the contract.

=====================  =========  ====================================================
kind                   subsystem  what it does
=====================  =========  ====================================================
cpu_contention         cpu        stress-ng --cpu workers
memory_pressure        memory     stress-ng --vm holding a bounded allocation
writeback_storm        memory     bounded buffered write held dirty, then sync
disk_burst             storage    fio O_DIRECT random read/write on a bounded file
packet_loss            network    random drop on the suite's veth (netem / nftables)
net_delay              network    netem delay on the suite's veth (needs netem)
net_throttle           network    tbf rate limit on the suite's veth
udp_flood              network    small-packet UDP flood over the veth (softirq storm)
hugepages_reserved     memory     vm.nr_hugepages raised, unused (cross-host case)
cgroup_throttle        cpu        CPU quota on the job's cgroup (cpu.max / cfs_quota)
mtu_shrink             network    MTU of the suite's veth lowered (576 B at high)
rt_hog                 cpu        SCHED_FIFO busy loop pinned to one CPU
affinity_squeeze       cpu        the job's threads pinned to fewer CPUs (affinity)
job_hang               cpu        the job's processes stopped (SIGSTOP), or half of each s
memory_leak            memory     a process growing 5 or 15 MB/s, never freeing (bounded)
oom_kill               memory     a job process killed by the OOM killer in its cgroup
swap_thrash            memory     a job process outgrowing its cgroup's limit, with swap
=====================  =========  ====================================================
"""

from __future__ import annotations

import importlib

from reveal.errors import RevealError
from reveal.inject.faults.base import FAULTS, Fault, FaultContext, register, run_episode

#: modules of this package that define the built-in faults (registered in this order)
BUILTIN_MODULES = ("cpu", "memory", "writeback", "disk", "network", "udp_flood", "hugepages",
                   "cgroup_throttle", "mtu", "rt_hog", "affinity", "hang", "leak", "oom", "swap")
for _module in BUILTIN_MODULES:
    importlib.import_module(f"{__package__}.{_module}")


def fault_class(kind: str) -> type[Fault]:
    """The class of fault ``kind``, or of benign activity ``kind``
    (:data:`reveal.inject.benign.BENIGN`); unknown names raise :class:`RevealError`."""
    cls = FAULTS.get(kind)
    if cls is not None:
        return cls
    from reveal.inject.benign import BENIGN

    cls = BENIGN.get(kind)
    if cls is None:
        raise RevealError(f"unknown fault {kind!r} (choose from {', '.join(FAULTS)}; "
                          f"benign activity: {', '.join(BENIGN)})")
    return cls


def make_fault(kind: str, intensity: str, context: FaultContext) -> Fault:
    """The fault (or benign activity) ``kind`` at ``intensity``; unknown names raise
    :class:`RevealError`."""
    return fault_class(kind)(intensity, context)


__all__ = ["FAULTS", "Fault", "FaultContext", "fault_class", "make_fault", "register",
           "run_episode"]
