"""`reveal analyze` end to end on synthetic runs: verdicts, attribution and bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from reveal.cli import main
from reveal.frame import Telemetry
from reveal.model import report_run
from reveal.store.run_writer import write_run
from synthetic import CHANNELS, ar1_host


def _synthetic(seconds: float, seed: int, fault: tuple[float, float] | None = None,
               start_ns: int = 0):
    return ar1_host(seconds, seed, fault, start_s=start_ns / 1e9)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    base = write_run(_synthetic(900, seed=1), root / "base")
    clean = write_run(_synthetic(120, seed=2), root / "clean")
    fault = write_run(_synthetic(120, seed=3, fault=(60, 80)), root / "fault")
    return base, clean, fault


def test_clean_run_against_baseline_reports_no_or_few_anomalies(runs, capsys):
    base, clean, _ = runs
    report = report_run(clean, base)
    flagged = len(report.anomalies) / len(report.windows.start_ns)
    assert flagged <= 0.05
    assert not report.baseline["self_fitted"]


def test_fault_is_flagged_and_attributed_to_cpu(runs, tmp_path, capsys):
    base, _, fault = runs
    out = tmp_path / "report.json"
    assert main(["analyze", str(fault), "--baseline", str(base), "--json", str(out),
                 "--quiet"]) == 0
    table = capsys.readouterr().out
    payload = json.loads(out.read_text())
    assert payload["schema"] == "reveal-report" and payload["version"] == 1
    inside = [a for a in payload["anomalies"]
              if a["end_ns"] > 60e9 and a["start_ns"] < 80e9]
    outside = [a for a in payload["anomalies"] if a["end_ns"] <= 58e9 or a["start_ns"] >= 82e9]
    assert len(inside) >= 10
    assert len(outside) <= 6
    assert all(a["subsystems"][0] == "cpu" for a in inside)
    assert inside[0]["reasons"][0]["metric"] == "derived.cpu_busy_pct"
    assert "CPU busy percentage" in table and "| Window" in table
    assert len(payload["windows"]["flagged"]) == payload["summary"]["windows"]


def test_self_fit_is_said(runs, capsys):
    _, _, fault = runs
    assert main(["analyze", str(fault), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "No baseline given" in out


def test_mismatched_channels_and_nonfinite_values_are_reported(runs, tmp_path):
    base, _, _ = runs
    tel = _synthetic(120, seed=4)
    tel.values[100:130, 1] = np.nan  # a channel vanishing for 3 s
    tel.values[200, 0] = np.inf
    extra = np.column_stack([tel.values, np.arange(tel.n_samples, dtype=float)])
    tel = Telemetry(tel.host, tel.timestamps_ns, extra[:, [0, 1, 2, 4]],
                    [CHANNELS[0], CHANNELS[1], CHANNELS[2], "net.tx_bytes{iface=eth9}"])
    run = write_run(tel, tmp_path / "odd")
    report = report_run(run, base)
    text = " ".join(report.warnings)
    assert "absent from the baseline" in text and "net.tx_bytes{iface=eth9}" in text
    assert "baseline channels are absent from the run" in text
    assert report.channels["analysed"] >= 2


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reveal.cli", *args], capture_output=True,
                          text=True, timeout=120)


def test_short_run_and_truncated_file_exit_2_with_one_line(runs, tmp_path):
    base, _, _ = runs
    short = write_run(_synthetic(2, seed=5), tmp_path / "short")
    result = _cli("analyze", str(short), "--baseline", str(base), "--quiet")
    assert result.returncode == 2
    assert "shorter than one window" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    broken = write_run(_synthetic(30, seed=6), tmp_path / "broken")
    seg = next((broken / "segments").glob("*.parquet"))
    seg.write_bytes(seg.read_bytes()[:-300])
    result = _cli("analyze", str(broken), "--quiet")
    assert result.returncode == 2 and seg.name in result.stderr
    assert "Traceback" not in result.stderr


def test_constant_run_has_nothing_to_detect_on(tmp_path):
    tel = _synthetic(60, seed=7)
    tel.values[:] = 1.0
    run = write_run(tel, tmp_path / "flat")
    result = _cli("analyze", str(run), "--quiet")
    assert result.returncode == 2
    assert "nothing to detect" in result.stderr or "no channel usable" in result.stderr


def test_explain_floors_prints_each_channels_least_change_and_its_rule(runs, capsys):
    base, clean, _ = runs
    assert main(["analyze", str(clean), "--baseline", str(base), "--explain-floors",
                 "--quiet"]) == 0
    out = capsys.readouterr().out
    block = out[out.index("Least change that matters"):]
    lines = {line.split()[0]: line for line in block.splitlines()[2:] if line.strip()}
    assert "of all CPUs" in lines["derived.cpu_busy_pct"]
    assert "of memory" in lines["mem.Dirty"]
    assert "Mbit/s link" in lines["net.rx_bytes{iface=eth0}"]
    assert main(["analyze", str(clean), "--baseline", str(base), "--explain-floors",
                 "--no-significance", "--quiet"]) == 0
    assert "off for this model" in capsys.readouterr().out
