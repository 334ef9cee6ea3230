"""``bench/bench_live_latency.py`` on a kept live scenario: the watch's scorer, replayed on
the recording with the watch's own model, scores a window holding one OOM kill as it closes
in every phase of its batches, where batches alone wait up to four strides more."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KEPT = ROOT / "bench" / "recordings" / "live_oom_early.tar.xz"


def test_a_kept_oom_kill_is_scored_as_its_window_closes_in_every_phase(tmp_path: Path) -> None:
    result = tmp_path / "latency.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_live_latency.py"),
                           str(KEPT), "--result", str(result)], cwd=ROOT, text=True,
                          capture_output=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(result.read_text())
    assert data["provenance"]["revision"]["commit"]
    (scenario,) = data["scenarios"]
    assert scenario["recording"] == "bench/recordings/live_oom_early.tar.xz"
    kills = [f for f in scenario["faults"] if f["kind"] == "oom_kill"]
    assert sorted(f["intensity"] for f in kills) == ["high", "low"]
    for fault in kills:
        look, batches = fault["flagged"], fault["batches_only"]["flagged"]
        assert len(look["scored_s"]) == len(batches["scored_s"]) == 5  # every phase
        assert "Out-of-memory kills" in look["claim"]
        # with the look: scored when the window closed, whatever the phase
        assert look["scored_s"] == look["closed_s"]
        assert max(look["scored_s"]) < 3.0
        # batches alone: up to four strides (1 s each) later, by phase
        assert max(batches["scored_s"]) - min(batches["scored_s"]) >= 3.5
        assert fault["live_alert_s"] < 3.0  # what the watch measured on this recording
