"""Things that appear on a host beside the job: a container, a new network interface.

- ``container_start_stop``: what a container runtime does for a short-lived container. A
  cgroup ``rvbenign-<pid>-ctr`` in every CPU hierarchy the suite may use (cgroup v2, or
  v1 ``cpu`` and ``cpuacct``), a network namespace ``rvbenign-<pid>-ctr`` joined to the
  host by a veth pair (host end ``rvbenign…h…``, container end inside the namespace with a
  private address), a process (``sleep``) inside both for ``hold_s`` seconds, then all of it
  torn down. Nothing is attached to the host's bridges or routes.
- ``new_interface``: ``ip link add rvbenign…d… type dummy``, up, held ``hold_s`` seconds,
  deleted. Where the kernel has no dummy driver, a bridge with no ports (what a container
  runtime's first start makes), else a veth pair.

Both deserve an informational event (something appeared), not an alarm.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from typing import ClassVar

from reveal.inject import processes
from reveal.inject.benign.base import BenignActivity, benign_ifname, benign_name, register
from reveal.inject.cleanup import netns_names
from reveal.inject.jobcgroup import JobCgroup
from reveal.inject.veth_pair import netns_supported

CONTAINER_ADDR = "10.214.0.2/30"  # inside the container's namespace only
LINK_TYPES = ("dummy", "bridge", "veth")


def delete_link(name: str) -> None:
    """Delete an interface (a veth's peer goes with it); no error when it is gone."""
    processes.run(["ip", "link", "delete", name], check=False)


def delete_netns(name: str) -> None:
    """Kill what runs in namespace ``name``, then delete it (with its interfaces)."""
    if name not in netns_names():
        return
    for pid in processes.run(["ip", "netns", "pids", name], check=False).stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), 9)
    processes.run(["ip", "netns", "delete", name], check=False)


@register
class ContainerStartStop(BenignActivity):
    kind = "container_start_stop"
    subsystem = "software"
    informational = True
    description = "a container: cgroup + network namespace + veth, a process for a few s"
    self_ending = True
    INTENSITIES: ClassVar = {"default": {"hold_s": 5.0}}

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.netns = benign_name("ctr")
        self.host_if = benign_ifname("h")
        self.ctr_if = benign_ifname("c")
        self.cgroup = JobCgroup()
        self.cgroup.name = benign_name("ctr")  # same mechanics, the benign prefix

    def check_host(self) -> str | None:
        return netns_supported()

    def begin(self) -> None:
        self.params.update(netns=self.netns, interfaces=[self.host_if, self.ctr_if],
                           cgroup=self.cgroup.name)
        self.cgroup.create()
        processes.run(["ip", "netns", "add", self.netns])
        processes.run(["ip", "link", "add", self.host_if, "type", "veth", "peer", "name",
                       self.ctr_if])
        processes.run(["ip", "link", "set", self.ctr_if, "netns", self.netns])
        processes.run(["ip", "-n", self.netns, "addr", "add", CONTAINER_ADDR, "dev",
                       self.ctr_if])
        for netns, ifname in ((self.netns, self.ctr_if), (self.netns, "lo"),
                              (None, self.host_if)):
            processes.run(["ip", *(["-n", netns] if netns else []), "link", "set", ifname,
                           "up"])
        self.start_process(["ip", "netns", "exec", self.netns, "sleep",
                            f"{float(self.params['hold_s']):g}"])
        for proc in self.procs:
            self.cgroup.add(proc.pid)

    def end(self) -> None:
        super().end()
        delete_netns(self.netns)
        delete_link(self.host_if)
        self.cgroup.remove()
        self.cgroup.close()


@register
class NewInterface(BenignActivity):
    kind = "new_interface"
    subsystem = "network"
    informational = True
    description = "a new interface (dummy; else a bridge) added, up for a few s, deleted"
    self_ending = True
    INTENSITIES: ClassVar = {"default": {"hold_s": 4.0}}

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.ifname = benign_ifname("d")
        self.made = False

    def check_host(self) -> str | None:
        if os.geteuid() != 0:
            return "adding an interface needs root"
        return None if shutil.which("ip") else "the ip command (iproute2) is not installed"

    def begin(self) -> None:
        errors = []
        for link_type in LINK_TYPES:
            extra = ["peer", "name", benign_ifname("p")] if link_type == "veth" else []
            made = processes.run(["ip", "link", "add", self.ifname, "type", link_type,
                                  *extra], check=False)
            if made.returncode == 0:
                self.made = True
                self.params["type"] = link_type
                break
            errors.append(f"{link_type}: {made.stderr.strip()}")
        if not self.made:
            raise RuntimeError(f"could not add {self.ifname}: {'; '.join(errors)}")
        self.params["interface"] = self.ifname
        processes.run(["ip", "link", "set", self.ifname, "up"])
        self.mark_begun()

    def end(self) -> None:
        if self.made:
            delete_link(self.ifname)
            self.made = False
        super().end()
