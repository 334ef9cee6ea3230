"""Whole files from the kernel: seq_file sources hand out about one page per read, so the
readers must go on until end of file. Real seq_files only (a regular file returns everything
at once and could not show a cut): a network namespace this test creates with 120 dummy
interfaces (veth pairs), and /proc/PID/smaps of a process it starts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator

import numpy as np
import pytest

from reveal.collect import _procfs
from reveal.collect._procfs import OpenFile, pread_all, read_bytes
from reveal.collect.network import NetworkProbe
from reveal.frame import parse_channel
from reveal.inject.naming import owned_name

N_PAIRS = 60
N_LINKS = 2 * N_PAIRS
LINK_NAMES = {f"rvwf{side}{i}" for i in range(N_PAIRS) for side in "ab"}

needs_netns = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None,
                                 reason="network namespaces need root and iproute2")


def _independent_read(path: str) -> bytes:
    """The file through Python's buffered reader, which reads until end of file itself."""
    with open(path, "rb") as handle:
        return handle.read()


@pytest.fixture(scope="module")
def crowded_netns() -> Iterator[int]:
    """PID of a process inside a namespace of this test's own holding 120 links."""
    name = owned_name("wholefile")
    subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
    sleeper = None
    try:
        batch = "".join(f"link add rvwfa{i} type veth peer name rvwfb{i}\n"
                        for i in range(N_PAIRS))
        subprocess.run(["ip", "-n", name, "-batch", "-"], input=batch.encode(), check=True,
                       capture_output=True)
        sleeper = subprocess.Popen(["ip", "netns", "exec", name, "sleep", "120"])
        for _ in range(200):  # until the exec into the namespace has happened
            try:
                if os.readlink(f"/proc/{sleeper.pid}/ns/net") != os.readlink(
                        "/proc/self/ns/net") and _independent_read(
                        f"/proc/{sleeper.pid}/comm").strip() == b"sleep":
                    break
            except OSError:
                pass
            subprocess.run(["sleep", "0.02"], check=False)
        yield sleeper.pid
    finally:
        if sleeper is not None:
            sleeper.kill()
            sleeper.wait()
        subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)


@needs_netns
def test_net_dev_of_a_crowded_namespace_is_a_seq_file_longer_than_one_read(
        crowded_netns: int) -> None:
    path = f"/proc/{crowded_netns}/net/dev"
    whole = _independent_read(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        first = os.pread(fd, 1 << 20, 0)
    finally:
        os.close(fd)
    # the premise: one read of a big buffer does not give the whole file
    assert len(whole) > 8192
    assert len(first) < len(whole)


@needs_netns
def test_pread_all_and_open_file_read_every_record(crowded_netns: int) -> None:
    path = f"/proc/{crowded_netns}/net/dev"
    expected = {line.split(b":")[0].strip() for line in _independent_read(path).splitlines()
                if b":" in line}
    handle = OpenFile(path)
    try:
        for _ in range(3):  # the same descriptor, re-read from the start each tick
            text = handle.read()
            got = {line.split(b":")[0].strip() for line in text.splitlines() if b":" in line}
            assert got == expected
    finally:
        handle.close()
    assert len(expected) == N_LINKS + 1  # the links and lo
    discovered = read_bytes(path)
    assert discovered is not None
    assert discovered.count(b"\n") == _independent_read(path).count(b"\n")


@needs_netns
@pytest.mark.parametrize("native", [True, False], ids=["c-reader", "python-reader"])
def test_network_probe_records_every_interface_of_the_namespace(
        crowded_netns: int, native: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if native and not _procfs.native_available():
        pytest.skip("the C reader is not built here")
    monkeypatch.setattr(_procfs, "USE_NATIVE", native)
    proc_root = f"/proc/{crowded_netns}"
    probe = NetworkProbe(proc_root=proc_root, infiniband=False, softnet=False)
    probe.open()
    try:
        ifaces = {parse_channel(c)[1]["iface"] for c in probe.channels
                  if c.startswith("net.rx_bytes")}
        listed = subprocess.run(["ls", f"{proc_root}/net/dev_snmp6"], capture_output=True,
                                text=True, check=False).stdout.split()
        names = LINK_NAMES | {"lo"}
        assert ifaces == names
        if listed:  # an independent list of the namespace's interfaces
            assert set(listed) == names
        out = np.full(len(probe.channels), np.nan)
        for _ in range(3):
            probe.read(out)
        parts = probe.native_parts()
        if native:
            assert parts is not None  # the C reader took the group and read it whole
        rx = [i for i, c in enumerate(probe.channels) if c.startswith("net.rx_packets")]
        assert len(rx) == N_LINKS + 1
        assert np.isfinite(out[rx]).all()
    finally:
        probe.close()


def test_smaps_of_a_process_is_read_whole() -> None:
    # /proc/PID/smaps: one record per mapping, many pages long for a Python process
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    try:
        path = f"/proc/{child.pid}/smaps"
        for _ in range(100):
            whole = _independent_read(path)
            if len(whole) > 16384:
                break
            subprocess.run(["sleep", "0.05"], check=False)
        assert len(whole) > 16384
        fd = os.open(path, os.O_RDONLY)
        try:
            text = pread_all(fd, 4096)
            assert len(os.pread(fd, 1 << 20, 0)) < len(text)
        finally:
            os.close(fd)
        # every mapping record is there (the mapping count, read independently)
        maps = _independent_read(f"/proc/{child.pid}/maps").count(b"\n")
        assert text.count(b"\nRss:") + text.startswith(b"Rss:") == maps
        assert text.count(b"VmFlags:") == maps
    finally:
        child.stdin.close()  # type: ignore[union-attr]
        child.wait()


def test_pread_all_respects_a_limit(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "numbers")
    with open(path, "wb") as handle:
        handle.write(b"1 " * 50_000)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert pread_all(fd, 4096) == b"1 " * 50_000
        assert pread_all(fd, 4096, limit=10_001) == (b"1 " * 50_000)[:10_001]
    finally:
        os.close(fd)
