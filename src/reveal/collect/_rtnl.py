"""A small rtnetlink reader: interfaces (name, MTU) and queueing-discipline statistics.

One ``NETLINK_ROUTE`` socket per network namespace (a socket belongs to the namespace it
was made in), one dump request per read (``RTM_GETQDISC`` with ``NLM_F_DUMP``: what
``tc -s qdisc show`` asks), parsed with :mod:`struct`. No process is started and no
library is needed. Statistics come from ``TCA_STATS2`` (``gnet_stats_basic``: bytes and
packets, ``TCA_STATS_PKT64`` when packets passed 2^32; ``gnet_stats_queue``: backlog in
packets and bytes, drops, requeues, overlimits), else from the older ``TCA_STATS``
(``struct tc_stats``, no requeues).

A socket made with ``groups=RTMGRP_TC | RTMGRP_LINK`` also hears the kernel announce every
qdisc added, changed or deleted in its namespace (``RTM_NEWQDISC``/``RTM_DELQDISC`` to the
``RTNLGRP_TC`` listeners) and every interface added, removed or changed
(``RTM_NEWLINK``/``RTM_DELLINK``, ``RTNLGRP_LINK``: registration, flags, carrier, MTU —
not statistics): :meth:`Rtnl.changed` drains those without blocking, so a new shaper or a
new container's veth is noticed within a poll instead of at the next full re-discovery, at
no cost while nothing changes.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from dataclasses import dataclass

NETLINK_ROUTE = 0
RTM_NEWLINK, RTM_DELLINK, RTM_GETLINK = 16, 17, 18
RTM_NEWQDISC, RTM_DELQDISC, RTM_GETQDISC = 36, 37, 38
RTMGRP_LINK = 0x1  # multicast group of interfaces added, removed or changed
RTMGRP_TC = 0x8  # multicast group of qdisc and class changes
#: announcements that change what there is to record
_CHANGES = (RTM_NEWQDISC, RTM_DELQDISC, RTM_NEWLINK, RTM_DELLINK)
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
IFLA_IFNAME, IFLA_MTU = 3, 4
IFF_LOOPBACK = 0x8
TCA_KIND, TCA_STATS, TCA_STATS2 = 1, 3, 7
TCA_STATS_BASIC, TCA_STATS_QUEUE, TCA_STATS_PKT64 = 1, 3, 8
TC_H_ROOT, TC_H_INGRESS = 0xFFFFFFFF, 0xFFFFFFF1
NLA_TYPE_MASK = 0x3FFF

_NLMSG = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_RTA = struct.Struct("=HH")  # len, type
_TCMSG = struct.Struct("=BxxxiIII")  # family, ifindex, handle, parent, info
_IFINFO = struct.Struct("=BxHiII")  # family, type, index, flags, change
_BASIC = struct.Struct("=QI")
_QUEUE = struct.Struct("=IIIII")  # qlen, backlog, drops, requeues, overlimits
_TC_STATS = struct.Struct("=QIIIIIII")  # bytes, packets, drops, overlimits, bps, pps, qlen, backlog

#: The statistics of one qdisc, in this order.
STATS = ("bytes", "packets", "drops", "overlimits", "requeues", "backlog_bytes",
         "backlog_packets")


@dataclass(frozen=True)
class Qdisc:
    """One queueing discipline and its statistics (:data:`STATS` order; NaN if absent)."""

    ifindex: int
    handle: int
    parent: int
    kind: str
    stats: tuple[float, ...]


@dataclass(frozen=True)
class Link:
    """One interface: its name, MTU (bytes; NaN if not said) and whether it is a loopback."""

    name: str
    mtu: float
    loopback: bool = False


def tc_handle(value: int) -> str:
    """A handle as ``tc`` prints it: ``8001:``, ``1:10``."""
    major, minor = value >> 16, value & 0xFFFF
    return f"{major:x}:" if minor == 0 else f"{major:x}:{minor:x}"


def tc_parent(value: int) -> str:
    """A parent as ``tc`` says it: ``root``, ``ingress`` (also clsact), or a handle."""
    if value == TC_H_ROOT:
        return "root"
    if value == TC_H_INGRESS:
        return "ingress"
    return tc_handle(value)


def attributes(data: bytes | memoryview, offset: int, end: int) -> dict[int, memoryview]:
    """``{type: payload}`` of the netlink attributes in ``data[offset:end]``."""
    view = memoryview(data)
    out: dict[int, memoryview] = {}
    while offset + 4 <= end:
        length, kind = _RTA.unpack_from(view, offset)
        if length < 4 or offset + length > end:
            break
        out[kind & NLA_TYPE_MASK] = view[offset + 4: offset + length]
        offset += (length + 3) & ~3
    return out


def parse_qdisc(payload: memoryview) -> Qdisc:
    """One ``RTM_NEWQDISC`` message body (``struct tcmsg`` and its attributes)."""
    _, ifindex, handle, parent, _ = _TCMSG.unpack_from(payload, 0)
    attrs = attributes(payload, _TCMSG.size, len(payload))
    kind = bytes(attrs.get(TCA_KIND, b"")).split(b"\0", 1)[0].decode("ascii", "replace")
    nan = float("nan")
    stats = [nan] * len(STATS)
    nested = attrs.get(TCA_STATS2)
    if nested is not None:
        inner = attributes(nested, 0, len(nested))
        basic = inner.get(TCA_STATS_BASIC)
        if basic is not None and len(basic) >= _BASIC.size:
            stats[0], stats[1] = _BASIC.unpack_from(basic, 0)
        pkt64 = inner.get(TCA_STATS_PKT64)
        if pkt64 is not None and len(pkt64) >= 8:
            stats[1] = struct.unpack_from("=Q", pkt64, 0)[0]
        queue = inner.get(TCA_STATS_QUEUE)
        if queue is not None and len(queue) >= _QUEUE.size:
            qlen, backlog, drops, requeues, overlimits = _QUEUE.unpack_from(queue, 0)
            stats[2:] = [drops, overlimits, requeues, backlog, qlen]
    else:
        old = attrs.get(TCA_STATS)
        if old is not None and len(old) >= _TC_STATS.size:
            nbytes, packets, drops, overlimits, _, _, qlen, backlog = _TC_STATS.unpack_from(old)
            stats = [nbytes, packets, drops, overlimits, nan, backlog, qlen]
    return Qdisc(ifindex, handle, parent, kind, tuple(float(v) for v in stats))


class Rtnl:
    """A ``NETLINK_ROUTE`` socket of the namespace it was made in (see
    :func:`reveal.collect._namespaces.run_inside` to make one in another namespace)."""

    def __init__(self, groups: int = 0) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                                  NETLINK_ROUTE)
        self.sock.bind((0, groups))
        self._seq = 0
        self._buf = bytearray(1 << 16)

    def dump(self, msg_type: int, body: bytes) -> list[memoryview]:
        """The bodies of every message answering a dump request."""
        self._seq += 1
        seq = self._seq
        head = _NLMSG.pack(_NLMSG.size + len(body), msg_type, NLM_F_REQUEST | NLM_F_DUMP,
                           seq, 0)
        self.sock.send(head + body)
        out: list[memoryview] = []
        while True:
            n = self.sock.recv_into(self._buf)
            data = memoryview(bytes(self._buf[:n]))
            offset = 0
            while offset + _NLMSG.size <= n:
                length, kind, _, mseq, _ = _NLMSG.unpack_from(data, offset)
                if length < _NLMSG.size:
                    return out
                if mseq == seq:
                    if kind == NLMSG_DONE:
                        return out
                    if kind == NLMSG_ERROR:
                        code = -struct.unpack_from("=i", data, offset + _NLMSG.size)[0]
                        if code:
                            raise OSError(code, os.strerror(code))
                        return out
                    out.append(data[offset + _NLMSG.size: offset + length])
                offset += (length + 3) & ~3

    def qdiscs(self) -> list[Qdisc]:
        """Every qdisc of every interface of this namespace, with its statistics."""
        return [parse_qdisc(body) for body in self.dump(RTM_GETQDISC,
                                                         _TCMSG.pack(0, 0, 0, 0, 0))]

    def links(self) -> dict[int, Link]:
        """Interface index → its :class:`Link` (one ``RTM_GETLINK`` dump)."""
        found: dict[int, Link] = {}
        for body in self.dump(RTM_GETLINK, _IFINFO.pack(0, 0, 0, 0, 0)):
            _, _, index, flags, _ = _IFINFO.unpack_from(body, 0)
            attrs = attributes(body, _IFINFO.size, len(body))
            name = attrs.get(IFLA_IFNAME)
            if name is None:
                continue
            mtu = attrs.get(IFLA_MTU)
            found[index] = Link(bytes(name).split(b"\0", 1)[0].decode("utf-8", "replace"),
                                float(struct.unpack_from("=I", mtu, 0)[0])
                                if mtu is not None and len(mtu) >= 4 else float("nan"),
                                bool(flags & IFF_LOOPBACK))
        return found

    def changed(self) -> bool:
        """Drain announcements without blocking; True when a qdisc or an interface was
        added, changed or deleted since the last call (or announcements were lost: the
        buffer overflowed)."""
        changed = False
        while True:
            try:
                n = self.sock.recv_into(self._buf, 0, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return changed
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:  # announcements lost: assume a change
                    changed = True
                    continue
                raise
            offset = 0
            while offset + _NLMSG.size <= n:
                length, kind, _, _, _ = _NLMSG.unpack_from(self._buf, offset)
                if length < _NLMSG.size:
                    break
                changed |= kind in _CHANGES
                offset += (length + 3) & ~3

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()

    @property
    def closed(self) -> bool:
        return self.sock.fileno() < 0


def open_rtnl(groups: int = 0) -> Rtnl:
    """A socket in the calling thread's namespace (joined to multicast ``groups``);
    OSError when netlink is refused."""
    try:
        return Rtnl(groups)
    except OSError as exc:
        raise OSError(exc.errno or errno.EPERM, f"netlink: {exc.strerror}") from None
