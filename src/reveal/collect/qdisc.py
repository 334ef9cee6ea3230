"""Queueing disciplines: what shapers, fair queues and netem did to every interface's traffic.

A rate cap (``tbf``, ``htb``), a fair queue dropping a flow (``fq_codel``) or ``netem``
loss shows in the qdisc's own counters long before anything else explains it. This probe
reads them through rtnetlink (:mod:`reveal.collect._rtnl`: one ``RTM_GETQDISC`` dump per
namespace and read, what ``tc -s qdisc show`` asks; no process started), for the
collector's own network namespace and every other one
(:func:`reveal.collect._namespaces.scan`; a socket made inside each with ``setns``, as root).

Channels, per qdisc (labels ``iface``, ``qdisc`` = its kind, ``handle``, ``parent`` as ``tc``
prints them, and for another namespace ``netns`` plus its owner's ``container``/``pod``/
``service`` like the ``netns`` probe's):

- ``qdisc.bytes``, ``qdisc.packets`` (counters: sent), ``qdisc.drops``,
  ``qdisc.overlimits``, ``qdisc.requeues`` (events; 32-bit in the kernel, so they wrap),
  ``qdisc.backlog_bytes``, ``qdisc.backlog_packets`` (gauges: queued now).
- ``net.mtu{iface=…}`` (and the namespace's labels): each interface's MTU in bytes, a
  setting (loopbacks left out; ``mtu=false`` drops it), read from the same sockets: a link
  left at a wrong MTU by an overlay or tunnel shrinks every segment of the job.

A parent's counters include its children's (``mq`` sums its per-queue qdiscs, ``htb`` its
classes' leaves). ``noqueue`` (no queue at all: virtual interfaces, loopback) has no
statistics and is left out (``skip_kinds``).

Rate: every ``poll_s`` (1 s) on the probe's own thread (``reveal-qdisc``), into an
array the C tick thread copies each tick, so between two reads a value repeats. A dump
costs about 60 µs of CPU for two qdiscs; between refreshes only the namespaces holding
recorded qdiscs are dumped, since new qdiscs join at the next ``refresh()`` anyway (which
dumps every namespace); one that went away reads NaN until then. A refresh comes early when
the kernel announces a qdisc or an interface added, changed or deleted (an ``RTNLGRP_TC``
and ``RTNLGRP_LINK`` listener per namespace, :meth:`QdiscProbe.wants_refresh`): a shaper or
netem put on a link, or a new interface (a container's veth), joins within a second, not
at the next periodic re-discovery (every probe is refreshed then). The interfaces (names,
MTUs) are dumped again at every refresh and as soon as the kernel announces one changed,
so a new MTU is recorded within a second at no cost while nothing changes. A namespace that
ends is let go within a second (its socket would keep it alive). Without CAP_SYS_ADMIN only
the collector's own namespace is read, and the reason says so once.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import threading
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from reveal.collect import _namespaces
from reveal.collect._rtnl import (
    RTMGRP_LINK,
    RTMGRP_TC,
    STATS,
    Link,
    Rtnl,
    open_rtnl,
    tc_handle,
    tc_parent,
)
from reveal.collect.netns import namespace_labels
from reveal.collect.options import as_list
from reveal.collect.probe import NativePart, Probe, register
from reveal.frame import format_channel

#: A qdisc: (namespace inode, 0 for the own one), interface index, parent, handle, kind.
Key = tuple[int, int, int, int, str]


@dataclass
class _Space:
    """One namespace's netlink socket and what its last dump said."""

    ino: int  # 0: the collector's own namespace
    rtnl: Rtnl
    labels: dict[str, str]
    ns: _namespaces.Namespace | None = None
    holder: int = 0
    links: dict[int, Link] = field(default_factory=dict)
    seen: dict[Key, tuple[float, ...]] = field(default_factory=dict)
    gone: bool = False
    events: Rtnl | None = None  # hears qdiscs added, changed or deleted here

    def close(self) -> None:
        for sock in (self.rtnl, self.events):
            if sock is not None and not sock.closed:
                sock.close()


@register
class QdiscProbe(_namespaces.DrivenPeriodic, Probe):
    """Bytes, packets, drops, overlimits, requeues and backlog of every qdisc."""

    name = "qdisc"
    description = ("queueing-discipline bytes, packets, drops, overlimits, requeues and "
                   "backlog of every interface, every network namespace (rtnetlink)")
    options_help: ClassVar[dict[str, str]] = {
        "poll_s": "seconds between two reads of every qdisc (default: 1; not the sampling "
                  "interval)",
        "namespaces": "also the qdiscs of the other network namespaces (default: true)",
        "max_namespaces": "most other namespaces read at once (default: 64)",
        "skip_kinds": "qdisc kinds left out (default: noqueue)",
        "mtu": "each interface's MTU, net.mtu (default: true)",
        "netns_dir": "where named namespaces are bind-mounted (default: /run/netns)",
        "proc_root": "procfs to find namespaces in (default: /proc)",
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.poll_s = float(options.get("poll_s", 1.0))
        self.namespaces = bool(options.get("namespaces", True))
        self.max_namespaces = int(options.get("max_namespaces", 64))
        self.skip_kinds = tuple(as_list(options.get("skip_kinds", ("noqueue",))))
        self.mtu = bool(options.get("mtu", True))
        self.netns_dir = str(options.get("netns_dir", _namespaces.NETNS_DIR))
        self.proc_root = str(options.get("proc_root", "/proc")).rstrip("/")
        self.lock = threading.RLock()
        self.spaces: dict[int, _Space] = {}
        self.failed: dict[int, str] = {}
        self.keys: list[Key] = []
        self._index: dict[Key, int] = {}
        #: (namespace inode, interface index) of each ``net.mtu`` channel, after the qdiscs'
        self.link_keys: list[tuple[int, int]] = []
        self.values = np.empty(0)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._nsfs_dev: int | None = None
        self._exits: _namespaces.Exits | None = None
        self._cadence = _namespaces.Cadence(self.poll_s)
        self.released_early = 0
        self._announced = False

    # -- namespaces ------------------------------------------------------------------------
    def _sync_spaces(self) -> None:
        """Open sockets in namespaces that appeared, close those of namespaces gone."""
        if not self.namespaces:
            return
        found = _namespaces.scan(self.proc_root, self.netns_dir)
        wanted = sorted(found.namespaces, key=lambda i: (not found.namespaces[i].names, i))
        self.info["namespaces_dropped"] = max(0, len(wanted) - self.max_namespaces)
        wanted = wanted[: self.max_namespaces]
        with self.lock:
            for ino in [i for i, s in self.spaces.items()
                        if i and (i not in found.namespaces or s.gone)]:
                self.spaces.pop(ino).close()
            for ino in wanted:
                ns = found.namespaces[ino]
                space = self.spaces.get(ino)
                if space is not None:
                    space.ns = ns
                    continue
                try:
                    path = (f"{self.netns_dir}/{ns.names[0]}" if ns.names
                            else f"{self.proc_root}/{ns.pids[0]}/ns/net")
                    rtnl, events = _namespaces.run_inside(path, ino, _sockets)
                except OSError as exc:
                    self.failed[ino] = ("entering a namespace needs CAP_SYS_ADMIN"
                                        if isinstance(exc, PermissionError)
                                        else exc.strerror or str(exc))
                    continue
                self.failed.pop(ino, None)
                labels, _ = namespace_labels(ns, self.proc_root)
                self.spaces[ino] = _Space(ino, rtnl, labels, ns,
                                          ns.pids[0] if ns.pids else 0, events=events)
            for ino in [i for i in self.failed if i not in found.namespaces]:
                del self.failed[ino]
        notes = []
        if self.failed:
            reasons = sorted(set(self.failed.values()))
            notes.append(f"qdiscs of {len(self.failed)} other namespace(s) not read "
                         f"({'; '.join(reasons)})")
        if self.info["namespaces_dropped"]:
            notes.append(f"{self.info['namespaces_dropped']} namespaces over max_namespaces "
                         "not read")
        self.status = "degraded" if notes else "ok"
        self.reason = "qdisc: " + "; ".join(notes) if notes else ""

    # -- reading -----------------------------------------------------------------------------
    def _poll(self, recorded_only: bool = False) -> None:
        """One dump per namespace (with ``recorded_only``, only of namespaces whose qdiscs
        have channels: the others' new qdiscs could not join before a refresh anyway);
        values of the qdiscs with channels into the array."""
        with self.lock:
            values, index = self.values, self._index
            spaces = [s for s in self.spaces.values() if not s.gone]
            fresh = np.full(len(values), np.nan)
            if recorded_only:
                holding = {k[0] for k in self.keys}
                skipped = [s for s in spaces if s.ino not in holding]
                spaces = [s for s in spaces if s.ino in holding]
                for space in skipped:  # nothing of theirs is recorded: nothing to write
                    space.seen = {k: v for k, v in space.seen.items() if k in index}
            for space in spaces:
                try:
                    found = space.rtnl.qdiscs()
                except OSError:
                    found = []
                seen: dict[Key, tuple[float, ...]] = {}
                for q in found:
                    if matches(q.kind, self.skip_kinds):
                        continue
                    if q.ifindex not in space.links:
                        self._relink(space)
                    seen[(space.ino, q.ifindex, q.parent, q.handle, q.kind)] = q.stats
                space.seen = seen
                for key, stats in seen.items():
                    at = index.get(key)
                    if at is not None:  # a new one joins at the next refresh
                        fresh[at: at + len(STATS)] = stats
            self._fill_mtus(fresh)
            values[:] = fresh

    def _fill_mtus(self, out: np.ndarray) -> None:
        """The MTU of each ``net.mtu`` channel into its place of ``out`` (NaN for an
        interface or namespace gone); from the last interface dump, no system call."""
        first = len(self.keys) * len(STATS)
        for i, (ino, ifindex) in enumerate(self.link_keys):
            space = self.spaces.get(ino)
            link = space.links.get(ifindex) if space is not None and not space.gone else None
            out[first + i] = link.mtu if link is not None else np.nan

    def _relink_all(self) -> None:
        """Dump the interfaces of every namespace read (their names and MTUs)."""
        with self.lock:
            for space in self.spaces.values():
                if not space.gone:
                    self._relink(space)

    @staticmethod
    def _relink(space: _Space) -> None:
        with contextlib.suppress(OSError):
            space.links = space.rtnl.links()

    def _settle(self, inodes: set[int]) -> None:
        """Check namespaces whose process exited; close the socket of those that ended."""
        with self.lock:
            items = [(ino, self.spaces[ino].ns, self.spaces[ino].holder) for ino in inodes
                     if ino in self.spaces and not self.spaces[ino].gone
                     and self.spaces[ino].ns is not None]
        alive, ended = _namespaces.settle(items, self.proc_root, self.netns_dir,  # type: ignore[arg-type]
                                     self._nsfs_dev)
        with self.lock:
            for ino, (ns, holder) in alive.items():
                if ino in self.spaces:
                    self.spaces[ino].ns, self.spaces[ino].holder = ns, holder
            for ino in ended:
                space = self.spaces.get(ino)
                if space is not None and not space.gone:
                    space.gone = True
                    space.seen = {}
                    space.close()
                    self.released_early += 1

    def _holders(self) -> dict[int, int]:
        """The process watched for each other namespace not gone (inode → pid, 0: none)."""
        with self.lock:
            return {ino: s.holder for ino, s in self.spaces.items() if ino and not s.gone}

    def _readable(self) -> dict[int, _Announced]:
        """The announcement socket of each namespace that has one."""
        with self.lock:
            return {s.events.fileno(): _Announced(ino) for ino, s in self.spaces.items()
                    if s.events is not None and not s.gone}

    def _fired(self, keys: list[int | _Announced]) -> None:
        """Ask for a refresh as soon as the kernel announces a qdisc added, changed or
        deleted anywhere (:meth:`wants_refresh`); let go at once of a namespace whose last
        process exited."""
        announced = [k.ino for k in keys if isinstance(k, _Announced)]
        if announced:
            self._heard(announced)
        exited = {k for k in keys if not isinstance(k, _Announced)}
        if exited:
            self._settle(exited)

    def _heard(self, inodes: list[int]) -> None:
        """Drain the announcements of namespaces ``inodes``; a qdisc that came, changed or
        went makes the next :meth:`wants_refresh` true."""
        with self.lock:
            for ino in inodes:
                space = self.spaces.get(ino)
                if space is None or space.events is None or space.gone:
                    continue
                try:
                    if space.events.changed():
                        self._announced = True
                        if self.mtu:  # an MTU set anew is recorded at the next poll
                            self._relink(space)
                except OSError:  # a socket that fails is not listened to again
                    space.events.close()
                    space.events = None

    def wants_refresh(self) -> bool:
        """True once after the kernel announced a qdisc or an interface added, changed or
        deleted (the next namespace scan then looks afresh)."""
        announced, self._announced = self._announced, False
        if announced:
            _namespaces.forget_scan()
        return announced

    def _channels_of(self, key: Key) -> list[str]:
        ino, ifindex, parent, handle, kind = key
        space = self.spaces.get(ino)
        link = space.links.get(ifindex) if space is not None else None
        iface = link.name if link is not None else str(ifindex)
        labels = {"iface": iface, "qdisc": kind, "handle": tc_handle(handle),
                  "parent": tc_parent(parent), **(space.labels if space is not None else {})}
        return [format_channel(f"qdisc.{stat}", labels) for stat in STATS]

    def _link_keys(self) -> list[tuple[int, int]]:
        """The interfaces given a ``net.mtu`` channel: every one but loopbacks, of every
        namespace read, in the order of the namespaces."""
        if not self.mtu:
            return []
        return [(ino, ifindex) for ino, space in self.spaces.items() if not space.gone
                for ifindex, link in sorted(space.links.items()) if not link.loopback]

    def _mtu_channel(self, key: tuple[int, int]) -> str:
        space = self.spaces[key[0]]
        return format_channel("net.mtu", {"iface": space.links[key[1]].name, **space.labels})

    def _adopt(self) -> bool:
        """Channels for the qdiscs of the last dump and the interfaces known; True when
        they changed."""
        with self.lock:
            order = {ino: i for i, ino in enumerate(self.spaces)}
            keys = sorted((k for s in self.spaces.values() if not s.gone for k in s.seen),
                          key=lambda k: (order.get(k[0], 0), k[1], k[2], k[3], k[4]))
            link_keys = self._link_keys()
            channels = [c for key in keys for c in self._channels_of(key)]
            channels += [self._mtu_channel(k) for k in link_keys]
            if keys == self.keys and channels == self.channels:
                return False
            values = np.full(len(channels), np.nan)
            index = {key: i * len(STATS) for i, key in enumerate(keys)}
            for space in self.spaces.values():
                for key, stats in space.seen.items():
                    if key in index:
                        values[index[key]: index[key] + len(STATS)] = stats
            self.keys, self._index, self.channels = keys, index, channels
            self.link_keys = link_keys
            self._fill_mtus(values)
            self.values = values
            self.info["qdiscs"] = len(keys)
            self.info["interfaces"] = len(link_keys)
            return True

    # -- the probe contract ------------------------------------------------------------------
    def open(self) -> None:
        try:
            self._nsfs_dev = os.stat(f"{self.proc_root}/self/ns/net").st_dev
        except OSError:
            self._nsfs_dev = None
        own, events = _sockets()
        self.spaces = {0: _Space(0, own, {}, events=events)}
        _namespaces.forget_scan()
        self._sync_spaces()
        self._relink_all()
        self._poll()
        self._adopt()
        self._cadence = _namespaces.Cadence(self.poll_s)
        self._cadence.due()  # just dumped
        self._start_thread("reveal-qdisc")

    def _periodic(self) -> None:
        """Every ``poll_s``: look at namespaces kept only by a bind mount; dump those
        holding recorded qdiscs (a new qdisc joins at a refresh, which dumps them all)."""
        with self.lock:
            unheld = {ino for ino, s in self.spaces.items()
                      if ino and not s.gone and not s.holder}
        if unheld:
            self._settle(unheld)
        self._poll(recorded_only=True)

    def read(self, out: np.ndarray) -> None:
        out[:] = self.values

    def native_parts(self) -> list[NativePart]:
        return [NativePart(self.values, 0, len(self.values), self.read)]

    def refresh(self) -> bool:
        """Namespaces that came or went, their interfaces, then the qdiscs of a dump made
        now."""
        self._sync_spaces()
        self._relink_all()
        self._poll()
        self.info["released_early"] = self.released_early
        return self._adopt()

    def close(self) -> None:
        self._stop_thread()
        with self.lock:
            for space in self.spaces.values():
                space.close()
            self.spaces = {}


@dataclass(frozen=True)
class _Announced:
    """A namespace's announcement socket has data (a key of :meth:`Exits.wait`)."""

    ino: int


def _sockets() -> tuple[Rtnl, Rtnl | None]:
    """A dump socket and an announcement socket in the calling thread's namespace (the
    second None where multicast groups are refused: new qdiscs then join at a refresh)."""
    rtnl = open_rtnl()
    try:
        return rtnl, open_rtnl(RTMGRP_TC | RTMGRP_LINK)
    except OSError:
        return rtnl, None


def matches(kind: str, patterns: tuple[str, ...]) -> bool:
    """Whether a qdisc kind matches one of ``patterns`` (shell patterns)."""
    return any(fnmatch.fnmatchcase(kind, p) for p in patterns)

