"""Network faults on the suite's veth pair only: packet loss, added delay, rate throttle.

Every command runs inside the suite's namespaces (``ip netns exec``) on the suite's veth
ends; nothing touches the host's interfaces. Loss and delay use ``tc netem`` when the kernel
has it; where it does not (``CONFIG_NET_SCH_NETEM`` unset), loss falls back to an nftables
rule dropping a random share of packets (``numgen random``) and delay is unavailable. The
mechanism used is recorded in the episode's detail.
"""

from __future__ import annotations

import shutil
from functools import lru_cache
from typing import Any, ClassVar

from reveal.inject import processes
from reveal.inject.faults.base import Fault, register
from reveal.inject.naming import PREFIX
from reveal.inject.veth_pair import NetnsPair

NFT_TABLE = PREFIX


@lru_cache(maxsize=1)
def netem_available() -> bool:
    """Whether ``tc qdisc ... netem`` works here (tried on a throwaway namespace)."""
    if shutil.which("tc") is None:
        return False
    with NetnsPair(tag="probe") as pair:
        result = processes.run([*pair.exec_prefix(0), "tc", "qdisc", "add", "dev",
                                pair.ifnames[0], "root", "netem", "delay", "1ms"], check=False)
    return result.returncode == 0


class _VethFault(Fault):
    needs_netns = True

    @property
    def pair(self) -> NetnsPair:
        assert self.context.netns is not None
        return self.context.netns

    def _in(self, side: int, *argv: str, check: bool = True) -> None:
        processes.run([*self.pair.exec_prefix(side), *argv], check=check)

    def _qdisc_all(self, *spec: str) -> None:
        for side in (0, 1):
            self._in(side, "tc", "qdisc", "replace", "dev", self.pair.ifnames[side], "root",
                     *spec)

    def _qdisc_clear(self) -> None:
        for side in (0, 1):
            self._in(side, "tc", "qdisc", "del", "dev", self.pair.ifnames[side], "root",
                     check=False)

    def finished(self) -> bool:
        return False

    def detail(self) -> dict[str, Any]:
        """Parameters, and the namespaces and interfaces acted on (what a claim names)."""
        return {**self.params, "where": [*self.pair.names, *self.pair.ifnames]}


@register
class PacketLoss(_VethFault):
    kind = "packet_loss"
    subsystem = "network"
    description = "random packet drop on both veth ends (netem, else nftables)"
    INTENSITIES: ClassVar = {
        "trace": {"loss_pct": 0.1},
        "low": {"loss_pct": 1.0},
        "high": {"loss_pct": 5.0},
    }

    def check_host(self) -> str | None:
        if not netem_available() and shutil.which("nft") is None:
            return "neither tc netem (kernel) nor nft (apt-get install nftables) is available"
        return None

    def begin(self) -> None:
        loss = float(self.params["loss_pct"])
        if netem_available():
            self.params["mechanism"] = "tc netem"
            self._qdisc_all("netem", "loss", f"{loss}%")
            return
        self.params["mechanism"] = "nftables numgen"
        per_100k = round(loss * 1000)
        for side in (0, 1):
            rules = (f"table inet {NFT_TABLE} {{\n chain input {{\n"
                     f"  type filter hook input priority 0; policy accept;\n"
                     f"  iifname \"{self.pair.ifnames[side]}\" "
                     f"numgen random mod 100000 < {per_100k} counter drop\n }}\n}}\n")
            processes.run([*self.pair.exec_prefix(side), "nft", "-f", "-"], input_text=rules)

    def end(self) -> None:
        if self.params.get("mechanism") == "tc netem":
            self._qdisc_clear()
        elif self.params.get("mechanism"):
            for side in (0, 1):
                self._in(side, "nft", "delete", "table", "inet", NFT_TABLE, check=False)


@register
class NetDelay(_VethFault):
    kind = "net_delay"
    subsystem = "network"
    description = "added one-way delay with jitter on both veth ends (tc netem)"
    INTENSITIES: ClassVar = {
        "low": {"delay_ms": 5, "jitter_ms": 1},
        "high": {"delay_ms": 50, "jitter_ms": 10},
    }

    def check_host(self) -> str | None:
        if not netem_available():
            return "tc netem is not in this kernel (CONFIG_NET_SCH_NETEM)"
        return None

    def begin(self) -> None:
        self._qdisc_all("netem", "delay", f"{self.params['delay_ms']}ms",
                        f"{self.params['jitter_ms']}ms")

    def end(self) -> None:
        self._qdisc_clear()


@register
class NetThrottle(_VethFault):
    kind = "net_throttle"
    subsystem = "network"
    description = "token-bucket rate limit on both veth ends (tc tbf)"
    INTENSITIES: ClassVar = {
        "low": {"rate_mbit": 80},
        "high": {"rate_mbit": 10},
    }
    tools = (("tc", "iproute2"),)

    def begin(self) -> None:
        rate = int(self.params["rate_mbit"])
        burst_kbit = max(32, rate * 10)
        self._qdisc_all("tbf", "rate", f"{rate}mbit", "burst", f"{burst_kbit}kbit",
                        "latency", "100ms")

    def end(self) -> None:
        self._qdisc_clear()
