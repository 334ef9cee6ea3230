"""Hardware and architectural interrupts (/proc/interrupts), per IRQ and per CPU.

/proc/interrupts has one count per CPU per IRQ: on a host with 256 CPUs, 64 NICs and 64
NVMe disks about 400 rows × 256 CPUs, 100 000 counts in 1.2 MB of text. Channels, all
cumulative interrupt counts (``irq.count``; a label that is absent is summed over):

- ``detail="full"``: ``irq.count{cpu=N,irq=NAME}``, IRQ ``NAME`` (a number such as ``24``
  or an arch name such as ``LOC``, ``RES``, ``TLB``) handled on CPU ``N``: CPUs × IRQs.
- ``detail="totals"``: ``irq.count{irq=NAME}`` summed over CPUs and ``irq.count{cpu=N}``
  summed over IRQs: CPUs + IRQs channels.
- ``detail="auto"`` (default): full detail while it has at most ``max_channels`` per-CPU
  channels (4096: a 32-CPU host with 128 IRQs), totals above. A host's choice is in
  ``info["irq_detail"]``.

``irq.count{irq=ERR}``/``{irq=MIS}`` (one count each, no CPU) are kept in every mode. The
kernel's description of each IRQ (chip, trigger, device) goes to ``info["irq_names"]``.
``skip_zero=True`` leaves out IRQs that never fired (they come back at ``refresh()`` once
they do).

Totals are computed from the full table: the file is parsed whole (by the C reader's plan
when built, else by the vectorised Python path) into a scratch row, viewed as an
IRQs × CPUs matrix and summed along each axis (two NumPy reductions, no copy). Counts are
integers below 2^53, so the sums are exact and equal on both paths. The C tick thread
reads plans that write picked numbers into the row and cannot add them up, so a probe in
totals mode is read in Python each tick (see docs/collector.md, "Big hosts").
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from reveal.collect._procfs import (
    FileGroup,
    FileProbe,
    Layout,
    PlanItem,
    Source,
    read_bytes,
)
from reveal.collect.cpu import per_cpu_table_layout
from reveal.collect.probe import ProbeUnavailable, register

METRIC = "irq.count"
DETAILS = ("auto", "totals", "full")
DEFAULT_MAX_CHANNELS = 4096
_PER_CPU = METRIC + "{cpu="  # prefix of a per-CPU channel (labels are sorted: cpu, irq)
_IRQ = ",irq="


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


def table_layout(data: bytes, skip_zero: bool = False) -> Layout:
    """Layout of /proc/interrupts: the per-CPU counts first, row by row (each row one IRQ,
    its CPUs in header order), then the single-count rows (``ERR``, ``MIS``). With
    ``skip_zero``, rows whose counts are all zero are left out."""
    layout = per_cpu_table_layout(data, METRIC, "irq")
    if skip_zero:
        tokens = data.split()
        totals: dict[str, int] = {}
        for channel, (pos, _) in layout.items():
            irq = channel[channel.find("irq=") + 4:-1]
            totals[irq] = totals.get(irq, 0) + int(tokens[pos])
        layout = {ch: spot for ch, spot in layout.items()
                  if totals[ch[ch.find("irq=") + 4:-1]] > 0}
    per_cpu = {ch: spot for ch, spot in layout.items() if ch.startswith(_PER_CPU)}
    per_cpu.update((ch, spot) for ch, spot in layout.items() if not ch.startswith(_PER_CPU))
    return per_cpu


def table_shape(channels: list[str]) -> tuple[list[str], list[str], int]:
    """``(irqs, cpus, n)`` of a :func:`table_layout` channel list: the per-CPU channels
    are ``channels[:n]``, ``n = len(irqs) × len(cpus)``, IRQ-major. ValueError otherwise."""
    n = 0
    while n < len(channels) and channels[n].startswith(_PER_CPU):
        n += 1
    if n == 0:
        return [], [], 0
    first_irq = channels[0][channels[0].index(_IRQ):]
    ncpu = 0
    while ncpu < n and channels[ncpu].endswith(first_irq):
        ncpu += 1
    if n % ncpu:
        raise ValueError("/proc/interrupts: rows with differing CPU counts")
    cpus = [ch[len(_PER_CPU):ch.index(_IRQ)] for ch in channels[:ncpu]]
    irqs = [ch[ch.index(_IRQ) + len(_IRQ):-1] for ch in channels[0:n:ncpu]]
    expected = [f"{_PER_CPU}{cpu}{_IRQ}{irq}}}" for irq in irqs for cpu in cpus]
    if expected != channels[:n]:
        raise ValueError("/proc/interrupts: per-CPU channels are not an IRQ × CPU grid")
    return irqs, cpus, n


class InterruptTable:
    """/proc/interrupts as one file group, exposed in full detail or as totals.

    The group always parses the whole table (its channels are the full detail). In full
    detail it reads straight into the output (and its C plan is this part's native
    reader); in totals mode it reads into a scratch row, and :meth:`read` writes
    per-IRQ sums, per-CPU sums, then the single-count rows. In totals mode the C reader
    adds each cell into its IRQ's and its CPU's sum in the same pass (a summing plan made
    from the group's plan), so the ticks stay in C on big hosts too.
    """

    def __init__(self, path: str, detail: str = "auto",
                 max_channels: int = DEFAULT_MAX_CHANNELS, skip_zero: bool = False) -> None:
        self.detail = detail
        self.max_channels = max_channels
        self.group = FileGroup((Source(path, lambda data: table_layout(data, skip_zero),
                                       dynamic=skip_zero),))
        self.missing = self.group.missing
        self.changed = False
        self.channels: list[str] = []
        self.full = True
        self.shape: tuple[int, int] = (0, 0)  # (IRQs, CPUs) of the per-CPU table
        self._scratch: np.ndarray | None = None
        self._source_channels: list[str] | None = None
        self._sums: list[list[int]] = []  # per full channel: the totals it is added into
        self._sums_of: Any = None  # the group plan the summing plan was made from
        self._sums_plan: Any = None
        self._shape()

    def _shape(self) -> None:
        """Work out the exposed channels from the group's (full) channel list."""
        full = self.group.channels
        self._source_channels = full
        irqs, cpus, n = table_shape(full)
        self.shape = (len(irqs), len(cpus))
        self.full = self.detail == "full" or (self.detail == "auto" and n <= self.max_channels)
        if self.full:
            self.channels = list(full)
            self._scratch = None
            return
        self.channels = ([f"{METRIC}{{irq={irq}}}" for irq in irqs]
                         + [f"{METRIC}{{cpu={cpu}}}" for cpu in cpus] + full[n:])
        self._scratch = np.full(len(full), np.nan)
        rows, ncpu = self.shape
        self._sums = ([[s // ncpu, rows + s % ncpu] for s in range(n)]
                      + [[rows + ncpu + j] for j in range(len(full) - n)])
        self._sums_of = self._sums_plan = None

    def read(self, out: np.ndarray) -> None:
        scratch = self._scratch
        if scratch is None:
            self.group.read(out)
            return
        self.group.read(scratch)
        rows, cpus = self.shape
        n = rows * cpus
        matrix = scratch[:n].reshape(rows, cpus)
        matrix.sum(axis=1, out=out[:rows])
        matrix.sum(axis=0, out=out[rows:rows + cpus])
        out[rows + cpus:] = scratch[n:]

    def native_reader(self) -> Any:
        """The group's C plan in full detail; in totals mode a C plan that sums as it
        parses (remade whenever the group's own plan changes); None off the C reader."""
        plan = self.group.native_reader()
        if self.full or plan is None:
            return plan
        if self._sums_of is not plan:
            self._sums_plan = self.group.native_sums(self._sums, len(self.channels))
            self._sums_of = plan
        return self._sums_plan

    @property
    def native(self) -> bool:
        """True when the file is parsed by the C reader (in either mode)."""
        return self.group.native

    def refresh(self) -> bool:
        self.group.refresh()
        if self.group.channels is self._source_channels:
            return False
        before = self.channels
        self._shape()
        return self.channels != before

    def close(self) -> None:
        self.group.close()
        self._scratch = None


@register
class InterruptsProbe(FileProbe):
    """Interrupt counts per IRQ and per CPU (/proc/interrupts)."""

    name = "interrupts"
    description = "interrupt counts per IRQ and per CPU (/proc/interrupts)"
    options_help: ClassVar[dict[str, str]] = {
        "detail": "full (one channel per CPU per IRQ), totals (per IRQ summed over CPUs and "
                  "per CPU summed over IRQs) or auto: full up to max_channels (default: auto)",
        "max_channels": "the most per-CPU × per-IRQ channels auto detail records in full "
                        f"(default: {DEFAULT_MAX_CHANNELS})",
        "skip_zero": "leave out IRQs that never fired; they come back at a refresh once "
                     "they do (default: false)",
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        detail = str(options.get("detail", "auto")).strip().lower()
        if detail not in DETAILS:
            raise ProbeUnavailable(f"interrupts: detail must be one of {', '.join(DETAILS)}, "
                                   f"got {options.get('detail')!r}")
        try:
            self.max_channels = int(options.get("max_channels", DEFAULT_MAX_CHANNELS))
        except (TypeError, ValueError):
            raise ProbeUnavailable("interrupts: max_channels must be an integer, got "
                                   f"{options.get('max_channels')!r}") from None
        self.detail = detail
        self.skip_zero = bool(options.get("skip_zero", False))

    def plan(self) -> dict[str, PlanItem]:
        path = f"{self.proc_root}/interrupts"
        return {"interrupts": lambda: InterruptTable(path, self.detail, self.max_channels,
                                                     self.skip_zero)}

    def open(self) -> None:
        super().open()
        self._describe()

    def refresh(self) -> bool:
        changed = super().refresh()
        if changed:
            self._describe()
        return changed

    def _describe(self) -> None:
        table = self._parts.get("interrupts")
        if isinstance(table, InterruptTable):
            irqs, cpus = table.shape
            self.info["irq_detail"] = "full" if table.full else "totals"
            self.info["irq_table"] = {"irqs": irqs, "cpus": cpus}
        data = read_bytes(f"{self.proc_root}/interrupts")
        if data is not None:
            self.info["irq_names"] = irq_descriptions(data)
