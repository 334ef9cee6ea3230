"""Hardware and architectural interrupts per IRQ per CPU (/proc/interrupts).

Channels: ``irq.count{cpu=N,irq=NAME}``, cumulative interrupts of IRQ ``NAME`` (a number
such as ``24`` or an arch name such as ``LOC``, ``RES``, ``TLB``) handled on CPU ``N``;
``irq.count{irq=ERR}``/``{irq=MIS}`` are totals. The kernel's description of each IRQ (chip,
trigger, device) goes to ``info["irq_names"]``. On large hosts this probe holds most of the
collector's channels (CPUs × IRQs); ``skip_zero=True`` leaves out IRQs that never fired
(they come back at ``refresh()`` once they do).
"""

from __future__ import annotations

from reveal.collect._procfs import FileProbe, GroupSpec, Layout, PlanItem, Source, read_bytes
from reveal.collect.cpu import per_cpu_table_layout
from reveal.collect.probe import register
from reveal.frame import parse_channel


def irq_descriptions(data: bytes, limit: int = 120) -> dict[str, str]:
    """IRQ name → the text after its counts (``IO-APIC 5-edge ACPI:Ged``), bounded."""
    lines = data.split(b"\n")
    ncpu = sum(1 for t in (lines[0].split() if lines else []) if t.startswith(b"CPU"))
    names: dict[str, str] = {}
    for line in lines[1:]:
        toks = line.split()
        if not toks or not toks[0].endswith(b":"):
            continue
        rest = toks[1:]
        skip = 0
        while skip < min(ncpu, len(rest)) and rest[skip].isdigit():
            skip += 1
        text = b" ".join(rest[skip:]).decode("ascii", "replace")
        names[toks[0][:-1].decode("ascii", "replace")] = "".join(
            ch if ch.isprintable() else "_" for ch in text)[:limit]
    return names


@register
class InterruptsProbe(FileProbe):
    """Per-IRQ, per-CPU interrupt counts (/proc/interrupts)."""

    name = "interrupts"
    description = "interrupt counts per IRQ per CPU (/proc/interrupts)"

    def _layout(self, data: bytes) -> Layout:
        layout = per_cpu_table_layout(data, "irq.count", "irq")
        if not self.options.get("skip_zero", False):
            return layout
        tokens = data.split()
        totals: dict[str, int] = {}
        for channel, (pos, _) in layout.items():
            irq = parse_channel(channel)[1]["irq"]
            totals[irq] = totals.get(irq, 0) + int(tokens[pos])
        return {ch: spot for ch, spot in layout.items()
                if totals[parse_channel(ch)[1]["irq"]] > 0}

    def plan(self) -> dict[str, PlanItem]:
        dynamic = bool(self.options.get("skip_zero", False))
        source = Source(f"{self.proc_root}/interrupts", self._layout, dynamic=dynamic)
        return {"interrupts": GroupSpec((source,))}

    def open(self) -> None:
        super().open()
        self._describe()

    def refresh(self) -> bool:
        changed = super().refresh()
        if changed:
            self._describe()
        return changed

    def _describe(self) -> None:
        data = read_bytes(f"{self.proc_root}/interrupts")
        if data is not None:
            self.info["irq_names"] = irq_descriptions(data)
