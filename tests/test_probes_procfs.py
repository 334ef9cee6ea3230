"""The /proc probes on this machine: cpu, interrupts, memory, storage, network, pressure.

Each probe is opened on the real /proc and /sys, read twice, and checked against an
independent read of the same source (a value read by the probe must lie between two
plain reads taken just before and just after it) or an independent system interface.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from reveal.catalog import default_catalog
from reveal.collect.cpu import CPU_FIELDS, CpuProbe
from reveal.collect.interrupts import InterruptsProbe
from reveal.collect.memory import MemoryProbe
from reveal.collect.network import NET_DEV_FIELDS, NetworkProbe
from reveal.collect.pressure import PressureProbe
from reveal.collect.probe import Probe, ProbeUnavailable
from reveal.collect.storage import DISK_FIELDS, StorageProbe
from reveal.frame import channel_metric, format_channel, parse_channel

IS_ROOT = os.geteuid() == 0


def read(probe: Probe) -> dict[str, float]:
    out = np.full(len(probe.channels), -7.0)
    probe.read(out)
    assert not np.any(out == -7.0), "read() left values unwritten"
    return dict(zip(probe.channels, out, strict=True))


def opened(probe: Probe) -> Probe:
    probe.open()
    assert probe.channels, f"{probe.name}: no channel"
    assert len(set(probe.channels)) == len(probe.channels), "duplicate channels"
    return probe


def assert_counters_monotonic(probe: Probe, first: dict[str, float],
                              second: dict[str, float]) -> None:
    catalog = default_catalog()
    for channel, before in first.items():
        if catalog.lookup(channel).kind in ("counter", "event") and np.isfinite(before):
            assert second[channel] >= before, f"{channel}: {before} -> {second[channel]}"


def bracket(independent: Callable[[], dict[str, float]], probe: Probe,
            ) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """(plain read, probe read, plain read) taken back to back."""
    before = independent()
    values = read(probe)
    after = independent()
    return before, values, after


def assert_bracketed(before: dict[str, float], values: dict[str, float],
                     after: dict[str, float], minimum: int) -> None:
    checked = 0
    for channel, low in before.items():
        if channel in values and channel in after:
            lo, hi = min(low, after[channel]), max(low, after[channel])
            assert lo <= values[channel] <= hi, f"{channel}: {values[channel]} not in {lo}..{hi}"
            checked += 1
    assert checked >= minimum, f"only {checked} channels compared"


# -- cpu ---------------------------------------------------------------------------------

def test_cpu_probe_matches_proc_stat() -> None:
    probe = opened(CpuProbe())
    ncpu = len([ln for ln in Path("/proc/stat").read_text().splitlines()
                if ln.startswith("cpu") and ln[3:4].isdigit()])
    for field in ("user", "system", "idle"):
        per_cpu = [c for c in probe.channels if c.startswith(f"cpu.{field}{{")]
        assert len(per_cpu) == ncpu
    first = read(probe)
    assert all(np.isfinite(v) for v in first.values())
    # the kernel's total row is the sum of the per-CPU rows (to a tick or two per CPU)
    for field in CPU_FIELDS:
        total = first[f"cpu.{field}"]
        parts = sum(first[format_channel(f"cpu.{field}", {"cpu": str(i)})]
                    for i in range(ncpu) if format_channel(f"cpu.{field}", {"cpu": str(i)})
                    in first)
        assert abs(total - parts) <= 2 * ncpu + 2, (field, total, parts)
    subprocess.run(["true"], check=True)  # a fork, some context switches
    time.sleep(0.05)
    second = read(probe)
    assert_counters_monotonic(probe, first, second)
    assert second["cpu.processes"] > first["cpu.processes"]
    assert second["cpu.ctxt"] > first["cpu.ctxt"]
    assert probe.info["user_hz"] == os.sysconf("SC_CLK_TCK")


def test_cpu_probe_softirqs_and_loadavg_against_independent_reads() -> None:
    import psutil

    probe = opened(CpuProbe())

    def plain() -> dict[str, float]:
        return {"softirq_total": float(psutil.cpu_stats().soft_interrupts)}

    before = plain()["softirq_total"]
    values = read(probe)
    after = plain()["softirq_total"]
    total = sum(v for c, v in values.items() if c.startswith("softirq.count{"))
    assert before - 50 <= total <= after + 50  # /proc/stat's softirq line vs /proc/softirqs
    load_before = os.getloadavg()
    values = read(probe)
    load_after = os.getloadavg()
    got = (values["loadavg.load1"], values["loadavg.load5"], values["loadavg.load15"])
    assert any(np.allclose(got, load, atol=0.011) for load in (load_before, load_after))
    assert values["loadavg.tasks"] >= values["loadavg.runnable"] >= 0


def test_interrupts_probe_against_independent_parse() -> None:
    probe = opened(InterruptsProbe())

    def plain() -> dict[str, float]:
        lines = Path("/proc/interrupts").read_text().splitlines()
        cpus = [t[3:] for t in lines[0].split()]
        result = {}
        for line in lines[1:]:
            toks = line.split()
            name = toks[0].rstrip(":")
            counts = [t for t in toks[1:1 + len(cpus)] if t.isdigit()]
            if len(counts) == len(cpus):
                for cpu, count in zip(cpus, counts, strict=True):
                    result[format_channel("irq.count", {"cpu": cpu, "irq": name})] = float(count)
            elif len(toks) == 2:
                result[format_channel("irq.count", {"irq": name})] = float(toks[1])
        return result

    before, values, after = bracket(plain, probe)
    assert set(values) == set(before)
    assert_bracketed(before, values, after, minimum=len(values))
    assert "LOC" in probe.info["irq_names"] or "24" in probe.info["irq_names"]
    second = read(probe)
    assert_counters_monotonic(probe, values, second)


def test_interrupts_skip_zero_drops_idle_irqs() -> None:
    every = opened(InterruptsProbe())
    busy = opened(InterruptsProbe(skip_zero=True))

    def fired(values: dict[str, float]) -> set[str]:
        totals: dict[str, float] = {}
        for channel, value in values.items():
            irq = parse_channel(channel)[1]["irq"]
            totals[irq] = totals.get(irq, 0.0) + value
        return {irq for irq, total in totals.items() if total > 0}

    before = fired(read(every))
    busy.refresh()  # counts only grow: whatever had fired before is kept now
    kept = {parse_channel(c)[1]["irq"] for c in busy.channels}
    after = fired(read(every))
    assert before <= kept <= after
    assert len(busy.channels) <= len(every.channels)
    if set(every.info["irq_names"]) - after:  # some IRQ never fired: it is left out
        assert len(busy.channels) < len(every.channels)


# -- memory ------------------------------------------------------------------------------

def test_memory_probe_meminfo_and_vmstat() -> None:
    probe = opened(MemoryProbe())
    first = read(probe)
    page = os.sysconf("SC_PAGE_SIZE")
    assert first["mem.MemTotal"] == os.sysconf("SC_PHYS_PAGES") * page
    assert 0 < first["mem.MemAvailable"] <= first["mem.MemTotal"]
    assert "mem.Active_anon" in first  # Active(anon) renamed
    meminfo_fields = [ln.split(":")[0] for ln in Path("/proc/meminfo").read_text().splitlines()]
    assert sum(c.startswith("mem.") for c in probe.channels) == len(meminfo_fields)
    vmstat_fields = Path("/proc/vmstat").read_text().split()[::2]
    assert sum(c.startswith("vmstat.") for c in probe.channels) == len(vmstat_fields)
    # fault in 64 MiB of fresh pages (a new mapping: malloc could hand back memory this
    # process already faulted in)
    block = mmap.mmap(-1, 64 * 2**20)
    with contextlib.suppress(AttributeError, OSError):
        block.madvise(mmap.MADV_NOHUGEPAGE)  # one fault per page, whatever the THP setting
    for at in range(0, len(block), page):
        block[at] = 1
    second = read(probe)
    block.close()
    assert second["vmstat.pgfault"] - first["vmstat.pgfault"] >= 64 * 2**20 // page // 2
    assert_counters_monotonic(probe, first, second)
    assert all(np.isfinite(v) for v in second.values())


def test_memory_probe_numa_and_hugepages() -> None:
    probe = opened(MemoryProbe(numa=True))
    values = read(probe)
    nodes = sorted(p.name[4:] for p in Path("/sys/devices/system/node").glob("node[0-9]*"))
    assert nodes
    total = sum(values[format_channel("numa.MemTotal", {"node": n})] for n in nodes)
    assert 0 < total <= values["mem.MemTotal"]  # hot-plugged memory may sit outside nodes
    for node in nodes:  # the node file, read independently (kB → bytes)
        text = Path(f"/sys/devices/system/node/node{node}/meminfo").read_text()
        free = next(int(ln.split()[3]) for ln in text.splitlines() if "MemTotal:" in ln)
        assert values[format_channel("numa.MemTotal", {"node": node})] == free * 1024
    assert format_channel("numastat.numa_hit", {"node": nodes[0]}) in values
    for pool in Path("/sys/kernel/mm/hugepages").glob("hugepages-*"):
        size = pool.name.split("-", 1)[1]
        nr = float((pool / "nr_hugepages").read_text())
        assert values[format_channel("hugepages.nr", {"size": size})] == nr
        assert format_channel("hugepages.free", {"node": nodes[0], "size": size}) in values
    auto = opened(MemoryProbe())
    if len(nodes) < 2:
        assert not any(c.startswith(("numa.", "numastat.")) for c in auto.channels)
        assert "skipped" in auto.info["numa"]


def test_memory_probe_buddyinfo_against_independent_read() -> None:
    def plain() -> dict[str, float]:
        result = {}
        for line in Path("/proc/buddyinfo").read_text().splitlines():
            toks = line.split()
            for order, count in enumerate(toks[4:]):
                labels = {"node": toks[1].rstrip(","), "zone": toks[3], "order": str(order)}
                result[format_channel("buddy.free_blocks", labels)] = float(count)
        return result

    probe = opened(MemoryProbe())
    before, values, after = bracket(plain, probe)
    buddy = {c: v for c, v in values.items() if c.startswith("buddy.")}
    assert set(buddy) == set(before) and buddy
    for channel, value in buddy.items():  # a level: it may move between the reads
        low = min(before[channel], after[channel])
        high = max(before[channel], after[channel])
        assert value == int(value) >= 0
        assert low * 0.9 - 64 <= value <= high * 1.1 + 64, channel


@pytest.mark.skipif(not IS_ROOT, reason="needs root to size the huge-page pool")
def test_memory_probe_sees_hugepage_pool_change() -> None:
    pool = Path("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages")
    if not pool.exists():
        pytest.skip("no 2 MiB huge pages on this kernel")
    probe = opened(MemoryProbe())
    channel = format_channel("hugepages.nr", {"size": "2048kB"})
    old = pool.read_text()
    try:
        pool.write_text(str(int(old) + 1))
        wanted = float(pool.read_text())  # the kernel may grant fewer
        assert read(probe)[channel] == wanted
    finally:
        pool.write_text(old)
    assert read(probe)[channel] == float(old)


# -- storage -----------------------------------------------------------------------------

def _diskstats() -> dict[str, float]:
    result = {}
    for line in Path("/proc/diskstats").read_text().splitlines():
        toks = line.split()
        for field, value in zip(DISK_FIELDS, toks[3:], strict=False):
            result[format_channel(f"disk.{field}", {"dev": toks[2]})] = float(value)
    return result


def test_storage_probe_whole_devices_against_independent_read() -> None:
    probe = opened(StorageProbe())
    devices = {parse_channel(c)[1]["dev"] for c in probe.channels}
    for dev in devices:
        assert not dev.startswith(("loop", "ram"))
        assert not (Path("/sys/class/block") / dev / "partition").exists()
    before, values, after = bracket(_diskstats, probe)
    assert_bracketed(before, values, after, minimum=len(values))
    with_virtual = opened(StorageProbe(virtual=True))
    if any(name.startswith("loop") for name in os.listdir("/sys/class/block")):
        assert any("dev=loop" in c for c in with_virtual.channels)


def test_storage_probe_counts_a_write() -> None:
    probe = opened(StorageProbe())
    st_dev = os.stat(Path.cwd()).st_dev
    name = Path(f"/sys/dev/block/{os.major(st_dev)}:{os.minor(st_dev)}")
    if not name.exists():
        pytest.skip("the working directory is not on a block device")
    dev = name.resolve().name
    if (name / "partition").exists():
        dev = name.resolve().parent.name
    channel = format_channel("disk.sectors_written", {"dev": dev})
    if channel not in probe.channels:
        pytest.skip(f"{dev} is not followed by default")
    first = read(probe)[channel]
    path = Path.cwd() / f".reveal-io-{uuid.uuid4().hex}"
    try:
        with open(path, "wb") as handle:
            handle.write(os.urandom(4 * 2**20))
            handle.flush()
            os.fsync(handle.fileno())
    finally:
        path.unlink()
    assert read(probe)[channel] - first >= 4 * 2**20 / 512 / 2


def test_storage_probe_partitions_option() -> None:
    parts = [p.name for p in Path("/sys/class/block").iterdir() if (p / "partition").exists()]
    if not parts:
        pytest.skip("no partition on this host (the kernel may lack partition support)")
    whole = opened(StorageProbe(virtual=True))
    every = opened(StorageProbe(virtual=True, partitions=True))
    for name in parts:
        channel = format_channel("disk.reads_completed", {"dev": name})
        assert channel not in whole.channels
        assert channel in every.channels


@pytest.fixture()
def zram_device() -> Iterator[str]:
    """A zram block device made for the test (zram-control hot_add), removed after."""
    control = Path("/sys/class/zram-control")
    if not IS_ROOT:
        pytest.skip("needs root to add a zram device")
    if not control.exists():
        pytest.skip("no zram-control hot_add here")
    number = (control / "hot_add").read_text().strip()
    try:
        yield f"zram{number}"
    finally:
        if Path(f"/sys/class/block/zram{number}").exists():
            (control / "hot_remove").write_text(number)


def test_storage_probe_picks_up_new_device(zram_device: str) -> None:
    probe = opened(StorageProbe())
    channel = format_channel("disk.reads_completed", {"dev": zram_device})
    if channel not in probe.channels:
        assert probe.refresh()
    assert channel in probe.channels
    assert read(probe)[channel] == 0.0
    assert not probe.refresh()
    (Path("/sys/class/zram-control") / "hot_remove").write_text(zram_device[4:])
    values = read(probe)  # the device is gone before refresh: NaN, no crash
    assert np.isnan(values[channel])
    assert probe.refresh()
    assert channel not in probe.channels


# -- network -----------------------------------------------------------------------------

def _net_dev(proc: str = "/proc") -> dict[str, float]:
    result = {}
    for line in Path(f"{proc}/net/dev").read_text().splitlines()[2:]:
        name, _, rest = line.partition(":")
        for field, value in zip(NET_DEV_FIELDS, rest.split(), strict=True):
            result[format_channel(f"net.{field}", {"iface": name.strip()})] = float(value)
    return result


def _snmp() -> dict[str, float]:
    result = {}
    lines = Path("/proc/net/snmp").read_text().splitlines()
    for head, vals in zip(lines[::2], lines[1::2], strict=True):
        proto = head.split(":")[0]
        for key, value in zip(head.split()[1:], vals.split()[1:], strict=True):
            result[f"snmp.{proto}.{key}"] = float(value)
    return result


def test_network_probe_against_independent_reads() -> None:
    probe = opened(NetworkProbe())
    before, values, after = bracket(_net_dev, probe)
    assert_bracketed(before, values, after, minimum=16)
    before, values, after = bracket(_snmp, probe)
    assert_bracketed(before, values, after, minimum=50)
    assert values["snmp.Tcp.MaxConn"] == -1.0  # signed value kept
    assert any(c.startswith("netstat.TcpExt.") for c in probe.channels)
    assert any(c.startswith("netstat.IpExt.") for c in probe.channels)
    assert "sockstat.sockets.used" in values


def test_network_probe_softnet_against_independent_read() -> None:
    def plain() -> dict[str, float]:
        result = {}
        names = {0: "processed", 1: "dropped", 2: "time_squeeze", 9: "received_rps",
                 10: "flow_limit_count", 11: "backlog_len"}
        for i, line in enumerate(Path("/proc/net/softnet_stat").read_text().splitlines()):
            fields = [int(f, 16) for f in line.split()]
            cpu = str(fields[12]) if len(fields) > 12 else str(i)
            for col, name in names.items():
                result[format_channel(f"softnet.{name}", {"cpu": cpu})] = float(fields[col])
        return result

    probe = opened(NetworkProbe())
    before, values, after = bracket(plain, probe)
    softnet = {c for c in values if c.startswith("softnet.")}
    assert softnet == set(before)
    for channel in softnet:
        if "backlog_len" not in channel:  # counters: bracketed
            assert before[channel] <= values[channel] <= after[channel], channel
    with_v6 = opened(NetworkProbe(snmp6=True, softnet=False))
    assert not any(c.startswith("softnet.") for c in with_v6.channels)
    if Path("/proc/net/snmp6").exists():
        assert "snmp6.Ip6InReceives" in with_v6.channels


def test_network_probe_counts_loopback_traffic() -> None:
    probe = opened(NetworkProbe())
    first = read(probe)
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for _ in range(200):
        sender.sendto(b"x" * 1000, receiver.getsockname())
    sender.close()
    receiver.close()
    second = read(probe)
    lo_tx = format_channel("net.tx_packets", {"iface": "lo"})
    assert second[lo_tx] - first[lo_tx] >= 200
    assert second["snmp.Udp.OutDatagrams"] - first["snmp.Udp.OutDatagrams"] >= 200
    assert_counters_monotonic(probe, first, second)


@pytest.fixture()
def netns_process() -> Iterator[tuple[str, int]]:
    """A network namespace made for the test, with one process living in it."""
    if not IS_ROOT or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2")
    name = f"reveal-t{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    sleeper = subprocess.Popen(["ip", "netns", "exec", name, "sleep", "60"])
    try:
        own = os.readlink("/proc/self/ns/net")
        for _ in range(250):  # until `ip netns exec` has entered the namespace and exec'd
            if (os.readlink(f"/proc/{sleeper.pid}/ns/net") != own and
                    Path(f"/proc/{sleeper.pid}/cmdline").read_bytes().startswith(b"sleep")):
                break
            time.sleep(0.02)
        else:
            pytest.fail("the process never entered the test network namespace")
        yield name, sleeper.pid
    finally:
        sleeper.kill()
        sleeper.wait()
        subprocess.run(["ip", "netns", "delete", name], check=False)


def test_network_probe_picks_up_new_interface_in_netns(netns_process: tuple[str, int],
                                                       tmp_path: Path) -> None:
    name, pid = netns_process
    probe = opened(NetworkProbe(proc_root=f"/proc/{pid}", sys_root=str(tmp_path)))
    assert {parse_channel(c)[1].get("iface") for c in probe.channels
            if c.startswith("net.")} == {"lo"}
    hostile = "x{y}=z,w"  # a legal interface name, not a legal label value
    subprocess.run(["ip", "-n", name, "link", "add", hostile, "type", "veth", "peer", "name",
                    "veth1"], check=True)
    read(probe)  # a tick in between: the layout changed, values stay well-formed
    assert probe.refresh()
    assert format_channel("net.rx_bytes", {"iface": "veth1"}) in probe.channels
    sanitised = "net.rx_bytes{iface=x_y__z_w}"
    assert sanitised in probe.channels
    values = read(probe)
    assert values[sanitised] == 0.0
    assert all(np.isfinite(v) for v in values.values())
    subprocess.run(["ip", "-n", name, "link", "del", "veth1"], check=True)  # both ends go
    assert probe.refresh()
    assert not any("veth1" in c or "x_y" in c for c in probe.channels)
    assert not probe.refresh()


# -- pressure ----------------------------------------------------------------------------

def test_pressure_probe_against_independent_read() -> None:
    if not Path("/proc/pressure/cpu").exists():
        with pytest.raises(ProbeUnavailable, match="psi"):
            PressureProbe().open()
        return
    probe = opened(PressureProbe())

    def plain() -> dict[str, float]:
        result = {}
        for res in ("cpu", "io", "memory", "irq"):
            path = Path(f"/proc/pressure/{res}")
            try:
                text = path.read_text()
            except OSError:
                continue
            for line in text.splitlines():
                kind, *pairs = line.split()
                for pair in pairs:
                    key, value = pair.split("=")
                    if key == "total":
                        result[f"psi.{res}.{kind}.{key}"] = float(value)
        return result

    before, values, after = bracket(plain, probe)
    assert_bracketed(before, values, after, minimum=4)
    for channel, value in values.items():
        if ".avg" in channel:
            assert 0.0 <= value <= 100.0
    assert probe.info["psi_absent"] == [r for r in ("cpu", "io", "memory", "irq")
                                        if not any(c.startswith(f"psi.{r}.")
                                                   for c in probe.channels)]


# -- every /proc probe -------------------------------------------------------------------

PROBES = (CpuProbe, InterruptsProbe, MemoryProbe, StorageProbe, NetworkProbe, PressureProbe)


@pytest.mark.parametrize("cls", PROBES, ids=lambda c: c.name)
def test_probe_channels_catalogued_and_stable(cls: type[Probe]) -> None:
    probe = opened(cls())
    catalog = default_catalog()
    for channel in probe.channels:
        assert channel_metric(channel) in catalog, f"{channel} has no catalog entry"
        assert catalog.lookup(channel).description
    channels = list(probe.channels)
    first = read(probe)
    second = read(probe)
    assert probe.channels == channels
    assert_counters_monotonic(probe, first, second)
    probe.close()


@pytest.mark.parametrize("cls", PROBES, ids=lambda c: c.name)
def test_probe_unavailable_under_missing_root(cls: type[Probe]) -> None:
    probe = cls(root="/nonexistent")
    with pytest.raises(ProbeUnavailable) as info:
        probe.open()
    assert "/nonexistent" in str(info.value)
    assert probe.status == "unavailable" and probe.reason


def test_network_probe_infiniband_counters(tmp_path: Path) -> None:
    """InfiniBand port counters, laid out as /sys/class/infiniband lays them out (no HCA
    exists on this VM, so the tree is written by the test and read by the real code)."""
    counters = tmp_path / "class/infiniband/mlx5_0/ports/1/counters"
    counters.mkdir(parents=True)
    for name, value in (("port_xmit_data", "123456789012"), ("port_rcv_data", "987654321"),
                        ("symbol_error", "0"), ("link_downed", "1")):
        (counters / name).write_text(value + "\n")
    probe = opened(NetworkProbe(proc_root="/proc", sys_root=str(tmp_path)))
    labels = {"dev": "mlx5_0", "port": "1"}
    values = read(probe)
    assert values[format_channel("ib.port_xmit_data", labels)] == 123456789012.0
    assert values[format_channel("ib.link_downed", labels)] == 1.0
    assert probe.info["infiniband_ports"] == 1
    catalog = default_catalog()
    assert catalog.lookup("ib.port_xmit_data").unit == "4-byte words"
    assert catalog.lookup("ib.symbol_error").kind == "event"
    (counters / "port_xmit_data").write_text("123456789999\n")
    assert read(probe)[format_channel("ib.port_xmit_data", labels)] == 123456789999.0
    port2 = tmp_path / "class/infiniband/mlx5_0/ports/2/counters"
    port2.mkdir(parents=True)
    (port2 / "port_rcv_data").write_text("5\n")
    assert probe.refresh()
    assert format_channel("ib.port_rcv_data", {"dev": "mlx5_0", "port": "2"}) in probe.channels
