"""The shared fast readers (reveal.collect._procfs) on real files.

The vectorised parse must give exactly what a plain token-by-token parse gives, switch to
the slow path where a text does not allow the fast one, and notice layout changes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from reveal.collect._procfs import (
    FileGroup,
    NumberParser,
    OpenFile,
    Source,
    key_value_layout,
    single_value,
)
from reveal.collect.cpu import compact_stat, stat_layout


def _parse(data: bytes, positions: list[int | None], mode: str = "uint",
           scale: list[float] | None = None) -> tuple[NumberParser, np.ndarray]:
    parser = NumberParser(data, positions, scale, mode)
    out = np.full(len(positions), -7.0)
    assert parser.parse(data, out)
    return parser, out


@pytest.mark.parametrize("path", ["/proc/stat", "/proc/vmstat", "/proc/meminfo",
                                  "/proc/interrupts", "/proc/diskstats", "/proc/net/dev"])
def test_fast_parse_equals_plain_parse(path: str) -> None:
    data = Path(path).read_bytes()
    tokens = data.split()
    positions = [i for i, t in enumerate(tokens) if t.isdigit()]
    parser, out = _parse(data, positions)
    assert parser.fast
    assert np.array_equal(out, [float(tokens[i]) for i in positions])


def test_signed_and_decimal_modes() -> None:
    data = b"Tcp: 1 200 -1 16\nload 0.25 12.50 3\n"
    tokens = data.split()
    parser, out = _parse(data, [1, 2, 3, 4], mode="int")
    assert parser.fast and out.tolist() == [1.0, 200.0, -1.0, 16.0]
    parser, out = _parse(data, [6, 7, 8], mode="float")
    assert parser.fast and out.tolist() == [0.25, 12.5, 3.0]
    parser, out = _parse(data, [6, 7, 8], mode="fixed")  # integer parse, then 10^-places
    assert parser.fast and out.tolist() == [0.25, 12.5, 3.0]
    assert tokens[3] == b"-1"


def test_fixed_mode_on_real_pressure_and_loadavg() -> None:
    for path in ("/proc/loadavg", "/proc/pressure/cpu"):
        try:
            data = Path(path).read_bytes().replace(b"=", b" ").replace(b"/", b" ")
        except OSError:
            continue
        tokens = data.split()
        positions = [i for i, t in enumerate(tokens) if t[:1].isdigit() and (
            b"." in t or tokens[i - 1] == b"total")]
        parser, out = _parse(data, positions, mode="fixed")
        assert parser.fast
        assert np.allclose(out, [float(tokens[i]) for i in positions], rtol=1e-12)


def test_slow_path_when_labels_break_the_fast_one() -> None:
    data = b"veth-x 12 34\nbr- 5 6\n"  # a bare '-' survives the int-mode reduction
    parser, out = _parse(data, [1, 2, 4, 5], mode="int")
    assert not parser.fast
    assert out.tolist() == [12.0, 34.0, 5.0, 6.0]
    changed = b"veth-x 12 34\nbr- 5 6 7\n"
    assert not parser.parse(changed, np.empty(4))


def test_missing_positions_and_scale() -> None:
    data = b"MemTotal: 100 kB\nHugePages_Total: 4\n"
    parser, out = _parse(data, [1, None, 4], scale=[1024.0, 1.0, 1.0])
    assert out[0] == 102400.0 and np.isnan(out[1]) and out[2] == 4.0
    assert not parser.parse(b"MemTotal: 100 kB\n", np.empty(3))


def test_compacted_proc_stat_keeps_intr_total() -> None:
    data = Path("/proc/stat").read_bytes()
    compact = compact_stat(data)
    assert len(compact) < len(data)
    intr_line = next(ln for ln in data.splitlines() if ln.startswith(b"intr "))
    layout = stat_layout(compact)
    pos, _ = layout["cpu.intr"]
    assert compact.split()[pos] == intr_line.split()[1]


def test_open_file_grows_its_buffer(tmp_path: Path) -> None:
    path = tmp_path / "big"
    content = b"x 1\n" * 5000
    path.write_bytes(content)
    handle = OpenFile(str(path), size=64)
    assert handle.read() == content
    handle.close()


def test_group_follows_layout_changes(tmp_path: Path) -> None:
    table, single = tmp_path / "table", tmp_path / "single"
    table.write_bytes(b"alpha 1\nbeta 2\n")
    single.write_bytes(b"7\n")
    group = FileGroup([Source(str(table), lambda d: key_value_layout(d, "t.")),
                       Source(str(single), single_value("t.single", 2.0)),
                       Source(str(tmp_path / "absent"), single_value("t.absent"))])
    assert group.channels == ["t.alpha", "t.beta", "t.single"]
    assert group.missing == [str(tmp_path / "absent")]
    out = np.empty(3)
    group.read(out)
    assert out.tolist() == [1.0, 2.0, 14.0]
    table.write_bytes(b"alpha 10\nbeta 20\n")  # values only: no re-discovery needed
    group.read(out)
    assert out.tolist() == [10.0, 20.0, 14.0]
    assert not group.refresh()
    table.write_bytes(b"beta 21\ngamma 3\nalpha 11\n")  # lines moved, one added
    group.read(out)
    assert out.tolist() == [11.0, 21.0, 14.0] and group.changed
    assert group.refresh()
    assert group.channels == ["t.beta", "t.gamma", "t.alpha", "t.single"]
    out = np.empty(4)
    single.write_bytes(b"max\n")  # not a number any more
    group.read(out)
    assert out[:3].tolist() == [21.0, 3.0, 11.0] and np.isnan(out[3])
    group.close()
