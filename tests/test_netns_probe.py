"""The netns probe on real network namespaces this test creates: two namespaces joined by a
veth pair, traffic the test sends from one to the other seen in both namespaces' counters;
a real ``reveal collect`` run during which a namespace and a cgroup are created and
destroyed; a namespace released as soon as its last process exits; and a non-root reader.

Every namespace and cgroup is named ``rvinj-<pid>-…`` (``reveal validate --cleanup``
removes those of a dead owner), removed in ``finally`` and on SIGTERM; processes started
inside die with the test (parent-death signal). Names hold what a tenant may choose:
blanks, quotes, ``<``, ``>`` and non-ASCII letters.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
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
from reveal.collect import _namespaces
from reveal.collect.cgroup import cgroup_mounts
from reveal.collect.netns import NetnsProbe
from reveal.errors import InputError
from reveal.frame import parse_channel
from reveal.inject.naming import owned_name
from reveal.inject.undo import UNDO
from reveal.store.run_reader import read_run
from runs import collecting
from runs import rmdir_patiently as _rmdir

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("setpriv") is None,
    reason="network namespaces need root, iproute2 and setpriv")

DOCKER_ID = "feedc0ffee01" + "0123456789abcdef" * 3 + "abcd"


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def inside(ns: str, *argv: str) -> subprocess.Popen:
    """A process inside namespace ``ns`` that dies with this test."""
    return subprocess.Popen(["setpriv", "--pdeathsig", "KILL", "ip", "netns", "exec", ns,
                             *argv])


def wait_in_namespace(proc: subprocess.Popen, ns: str, program: str | None = None) -> None:
    """Until ``proc`` is inside ``ns`` and past ``ip netns exec`` (with ``program``: until it
    runs that program, e.g. past a ``setpriv`` that changes its user first)."""
    want = os.stat(f"/run/netns/{ns}").st_ino
    for _ in range(300):
        try:
            comm = Path(f"/proc/{proc.pid}/comm").read_text().strip()
            if _namespaces.ns_inode(os.readlink(f"/proc/{proc.pid}/ns/net")) == want and \
                    (comm == program if program else comm != "ip"):
                return
        except OSError:
            pass
        time.sleep(0.01)
    raise AssertionError(f"process {proc.pid} never entered {ns!r}")


@dataclass
class Pair:
    """Namespaces ``a`` and ``b`` joined by veth ``ifa`` (10.77.0.1) – ``ifb`` (10.77.0.2)."""

    a: str
    b: str
    ifa: str
    ifb: str

    def delete(self) -> None:
        for ns in (self.a, self.b):
            pids = ip("netns", "pids", ns, check=False).stdout.split()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            ip("netns", "del", ns, check=False)


def make_pair(tag: str) -> Pair:
    uid = uuid.uuid4().hex[:4]
    pair = Pair(owned_name(f'{tag} "α" <{uid}> a'), owned_name(f'{tag} "β" <{uid}> b'),
                f"rvn{uid}a", f"rvn{uid}b")
    undo = UNDO.push(f"namespaces {pair.a!r} {pair.b!r}", pair.delete)
    try:
        ip("netns", "add", pair.a)
        ip("netns", "add", pair.b)
        ip("link", "add", pair.ifa, "netns", pair.a, "type", "veth", "peer", "name", pair.ifb,
           "netns", pair.b)
        for ns, ifname, addr in ((pair.a, pair.ifa, "10.77.0.1"), (pair.b, pair.ifb, "10.77.0.2")):
            ip("-n", ns, "addr", "add", f"{addr}/30", "dev", ifname)
            ip("-n", ns, "link", "set", ifname, "up")
            ip("-n", ns, "link", "set", "lo", "up")
    except Exception:
        UNDO.pop(undo, run=True)
        raise
    pair.undo = undo  # type: ignore[attr-defined]
    return pair


@pytest.fixture()
def pair() -> Iterator[Pair]:
    made = make_pair("ns")
    try:
        yield made
    finally:
        UNDO.pop(made.undo, run=True)  # type: ignore[attr-defined]


SENDER = ("import socket, sys\n"
          "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
          "n, size = int(sys.argv[1]), int(sys.argv[2])\n"
          "for _ in range(n):\n"
          "    s.sendto(b'x' * size, ('10.77.0.2', 9))\n")


def send_udp(ns: str, count: int, size: int) -> None:
    subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", SENDER, str(count),
                    str(size)], check=True, timeout=60)


def values(probe: NetnsProbe) -> dict[str, float]:
    out = np.full(len(probe.channels), -7.0)
    probe.read(out)
    return dict(zip(probe.channels, out, strict=True))


def of(channels: dict[str, float] | list[str], metric: str, **labels: str) -> str:
    hits = [c for c in channels if parse_channel(c)[0] == metric
            and all(parse_channel(c)[1].get(k) == v for k, v in labels.items())]
    assert len(hits) == 1, (metric, labels, hits)
    return hits[0]


def test_traffic_between_two_namespaces_is_seen_in_both(pair: Pair) -> None:
    probe = NetnsProbe(protocol_interval_s=0.2)
    probe.open()
    try:
        names = {s["names"][0] for s in probe.info["namespaces"].values() if s["names"]}
        assert {pair.a, pair.b} <= names
        assert probe.native_parts() is not None  # every tick stays in C
        before = values(probe)
        tx = of(before, "net.tx_bytes", iface=pair.ifa, netns=pair.a)
        rx = of(before, "net.rx_bytes", iface=pair.ifb, netns=pair.b)
        out_dgrams = of(before, "snmp.Udp.OutDatagrams", netns=pair.a)
        no_ports = of(before, "snmp.Udp.NoPorts", netns=pair.b)
        send_udp(pair.a, 300, 1000)
        time.sleep(0.6)  # the protocol counters' thread reads every 0.2 s here
        after = values(probe)
        assert after[tx] - before[tx] >= 300 * 1000
        assert after[rx] - before[rx] >= 300 * 1000
        assert after[out_dgrams] - before[out_dgrams] == 300
        assert after[no_ports] - before[no_ports] == 300  # nobody listens on port 9
        # the host's own counters are not touched: every channel names its namespace
        assert all("netns" in parse_channel(c)[1] for c in probe.channels)
        catalog = default_catalog()
        for channel in probe.channels:
            assert catalog.lookup(channel).subsystem == "network", channel
            if parse_channel(channel)[1]["netns"] in (pair.a, pair.b):
                assert np.isfinite(after[channel]), channel
        # the host namespace's own channels keep their names (the network probe's)
        assert not any(c == "net.rx_bytes{iface=lo}" for c in probe.channels)
    finally:
        probe.close()


def test_a_namespace_is_released_when_its_last_process_exits() -> None:
    uid = uuid.uuid4().hex[:4]
    host_end, ns_end = f"rvn{uid}h", f"rvn{uid}n"
    sleeper = subprocess.Popen(["setpriv", "--pdeathsig", "KILL", "unshare", "-n",
                                "sleep", "60"])
    try:
        for _ in range(300):
            link = os.readlink(f"/proc/{sleeper.pid}/ns/net")
            if link != os.readlink("/proc/self/ns/net"):
                break
            time.sleep(0.01)
        ip("link", "add", host_end, "type", "veth", "peer", "name", ns_end, "netns",
           str(sleeper.pid))
        probe = NetnsProbe(protocols="none")
        probe.open()
        try:
            ino = _namespaces.ns_inode(link)
            label = str(ino)  # no name: the inode is the label
            assert label in probe.info["namespaces"]
            assert probe.info["namespaces"][label]["read_via"] == f"pid {sleeper.pid}"
            rx = of(probe.channels, "net.rx_packets", iface=ns_end, netns=label)
            assert np.isfinite(values(probe)[rx])
            sleeper.kill()
            sleeper.wait()
            # the probe held the namespace's files; it lets go within about a second, so
            # the namespace ends and takes the veth pair (and its host end) with it
            deadline = time.monotonic() + 5
            while ip("link", "show", host_end, check=False).returncode == 0:
                assert time.monotonic() < deadline, "the namespace was kept alive"
                time.sleep(0.05)
            assert probe.states[ino].released and probe.released_early >= 1
            assert np.isnan(values(probe)[rx])
            _namespaces.forget_scan()
            assert probe.refresh()
            assert rx not in probe.channels and label not in probe.info["namespaces"]
        finally:
            probe.close()
    finally:
        sleeper.kill()
        sleeper.wait()
        ip("link", "del", host_end, check=False)


def _cpu_root() -> tuple[Path, str]:
    mounts = dict(cgroup_mounts(Path("/proc/self/mountinfo").read_bytes()))
    for kind in ("cpu", "v2"):
        if kind in mounts and Path(mounts[kind]).is_dir():
            return Path(mounts[kind]), kind
    pytest.skip("no cpu cgroup hierarchy")


def test_collect_run_sees_a_namespace_and_a_cgroup_come_and_go(tmp_path: Path) -> None:
    """A real ``reveal collect``: a namespace pair and a Docker-shaped cgroup appear 3 s in,
    carry traffic, and are destroyed 9 s in; the run shows their channels with values
    only while they existed, labelled with the namespace name and the container."""
    root, kind = _cpu_root()
    parent = root / owned_name(f"ns-{uuid.uuid4().hex[:4]}")
    scope = parent / f"docker-{DOCKER_ID}.scope"
    run = tmp_path / "run"
    options = [] if kind == "cpu" else ["--probe-option", f"cgroup.cgroup_root={root}"]
    made: Pair | None = None
    holder = None
    sent = 400 * 1200
    try:
        with collecting(run, "--duration", "18", "--refresh", "1", "--probes",
                        "netns,cgroup,pressure", "--probe-option",
                        f"cgroup.patterns={parent.name}/*", "--probe-option",
                        "netns.protocol_interval_s=0.5", *options):
            time.sleep(3)
            t_make = time.time()
            parent.mkdir()
            scope.mkdir()
            made = make_pair("run")
            holder = inside(made.a, "sleep", "60")
            wait_in_namespace(holder, made.a)
            (scope / "cgroup.procs").write_text(str(holder.pid))
            t_made = time.time()
            time.sleep(2.5)  # found at a refresh (every second here)
            send_udp(made.a, 400, 1200)
            time.sleep(3.5)
            t_kill = time.time()
            holder.kill()
            holder.wait()
            UNDO.pop(made.undo, run=True)  # type: ignore[attr-defined]
            made = None
            _rmdir(scope)
            _rmdir(parent)
            t_gone = time.time()
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
        if made is not None:
            UNDO.pop(made.undo, run=True)  # type: ignore[attr-defined]
        _rmdir(scope)
        _rmdir(parent)
    frame = read_run(run)
    t = frame.wall_time_s()
    before, during, after = t < t_make, (t > t_made + 2) & (t < t_kill), t > t_gone + 2.5
    assert before.sum() >= 5 and during.sum() >= 20 and after.sum() >= 5
    channels = frame.channels
    tx = of(channels, "net.tx_bytes", iface=f"rvn{made_uid(channels)}a")
    labels = parse_channel(tx)[1]
    assert labels["netns"].endswith("a") and '"α"' in labels["netns"]
    assert labels["container"] == f"docker:{DOCKER_ID[:12]}"  # the holder's cgroup
    col = frame.column(tx)
    present = np.isfinite(col)
    assert not present[before].any()  # not there before the namespace was made
    assert present[during].all()
    assert not present[after].any()  # gone after it was destroyed
    seen = col[present]
    assert seen.max() - seen.min() >= sent and np.all(np.diff(seen) >= 0)
    dgrams = frame.column(of(channels, "snmp.Udp.OutDatagrams", netns=labels["netns"]))
    got = dgrams[np.isfinite(dgrams)]
    assert got.max() - got.min() == 400
    # the cgroup came and went too, labelled with its container
    usage = [c for c in channels if c.startswith("cgroup.")
             and parse_channel(c)[1].get("container") == f"docker:{DOCKER_ID[:12]}"]
    assert usage
    cg = np.isfinite(frame.column(usage[0]))
    assert not cg[before].any() and cg[during].all() and not cg[after].any()
    meta = json.loads((run / "meta.json").read_text())
    assert "netns" in json.dumps(meta)


def test_a_namespace_made_mid_run_joins_within_seconds_with_a_long_refresh_period(
        tmp_path: Path) -> None:
    """``--refresh 120``: the namespace pair is found because its bind mounts and links are
    heard (inotify on /run/netns, link announcements), not by the periodic refresh."""
    run = tmp_path / "run"
    made: Pair | None = None
    try:
        with collecting(run, "--duration", "12", "--refresh", "120", "--probes",
                        "netns,qdisc,pressure"):
            time.sleep(4)
            made = make_pair("join")
            made_at = time.time()
    finally:
        if made is not None:
            UNDO.pop(made.undo, run=True)  # type: ignore[attr-defined]
    frame = read_run(run)
    uid = made.ifa[3:7]
    rx = frame.column(of(frame.channels, "net.rx_bytes", iface=f"rvn{uid}a"))
    first = frame.wall_time_s()[np.isfinite(rx)]
    assert len(first), "the namespace never joined (only the 120 s refresh would find it)"
    assert first[0] - made_at < 3.0


def made_uid(channels: list[str]) -> str:
    """The uid part of the veth name the collect test made (``rvn<uid>a``)."""
    for channel in channels:
        iface = parse_channel(channel)[1].get("iface", "")
        if iface.startswith("rvn") and iface.endswith("a") and len(iface) == 8:
            return iface[3:7]
    raise AssertionError("the test's interface is not in the run")


NON_ROOT = r"""
import json, os, sys
import numpy as np
from reveal.collect.netns import NetnsProbe
from reveal.errors import InputError
probe = NetnsProbe()
probe.open()
out = np.full(len(probe.channels), np.nan)
probe.read(out)
print(json.dumps({"status": probe.status, "reason": probe.reason,
                  "namespaces": probe.info["namespaces"],
                  "finite": int(np.isfinite(out).sum())}))
probe.close()
"""


def test_without_root_what_cannot_be_read_is_said_once_and_the_rest_goes_on(
        pair: Pair, capfd: pytest.CaptureFixture[str]) -> None:
    nobody = inside(pair.a, "setpriv", "--reuid", "65534", "--regid", "65534",
                    "--clear-groups", "sleep", "60")
    try:
        wait_in_namespace(nobody, pair.a, "sleep")  # past setpriv: the user is nobody
        capfd.readouterr()
        pid = os.fork()
        if pid == 0:
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
    finally:
        nobody.kill()
        nobody.wait()
    assert report["status"] == "degraded"
    # b has no process and entering it needs CAP_SYS_ADMIN: said once, by name
    assert report["reason"].count("CAP_SYS_ADMIN") == 1
    unread = int(re.search(r"(\d+) namespace\(s\) not read", report["reason"]).group(1))
    assert pair.b in report["reason"] or unread > 5  # the first five are named
    # a is read through the ordinary user's process inside it
    assert pair.a in report["namespaces"] and report["finite"] > 0
    assert pair.b not in report["namespaces"]


def test_an_interface_added_inside_joins_at_the_next_refresh(pair: Pair) -> None:
    probe = NetnsProbe(protocols="none")
    probe.open()
    extra = f"{pair.ifa[:-1]}x"
    try:
        assert not [c for c in probe.channels if f"iface={extra}," in c]
        ip("-n", pair.a, "link", "add", extra, "type", "veth", "peer", "name",
           f"{pair.ifa[:-1]}y")
        out = np.full(len(probe.channels), np.nan)
        probe.read(out)  # the layout moved: read again from the text, same channels
        mine = [i for i, c in enumerate(probe.channels)
                if parse_channel(c)[1]["netns"] in (pair.a, pair.b)]
        assert np.isfinite(out[mine]).all()
        assert probe.refresh()
        added = [c for c in probe.channels if parse_channel(c)[1].get("iface") == extra]
        assert len(added) == 8 and all(parse_channel(c)[1]["netns"] == pair.a for c in added)
        assert probe.native_parts() is not None
        out = np.full(len(probe.channels), np.nan)
        probe.read(out)
        assert np.isfinite([out[probe.channels.index(c)] for c in added]).all()
    finally:
        probe.close()


def test_unknown_option_values_are_refused() -> None:
    with pytest.raises(InputError, match="protocols"):
        NetnsProbe(protocols="most")
    with pytest.raises(InputError, match="dev_fields"):
        NetnsProbe(dev_fields="some")


def test_a_namespace_whose_process_exits_gets_another_then_is_retired() -> None:
    uid = uuid.uuid4().hex[:4]
    host_end, ns_end = f"rvn{uid}h", f"rvn{uid}n"
    first = subprocess.Popen(["setpriv", "--pdeathsig", "KILL", "unshare", "-n", "sleep", "60"])
    second = None
    probe = None
    try:
        for _ in range(300):
            if os.readlink(f"/proc/{first.pid}/ns/net") != os.readlink("/proc/self/ns/net"):
                break
            time.sleep(0.01)
        link = os.readlink(f"/proc/{first.pid}/ns/net")
        second = subprocess.Popen(["setpriv", "--pdeathsig", "KILL", "nsenter",
                                   f"--net=/proc/{first.pid}/ns/net", "sleep", "60"])
        for _ in range(300):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{second.pid}/ns/net") == link:
                    break
            time.sleep(0.01)
        ip("link", "add", host_end, "type", "veth", "peer", "name", ns_end, "netns",
           str(first.pid))
        probe = NetnsProbe(protocols="none")
        probe.open()
        label = str(_namespaces.ns_inode(link))
        assert probe.info["namespaces"][label]["read_via"] == f"pid {first.pid}"
        rx = of(probe.channels, "net.rx_packets", iface=ns_end, netns=label)
        first.kill()
        first.wait()
        time.sleep(1.0)  # the watch fires at once; give the thread time to settle it
        # another process is still inside (the host-wide count may move: other tests'
        # namespaces come and go beside this one)
        assert not probe.states[int(label)].released
        assert probe.states[int(label)].holder == second.pid
        assert np.isfinite(values(probe)[rx])
        assert ip("link", "show", host_end, check=False).returncode == 0
        second.kill()
        second.wait()
        deadline = time.monotonic() + 5
        while ip("link", "show", host_end, check=False).returncode == 0:
            assert time.monotonic() < deadline, "the namespace was kept alive"
            time.sleep(0.05)
        assert probe.states[int(label)].released and probe.released_early >= 1
        assert np.isnan(values(probe)[rx])
    finally:
        if probe is not None:
            probe.close()
        for proc in (first, second):
            if proc is not None:
                proc.kill()
                proc.wait()
        ip("link", "del", host_end, check=False)
