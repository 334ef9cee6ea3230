"""Honest self-fit: clean runs of this host, analysed with no baseline, say "no anomaly".

With no baseline the detectors are fitted on the run itself, robustly (outlying windows
left out of the refit), and the combined threshold is at least median + 5 robust sigmas of
the run's own combined scores (``AnalyzeConfig.self_fit_threshold_mads``): the baseline's
99th percentile alone would flag about 1 % of any run, anomaly or not.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from reveal.model import Reveal

SECONDS = 45


def test_three_clean_runs_without_a_baseline_report_no_anomaly(tmp_path: Path) -> None:
    runs = [tmp_path / f"clean{i}" for i in range(3)]
    for run in runs:  # one after another: a collector compacting its run is real work
        proc = subprocess.run([sys.executable, "-m", "reveal.cli", "collect", "--quiet",
                               "--duration", str(SECONDS), "--out", str(run)],
                              capture_output=True, text=True, timeout=SECONDS + 120)
        assert proc.returncode == 0, proc.stderr
    for run in runs:
        report = Reveal().fit_score(run)
        assert report.decision["self_fitted"]
        combined = np.asarray(report.windows.combined)
        assert len(combined) >= 40
        assert report.no_anomaly, (run, report.decision, sorted(combined)[-3:],
                                   [a.claim for a in report.anomalies[:3]])
        assert report.to_dict()["summary"]["verdict"] == "no anomaly"


def test_self_fit_still_flags_a_clear_fault() -> None:
    """The raised threshold is not blindness: a level shift in a third of the run is found."""
    from reveal.frame import Telemetry

    rng = np.random.default_rng(0)
    n = 900  # 90 s at 10 Hz
    busy = 30 + rng.normal(0, 2, n)
    busy[500:800] += 40  # 30 s of contention
    dirty = 4e6 + rng.normal(0, 1e5, n)
    ts = np.arange(n, dtype=np.int64) * 100_000_000
    tel = Telemetry("host", ts, np.column_stack([busy, dirty]),
                    ["derived.cpu_busy_pct", "mem.Dirty"], {"interval_s": 0.1})
    report = Reveal().fit_score(tel)
    assert not report.no_anomaly
    flagged_s = [a.start_ns / 1e9 for a in report.anomalies]
    assert min(flagged_s) >= 46 and max(flagged_s) <= 80  # inside (or at the edge of) it
    assert report.episodes[0].subsystem == "cpu"
