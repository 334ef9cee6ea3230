"""Label-refined subsystems: softirq types and interrupt lines by device."""

from __future__ import annotations

from pathlib import Path

from reveal.analyze.subsystems import channel_subsystems, irq_names, irq_subsystem
from reveal.collect.interrupts import irq_descriptions


def test_softirq_types_go_to_their_subsystem():
    channels = ["softirq.count{cpu=0,type=NET_RX}", "softirq.count{cpu=1,type=BLOCK}",
                "softirq.count{cpu=0,type=TIMER}", "cpu.user{cpu=0}"]
    assert channel_subsystems(channels) == ["network", "storage", "cpu", "cpu"]


def test_interrupt_lines_follow_their_device():
    irqs = {"36": "PCI-MSIX-0000:00:02.0 1-edge virtio1-req.0",
            "38": "PCI-MSIX-0000:00:03.0 1-edge virtio2-input.0",
            "90": "IR-PCI-MSI 524288-edge nvme0q1",
            "91": "IR-PCI-MSI 1048576-edge mlx5_comp3@pci:0000:3b:00.0",
            "LOC": "Local timer interrupts"}
    channels = [f"irq.count{{cpu=0,irq={i}}}" for i in ("36", "38", "90", "91", "LOC", "77")]
    assert channel_subsystems(channels, irqs=irqs) == [
        "storage", "network", "storage", "network", "cpu", "cpu"]


def test_irq_names_from_run_metadata_and_garbage():
    meta = {"probes": {"interrupts": {"info": {"irq_names": {38: "virtio2-input.0"}}}}}
    assert irq_names(meta) == {"38": "virtio2-input.0"}
    assert irq_names({}) == {} and irq_names({"probes": "not a dict"}) == {}
    assert irq_subsystem("Rescheduling interrupts") is None


def test_this_hosts_interrupt_lines_are_classified_without_error():
    """The real /proc/interrupts: every line gets a known subsystem or none."""
    data = Path("/proc/interrupts").read_bytes()
    names = irq_descriptions(data)
    assert names, "no interrupt line parsed"
    got = {irq_subsystem(d) for d in names.values()}
    assert got <= {None, "network", "storage", "gpu"}
