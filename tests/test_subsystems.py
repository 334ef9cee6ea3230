"""Label-refined subsystems: catalog subsystems, softirq types, interrupt lines by device."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from reveal.analysis.subsystems import channel_subsystems, irq_names, irq_subsystem
from reveal.collect.interrupts import irq_descriptions


def test_catalog_channels_keep_their_subsystem() -> None:
    expected = {
        "cpu.user{cpu=0}": "cpu",
        "cpu.iowait": "cpu",
        "perf.cycles{cpu=3}": "cpu",
        "derived.cpu_busy_pct{cpu=1}": "cpu",
        "mem.MemAvailable": "memory",
        "vmstat.pgfault": "memory",
        "derived.mem_used_pct": "memory",
        "disk.sectors_read{dev=vda}": "storage",
        "disk.time_io_ms{dev=nvme0n1}": "storage",
        "derived.disk_util_pct{dev=vda}": "storage",
        "pressure.io.some": "storage",
        "net.rx_bytes{iface=eth0}": "network",
        "tcp.RetransSegs": "network",
        "derived.net_rx_util_pct{iface=eth0}": "network",
        "nccl.allreduce_bytes": "network",  # no entry: inferred from the name
        "gpu.sm_util{gpu=0}": "gpu",
        "gpu.mem_util{gpu=1}": "gpu",
    }
    assert dict(zip(expected, channel_subsystems(list(expected)), strict=True)) == expected


def test_softirq_types_go_to_their_subsystem() -> None:
    expected = {"NET_RX": "network", "NET_TX": "network", "BLOCK": "storage",
                "IRQ_POLL": "storage", "HI": "cpu", "TIMER": "cpu", "TASKLET": "cpu",
                "SCHED": "cpu", "HRTIMER": "cpu", "RCU": "cpu"}
    channels = [f"softirq.count{{cpu={i % 2},type={t}}}" for i, t in enumerate(expected)]
    got = channel_subsystems([*channels, "softirq.count{cpu=0}"])
    assert got == [*expected.values(), "cpu"]  # no type label: the catalog's cpu


# /proc/interrupts descriptions of real devices and the subsystem of each
DEVICE_LINES = {
    "PCI-MSIX-0000:00:02.0 1-edge virtio1-req.0": "storage",  # virtio-blk queue
    "PCI-MSIX-0000:00:03.0 1-edge virtio2-input.0": "network",  # virtio-net rx queue
    "PCI-MSIX-0000:00:03.0 2-edge virtio2-output.0": "network",  # virtio-net tx queue
    "IR-PCI-MSI 65536-edge nvme1q0": "storage",
    "IR-PCI-MSI 512000-edge ahci[0000:00:17.0]": "storage",
    "IR-PCI-MSI 524288-edge eth0-TxRx-0": "network",
    "IR-PCI-MSI 1048576-edge mlx5_comp3@pci:0000:3b:00.0": "network",
    "PCI-MSIX-0000:00:06.0 2-edge ena-mgmnt@pci:0000:00:05.0": "network",
    "IR-PCI-MSI 1572864-edge nvidia": "gpu",
    "IR-PCI-MSI 1048576-edge amdgpu": "gpu",
    "IR-PCI-MSI 32768-edge i915": "gpu",
    "PCI-MSIX-0000:00:03.0 0-edge virtio2-config": None,
    "PCI-MSIX-0000:00:04.0 1-edge virtio3-rx": None,  # vsock, not a NIC
    "IR-PCI-MSI 327680-edge xhci_hcd": None,
    "IO-APIC 4-edge ttyS0": None,
    "Local timer interrupts": None,
    "Rescheduling interrupts": None,
    "": None,
}


@pytest.mark.parametrize(("description", "subsystem"), DEVICE_LINES.items())
def test_interrupt_descriptions_name_their_device(description: str, subsystem: str) -> None:
    assert irq_subsystem(description) == subsystem


def test_virtio_rng_queue_is_not_a_network_queue() -> None:
    assert irq_subsystem("PCI-MSIX-0000:00:05.0 1-edge virtio4-input") is None


def test_interrupt_channels_follow_their_device() -> None:
    irqs = {"36": "PCI-MSIX-0000:00:02.0 1-edge virtio1-req.0",
            "38": "PCI-MSIX-0000:00:03.0 1-edge virtio2-input.0",
            "91": "IR-PCI-MSI 1048576-edge mlx5_comp3@pci:0000:3b:00.0",
            "95": "IR-PCI-MSI 1572864-edge nvidia",
            "LOC": "Local timer interrupts"}
    channels = [f"irq.count{{cpu=1,irq={i}}}" for i in ("36", "38", "91", "95", "LOC", "77")]
    # a line without a known device, or not in the names at all, keeps the catalog's cpu
    assert channel_subsystems([*channels, "irq.count{cpu=0}"], irqs=irqs) == [
        "storage", "network", "network", "gpu", "cpu", "cpu", "cpu"]
    # without the run's IRQ names every line is the catalog's
    assert channel_subsystems(channels) == ["cpu"] * len(channels)


def test_irq_names_from_run_metadata_and_garbage() -> None:
    meta = {"probes": {"interrupts": {"info": {"irq_names": {38: "virtio2-input.0",
                                                             "LOC": "Local timer interrupts"}}}}}
    assert irq_names(meta) == {"38": "virtio2-input.0", "LOC": "Local timer interrupts"}
    assert irq_names({}) == {}
    assert irq_names({"probes": "not a dict"}) == {}
    assert irq_names({"probes": {"interrupts": {"info": {"irq_names": ["38"]}}}}) == {}
    assert irq_names({"probes": {"interrupts": {}}}) == {}


def _virtio_drivers() -> dict[str, str]:
    """virtioN → its bound driver, from sysfs."""
    out = {}
    for dev in Path("/sys/bus/virtio/devices").glob("virtio*"):
        driver = dev / "driver"
        if driver.exists():
            out[dev.name] = os.path.basename(os.readlink(driver))
    return out


def test_this_hosts_interrupt_lines_match_their_devices() -> None:
    """The real /proc/interrupts against what sysfs says each device is: virtio-net queues
    are network, virtio-blk queues and NVMe queues storage, config vectors and the
    architecture's own rows (timer, IPIs, ...) none."""
    names = irq_descriptions(Path("/proc/interrupts").read_bytes())
    assert names, "no interrupt line parsed"
    drivers = _virtio_drivers()
    checked = 0
    for irq, description in names.items():
        queue = re.search(r"\b(virtio\d+)-(\S+)$", description)
        if not irq.isdigit():
            want = None  # NMI, LOC, RES, ...: no device behind them
        elif re.search(r"\bnvme\d+q\d+$", description):
            want = "storage"
        elif queue and queue.group(2) == "config":
            want = None
        elif queue and drivers.get(queue.group(1)) == "virtio_net":
            want = "network"
        elif queue and drivers.get(queue.group(1)) == "virtio_blk":
            want = "storage"
        else:
            continue  # a device this test has no independent word on
        assert irq_subsystem(description) == want, (irq, description)
        checked += 1
    assert checked >= 1
