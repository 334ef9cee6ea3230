"""``reveal compare windows`` and ``reveal compare repro`` on run directories."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from reveal.cli import main
from reveal.frame import Telemetry
from reveal.store.run_writer import write_run

S = 1_000_000_000


def _run(path: Path, seed: int, seconds: float = 120.0, spike: tuple[float, float] | None = None,
         channels: list[str] | None = None) -> Path:
    rng = np.random.default_rng(seed)
    n = int(seconds * 10)
    t = np.arange(n) * 0.1
    names = channels or ["cpu.user{cpu=0}", "mem.MemFree", "net.rx_bytes{iface=e$th|0}"]
    cols = [50 + 10 * np.sin(2 * np.pi * t / 20) + rng.normal(0, 1, n),
            1e9 + rng.normal(0, 1e6, n),
            np.cumsum(1e5 + rng.normal(0, 1e3, n))]
    values = np.column_stack(cols[:len(names)])
    if spike is not None:
        inside = (t >= spike[0]) & (t < spike[1])
        values[inside, 0] += 60.0
        values[inside, 1] -= 3e8
    ts = (np.arange(n) * 0.1 * S).astype(np.int64) + 10 * S
    return write_run(Telemetry("h", ts, values, names, {"interval_s": 0.1}), path)


def test_repro_ranks_channels_and_writes_json(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    runs = [_run(tmp_path / f"r{i}", seed=i) for i in range(3)]
    out = tmp_path / "repro.json"
    assert main(["compare", "repro", *map(str, runs), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    result = json.loads(out.read_text())
    assert result["runs"] == 3 and result["chunks"] >= 10
    by_name = {r["channel"]: r for r in result["results"]}
    assert by_name["cpu.user{cpu=0}"]["reproducible"]  # the shared 20 s cycle
    assert not by_name["mem.MemFree"]["reproducible"]  # white noise only
    assert "e$th\\|0" in text  # the tenant interface name is escaped in the table


def test_repro_refuses_a_single_run(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["compare", "repro", str(_run(tmp_path / "r", 0))]) == 2
    assert "two runs" in capsys.readouterr().err


def test_windows_agreement_between_granularities(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    gauges = ["derived.cpu_busy_pct{cpu=0}", "mem.MemFree", "net.rx_bytes{iface=e$th|0}"]
    base = _run(tmp_path / "base", seed=1, seconds=150, channels=gauges)
    run = _run(tmp_path / "run", seed=2, seconds=120, spike=(50.0, 65.0), channels=gauges)
    out = tmp_path / "windows.json"
    assert main(["compare", "windows", str(run), "--baseline", str(base), "--json",
                 str(out)]) == 0
    result = json.loads(out.read_text())
    assert [(s["size_s"], s["stride_s"]) for s in result["settings"]] == [
        (3.0, 1.0), (1.5, 0.5), (5.0, 2.0)]
    assert all(s["flagged_s"] > 0 for s in result["settings"])  # every setting sees the spike
    assert len(result["pairs"]) == 3
    for pair in result["pairs"]:
        assert 0.0 < pair["iou"] <= 1.0
        assert pair["hit_by_count"] > 0.0
    assert "IoU" in capsys.readouterr().out


def test_compare_needs_a_study(capsys) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit):
        main(["compare"])
