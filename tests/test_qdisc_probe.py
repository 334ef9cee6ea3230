"""The qdisc probe: the netlink parsing on built messages, then real qdiscs this test adds
inside network namespaces it creates — a tbf rate cap that the test's own traffic
overflows, seen as drops and overlimits (checked against ``tc -s``), in a probe and in a
real ``reveal collect`` run during which the qdisc and its namespace come and go; and a
non-root reader (its own namespace read, the others said once).

Namespaces are named ``rvinj-<pid>-…`` with blanks, quotes, ``<``, ``>`` and non-ASCII
letters, removed in ``finally`` and on SIGTERM (``reveal validate --cleanup`` removes those
of a dead owner).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from reveal.catalog import default_catalog
from reveal.collect._rtnl import (
    TCA_KIND,
    TCA_STATS,
    TCA_STATS2,
    TCA_STATS_BASIC,
    TCA_STATS_PKT64,
    TCA_STATS_QUEUE,
    parse_qdisc,
    tc_handle,
    tc_parent,
)
from reveal.collect.qdisc import QdiscProbe
from reveal.frame import parse_channel
from reveal.inject.naming import owned_name
from reveal.inject.undo import UNDO
from reveal.store.run_reader import read_run
from runs import collecting

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None,
    reason="namespaces and qdiscs need root, iproute2 and tc")


def _attr(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * (-length % 4)


def _tcmsg(ifindex: int, handle: int, parent: int) -> bytes:
    return struct.pack("=BxxxiIII", 0, ifindex, handle, parent, 0)


def test_stats2_with_64_bit_packets() -> None:
    stats2 = (_attr(TCA_STATS_BASIC, struct.pack("=QIxxxx", 10_000_000_000, 5))
              + _attr(TCA_STATS_PKT64, struct.pack("=Q", 2**33 + 5))
              + _attr(TCA_STATS_QUEUE, struct.pack("=IIIII", 3, 4500, 77, 2, 900)))
    body = _tcmsg(7, 0x80010000, 0xFFFFFFFF) + _attr(TCA_KIND, b"tbf\0") + _attr(
        TCA_STATS2 | 0x8000, stats2)  # nested flag set, as the kernel may
    q = parse_qdisc(memoryview(body))
    assert (q.ifindex, q.kind, tc_handle(q.handle), tc_parent(q.parent)) == (
        7, "tbf", "8001:", "root")
    assert q.stats == (10_000_000_000, 2**33 + 5, 77, 900, 2, 4500, 3)


def test_old_tc_stats_has_no_requeues() -> None:
    old = struct.pack("=QIIIIIII", 1234, 10, 1, 2, 0, 0, 3, 300)
    q = parse_qdisc(memoryview(_tcmsg(2, 0x10000, 0xFFFFFFF1) + _attr(TCA_KIND, b"ingress\0")
                               + _attr(TCA_STATS, old)))
    assert tc_parent(q.parent) == "ingress" and tc_handle(q.handle) == "1:"
    assert q.stats[:4] == (1234, 10, 1, 2) and np.isnan(q.stats[4])
    assert q.stats[5:] == (300, 3)
    assert tc_handle(0x10010) == "1:10"


def test_own_namespace_and_catalog() -> None:
    probe = QdiscProbe(namespaces=False)
    probe.open()
    try:
        out = np.full(len(probe.channels), np.nan)
        probe.read(out)
        catalog = default_catalog()
        for channel in probe.channels:
            info = catalog.lookup(channel)
            assert info.subsystem == "network" and info.unit, channel
            assert "netns" not in parse_channel(channel)[1]
        assert not any(parse_channel(c)[1].get("qdisc") == "noqueue" for c in probe.channels)
        # every interface but the loopback has its MTU, as the kernel says it
        mtus = {parse_channel(c)[1]["iface"]: out[i] for i, c in enumerate(probe.channels)
                if c.startswith("net.mtu")}
        sysfs = {p.name: float((p / "mtu").read_text()) for p in Path("/sys/class/net").iterdir()
                 if not int((p / "flags").read_text(), 16) & 0x8}
        assert mtus == sysfs
        assert probe.native_parts() is not None
    finally:
        probe.close()


@dataclass
class Pair:
    a: str
    b: str
    ifa: str
    ifb: str
    undo: int = 0

    def delete(self) -> None:
        for ns in (self.a, self.b):
            for pid in subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                                      text=True, check=False).stdout.split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


def run(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def make_pair(tag: str) -> Pair:
    uid = uuid.uuid4().hex[:4]
    pair = Pair(owned_name(f"{tag} 'q' <{uid}> ä"), owned_name(f"{tag} 'q' <{uid}> ö"),
                f"rvq{uid}a", f"rvq{uid}b")
    pair.undo = UNDO.push(f"namespaces {pair.a!r} {pair.b!r}", pair.delete)
    try:
        run("ip", "netns", "add", pair.a)
        run("ip", "netns", "add", pair.b)
        run("ip", "link", "add", pair.ifa, "netns", pair.a, "type", "veth", "peer", "name",
            pair.ifb, "netns", pair.b)
        for ns, ifname, addr in ((pair.a, pair.ifa, "10.78.0.1"), (pair.b, pair.ifb,
                                                                     "10.78.0.2")):
            run("ip", "-n", ns, "addr", "add", f"{addr}/30", "dev", ifname)
            run("ip", "-n", ns, "link", "set", ifname, "up")
    except Exception:
        UNDO.pop(pair.undo, run=True)
        raise
    return pair


@pytest.fixture()
def pair() -> Iterator[Pair]:
    made = make_pair("qd")
    try:
        yield made
    finally:
        UNDO.pop(made.undo, run=True)


def add_tbf(pair: Pair) -> None:
    """A 1 Mbit/s cap with a small queue on a's end: a burst must overflow it."""
    run("tc", "-n", pair.a, "qdisc", "add", "dev", pair.ifa, "root", "handle", "1:", "tbf",
        "rate", "1mbit", "burst", "4kb", "limit", "8kb")


SENDER = ("import socket, sys\n"
          "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
          "for _ in range(int(sys.argv[1])):\n"
          "    s.sendto(b'x' * 1200, ('10.78.0.2', 9))\n")


def push(pair: Pair, count: int) -> None:
    subprocess.run(["ip", "netns", "exec", pair.a, sys.executable, "-c", SENDER, str(count)],
                   check=True, timeout=60)


def tc_counts(pair: Pair) -> dict[str, int]:
    """``tc -s`` of the tbf, read independently of the probe."""
    text = run("tc", "-s", "-n", pair.a, "qdisc", "show", "dev", pair.ifa)
    match = re.search(r"Sent (\d+) bytes (\d+) pkt \(dropped (\d+), overlimits (\d+)", text)
    assert match, text
    return dict(zip(("bytes", "packets", "drops", "overlimits"), map(int, match.groups()),
                    strict=True))


def of(channels: list[str], metric: str, **labels: str) -> str:
    hits = [c for c in channels if parse_channel(c)[0] == metric
            and all(parse_channel(c)[1].get(k) == v for k, v in labels.items())]
    assert len(hits) == 1, (metric, labels, hits)
    return hits[0]


@needs_root
def test_a_rate_cap_shows_drops_and_overlimits(pair: Pair) -> None:
    add_tbf(pair)
    probe = QdiscProbe(poll_s=0.1)
    probe.open()
    try:
        drops = of(probe.channels, "qdisc.drops", iface=pair.ifa, qdisc="tbf", netns=pair.a)
        labels = parse_channel(drops)[1]
        assert labels["handle"] == "1:" and labels["parent"] == "root"
        push(pair, 2000)
        time.sleep(0.5)
        probe.refresh()  # reads now too
        out = np.full(len(probe.channels), np.nan)
        probe.read(out)
        got = {m: out[probe.channels.index(of(probe.channels, f"qdisc.{m}", iface=pair.ifa,
                                                 netns=pair.a))]
               for m in ("bytes", "packets", "drops", "overlimits", "requeues")}
        truth = tc_counts(pair)
        assert got["drops"] > 0 and got["overlimits"] > 0
        assert got["packets"] + got["drops"] >= 2000
        assert got["bytes"] < 2000 * 1200  # the cap held some back
        for key in ("bytes", "packets", "drops", "overlimits"):
            assert got[key] == truth[key], (key, got, truth)  # the queue is quiet by now
        assert got["requeues"] == 0
    finally:
        probe.close()


@needs_root
def test_an_mtu_set_on_a_namespaced_link_is_recorded_without_a_refresh(pair: Pair) -> None:
    probe = QdiscProbe(poll_s=0.2)
    probe.open()
    try:
        channels = list(probe.channels)
        at = channels.index(of(channels, "net.mtu", iface=pair.ifa, netns=pair.a))
        peer = channels.index(of(channels, "net.mtu", iface=pair.ifb, netns=pair.b))
        assert not [c for c in channels if c.startswith("net.mtu") and pair.a in c
                    and parse_channel(c)[1]["iface"] == "lo"]
        out = np.full(len(channels), np.nan)
        probe.read(out)
        assert out[at] == out[peer] == 1500
        run("ip", "-n", pair.a, "link", "set", "dev", pair.ifa, "mtu", "1280")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            probe.read(out)
            if out[at] != 1500:
                break
            time.sleep(0.05)
        # heard from the kernel's announcement, read at the next poll: no refresh asked
        assert out[at] == 1280 and out[peer] == 1500
        assert probe.channels == channels
    finally:
        probe.close()


@needs_root
def test_collect_run_sees_a_qdisc_and_its_namespace_come_and_go(tmp_path: Path) -> None:
    out_dir = tmp_path / "run"
    made = None
    try:
        with collecting(out_dir, "--duration", "16", "--refresh", "1", "--probes",
                        "qdisc,pressure", "--probe-option", "qdisc.poll_s=0.2"):
            time.sleep(3)
            t_make = time.time()
            made = make_pair("qrun")
            add_tbf(made)
            t_made = time.time()
            time.sleep(2.5)
            push(made, 2000)
            time.sleep(3)
            truth = tc_counts(made)
            t_kill = time.time()
            UNDO.pop(made.undo, run=True)
            t_gone = time.time()
    finally:
        if made is not None:
            UNDO.pop(made.undo, run=True)
    frame = read_run(out_dir)
    t = frame.wall_time_s()
    before, during, after = t < t_make, (t > t_made + 2) & (t < t_kill), t > t_gone + 2.5
    assert before.sum() >= 5 and during.sum() >= 20 and after.sum() >= 5
    drops = of(frame.channels, "qdisc.drops", iface=made.ifa, qdisc="tbf")
    assert parse_channel(drops)[1]["netns"] == made.a  # stored as named
    col = frame.column(drops)
    present = np.isfinite(col)
    assert not present[before].any() and present[during].all() and not present[after].any()
    assert np.nanmax(col) == truth["drops"] > 0
    over = frame.column(of(frame.channels, "qdisc.overlimits", iface=made.ifa, qdisc="tbf"))
    assert np.nanmax(over) == truth["overlimits"] > 0
    assert np.all(np.diff(col[present]) >= 0)


@needs_root
def test_a_qdisc_added_mid_run_joins_within_seconds_not_at_the_next_refresh(
        tmp_path: Path) -> None:
    """The kernel announces a new qdisc: it is recorded within about a second of being
    added, although the collector re-discovers channels only every 30 s."""
    made = make_pair("qnew")
    out_dir = tmp_path / "run"
    try:
        with collecting(out_dir, "--duration", "12", "--refresh", "30", "--probes",
                        "qdisc,pressure"):
            time.sleep(4)
            add_tbf(made)
            t_added = time.time()
    finally:
        UNDO.pop(made.undo, run=True)
    frame = read_run(out_dir)
    t = frame.wall_time_s()
    col = frame.column(of(frame.channels, "qdisc.packets", iface=made.ifa, qdisc="tbf"))
    first = t[np.isfinite(col)].min()
    assert first - t_added < 3.0, (first - t_added)
    assert not np.isfinite(col[t < t_added]).any()


NON_ROOT = r"""
import json
import numpy as np
from reveal.collect.qdisc import QdiscProbe
probe = QdiscProbe()
probe.open()
probe.refresh()
out = np.full(len(probe.channels), np.nan)
probe.read(out)
print(json.dumps({"status": probe.status, "reason": probe.reason,
                  "channels": probe.channels, "finite": int(np.isfinite(out).sum())}))
probe.close()
"""


@needs_root
def test_without_root_the_own_namespace_is_read_and_the_rest_said_once(
        pair: Pair, capfd: pytest.CaptureFixture[str]) -> None:
    add_tbf(pair)
    capfd.readouterr()
    pid = os.fork()
    if pid == 0:  # the child drops root, then runs the probe
        code = 1
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            exec(NON_ROOT, {})
            sys.stdout.flush()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    report = json.loads(capfd.readouterr().out.strip().splitlines()[-1])
    assert report["status"] == "degraded"
    assert report["reason"].count("CAP_SYS_ADMIN") == 1
    assert not any(pair.a in c for c in report["channels"])
    assert report["channels"]  # the own namespace's qdiscs, read without privileges
    assert all("netns" not in parse_channel(c)[1] for c in report["channels"])
    assert report["finite"] == len(report["channels"])


def _wakeups(tid: int) -> int:
    """Voluntary context switches of thread ``tid`` of this process (one per wake-up)."""
    status = Path(f"/proc/self/task/{tid}/status").read_text()
    return int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", status, re.M).group(1))


def test_a_driven_probe_dumps_at_the_samplers_calls_and_its_thread_sleeps() -> None:
    alone, driven = QdiscProbe(namespaces=False, poll_s=0.5), QdiscProbe(namespaces=False,
                                                                         poll_s=0.5)
    alone.open()
    driven.open()
    dumps: list[float] = []
    real = driven._poll

    def counted(recorded_only: bool = False) -> None:  # the real dump, counted
        dumps.append(time.monotonic())
        real(recorded_only)

    driven._poll = counted  # type: ignore[method-assign]
    try:
        assert driven.drive()
        time.sleep(0.3)  # out of the timed wait it was in
        threads = {p: p._thread.native_id for p in (alone, driven)}  # type: ignore[union-attr]
        before = {p: _wakeups(t) for p, t in threads.items()}
        calls = 0
        end = time.monotonic() + 2.6
        while time.monotonic() < end:  # the sampler's wake-ups, every 0.25 s here
            driven.poll()
            calls += 1
            time.sleep(0.25)
        woke = {p: _wakeups(t) - before[p] for p, t in threads.items()}
    finally:
        alone.close()
        driven.close()
    assert woke[alone] >= 4  # its own timer: a wake-up every 0.5 s
    assert woke[driven] <= 1  # asleep until an exit, an announcement or close
    assert calls >= 9 and 4 <= len(dumps) <= 6  # a dump when due, not at every call
    assert min(np.diff(dumps)) >= 0.4
