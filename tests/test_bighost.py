"""The file probes on a simulated 256-CPU host (tests/fixtures/bighost/make_tree.py).

A host of that size cannot run here, so the kernel's text formats are written into a
directory and every probe is opened on it through ``proc_root``/``sys_root``, on the
Python path and on the C reader's path. The expected channels and values come from small
parsers in this file that read the generated text on their own (they share no code with
the probes), and the record counts are checked against the host's sizes: every CPU, NIC,
disk and IRQ of the text must be in the probe's channels with the value printed.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from reveal.analysis.percpu import cpu_groups
from reveal.catalog import default_catalog
from reveal.collect import _procfs
from reveal.collect.cpu import CpuProbe
from reveal.collect.interrupts import InterruptsProbe
from reveal.collect.memory import MemoryProbe
from reveal.collect.network import NetworkProbe
from reveal.collect.options import check_probe_options
from reveal.collect.power import PowerProbe
from reveal.collect.pressure import PressureProbe
from reveal.collect.probe import Probe, ProbeUnavailable
from reveal.collect.storage import StorageProbe

_SPEC_PATH = Path(__file__).parent / "fixtures" / "bighost" / "make_tree.py"
_spec = importlib.util.spec_from_file_location("bighost_make_tree", _SPEC_PATH)
assert _spec is not None and _spec.loader is not None
bighost = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bighost
_spec.loader.exec_module(bighost)

Values = dict[str, float]


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> object:
    return bighost.make_tree(tmp_path_factory.mktemp("bighost"), seed=7)


@pytest.fixture(params=[False, True], ids=["python", "c"])
def native(request: pytest.FixtureRequest) -> Iterator[bool]:
    """New file groups on the Python path, or with the C reader's plans."""
    if request.param and not _procfs.native_available() and _procfs._procread is None:
        pytest.skip("the C reader is not built here")
    before = _procfs.USE_NATIVE
    _procfs.USE_NATIVE = request.param
    yield request.param
    _procfs.USE_NATIVE = before


def text(host: object, rel: str) -> str:
    return (Path(host.root) / rel).read_text()  # type: ignore[attr-defined]


def roots(host: object) -> dict[str, str]:
    root = Path(host.root)  # type: ignore[attr-defined]
    return {"proc_root": str(root / "proc"), "sys_root": str(root / "sys")}


def read(probe: Probe) -> Values:
    out = np.full(len(probe.channels), -7.0)
    probe.read(out)
    assert not np.any(out == -7.0), "read() left values unwritten"
    return dict(zip(probe.channels, out.tolist(), strict=True))


def assert_same(got: Values, expected: Values, decimals: bool = False) -> None:
    """Every expected channel present with its value, and nothing else."""
    assert len(got) == len(expected)
    missing = sorted(set(expected) - set(got))[:5]
    extra = sorted(set(got) - set(expected))[:5]
    assert not missing and not extra, f"missing {missing}, unexpected {extra}"
    names = sorted(expected)
    want = np.array([expected[n] for n in names])
    have = np.array([got[n] for n in names])
    if decimals:
        np.testing.assert_allclose(have, want, rtol=1e-12, atol=0)
    else:
        bad = [n for n, a, b in zip(names, have, want, strict=True) if a != b][:5]
        assert not bad, [(n, got[n], expected[n]) for n in bad]


def check(probe: Probe, host: object, expect: callable, native: bool,  # type: ignore[valid-type]
          decimals: bool = False) -> Values:
    """Open ``probe``, compare a read with ``expect(host)``, advance the host, compare
    again (so counters moved by what the text says); returns the first read."""
    probe.open()
    try:
        first = read(probe)
        assert_same(first, expect(host), decimals)
        if native:
            assert any(getattr(p, "native", False) for p in probe._parts.values()), \
                f"{probe.name}: no part on the C reader"
        host.tick()  # type: ignore[attr-defined]
        second = read(probe)
        assert_same(second, expect(host), decimals)
        moved = sum(second[k] != first[k] for k in first)
        assert moved > 0, "nothing moved after a tick"
        return first
    finally:
        probe.close()


# -- independent readers of the generated text -------------------------------------------

def expect_cpu(host: object) -> Values:
    fields = bighost.CPU_FIELDS
    out: Values = {}
    for line in text(host, "proc/stat").splitlines():
        words = line.split()
        key = words[0]
        if key == "cpu":
            out.update({f"cpu.{f}": float(v) for f, v in zip(fields, words[1:], strict=True)})
        elif key.startswith("cpu"):
            n = key[3:]
            out.update({f"cpu.{f}{{cpu={n}}}": float(v)
                        for f, v in zip(fields, words[1:], strict=True)})
        elif key in ("intr", "ctxt", "processes", "procs_running", "procs_blocked"):
            out[f"cpu.{key}"] = float(words[1])
    lines = text(host, "proc/softirqs").splitlines()
    cpus = [w[3:] for w in lines[0].split()]
    for line in lines[1:]:
        name, _, counts = line.partition(":")
        for cpu, value in zip(cpus, counts.split(), strict=True):
            out[f"softirq.count{{cpu={cpu},type={name.strip()}}}"] = float(value)
    load = text(host, "proc/loadavg").replace("/", " ").split()
    for i, name in enumerate(("load1", "load5", "load15", "runnable", "tasks")):
        out[f"loadavg.{name}"] = float(load[i])
    return out


def interrupt_rows(host: object) -> tuple[list[str], dict[str, list[int]], dict[str, int]]:
    """(CPU numbers, per-CPU rows IRQ → counts, single-count rows IRQ → count)."""
    lines = text(host, "proc/interrupts").splitlines()
    cpus = [w[3:] for w in lines[0].split()]
    rows: dict[str, list[int]] = {}
    singles: dict[str, int] = {}
    for line in lines[1:]:
        name, _, rest = line.partition(":")
        words = rest.split()
        if len(words) == 1:
            singles[name.strip()] = int(words[0])
        else:
            rows[name.strip()] = [int(w) for w in words[:len(cpus)]]
    return cpus, rows, singles


def expect_irq_full(host: object) -> Values:
    cpus, rows, singles = interrupt_rows(host)
    out = {f"irq.count{{cpu={c},irq={irq}}}": float(v)
           for irq, counts in rows.items() for c, v in zip(cpus, counts, strict=True)}
    out.update({f"irq.count{{irq={irq}}}": float(v) for irq, v in singles.items()})
    return out


def expect_irq_totals(host: object) -> Values:
    cpus, rows, singles = interrupt_rows(host)
    out = {f"irq.count{{irq={irq}}}": float(sum(counts)) for irq, counts in rows.items()}
    for i, cpu in enumerate(cpus):
        out[f"irq.count{{cpu={cpu}}}"] = float(sum(counts[i] for counts in rows.values()))
    out.update({f"irq.count{{irq={irq}}}": float(v) for irq, v in singles.items()})
    return out


def _kv(lines: list[str], prefix: str, labels: str = "", kb: bool = True) -> Values:
    out: Values = {}
    for line in lines:
        words = line.split()
        name = words[0].rstrip(":").replace("(", "_").replace(")", "")
        scale = 1024.0 if kb and len(words) > 2 and words[2] == "kB" else 1.0
        out[f"{prefix}{name}{labels}"] = float(words[1]) * scale
    return out


def expect_memory(host: object) -> Values:
    out = _kv(text(host, "proc/meminfo").splitlines(), "mem.")
    out.update(_kv(text(host, "proc/vmstat").splitlines(), "vmstat.", kb=False))
    for line in text(host, "proc/buddyinfo").splitlines():
        words = line.replace(",", " ").split()
        node, zone = words[1], words[3]
        for order, value in enumerate(words[4:]):
            out[f"buddy.free_blocks{{node={node},order={order},zone={zone}}}"] = float(value)
    nodes = sorted(os.listdir(Path(host.root) / "sys/devices/system/node"))  # type: ignore
    for entry in nodes:
        node = entry[4:]
        base = f"sys/devices/system/node/{entry}"
        for line in text(host, f"{base}/meminfo").splitlines():
            words = line.split()
            name = words[2].rstrip(":").replace("(", "_").replace(")", "")
            scale = 1024.0 if words[-1] == "kB" else 1.0
            out[f"numa.{name}{{node={node}}}"] = float(words[3]) * scale
        out.update(_kv(text(host, f"{base}/numastat").splitlines(), "numastat.",
                       f"{{node={node}}}", kb=False))
    huge = [("sys/kernel/mm/hugepages", None)] + [
        (f"sys/devices/system/node/{e}/hugepages", e[4:]) for e in nodes]
    for base, node in huge:
        for size in bighost.HUGEPAGE_SIZES:
            for short in ("nr", "free", "resv", "surplus"):
                path = Path(host.root) / base / size / f"{short}_hugepages"  # type: ignore
                if path.exists():
                    labels = f"node={node}," if node is not None else ""
                    out[f"hugepages.{short}{{{labels}size={size[10:]}}}"] = float(
                        path.read_text())
    return out


def expect_storage(host: object) -> Values:
    fields = ("reads_completed", "reads_merged", "sectors_read", "time_reading_ms",
              "writes_completed", "writes_merged", "sectors_written", "time_writing_ms",
              "ios_in_progress", "time_io_ms", "weighted_time_io_ms", "discards_completed",
              "discards_merged", "sectors_discarded", "time_discarding_ms",
              "flushes_completed", "time_flushing_ms")
    out: Values = {}
    for line in text(host, "proc/diskstats").splitlines():
        words = line.split()
        dev = words[2]
        if dev.startswith("loop") or (dev.startswith("nvme") and "p" in dev[4:]):
            continue  # virtual devices and partitions are left out by default
        out.update({f"disk.{f}{{dev={dev}}}": float(v)
                    for f, v in zip(fields, words[3:], strict=True)})
    return out


def _paired(body: str, prefix: str) -> Values:
    out: Values = {}
    lines = body.splitlines()
    for head, values in zip(lines[0::2], lines[1::2], strict=True):
        names, numbers = head.split(), values.split()
        proto = names[0].rstrip(":")
        out.update({f"{prefix}.{proto}.{n}": float(v)
                    for n, v in zip(names[1:], numbers[1:], strict=True)})
    return out


def expect_network(host: object) -> Values:
    fields = ("rx_bytes", "rx_packets", "rx_errs", "rx_drop", "rx_fifo", "rx_frame",
              "rx_compressed", "rx_multicast", "tx_bytes", "tx_packets", "tx_errs", "tx_drop",
              "tx_fifo", "tx_colls", "tx_carrier", "tx_compressed")
    out: Values = {}
    for line in text(host, "proc/net/dev").splitlines()[2:]:
        name, _, rest = line.partition(":")
        out.update({f"net.{f}{{iface={name.strip()}}}": float(v)
                    for f, v in zip(fields, rest.split(), strict=True)})
    out.update(_paired(text(host, "proc/net/snmp"), "snmp"))
    out.update(_paired(text(host, "proc/net/netstat"), "netstat"))
    for line in text(host, "proc/net/sockstat").splitlines():
        proto, _, rest = line.partition(":")
        words = rest.split()
        out.update({f"sockstat.{proto}.{k}": float(v) for k, v in zip(words[0::2], words[1::2],
                                                                     strict=True)})
    kept = ((0, "processed"), (1, "dropped"), (2, "time_squeeze"), (9, "received_rps"),
            (10, "flow_limit_count"), (11, "backlog_len"))
    for line in text(host, "proc/net/softnet_stat").splitlines():
        words = line.split()
        cpu = int(words[12], 16)
        out.update({f"softnet.{name}{{cpu={cpu}}}": float(int(words[col], 16))
                    for col, name in kept})
    net = Path(host.root) / "sys/class/net"  # type: ignore[attr-defined]
    for iface in os.listdir(net):
        if (net / iface / "speed").exists():
            out[f"net.speed_mbps{{iface={iface}}}"] = float((net / iface / "speed").read_text())
    return out


def expect_pressure(host: object) -> Values:
    out: Values = {}
    for resource in ("cpu", "io", "memory", "irq"):
        for line in text(host, f"proc/pressure/{resource}").splitlines():
            kind, *pairs = line.split()
            for pair in pairs:
                key, _, value = pair.partition("=")
                out[f"psi.{resource}.{kind}.{key}"] = float(value)
    return out


def expect_power(host: object) -> Values:
    out: Values = {}
    root = Path(host.root) / "sys/devices/system/cpu"  # type: ignore[attr-defined]
    for entry in os.listdir(root):
        cpu = entry[3:]
        freq = root / entry / "cpufreq/scaling_cur_freq"
        out[f"cpufreq.cur_mhz{{cpu={cpu}}}"] = float(freq.read_text()) * 0.001
        for state in os.listdir(root / entry / "cpuidle"):
            base = root / entry / "cpuidle" / state
            name = (base / "name").read_text().strip()
            for leaf, metric in (("time", "cpuidle.time_us"), ("usage", "cpuidle.usage")):
                out[f"{metric}{{cpu={cpu},state={name}}}"] = float((base / leaf).read_text())
    caps = Path(host.root) / "sys/class/powercap"  # type: ignore[attr-defined]
    for zone in os.listdir(caps):
        domain = (caps / zone / "name").read_text().strip()
        out[f"rapl.energy_uj{{domain={domain},zone={zone}}}"] = float(
            (caps / zone / "energy_uj").read_text())
    return out


def labels_of(channels: list[str], metric: str, label: str) -> set[str]:
    """Values of ``label`` among channels of ``metric``."""
    found = set()
    for channel in channels:
        if channel.startswith(metric + "{"):
            for part in channel[len(metric) + 1:-1].split(","):
                key, _, value = part.partition("=")
                if key == label:
                    found.add(value)
    return found


# -- the probes --------------------------------------------------------------------------

def test_record_counts_of_the_generated_text(host: object) -> None:
    """The text holds what the host's sizes say (so 100 % below means every record)."""
    spec = host.spec  # type: ignore[attr-defined]
    cpu = expect_cpu(host)
    assert len(labels_of(list(cpu), "cpu.user", "cpu")) == spec.cpus == 256
    assert len(labels_of(list(cpu), "softirq.count", "cpu")) == 256
    cpus, rows, singles = interrupt_rows(host)
    assert len(cpus) == 256
    device = 8 + spec.nics * spec.nic_vectors + spec.disks * spec.nvme_vectors
    assert len(rows) == device + 17 and set(singles) == {"ERR", "MIS"}
    net = expect_network(host)
    assert len(labels_of(list(net), "net.rx_bytes", "iface")) == spec.nics + 1  # and lo
    assert len(labels_of(list(net), "softnet.processed", "cpu")) == 256
    assert len(labels_of(list(expect_storage(host)), "disk.reads_completed", "dev")) == 64


def test_cpu_probe_reads_every_record(host: object, native: bool) -> None:
    first = check(CpuProbe(**roots(host)), host, expect_cpu, native, decimals=True)
    assert len(first) == 257 * 10 + 5 + 256 * 10 + 5


@pytest.mark.parametrize("detail", ["auto", "totals"])
def test_interrupts_totals_by_default(host: object, native: bool, detail: str) -> None:
    probe = InterruptsProbe(**roots(host), detail=detail)
    first = check(probe, host, expect_irq_totals, native)
    cpus, rows, singles = interrupt_rows(host)
    assert len(first) == len(rows) + len(cpus) + len(singles)  # O(IRQs + CPUs)
    assert probe.info["irq_detail"] == "totals"
    assert probe.info["irq_table"] == {"irqs": len(rows), "cpus": 256}
    assert "nvme3q1" in probe.info["irq_names"][next(
        irq for irq, d in probe.info["irq_names"].items() if "nvme3q1" in d)]


def test_interrupts_full_detail_on_request(host: object, native: bool) -> None:
    probe = InterruptsProbe(**roots(host), detail="full")
    first = check(probe, host, expect_irq_full, native)
    cpus, rows, singles = interrupt_rows(host)
    assert len(first) == len(rows) * len(cpus) + len(singles) > 100_000
    assert probe.info["irq_detail"] == "full"


def test_interrupts_totals_are_summed_by_the_c_plan_on_c_ticks(host: object,
                                                                native: bool) -> None:
    """Totals: where the C reader is built, one C plan parses the table and adds every cell
    into its IRQ's and its CPU's sum, so the ticks stay in C; its sums equal NumPy's."""
    totals = InterruptsProbe(**roots(host), detail="totals")
    full = InterruptsProbe(**roots(host), detail="full")
    totals.open()
    full.open()
    try:
        assert totals._parts["interrupts"].native == native
        parts = totals.native_parts()
        assert (parts is not None) == native
        assert (full.native_parts() is not None) == native
        if parts is not None:
            (part,) = parts
            in_c = np.full(len(totals.channels), np.nan)
            assert part.reader.read(in_c[part.start:part.stop])
            in_python = np.full(len(totals.channels), np.nan)
            part.recover(in_python[part.start:part.stop])  # the Python path: NumPy sums
            np.testing.assert_array_equal(in_c, in_python)
            irqs, cpus = totals._parts["interrupts"].shape
            assert np.isfinite(in_c).all() and in_c[:irqs].sum() == in_c[irqs:irqs + cpus].sum()
    finally:
        totals.close()
        full.close()


def test_interrupts_auto_keeps_full_detail_on_small_tables(host: object) -> None:
    probe = InterruptsProbe(**roots(host), max_channels=200_000)
    probe.open()
    try:
        assert probe.info["irq_detail"] == "full"
        assert len(probe.channels) > 100_000
    finally:
        probe.close()
    if Path("/proc/interrupts").exists():  # this host: a few CPUs, full detail as before
        here = InterruptsProbe()
        here.open()
        try:
            assert here.info["irq_detail"] == "full"
        finally:
            here.close()


def test_interrupts_skip_zero_in_totals(host: object) -> None:
    probe = InterruptsProbe(**roots(host), detail="totals", skip_zero=True)
    probe.open()
    try:
        values = read(probe)
        _, rows, _ = interrupt_rows(host)
        zero = {irq for irq, counts in rows.items() if sum(counts) == 0}
        assert zero, "the generated host has IRQs that never fired"
        assert not any(f"irq.count{{irq={irq}}}" in values for irq in zero)
        expected = expect_irq_totals(host)
        assert all(values[k] == expected[k] for k in values)
    finally:
        probe.close()


def test_interrupts_options_are_declared_and_checked() -> None:
    assert {"detail", "max_channels", "skip_zero"} <= set(InterruptsProbe.options_help)
    check_probe_options({"interrupts": {"detail": "full", "max_channels": 10}},
                        {"interrupts": InterruptsProbe})
    with pytest.raises(ProbeUnavailable, match="detail"):
        InterruptsProbe(detail="everything")
    with pytest.raises(ProbeUnavailable, match="max_channels"):
        InterruptsProbe(max_channels="many")


def test_irq_totals_in_catalog_and_per_cpu_ranking(host: object) -> None:
    probe = InterruptsProbe(**roots(host))
    probe.open()
    try:
        channels = probe.channels
    finally:
        probe.close()
    catalog = default_catalog()
    for channel in ("irq.count{irq=LOC}", "irq.count{cpu=3}", "irq.count{cpu=3,irq=LOC}"):
        info = catalog.lookup(channel)
        assert (info.kind, info.subsystem) == ("counter", "cpu")
    cpus = [str(i) for i in range(256)]
    groups = cpu_groups(channels + [f"derived.cpu_busy_pct{{cpu={c}}}" for c in cpus], cpus)
    key = (("irq.count", ()), None)
    assert key in groups and len(groups[key]) == 256  # per-CPU totals rank like any CPU
    assert all(channels[i] == f"irq.count{{cpu={c}}}" for i, c in zip(groups[key], cpus,
                                                                        strict=True))


def test_memory_probe_reads_every_record(host: object, native: bool) -> None:
    check(MemoryProbe(**roots(host)), host, expect_memory, native)


def test_storage_probe_reads_every_disk(host: object, native: bool) -> None:
    first = check(StorageProbe(**roots(host)), host, expect_storage, native)
    assert len(labels_of(list(first), "disk.reads_completed", "dev")) == 64


def test_network_probe_reads_every_interface(host: object, native: bool) -> None:
    first = check(NetworkProbe(**roots(host)), host, expect_network, native)
    assert len(labels_of(list(first), "net.tx_bytes", "iface")) == 65
    assert len(labels_of(list(first), "net.speed_mbps", "iface")) == 64


def test_pressure_probe_reads_every_line(host: object, native: bool) -> None:
    first = check(PressureProbe(**roots(host)), host, expect_pressure, native, decimals=True)
    assert len(first) == 7 * 4  # irq has only its "full" line


def test_power_probe_reads_every_cpu(host: object, native: bool) -> None:
    first = check(PowerProbe(**roots(host)), host, expect_power, native, decimals=True)
    assert len(labels_of(list(first), "cpufreq.cur_mhz", "cpu")) == 256
