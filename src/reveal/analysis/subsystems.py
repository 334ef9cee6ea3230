"""The subsystem a channel's evidence belongs to, refined by its labels.

The catalog gives one subsystem per metric; a few metrics serve several subsystems and only
their labels tell which: a softirq of type ``NET_RX`` is network work and one of type
``BLOCK`` is storage work, though both run on a CPU; an interrupt line belongs to the device
that raises it (``virtio2-input.0`` is a network queue, ``nvme0q3`` a disk queue), which the
interrupts probe records in the run's metadata (``probes.interrupts.info.irq_names``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from reveal.catalog import Catalog, default_catalog
from reveal.frame import channel_metric, parse_channel

SOFTIRQ_SUBSYSTEM = {"NET_RX": "network", "NET_TX": "network", "BLOCK": "storage",
                     "IRQ_POLL": "storage"}
# Interrupt descriptions (last field of a /proc/interrupts line) by device family.
IRQ_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("network", re.compile(r"virtio\d+-(input|output)\.\d+|"
                           r"\b(eth|ens|enp|eno|ib|mlx\d|ixgbe|i40e|"
                           r"ice|bnxt|ena|gve|efa|igb|e1000|tg3|qede|hinic)|-(rx|tx|TxRx)-",
                           re.IGNORECASE)),
    ("storage", re.compile(r"virtio\d+-req|nvme|ahci|\bata|scsi|megasas|mpt\d|sas|mmc",
                           re.IGNORECASE)),
    ("gpu", re.compile(r"nvidia|amdgpu|i915", re.IGNORECASE)),
)


def irq_names(meta: Mapping[str, Any]) -> dict[str, str]:
    """``irq → description`` recorded by the interrupts probe (empty when absent)."""
    try:
        names = meta["probes"]["interrupts"]["info"]["irq_names"]
    except (KeyError, TypeError):
        return {}
    return {str(k): str(v) for k, v in names.items()} if isinstance(names, Mapping) else {}


def irq_subsystem(description: str) -> str | None:
    """The subsystem of the device behind an interrupt description, or None."""
    for subsystem, pattern in IRQ_PATTERNS:
        if pattern.search(description):
            return subsystem
    return None


def channel_subsystems(channels: Sequence[str], catalog: Catalog | None = None,
                       irqs: Mapping[str, str] | None = None) -> list[str]:
    """Subsystem of every channel: the catalog's, refined by softirq type and IRQ device."""
    catalog = catalog or default_catalog()
    irqs = irqs or {}
    out = []
    for channel in channels:
        metric = channel_metric(channel)
        subsystem = catalog.lookup(metric).subsystem
        if metric == "softirq.count" or metric == "irq.count":
            labels = parse_channel(channel)[1]
            refined = (SOFTIRQ_SUBSYSTEM.get(labels.get("type", ""))
                       if metric == "softirq.count"
                       else irq_subsystem(irqs.get(labels.get("irq", ""), "")))
            subsystem = refined or subsystem
        out.append(subsystem)
    return out
