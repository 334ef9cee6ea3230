"""Two network namespaces joined by a veth pair: where the distributed workload and every
network fault live, so no fault ever touches the host's own interfaces.

``rvinj-<pid>-a`` holds ``rvi<pid>a`` with 10.213.0.1/30, ``rvinj-<pid>-b`` holds
``rvi<pid>b`` with 10.213.0.2/30. The addresses exist inside these namespaces only, so they
cannot clash with the host's routes. Deleting a namespace deletes its veth end, its qdiscs
and its nftables rules.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass, field

from reveal.errors import RevealError
from reveal.inject import processes
from reveal.inject.naming import IFNAME_PREFIX, owned_name
from reveal.inject.undo import UNDO

SUBNET_ADDRS = ("10.213.0.1", "10.213.0.2")
PREFIX_LEN = 30


def netns_supported() -> str | None:
    """None when namespaces + veth can be made here, else the reason they cannot."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    return None


@dataclass
class NetnsPair:
    """A created namespace pair; use as a context manager (deleted on exit)."""

    tag: str = "net"
    names: tuple[str, str] = ("", "")
    ifnames: tuple[str, str] = ("", "")
    addrs: tuple[str, str] = SUBNET_ADDRS
    _undo: int | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        pid = os.getpid()
        self.names = (owned_name(f"{self.tag}-a"), owned_name(f"{self.tag}-b"))
        self.ifnames = (f"{IFNAME_PREFIX}{pid}a"[:15], f"{IFNAME_PREFIX}{pid}b"[:15])

    def create(self) -> NetnsPair:
        reason = netns_supported()
        if reason:
            raise RevealError(f"cannot create network namespaces: {reason}")
        self._undo = UNDO.push(f"network namespaces {self.names}", self.delete)
        a, b = self.names
        ia, ib = self.ifnames
        try:
            for ns in self.names:
                processes.run(["ip", "netns", "add", ns])
            processes.run(["ip", "link", "add", ia, "type", "veth", "peer", "name", ib])
            processes.run(["ip", "link", "set", ia, "netns", a])
            processes.run(["ip", "link", "set", ib, "netns", b])
            for ns, ifname, addr in ((a, ia, self.addrs[0]), (b, ib, self.addrs[1])):
                processes.run(["ip", "-n", ns, "addr", "add", f"{addr}/{PREFIX_LEN}",
                               "dev", ifname])
                processes.run(["ip", "-n", ns, "link", "set", ifname, "up"])
                processes.run(["ip", "-n", ns, "link", "set", "lo", "up"])
        except Exception:
            self.close()
            raise
        return self

    def exec_prefix(self, side: int) -> list[str]:
        """argv prefix that runs a command inside namespace ``side`` (0 or 1)."""
        return ["ip", "netns", "exec", self.names[side]]

    def delete(self) -> None:
        """Kill what runs inside, then delete both namespaces (and so the veth pair)."""
        existing = set(_list_netns())
        for ns in self.names:
            if ns not in existing:
                continue
            pids = processes.run(["ip", "netns", "pids", ns], check=False).stdout.split()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), 9)
            processes.run(["ip", "netns", "delete", ns], check=False)
        # A veth end left in the root namespace by a failed move:
        for ifname in self.ifnames:
            processes.run(["ip", "link", "delete", ifname], check=False)

    def close(self) -> None:
        if self._undo is not None:
            UNDO.pop(self._undo, run=True)
            self._undo = None
        else:
            self.delete()

    def __enter__(self) -> NetnsPair:
        return self.create()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _list_netns() -> list[str]:
    out = processes.run(["ip", "netns", "list"], check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]
