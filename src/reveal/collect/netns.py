"""Network counters of every other network namespace (containers, pods, ``ip netns``).

The ``network`` probe reads the collector's own namespace; a containerised job's traffic,
retransmissions and drops are counted in its own namespace, invisible there. This probe
finds every network namespace of the host (:func:`reveal.collect._namespaces.scan`: the unique
``/proc/PID/ns/net`` inodes, names from the ``/run/netns`` bind mounts) and reads each one's
``/proc/net`` files through one process inside it, with the descriptors kept open (a
namespace with no process inside is entered with ``setns`` on a short-lived thread, as
root). Namespaces come and go: each ``refresh()`` looks again.

Channels: the ``network`` probe's metric names, with the namespace's labels added —
``netns=<name under /run/netns, else the namespace inode>`` and, from the cgroup of a
process inside (:func:`reveal.collect.containers.process_identity`), ``container=…``,
``pod=…`` or ``service=…``:

- ``net.<field>{iface=…,netns=…}`` from ``net/dev``, every tick (read by the C tick thread);
  ``dev_fields``: ``default`` (bytes, packets, errors and drops each way) or ``all`` (16).
- ``snmp.<Proto>.<Field>``, ``netstat.<Proto>.<Field>`` and ``sockstat.<Proto>.<field>``
  ``{netns=…}``, every ``protocol_interval_s`` (1 s) on the probe's own thread
  (``reveal-netns``), into an array the C thread copies at every tick: between two reads
  a value repeats. ``protocols``: ``default`` (:data:`PROTOCOL_FIELDS`, the counters the
  analysis names: segments, retransmissions, resets, listen drops, IP octets, UDP buffer
  errors, sockets in use), ``all`` or ``none``.

Cost: ``net/dev`` of a namespace with two interfaces is about 12 µs of kernel time per read,
``snmp`` + ``netstat`` + ``sockstat`` about 90 µs; so per namespace about 0.0125 % of a core
for the links at 100 ms and 0.01 % for the protocols at 1 s (``bench/bench_containers.py``).

Namespaces that end: every file held keeps its namespace alive in the kernel (and its
interfaces: a veth peer on the host). The probe's thread watches one process per
namespace with a pidfd (:class:`reveal.collect._namespaces.Exits`); when it exits, the
namespace is checked at once (another process inside, its bind mount, a fresh scan) and
one that ended is released (:meth:`reveal.collect._namespaces.NsFile.release`); its channels
are NaN until the next refresh drops them. One kept only by a bind mount is looked at
every ``protocol_interval_s``. At most ``max_namespaces`` (64) are read, the rest counted in
``info["namespaces_dropped"]``. Without root only the namespaces of this user's processes
are seen; what cannot be read is said once in the reason, the rest goes on.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from reveal.collect import _namespaces
from reveal.collect._dirwatch import DirWatch
from reveal.collect._namespaces import DOCKER_NETNS_DIR, Namespace, NsFile
from reveal.collect._procfs import (
    FileProbe,
    Layout,
    NumberParser,
    PlanItem,
    native_available,
    read_str,
)
from reveal.collect.containers import label_value, process_identity
from reveal.collect.network import (
    header_value_layout,
    net_dev_layout,
    sockstat_layout,
    split_colon,
)
from reveal.collect.options import as_list
from reveal.collect.probe import register
from reveal.errors import InputError
from reveal.frame import format_channel, parse_channel

DEV_FIELDS = ("rx_bytes", "rx_packets", "rx_errs", "rx_drop",
              "tx_bytes", "tx_packets", "tx_errs", "tx_drop")
#: The protocol counters read per namespace by default (``protocols=default``).
PROTOCOL_FIELDS = frozenset({
    "snmp.Ip.InReceives", "snmp.Ip.InDelivers", "snmp.Ip.OutRequests", "snmp.Ip.InDiscards",
    "snmp.Ip.OutDiscards", "snmp.Ip.OutNoRoutes",
    "snmp.Icmp.InMsgs", "snmp.Icmp.OutMsgs", "snmp.Icmp.InErrors",
    "snmp.Tcp.ActiveOpens", "snmp.Tcp.PassiveOpens", "snmp.Tcp.AttemptFails",
    "snmp.Tcp.EstabResets", "snmp.Tcp.CurrEstab", "snmp.Tcp.InSegs", "snmp.Tcp.OutSegs",
    "snmp.Tcp.RetransSegs", "snmp.Tcp.InErrs", "snmp.Tcp.OutRsts",
    "snmp.Udp.InDatagrams", "snmp.Udp.OutDatagrams", "snmp.Udp.NoPorts",
    "snmp.Udp.InErrors", "snmp.Udp.RcvbufErrors", "snmp.Udp.SndbufErrors",
    "netstat.TcpExt.ListenOverflows", "netstat.TcpExt.ListenDrops",
    "netstat.TcpExt.TCPTimeouts", "netstat.TcpExt.TCPSynRetrans",
    "netstat.TcpExt.TCPLostRetransmit", "netstat.TcpExt.TCPFastRetrans",
    "netstat.TcpExt.TCPBacklogDrop", "netstat.TcpExt.TCPRcvQDrop",
    "netstat.TcpExt.TCPZeroWindowDrop", "netstat.TcpExt.TCPMemoryPressures",
    "netstat.TcpExt.TCPAbortOnTimeout", "netstat.TcpExt.TCPAbortOnData",
    "netstat.TcpExt.PruneCalled", "netstat.IpExt.InOctets", "netstat.IpExt.OutOctets",
    "sockstat.sockets.used", "sockstat.TCP.inuse", "sockstat.TCP.orphan", "sockstat.TCP.tw",
    "sockstat.TCP.alloc", "sockstat.TCP.mem", "sockstat.UDP.inuse", "sockstat.UDP.mem",
})
_FILES = ("dev", "snmp", "netstat", "sockstat")
_COLON = ord(":")

Discover = Callable[[bytes], Layout]


def namespace_labels(ns: Namespace, proc_root: str = "/proc") -> tuple[dict[str, str], str]:
    """The labels of a namespace's channels — ``netns`` (its first name under /run/netns,
    else its inode) and its owner's (:func:`reveal.collect.containers.process_identity` of
    the first process inside that can be read) — and the cgroup path they came from."""
    labels = {"netns": label_value(ns.names[0] if ns.names else str(ns.ino))}
    for pid in ns.pids[:4]:
        text = read_str(f"{proc_root}/{pid}/cgroup")
        if text is not None:
            ident, cgroup = process_identity(text)
            return {**ident.labels(), **labels}, cgroup
    return labels, ""


def labelled(layout: Discover, labels: dict[str, str],
             keep: Callable[[str], bool] | None = None) -> Discover:
    """``layout`` with ``labels`` added to each channel, keeping metrics ``keep`` accepts."""

    def discover(data: bytes) -> Layout:
        out: Layout = {}
        for channel, spot in layout(data).items():
            metric, own = parse_channel(channel)
            if keep is None or keep(metric):
                out[format_channel(metric, {**own, **labels})] = spot
        return out

    return discover


class NsGroup:
    """Files of one namespace read and parsed together (the manner of
    :class:`reveal.collect._procfs.FileGroup`, over descriptors opened inside the
    namespace): a C plan where the extension is built, else the Python parse. The channel
    list changes only at :meth:`refresh`; a layout that stops fitting is re-discovered on
    the read that finds it (NaN where a channel is gone)."""

    def __init__(self, files: list[tuple[NsFile, Discover, bool]], mode: str) -> None:
        self._files = files  # (file, discover, split at ':')
        self.mode = mode
        self.changed = False
        self.channels: list[str] = []
        self._adopt(self._texts())

    @property
    def released(self) -> bool:
        """True once the namespace was released or its files closed: reads give NaN."""
        return any(f.released or f.fd < 0 for f, _, _ in self._files)

    def _texts(self) -> list[bytes]:
        texts = []
        for handle, _, colon in self._files:
            try:
                text = handle.read()
            except OSError:
                text = b""
            texts.append(split_colon(text) if colon else text)
        return texts

    def _layout(self, texts: list[bytes]) -> Layout:
        joined: Layout = {}
        base = 0
        for (_, discover, _), text in zip(self._files, texts, strict=True):
            for channel, (pos, scale) in discover(text).items():
                joined.setdefault(channel, (base + pos, scale))
            base += len(text.split())
        return joined

    def _adopt(self, texts: list[bytes]) -> None:
        layout = self._layout(texts)
        self.channels = list(layout)
        self._fit(texts, layout)

    def _fit(self, texts: list[bytes], layout: Layout) -> None:
        spots = [layout.get(name) for name in self.channels]
        self._parser = NumberParser(b"\n".join(texts), [s[0] if s else None for s in spots],
                                    [s[1] if s else 1.0 for s in spots], self.mode)
        self._nan = np.full(len(self.channels), np.nan)
        self._plan = None
        if native_available() and not self.released:
            self._plan = self._parser.native_plan(
                [(f.fd, f.size, 0, _COLON if colon else 0) for f, _, colon in self._files])

    def native_reader(self) -> Any:
        """The C plan, or (released) an array of NaN; None off the C reader's path."""
        return self._nan if self.released else self._plan

    def read(self, out: np.ndarray) -> None:
        if self.released:
            out[:] = np.nan
            return
        plan = self._plan
        if plan is not None and plan.read(out):
            return
        texts = self._texts()
        data = b"\n".join(texts)
        if self._parser.parse(data, out):
            return
        layout = self._layout(texts)
        if list(layout) != self.channels:
            self.changed = True
        self._fit(texts, layout)
        if not self._parser.parse(data, out):
            out[:] = np.nan

    def refresh(self) -> bool:
        """Adopt a new layout (an interface added or gone); True when channels changed."""
        if self.released:
            return False
        texts = self._texts()
        if not self.changed and self._parser.same_labels(b"\n".join(texts)):
            return False
        self.changed = False
        before = self.channels
        self._adopt(texts)
        return self.channels != before


@dataclass
class NsState:
    """A namespace being read: its files, labels, and the process that shows it's alive."""

    ns: Namespace
    labels: dict[str, str]
    files: dict[str, NsFile]
    via: str
    holder: int
    generation: int
    cgroup: str = ""
    groups: dict[str, NsGroup] = field(default_factory=dict)

    @property
    def released(self) -> bool:
        return any(f.released for f in self.files.values())

    def release(self, devnull: int) -> None:
        for handle in self.files.values():
            handle.release(devnull)

    def close(self) -> None:
        for handle in self.files.values():
            handle.close()


class _Links:
    """The ``net/dev`` part of one namespace (read every ``period_s``, 0: every tick)."""

    def __init__(self, group: NsGroup, period_s: float) -> None:
        self.group = group
        self.channels = group.channels
        self.period_s = period_s

    def read(self, out: np.ndarray) -> None:
        self.group.read(out)

    def native_reader(self) -> Any:
        return self.group.native_reader()

    def refresh(self) -> bool:
        changed = self.group.refresh()
        self.channels = self.group.channels
        return changed

    def close(self) -> None:  # the probe closes the namespace's files
        pass


class _Protocols:
    """Every namespace's protocol counters in one array, filled by the probe's thread;
    the tick copies it (the C thread, or :meth:`read`)."""

    def __init__(self, probe: NetnsProbe) -> None:
        self.probe = probe
        self.channels: list[str] = []
        self.values = np.empty(0)
        self.slices: list[tuple[NsGroup, slice]] = []
        self.refresh()

    def read(self, out: np.ndarray) -> None:
        out[:] = self.values

    def native_reader(self) -> Any:
        return self.values

    def refresh(self) -> bool:
        probe = self.probe
        with probe.lock:
            groups = [s.groups["protocols"] for s in probe.states.values()
                      if "protocols" in s.groups and not s.released]
            changed = False
            for group in groups:
                changed |= group.refresh()
            channels = [c for g in groups for c in g.channels]
            if channels == self.channels and not changed:
                self.slices = self._slices(groups)
                return False
            values = np.full(len(channels), np.nan)
            self.slices = self._slices(groups)
            for group, where in self.slices:
                group.read(values[where])  # no NaN until the thread's next read
            self.channels, self.values = channels, values
            return True

    @staticmethod
    def _slices(groups: list[NsGroup]) -> list[tuple[NsGroup, slice]]:
        out, at = [], 0
        for group in groups:
            out.append((group, slice(at, at + len(group.channels))))
            at += len(group.channels)
        return out

    def poll(self) -> None:
        """Read every namespace's protocol files into the array (the probe's lock held)."""
        values = self.values
        for group, where in self.slices:
            group.read(values[where])

    def close(self) -> None:
        pass


@register
class NetnsProbe(_namespaces.DrivenPeriodic, FileProbe):
    """Interface and protocol counters of every other network namespace."""

    name = "netns"
    description = ("interface, IP/TCP/UDP and socket counters of every other network "
                   "namespace (containers, pods, ip netns), labelled with its owner")
    options_help: ClassVar[dict[str, str]] = {
        "protocols": "snmp/netstat/sockstat counters per namespace: default, all or none "
                     "(default: default)",
        "dev_fields": "net/dev fields per interface: default (8) or all (16) "
                      "(default: default)",
        "protocol_interval_s": "seconds between reads of the protocol counters (default: 1)",
        "link_interval_s": "seconds between reads of net/dev, the last values repeated "
                           "between; 0: every tick (default: 0)",
        "max_namespaces": "most namespaces read at once (default: 64)",
        "netns_dir": "where named namespaces are bind-mounted (default: /run/netns)",
        "watch_dirs": "hear namespaces bind-mounted or removed in netns_dir (and Docker's "
                      "/run/docker/netns) at once, a refresh within a second instead of at "
                      "the next periodic one (default: true)",
        "skip_ifaces": "interfaces left out, shell patterns (default: none)",
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.protocols = str(options.get("protocols", "default"))
        self.dev_fields = str(options.get("dev_fields", "default"))
        self.protocol_interval_s = float(options.get("protocol_interval_s", 1.0))
        self.link_interval_s = float(options.get("link_interval_s", 0.0))
        if not self.link_interval_s >= 0:
            raise InputError("netns: link_interval_s must be 0 or more seconds")
        self.max_namespaces = int(options.get("max_namespaces", 64))
        self.netns_dir = str(options.get("netns_dir", _namespaces.NETNS_DIR))
        self.watch_dirs = bool(options.get("watch_dirs", True))
        self._dirwatch: DirWatch | None = None
        self.skip_ifaces = tuple(as_list(options.get("skip_ifaces", ())))
        if self.protocols not in ("default", "all", "none"):
            raise InputError(f"netns: protocols must be default, all or none, not "
                             f"{self.protocols!r}")
        if self.dev_fields not in ("default", "all"):
            raise InputError(f"netns: dev_fields must be default or all, not "
                             f"{self.dev_fields!r}")
        self.empty_ok = True
        self.states: dict[int, NsState] = {}
        self.failed: dict[int, str] = {}  # namespace inode → why it is not read
        self.lock = threading.RLock()
        self._generation = 0
        self._devnull = -1
        self._nsfs_dev: int | None = None
        self._protocols: _Protocols | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._exits: _namespaces.Exits | None = None
        self._cadence = _namespaces.Cadence(self.protocol_interval_s)
        self.released_early = 0

    # -- discovery -----------------------------------------------------------------------
    def _keep_dev(self, metric: str) -> bool:
        return self.dev_fields == "all" or metric.split(".", 1)[1] in DEV_FIELDS

    def _keep_protocol(self, metric: str) -> bool:
        return self.protocols == "all" or metric in PROTOCOL_FIELDS

    def _dev_layout(self, labels: dict[str, str]) -> Discover:
        skip = self.skip_ifaces

        def layout(data: bytes) -> Layout:
            full = net_dev_layout(data)
            if not skip:
                return full
            return {c: s for c, s in full.items()
                    if not any(fnmatch.fnmatchcase(parse_channel(c)[1].get("iface", ""), p)
                               for p in skip)}

        return labelled(layout, labels, self._keep_dev)

    def _open_state(self, ns: Namespace) -> NsState:
        names = ("dev",) if self.protocols == "none" else _FILES
        files, via = _namespaces.open_net_files(ns, names, self.proc_root, self.netns_dir)
        labels, cgroup = namespace_labels(ns, self.proc_root)
        self._generation += 1
        state = NsState(ns, labels, files, via, ns.pids[0] if ns.pids else 0,
                        self._generation, cgroup)
        try:
            state.groups["links"] = NsGroup([(files["dev"], self._dev_layout(labels), True)],
                                            "uint")
            if self.protocols != "none":
                keep = self._keep_protocol
                # snmp holds signed values (Tcp MaxConn is -1): parsed as signed integers
                state.groups["protocols"] = NsGroup([
                    (files["snmp"], labelled(header_value_layout("snmp"), labels, keep), False),
                    (files["netstat"], labelled(header_value_layout("netstat"), labels, keep),
                     False),
                    (files["sockstat"], labelled(sockstat_layout, labels, keep), False)], "int")
        except Exception:
            state.close()
            raise
        return state

    def plan(self) -> dict[str, PlanItem]:
        found = _namespaces.scan(self.proc_root, self.netns_dir)
        with self.lock:
            for ino in [i for i, s in self.states.items()
                        if i not in found.namespaces or s.released]:
                self.states.pop(ino).close()  # gone (or released): its files go too
            wanted = sorted(found.namespaces, key=lambda i: (not found.namespaces[i].names, i))
            self.info["namespaces_dropped"] = max(0, len(wanted) - self.max_namespaces)
            for ino in wanted[: self.max_namespaces]:
                ns = found.namespaces[ino]
                state = self.states.get(ino)
                if state is not None:
                    state.ns = ns  # the processes and names seen now
                    continue
                try:
                    self.states[ino] = self._open_state(ns)
                    self.failed.pop(ino, None)
                except (OSError, ValueError) as exc:
                    self.failed[ino] = f"{exc.strerror or exc}" if isinstance(
                        exc, OSError) else str(exc)
            for ino in [i for i in self.failed if i not in found.namespaces]:
                del self.failed[ino]
            self._describe(found)
            plan: dict[str, PlanItem] = {}
            for ino, state in self.states.items():
                plan[f"links:{ino}:{state.generation}"] = self._links_factory(state)
            if self.protocols != "none":
                plan["protocols"] = self._protocols_part
            return plan

    def _links_factory(self, state: NsState) -> Callable[[], _Links]:
        return lambda: _Links(state.groups["links"], self.link_interval_s)

    def _protocols_part(self) -> _Protocols:
        self._protocols = _Protocols(self)
        return self._protocols

    def _describe(self, found: _namespaces.Scan) -> None:
        self.info["namespaces"] = {
            s.labels["netns"]: {"inode": s.ns.ino, "names": list(s.ns.names),
                                "read_via": s.via, "cgroup": s.cgroup[:256],
                                **{k: v for k, v in s.labels.items() if k != "netns"}}
            for s in self.states.values()}
        self.info["released_early"] = self.released_early
        notes = []
        if self.failed:
            why: dict[str, list[str]] = {}
            for ino, reason in sorted(self.failed.items()):
                ns = found.namespaces.get(ino)
                label = label_value(ns.names[0]) if ns is not None and ns.names else str(ino)
                why.setdefault(reason, []).append(label)
            notes += [f"{len(v)} namespace(s) not read ({k}): {', '.join(v[:5])}"
                      for k, v in why.items()]
        if self.info["namespaces_dropped"]:
            notes.append(f"{self.info['namespaces_dropped']} namespaces over max_namespaces "
                         f"({self.max_namespaces}) not read")
        self.info["processes_hidden"] = found.hidden
        if found.hidden and os.geteuid() != 0:
            notes.append(f"the namespaces of {found.hidden} processes of other users are not "
                         "visible without root")
        self.status = "degraded" if notes else "ok"
        self.reason = "netns: " + "; ".join(notes) if notes else (
            "" if self.states else "no other network namespace yet; found at a refresh")

    # -- life ------------------------------------------------------------------------------
    def open(self) -> None:
        self._devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        with contextlib.suppress(OSError):
            self._nsfs_dev = os.stat(f"{self.proc_root}/self/ns/net").st_dev
        _namespaces.forget_scan()  # a scan made before this probe existed may be a second old
        super().open()
        self._exits = _namespaces.Exits()
        self._cadence = _namespaces.Cadence(self.protocol_interval_s)
        self._start_thread("reveal-netns")
        if self.watch_dirs:
            self._dirwatch = DirWatch()
            self._dirwatch.watch([d for d in (self.netns_dir, DOCKER_NETNS_DIR)
                                  if os.path.isdir(d)])

    def wants_refresh(self) -> bool:
        """A namespace was bind-mounted or removed in a watched directory (``ip netns add``,
        a container runtime); the next scan looks afresh."""
        if self._dirwatch is None or not self._dirwatch.changed():
            return False
        _namespaces.forget_scan()
        return True

    def _periodic(self) -> None:
        """Look at namespaces kept only by a bind mount; read every namespace's protocols."""
        with self.lock:
            unheld = {ino for ino, s in self.states.items() if not s.released and not s.holder}
        if unheld:
            self._settle(unheld)
        with self.lock:
            if self._protocols is not None:
                self._protocols.poll()

    def _holders(self) -> dict[int, int]:
        """The process watched for each namespace not released (inode → pid, 0: none)."""
        with self.lock:
            return {ino: s.holder for ino, s in self.states.items() if not s.released}

    def _fired(self, keys: list[int]) -> None:
        """Let go at once of the namespaces that ended with a watched process."""
        if keys:
            self._settle(set(keys))

    def _settle(self, inodes: set[int]) -> None:
        """Check namespaces whose process exited; release those that ended."""
        with self.lock:
            items = [(ino, self.states[ino].ns, self.states[ino].holder) for ino in inodes
                     if ino in self.states and not self.states[ino].released]
        alive, ended = _namespaces.settle(items, self.proc_root, self.netns_dir, self._nsfs_dev)
        with self.lock:
            for ino, (ns, holder) in alive.items():
                if ino in self.states:
                    self.states[ino].ns, self.states[ino].holder = ns, holder
            for ino in ended:
                state = self.states.get(ino)
                if state is not None and not state.released:
                    state.release(self._devnull)
                    self.released_early += 1

    def close(self) -> None:
        self._stop_thread()
        if self._dirwatch is not None:
            self._dirwatch.close()
            self._dirwatch = None
        super().close()
        with self.lock:
            for state in self.states.values():
                state.close()
            self.states = {}
        if self._devnull >= 0:
            os.close(self._devnull)
            self._devnull = -1
