"""The C reader (reveal.collect._procread) against the pure-Python readers, same bytes.

Every file group of every procfs/sysfs probe is snapshotted into real files; a group on
the C reader and one on the Python path read the same files and must give bit-identical
rows. Layout changes, unreadable files and bad plans go back to the Python path.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest

from reveal.collect import _procfs
from reveal.collect._procfs import FileGroup, Source, key_value_layout, single_value
from reveal.collect.cgroup import CgroupProbe
from reveal.collect.cpu import CpuProbe, compact_stat, split_slash, stat_layout
from reveal.collect.interrupts import InterruptsProbe
from reveal.collect.memory import MemoryProbe
from reveal.collect.network import NetworkProbe
from reveal.collect.power import PowerProbe
from reveal.collect.pressure import PressureProbe
from reveal.collect.probe import Probe, ProbeUnavailable
from reveal.collect.storage import StorageProbe

pytestmark = [pytest.mark.skipif(_procfs._procread is None,
                                 reason="C extension reveal.collect._procread not built "
                                        "(python setup.py build_ext --inplace)"),
              pytest.mark.usefixtures("native_on")]


def _group(sources: list[Source], mode: str, native: bool) -> FileGroup:
    _procfs.USE_NATIVE = native
    try:
        return FileGroup(sources, mode)
    finally:
        _procfs.USE_NATIVE = True


def _both(sources: list[Source], mode: str = "uint") -> tuple[np.ndarray, np.ndarray,
                                                               FileGroup, FileGroup]:
    py, c = _group(sources, mode, False), _group(sources, mode, True)
    assert not py.native and c.native
    assert py.channels == c.channels
    out_py, out_c = np.full(len(py.channels), -1.0), np.full(len(c.channels), -2.0)
    py.read(out_py)
    assert c._native is not None and c._native.read(out_c)  # the C path itself
    return out_py, out_c, py, c


@pytest.mark.parametrize("cls", [CpuProbe, InterruptsProbe, MemoryProbe, NetworkProbe,
                                 StorageProbe, PressureProbe, PowerProbe, CgroupProbe])
def test_every_probe_group_identical_on_snapshots(cls: type[Probe], tmp_path: Path) -> None:
    probe = cls()
    try:
        probe.open()
    except ProbeUnavailable as exc:
        pytest.skip(f"{cls.name} unavailable here: {exc}")
    # a part may wrap its file group (the interrupt table in totals or full detail)
    groups = [(k, getattr(p, "group", p)) for k, p in probe._parts.items()
              if isinstance(getattr(p, "group", p), FileGroup)]
    probe.close()
    if not groups:
        pytest.skip(f"{cls.name}: no file group here")
    for key, part in groups:
        sources = []
        for i, src in enumerate(part.sources):
            data = _procfs.read_bytes(src.path)
            if data is None:
                continue
            path = tmp_path / f"{key}-{i}"
            path.write_bytes(data)
            sources.append(dataclasses.replace(src, path=str(path)))
        out_py, out_c, _, _ = _both(sources, part.mode)
        assert out_py.tobytes() == out_c.tobytes(), f"{cls.name}/{key} differs"
        assert not np.any(out_c == -2.0)


def test_modes_scales_and_prepares_identical(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_bytes(b"cpu  10 20 30 40 0 0 5 0 0 0\ncpu0 1 2 3 4 0 0 5 0 0 0\n"
                     b"intr 999 1 2 3 4 5\nctxt 77\nprocesses 8\n")
    load = tmp_path / "loadavg"
    load.write_bytes(b"0.25 12.50 3.07 3/97 5669\n")
    mem = tmp_path / "meminfo"
    mem.write_bytes(b"MemTotal:  2048 kB\nActive(anon):  12 kB\nHugePages_Total: 3\n")
    signed = tmp_path / "snmp"
    signed.write_bytes(b"Tcp: RtoMin MaxConn\nTcp: 200 -1\n")

    def header(data: bytes) -> _procfs.Layout:
        return {"a": (4, 1.0), "b": (5, 1.0)} if len(data.split()) == 6 else {}

    cases = [
        ([Source(str(stat), stat_layout, compact_stat)], "uint"),
        ([Source(str(load), lambda d: {f"v{i}": (i, 1.0) for i in range(5)}, split_slash)],
         "fixed"),
        ([Source(str(mem), lambda d: key_value_layout(d, "mem.", kb_scale=True))], "uint"),
        ([Source(str(signed), header)], "int"),
    ]
    for sources, mode in cases:
        out_py, out_c, _, _ = _both(sources, mode)
        assert out_py.tobytes() == out_c.tobytes(), sources[0].path
    _, out_c, _, c = _both(cases[0][0])
    assert out_c[c.channels.index("cpu.intr")] == 999.0
    _, out_c, _, _ = _both(*cases[1])
    assert out_c.tolist() == pytest.approx([0.25, 12.5, 3.07, 3.0, 97.0], rel=1e-15)
    _, out_c, _, c = _both(*cases[2])
    assert out_c[c.channels.index("mem.MemTotal")] == 2048 * 1024.0
    _, out_c, _, _ = _both(*cases[3])
    assert out_c.tolist() == [200.0, -1.0]


def test_missing_token_is_nan_on_both_paths(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"a 1 b x c 3\n")
    source = Source(str(path), lambda d: {"a": (1, 1.0), "b": (3, 1.0), "c": (5, 2.0)})
    out_py, out_c, _, _ = _both([source])
    assert out_py.tobytes() == out_c.tobytes()
    assert out_c[0] == 1.0 and np.isnan(out_c[1]) and out_c[2] == 6.0


def test_layout_change_goes_back_to_python_and_rediscovers(tmp_path: Path) -> None:
    path = tmp_path / "vmstat"
    path.write_bytes(b"nr_free 10\npgfault 20\n")
    group = _group([Source(str(path), lambda d: key_value_layout(d, "vm."))], "uint", True)
    assert group.native
    out = np.empty(2)
    group.read(out)
    assert out.tolist() == [10.0, 20.0]
    path.write_bytes(b"nr_free 11\nnew_counter 5\npgfault 21\n")
    assert group._native is not None and not group._native.read(np.empty(2))
    group.read(out)  # the plan does not fit: Python path, layout rebuilt
    assert group.changed and out.tolist() == [11.0, 21.0]
    assert group.native  # a new plan for the new layout
    assert group.refresh()
    assert group.channels == ["vm.nr_free", "vm.new_counter", "vm.pgfault"]
    out = np.empty(3)
    group.read(out)
    assert out.tolist() == [11.0, 5.0, 21.0]


def test_grown_file_and_garbage_and_overflow(tmp_path: Path) -> None:
    path = tmp_path / "big"
    lines = [f"k{i} {i * 7}" for i in range(3000)]
    path.write_text("\n".join(lines) + "\n")  # well over the 4 KiB first buffer
    out_py, out_c, _, _ = _both([Source(str(path), lambda d: key_value_layout(d, "x."))])
    assert out_py.tobytes() == out_c.tobytes() and out_c[-1] == 2999 * 7
    path.write_text("\n".join([*lines[:-1], "k2999 18446744073709551615"]) + "\n")
    group = _group([Source(str(path), lambda d: key_value_layout(d, "x."))], "uint", True)
    assert group._native is not None and not group._native.read(np.empty(3000))
    out = np.empty(3000)
    group.read(out)  # too large for the C reader: the Python path gives the value
    assert out[-1] == float(2**64 - 1)
    path.write_bytes(b"a 1-2\n")
    group = _group([Source(str(path), single_value("a"))], "int", False)
    assert not group.channels  # "1-2" is no number on either path


def test_plan_rejects_bad_arguments(tmp_path: Path) -> None:
    plan_cls = _procfs._procread.Plan  # type: ignore[union-attr]
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        with pytest.raises(ValueError):
            plan_cls([(fd, 64, 0, 0)], 0, 2, 2, [0, 5], [0, 1], None, None, [])
        with pytest.raises(ValueError):
            plan_cls([(fd, 64, 0, 0)], 7, 1, 1, [0], [0], None, None, [])
        plan = plan_cls([(fd, 64, 0, 0)], 0, 1, 1, [0], [0], None, None, [])
        with pytest.raises(ValueError):
            plan.read(np.empty(1, dtype=np.float32))
        with pytest.raises(ValueError):
            plan.read(np.empty(2))
        assert plan.read(np.empty(1)) is False  # a directory cannot be read
    finally:
        os.close(fd)


def test_native_switch_off_keeps_python_path() -> None:
    _procfs.USE_NATIVE = False
    probe = CpuProbe()
    probe.open()
    try:
        assert not any(getattr(p, "native", False) for p in probe._parts.values())
        out = np.empty(len(probe.channels))
        probe.read(out)
        assert not np.isnan(out).any()
    finally:
        probe.close()


def test_softnet_hex_identical_and_falls_back(tmp_path: Path) -> None:
    from reveal.collect.network import SoftnetStat

    data = Path("/proc/net/softnet_stat").read_bytes()
    path = tmp_path / "softnet_stat"
    path.write_bytes(data)
    _procfs.USE_NATIVE = False
    py = SoftnetStat(str(path))
    _procfs.USE_NATIVE = True
    c = SoftnetStat(str(path))
    assert c.native and not py.native and c.channels == py.channels
    out_py, out_c = np.full(len(py.channels), -1.0), np.full(len(c.channels), -2.0)
    py.read(out_py)
    assert c._native.read(out_c)
    assert out_py.tobytes() == out_c.tobytes()
    line = b"ffffffff 00000001 0000000a" + b" 0000000b" * (len(data.split(b"\n")[0].split()) - 3)
    path.write_bytes(line + b"\n")
    assert not c._native.read(out_c)  # one row instead of the host's rows: no fit
    c.read(out_c)
    assert np.isnan(out_c).all() or c.changed
    assert c.refresh() or len(c.channels) == len(py.channels)
    if c.channels:
        out = np.empty(len(c.channels))
        c.read(out)
        assert out[0] == float(0xffffffff) and out[1] == 1.0
    py.close()
    c.close()
