"""Network: interfaces, protocol counters, sockets, InfiniBand ports.

Channels (counters as read; the network namespace is the collector's own):

- ``net.<field>{iface=NAME}``: the 16 /proc/net/dev fields (``rx_bytes rx_packets rx_errs
  rx_drop rx_fifo rx_frame rx_compressed rx_multicast tx_bytes tx_packets tx_errs tx_drop
  tx_fifo tx_colls tx_carrier tx_compressed``).
- ``snmp.<Proto>.<Field>`` from /proc/net/snmp (Ip, Icmp, IcmpMsg, Tcp, Udp, UdpLite) and
  ``netstat.<Proto>.<Field>`` from /proc/net/netstat (TcpExt, IpExt, MPTcpExt).
- ``sockstat.<Proto>.<field>`` from /proc/net/sockstat (sockets in use; ``mem`` in pages).
- ``softnet.<processed|dropped|time_squeeze|received_rps|flow_limit_count|backlog_len>
  {cpu=N}``: per-CPU packet processing (/proc/net/softnet_stat; ``softnet=False`` drops it).
- ``snmp6.<Field>``: IPv6/ICMPv6/UDPv6 counters from /proc/net/snmp6 (``snmp6=True``).
- ``net.speed_mbps{iface=NAME}``: link speed (Mbit/s) of interfaces that report one
  (/sys/class/net/*/speed; virtual interfaces and links without carrier have none).
- ``ib.<counter>{dev=mlx5_0,port=1}``: InfiniBand port counters
  (/sys/class/infiniband/*/ports/*/counters), where present. ``port_xmit_data`` and
  ``port_rcv_data`` count 4-byte words.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from reveal.collect import _procfs
from reveal.collect._procfs import (
    FileProbe,
    GroupSpec,
    Layout,
    OpenFile,
    PlanItem,
    Source,
    key_value_layout,
    list_dir,
    metric_name,
    native_available,
    native_prepare,
    single_value,
    sorted_numeric,
    token_lines,
)
from reveal.collect.probe import register
from reveal.frame import format_channel

NET_DEV_FIELDS = (
    "rx_bytes", "rx_packets", "rx_errs", "rx_drop", "rx_fifo", "rx_frame", "rx_compressed",
    "rx_multicast", "tx_bytes", "tx_packets", "tx_errs", "tx_drop", "tx_fifo", "tx_colls",
    "tx_carrier", "tx_compressed",
)


# /proc/net/softnet_stat columns kept: (column, metric)
SOFTNET_COLUMNS = ((0, "processed"), (1, "dropped"), (2, "time_squeeze"),
                   (9, "received_rps"), (10, "flow_limit_count"), (11, "backlog_len"))
_HEX = np.full(256, 255, dtype=np.uint64)
_HEX[np.frombuffer(b"0123456789", np.uint8)] = np.arange(10, dtype=np.uint64)
_HEX[np.frombuffer(b"abcdef", np.uint8)] = np.arange(10, 16, dtype=np.uint64)
_HEX[np.frombuffer(b"ABCDEF", np.uint8)] = np.arange(10, 16, dtype=np.uint64)
_NIBBLES = np.uint64(16) ** np.arange(7, -1, -1, dtype=np.uint64)


class SoftnetStat:
    """Per-CPU packet-processing counters of /proc/net/softnet_stat, decoded vectorised.

    Every field is printed ``%08x`` (one line per online CPU, fields one blank apart), so
    the text is a fixed-width byte matrix: hex digits are decoded with one table lookup and
    one dot product. Column 12 (kernels from 5.10) names the CPU; older kernels list CPUs
    in order. A change of width or line count re-discovers.
    """

    def __init__(self, path: str) -> None:
        self._file = OpenFile(path)
        self._native: Any = None
        self.changed = False
        self.missing: list[str] = []
        self.channels: list[str] = []
        self._shape = (0, 0)
        if not self._discover(self._file.read()):
            self._file.close()
            raise ValueError(f"{path}: not the fixed-width hex layout expected")

    def _discover(self, data: bytes) -> bool:
        self._native = None
        lines = data.split(b"\n")[:-1] if data.endswith(b"\n") else []
        if not lines or len({len(line) for line in lines}) != 1:
            return False
        width = len(lines[0]) + 1  # with its newline: 9 bytes per "%08x " field
        fields = width // 9
        if fields * 9 != width or fields <= max(c for c, _ in SOFTNET_COLUMNS):
            return False
        cpus = [str(int(line.split()[12], 16)) if fields > 12 else str(i)
                for i, line in enumerate(lines)]
        self._shape = (len(lines), width)
        # byte offsets of the 8 hex digits of every kept field, row after row
        self._where = np.array([row * width + col * 9 + k for row in range(len(lines))
                                for col, _ in SOFTNET_COLUMNS for k in range(8)], np.intp)
        if np.any(_HEX[np.frombuffer(data, np.uint8)[self._where]] > 15):
            return False
        self.channels = [format_channel(f"softnet.{name}", {"cpu": cpu})
                         for cpu in cpus for _, name in SOFTNET_COLUMNS]
        self._native = None
        if native_available():
            # the same numbers through the C reader: every blank-separated token is hex
            picks = [row * fields + col for row in range(len(lines))
                     for col, _ in SOFTNET_COLUMNS]
            self._native = _procfs._procread.Plan(  # type: ignore[union-attr]
                [(self._file.fd, max(4096, len(data) * 2), 0, 0)], 2, len(lines) * fields,
                len(picks), picks, list(range(len(picks))), None, None, [])
        return True

    @property
    def native(self) -> bool:
        """True when read by the C reader."""
        return self._native is not None

    def native_reader(self) -> Any:
        """The C plan reading this file each tick, or None."""
        return self._native

    def read(self, out: np.ndarray) -> None:
        native = self._native
        if native is not None and native.read(out):
            return
        try:
            data = self._file.read()
        except OSError:
            out[:] = np.nan
            return
        rows, width = self._shape
        if len(data) != rows * width:
            self.changed = True
            out[:] = np.nan
            return
        digits = _HEX[np.frombuffer(data, np.uint8)[self._where]]  # fixed "%08x": all hex
        out[:] = digits.reshape(-1, 8) @ _NIBBLES

    def refresh(self) -> bool:
        before = self.channels
        try:
            ok = self._discover(self._file.read())
        except OSError:
            ok = False
        if not ok:
            self.channels = []
        self.changed = False
        return self.channels != before

    def close(self) -> None:
        self._file.close()


@native_prepare(split=b":")
def split_colon(data: bytes) -> bytes:
    """Make sure ``eth0:123`` (old kernels glue name and first value) splits in two."""
    return data.replace(b":", b": ")


def net_dev_layout(data: bytes) -> Layout:
    layout: Layout = {}
    for base, toks in token_lines(data):
        if len(toks) >= 2 and toks[0].endswith(b":") and toks[1].isdigit():
            iface = toks[0][:-1].decode("ascii", "replace")
            for i, field in enumerate(NET_DEV_FIELDS[: len(toks) - 1]):
                layout[format_channel(f"net.{field}", {"iface": iface})] = (base + 1 + i, 1.0)
    return layout


def header_value_layout(prefix: str):
    """Layout of paired ``Proto: Name1 Name2`` / ``Proto: v1 v2`` lines (snmp, netstat)."""

    def layout(data: bytes) -> Layout:
        result: Layout = {}
        header: list[bytes] | None = None
        for base, toks in token_lines(data):
            if toks and header is not None and toks[0] == header[0] and len(toks) == len(
                    header):
                proto = metric_name(toks[0])
                for i, name in enumerate(header[1:], start=1):
                    result[f"{prefix}.{proto}.{metric_name(name)}"] = (base + i, 1.0)
                header = None
            elif toks:
                header = toks
        return result

    return layout


def snmp6_layout(data: bytes) -> Layout:
    """``Ip6InReceives 4`` lines → ``snmp6.Ip6InReceives``."""
    return key_value_layout(data, "snmp6.")


def sockstat_layout(data: bytes) -> Layout:
    """``TCP: inuse 1 orphan 0 tw 0 alloc 1 mem 390`` → ``sockstat.TCP.inuse`` ..."""
    result: Layout = {}
    for base, toks in token_lines(data):
        if toks and toks[0].endswith(b":"):
            proto = metric_name(toks[0])
            for i in range(1, len(toks) - 1, 2):
                if toks[i + 1].isdigit():
                    result[f"sockstat.{proto}.{metric_name(toks[i])}"] = (base + i + 1, 1.0)
    return result


@register
class NetworkProbe(FileProbe):
    """Interface counters, IP/TCP/UDP counters, sockets, InfiniBand ports."""

    name = "network"
    options_help: ClassVar[dict[str, str]] = {
        "infiniband": "InfiniBand port counters where present (default: true)",
        "snmp6": "IPv6 counters of /proc/net/snmp6 (default: false)",
        "softnet": "per-CPU packet processing of /proc/net/softnet_stat (default: true)",
    }
    description = "interfaces, SNMP/netstat protocol counters, sockets, InfiniBand (/proc, /sys)"

    def plan(self) -> dict[str, PlanItem]:
        net = f"{self.proc_root}/net"
        plain = [Source(f"{net}/dev", net_dev_layout, split_colon),
                 Source(f"{net}/sockstat", sockstat_layout)]
        if self.options.get("infiniband", True):
            ib_root = f"{self.sys_root}/class/infiniband"
            for dev in sorted(list_dir(ib_root)):
                for port in sorted_numeric(list_dir(f"{ib_root}/{dev}/ports"), ""):
                    plain += ib_sources(f"{ib_root}/{dev}/ports/{port}/counters", dev, port)
        # snmp/netstat hold signed values (Tcp MaxConn is -1): parsed apart, keeping '-'
        signed = [Source(f"{net}/snmp", header_value_layout("snmp")),
                  Source(f"{net}/netstat", header_value_layout("netstat"))]
        class_net = f"{self.sys_root}/class/net"
        for iface in sorted(list_dir(class_net)):
            channel = format_channel("net.speed_mbps", {"iface": iface})
            signed.append(Source(f"{class_net}/{iface}/speed",
                                 single_value(channel, positive=True)))
        if self.options.get("snmp6", False):
            plain.append(Source(f"{net}/snmp6", snmp6_layout))
        plan: dict[str, PlanItem] = {"counters": GroupSpec(tuple(plain)),
                                     "protocols": GroupSpec(tuple(signed), "int")}
        if self.options.get("softnet", True):
            plan["softnet"] = lambda: SoftnetStat(f"{net}/softnet_stat")
        return plan

    def open(self) -> None:
        super().open()
        net = f"{self.proc_root}/net"
        missing = [path for part in self._parts.values() for path in part.missing
                   if path.startswith(net)]
        missing += [f"{net}/{name}" for key, names in (("counters", ("dev", "sockstat")),
                                                        ("protocols", ("snmp", "netstat")))
                    if key in self.skipped for name in names]
        if missing:
            self.status, self.reason = "degraded", "unreadable: " + ", ".join(missing)
        self.info["infiniband_ports"] = len({c.split("{", 1)[1] for c in self.channels
                                             if c.startswith("ib.")})


def ib_sources(directory: str, dev: str, port: str) -> list[Source]:
    """One source per counter file of an InfiniBand port."""
    labels = {"dev": dev, "port": port}
    return [Source(f"{directory}/{name}",
                   single_value(format_channel(f"ib.{metric_name(name.encode())}", labels)))
            for name in sorted(list_dir(directory))]
