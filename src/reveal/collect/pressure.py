"""Pressure stall information (/proc/pressure/{cpu,io,memory,irq}).

Channels ``psi.<resource>.<some|full>.<avg10|avg60|avg300|total>``: ``avgN`` is the share
of wall time (percent) in which some / all non-idle tasks were stalled on the resource,
averaged over N seconds; ``total`` is the cumulative stall time in microseconds.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from reveal.collect._procfs import (
    FileProbe,
    GroupSpec,
    Layout,
    PlanItem,
    Source,
    native_prepare,
    token_lines,
)
from reveal.collect.probe import register
from reveal.frame import format_channel

RESOURCES = ("cpu", "io", "memory", "irq")


@native_prepare(split=b"=")
def split_equals(data: bytes) -> bytes:
    return data.replace(b"=", b" ")


def psi_layout(prefix: str, labels: dict[str, str] | None = None, avgs: bool = True,
               totals: bool = True) -> Callable[[bytes], Layout]:
    """Layout of ``some avg10 0.00 avg60 0.00 avg300 0.00 total 0`` lines (``=`` split):
    channels ``<prefix>.<some|full>.<key>{labels}``, of the averages (percent) when
    ``avgs``, of the total (µs) when ``totals``."""

    def layout(data: bytes) -> Layout:
        result: Layout = {}
        for base, toks in token_lines(data):
            if toks and toks[0] in (b"some", b"full"):
                kind = toks[0].decode()
                for i in range(1, len(toks) - 1, 2):
                    key = toks[i].decode("ascii", "replace")
                    wanted = totals if key == "total" else avgs
                    if wanted:
                        name = format_channel(f"{prefix}.{kind}.{key}", labels)
                        result[name] = (base + i + 1, 1.0)
        return result

    return layout


@register
class PressureProbe(FileProbe):
    """CPU, I/O, memory and IRQ stall pressure (PSI)."""

    name = "pressure"
    description = "pressure stall information for cpu, io, memory, irq (/proc/pressure)"

    def plan(self) -> dict[str, PlanItem]:
        root = f"{self.proc_root}/pressure"
        sources = tuple(Source(f"{root}/{res}", psi_layout(f"psi.{res}"), split_equals)
                        for res in RESOURCES if os.path.exists(f"{root}/{res}"))
        return {"psi": GroupSpec(sources, "fixed")} if sources else {}

    def unavailable_reason(self) -> str:
        return (f"{self.proc_root}/pressure is absent or unreadable: the kernel lacks "
                "CONFIG_PSI or was booted with psi=0")

    def open(self) -> None:
        super().open()
        readable = {ch.split(".")[1] for ch in self.channels}
        self.info["psi_absent"] = [r for r in RESOURCES if r not in readable]
