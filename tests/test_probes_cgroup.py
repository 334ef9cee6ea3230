"""cgroup probe on this machine's real hierarchies (v1 controllers and the v2 mount).

Tests make their own cgroups (mkdir), move a busy child process of their own into them,
and remove everything afterwards. Names are deliberately hostile: cgroup names are
chosen by tenants.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from reveal.catalog import default_catalog
from reveal.collect.cgroup import CgroupProbe, cgroup_label, cgroup_mounts, path_matches
from reveal.collect.probe import ProbeUnavailable
from reveal.errors import InputError
from reveal.frame import channel_metric, format_channel, parse_channel

CGROUP = Path("/sys/fs/cgroup")
V1_CPU, V1_CPUACCT, V2 = CGROUP / "cpu", CGROUP / "cpuacct", CGROUP / "unified"


def _mounted(kind: str) -> Path | None:
    mounts = dict(cgroup_mounts(Path("/proc/self/mountinfo").read_bytes()))
    return Path(mounts[kind]) if kind in mounts else None


def _read(probe: CgroupProbe) -> dict[str, float]:
    out = np.full(len(probe.channels), -7.0)
    probe.read(out)
    return dict(zip(probe.channels, out, strict=True))


@pytest.fixture()
def make_cgroup() -> Iterator:
    """make(root, name) creates a cgroup directory; all are removed (children first)."""
    made: list[Path] = []
    children: list[subprocess.Popen] = []

    def make(root: Path, name: str) -> Path:
        path = root / name
        path.mkdir()
        made.append(path)
        return path

    make.children = children  # type: ignore[attr-defined]
    yield make
    for child in children:
        child.kill()
        child.wait()
    for path in reversed(made):
        for _ in range(50):
            try:
                path.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.02)  # a killed task may take a moment to leave


def _spinner(make_cgroup, *cgroups: Path) -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    make_cgroup.children.append(child)
    for cgroup in cgroups:
        (cgroup / "cgroup.procs").write_text(str(child.pid))
    return child


def _needs(path: Path | None) -> Path:
    if os.geteuid() != 0:
        pytest.skip("needs root to create cgroups")
    if path is None or not path.is_dir():
        pytest.skip(f"no such cgroup hierarchy on this host: {path}")
    return path


def test_labels_are_sanitised_and_bounded() -> None:
    assert cgroup_label("system.slice/docker-abc.scope") == "system.slice/docker-abc.scope"
    hostile = "a,b={c}\nd\x00e"
    label = cgroup_label(hostile)
    assert not set(label) & set(",={}\n\r\x00")
    assert label.isprintable() and label.startswith("a_b__c__d_e~")
    long_a, long_b = "x" * 200 + "a", "x" * 200 + "b"
    assert len(cgroup_label(long_a)) == 64 and len(cgroup_label(long_a, 32)) == 32
    assert cgroup_label(long_a) != cgroup_label(long_b)
    channel = format_channel("cgroup.cpu.usage_usec", {"cgroup": label})
    assert parse_channel(channel) == ("cgroup.cpu.usage_usec", {"cgroup": label})


def test_pattern_matching_is_per_segment() -> None:
    assert path_matches("docker/abc", "docker/*")
    assert not path_matches("docker/abc/def", "docker/*")
    assert not path_matches("a/b", "*")
    assert path_matches("kubepods/burstable/pod123", "kubepods/*/pod*")


def test_mountinfo_parsing() -> None:
    text = (b"35 25 0:30 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup "
            b"rw,cpu,cpuacct\n"
            b"36 25 0:31 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
            b"37 25 0:32 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
            b"38 25 0:33 / /mnt/with\\040blank rw - cgroup cgroup rw,pids\n"
            b"39 25 8:1 / / rw - ext4 /dev/vda1 rw\n")
    assert dict(cgroup_mounts(text)) == {
        "cpu": "/sys/fs/cgroup/cpu,cpuacct", "cpuacct": "/sys/fs/cgroup/cpu,cpuacct",
        "memory": "/sys/fs/cgroup/memory", "v2": "/sys/fs/cgroup/unified",
        "pids": "/mnt/with blank"}


def test_new_v1_cgroup_appears_on_refresh_with_safe_label(make_cgroup) -> None:
    root = _needs(_mounted("cpu"))
    name = f"reveal-t,{{{uuid.uuid4().hex[:6]}}}=x"
    probe = CgroupProbe()
    probe.open()
    assert probe.status == "ok"
    before = list(probe.channels)
    path = make_cgroup(root, name)
    assert probe.refresh()
    label = cgroup_label(name)
    assert label != name and not set(label) & set(",={}")
    throttled = format_channel("cgroup.cpu.nr_throttled", {"cgroup": label})
    assert throttled in probe.channels
    # every channel is kept but those of cgroups another process removed meanwhile
    gone = set(before) - set(probe.channels)
    assert all(parse_channel(c)[1].get("cgroup") not in probe.info["cgroups"] for c in gone)
    assert probe.info["cgroups"][label] == name
    values = _read(probe)
    assert values[throttled] == 0.0
    catalog = default_catalog()
    for channel in probe.channels:
        assert channel_metric(channel) in catalog, channel
    path.rmdir()
    _read(probe)  # the directory went away between refreshes: no crash
    assert probe.refresh()
    assert throttled not in probe.channels
    probe.close()


def test_v1_cpuacct_usage_counts_a_busy_task(make_cgroup) -> None:
    root = _needs(_mounted("cpuacct"))
    name = f"reveal-t-{uuid.uuid4().hex[:8]}"
    group = make_cgroup(root, name)
    probe = CgroupProbe(patterns=(name,))
    probe.open()
    usage = format_channel("cgroup.cpuacct.usage_ns", {"cgroup": name})
    assert usage in probe.channels
    first = _read(probe)[usage]
    _spinner(make_cgroup, group)
    time.sleep(0.5)
    second = _read(probe)
    assert second[usage] - first >= 0.1e9  # at least 100 ms of CPU in 500 ms
    independent = float((group / "cpuacct.usage").read_text())
    assert second[usage] <= independent
    probe.close()


def test_v2_cgroup_usage_and_pressure(make_cgroup) -> None:
    root = _needs(_mounted("v2"))
    name = f"reveal-t-{uuid.uuid4().hex[:8]}"
    group = make_cgroup(root, name)
    probe = CgroupProbe(cgroup_root=str(root), patterns=(name,))
    probe.open()
    usage = format_channel("cgroup.cpu.usage_usec", {"cgroup": name})
    assert usage in probe.channels, probe.channels
    if (group / "cpu.pressure").exists():
        assert format_channel("cgroup.psi.cpu.some.total", {"cgroup": name}) in probe.channels
    first = _read(probe)
    _spinner(make_cgroup, group)
    time.sleep(0.5)
    second = _read(probe)
    assert second[usage] - first[usage] >= 100_000  # µs
    for channel, value in second.items():
        assert np.isfinite(value), channel
        if default_catalog().lookup(channel).kind == "counter":
            assert value >= first[channel], channel
    probe.close()


def test_cap_and_patterns(make_cgroup) -> None:
    root = _needs(_mounted("cpu"))
    stem = f"reveal-cap-{uuid.uuid4().hex[:6]}"
    for i in range(3):
        make_cgroup(root, f"{stem}-{i}")
    probe = CgroupProbe(patterns=(f"{stem}-*",), max_cgroups=2)
    probe.open()
    assert probe.info["cgroups_dropped"] == 1
    assert sorted(probe.info["cgroups"]) == [f"{stem}-0", f"{stem}-1"]
    probe.close()


def test_no_match_yet_is_not_an_error(make_cgroup) -> None:
    root = _needs(_mounted("cpu"))
    name = f"reveal-late-{uuid.uuid4().hex[:6]}"
    probe = CgroupProbe(patterns=(name,))
    probe.open()
    assert probe.channels == [] and probe.status == "ok" and "no cgroup matches" in probe.reason
    out = np.empty(0)
    probe.read(out)
    make_cgroup(root, name)
    assert probe.refresh()
    assert probe.channels
    probe.close()


@pytest.mark.parametrize("options", [{"root": "/nonexistent"},
                                     {"cgroup_root": "/nonexistent"}])
def test_unavailable_without_hierarchies(options: dict[str, str]) -> None:
    probe = CgroupProbe(**options)
    with pytest.raises(ProbeUnavailable, match="/nonexistent"):
        probe.open()
    assert probe.status == "unavailable"


def test_basic_detail_reads_fewer_files(make_cgroup) -> None:
    root = _needs(_mounted("memory") or _mounted("v2"))
    name = f"reveal-t-{uuid.uuid4().hex[:8]}"
    make_cgroup(root, name)
    full = CgroupProbe(patterns=(name,))
    basic = CgroupProbe(patterns=(name,), detail="basic")
    full.open()
    basic.open()
    assert basic.channels and set(basic.channels) < set(full.channels)
    assert not any(".stat." in c for c in basic.channels)
    with pytest.raises(InputError, match="detail"):
        CgroupProbe(detail="everything")
    full.close()
    basic.close()


def test_cpu_and_memory_in_use_twice_a_second_the_detail_every_second(make_cgroup) -> None:
    root = _needs(_mounted("memory") or _mounted("v2"))
    name = f"reveal-t-{uuid.uuid4().hex[:8]}"
    make_cgroup(root, name)
    if (cpu := _mounted("cpu")) is not None and cpu != root:
        make_cgroup(cpu, name)

    def files(plan: dict, key: str) -> set[str]:
        return {Path(src.path).name for src in plan[key].sources} if key in plan else set()

    plan = CgroupProbe(patterns=(name,)).plan()
    assert plan["counts"].period_s == 0.5 and plan["detail"].period_s == 1.0
    assert files(plan, "counts") <= {"cpu.stat", "cpu.pressure", "memory.current",
                                     "cpuacct.usage", "memory.usage_in_bytes"}
    assert "memory.stat" in files(plan, "detail")
    assert files(plan, "counts") & {"memory.current", "memory.usage_in_bytes"}
    every_tick = CgroupProbe(patterns=(name,), detail_period_s=0, tick_period_s=0).plan()
    assert every_tick["detail"].period_s == 0 and every_tick["counts"].period_s == 0
    probe = CgroupProbe(patterns=(name,))
    probe.open()
    parts = probe.native_parts()
    if parts is not None:  # the C thread is told to read them twice and once a second
        assert sorted(p.period_s for p in parts) == [0.5, 1.0]
    probe.close()
    with pytest.raises(InputError, match="detail_period_s"):
        CgroupProbe(detail_period_s=-1)


def test_the_every_tick_counters_at_a_period_of_their_own(make_cgroup) -> None:
    root = _needs(_mounted("memory") or _mounted("v2"))
    name = f"reveal-t-{uuid.uuid4().hex[:8]}"
    make_cgroup(root, name)
    probe = CgroupProbe(patterns=(name,), tick_period_s=0.2)
    plan = probe.plan()
    assert plan["counts"].period_s == 0.2 and plan["detail"].period_s == 1.0
    probe.open()
    parts = probe.native_parts()
    if parts is not None:  # the C thread is told to read them five times a second
        assert sorted(p.period_s for p in parts) == [0.2, 1.0]
    probe.close()
    with pytest.raises(InputError, match="tick_period_s"):
        CgroupProbe(tick_period_s=-0.1)
