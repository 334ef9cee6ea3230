"""A smaller MTU on the suite's veth pair (a link left at a wrong MTU by a mis-set overlay
or tunnel): the job's TCP segments shrink to a few hundred bytes, and those in flight at
the change no longer fit and are sent again. On a physical link the same bytes then cost
several times the packets and interrupts; a veth may pass them on as GSO segments, so
here the cost can be small. The original MTU is restored on both ends when the fault ends.
"""

from __future__ import annotations

import contextlib
from typing import ClassVar

from reveal.inject import processes
from reveal.inject.faults.base import register
from reveal.inject.faults.network import _VethFault


@register
class MtuShrink(_VethFault):
    kind = "mtu_shrink"
    subsystem = "network"
    description = "MTU of both veth ends lowered (ip link set mtu), then restored"
    INTENSITIES: ClassVar = {
        "low": {"mtu_bytes": 1280},
        "high": {"mtu_bytes": 576},
    }
    tools = (("ip", "iproute2"),)

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.saved: list[tuple[int, int]] = []

    def _mtu(self, side: int) -> int:
        text = processes.run([*self.pair.exec_prefix(side), "cat",
                              f"/sys/class/net/{self.pair.ifnames[side]}/mtu"]).stdout
        return int(text.strip())

    def begin(self) -> None:
        mtu = int(self.params["mtu_bytes"])
        for side in (0, 1):
            self.saved.append((side, self._mtu(side)))
            self._in(side, "ip", "link", "set", "dev", self.pair.ifnames[side], "mtu", str(mtu))
        self.params["mtu_before_bytes"] = self.saved[0][1]

    def end(self) -> None:
        for side, mtu in self.saved:
            with contextlib.suppress(RuntimeError, OSError):
                self._in(side, "ip", "link", "set", "dev", self.pair.ifnames[side], "mtu",
                         str(mtu))
        self.saved.clear()
