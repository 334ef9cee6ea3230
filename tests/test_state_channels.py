"""``state`` channels (free-list fragmentation): a fast reshaping is evidence, the new
steady arrangement it leaves behind is not."""

from __future__ import annotations

import dataclasses

import numpy as np

from reveal.config import AnalyzeConfig, DetectConfig
from reveal.frame import Telemetry
from reveal.model import Reveal, report_run

BUDDY = "buddy.free_blocks{node=0,order=2,zone=Normal}"


def _run(seconds: float, seed: int, reshape_at: float | None = None) -> Telemetry:
    """Order-2 free blocks near 300 (a few blocks of noise); ``reshape_at``: a memory hog
    reshapes them to about 900 within 3 s, and they stay there."""
    rng = np.random.default_rng(seed)
    n = int(seconds * 10)
    ts = np.arange(n, dtype=np.int64) * 100_000_000
    blocks = 300.0 + np.round(rng.normal(0, 3, n))
    if reshape_at is not None:
        a = int(reshape_at * 10)
        blocks[a:a + 30] += np.linspace(0, 600, 30)
        blocks[a + 30:] += 600
    dirty = 5e6 + 1e5 * rng.normal(size=n)
    busy = np.clip(40 + 3 * rng.normal(size=n), 0, 100)
    return Telemetry("host", ts, np.column_stack([blocks, dirty, busy]),
                     [BUDDY, "mem.Dirty", "derived.cpu_busy_pct"], {"interval_s": 0.1})


def _flagged(report, lo_s: float, hi_s: float) -> np.ndarray:
    start = np.asarray(report.windows.start_ns) / 1e9
    return np.asarray(report.windows.flagged)[(start >= lo_s) & (start < hi_s)]


def _surprise(config: AnalyzeConfig | None = None) -> Reveal:
    """The detectors' verdicts on surprise alone: what these tests are about (free lists
    are memory moving between free and free, which never matters on its own: see
    tests/test_significance.py)."""
    config = config or AnalyzeConfig()
    return Reveal(config=dataclasses.replace(
        config, detect=dataclasses.replace(config.detect, significance=False)))


def test_reshaping_is_flagged_and_the_new_steady_level_is_not():
    base, run = _run(300, seed=1), _run(120, seed=2, reshape_at=40)
    report = report_run(run, base, model=_surprise())
    assert _flagged(report, 38, 43).any()  # while the free lists are being reshaped
    assert _flagged(report, 50, 120).mean() < 0.05  # afterwards: a new arrangement
    reasons = {r.metric for a in report.anomalies if 38e9 <= a.start_ns < 43e9
               for r in a.reasons}
    assert "buddy.free_blocks" in reasons
    # with its level features and no steady state adopted, the same channel keeps
    # flagging long after
    levels = AnalyzeConfig(detect=dataclasses.replace(DetectConfig(), state_levels=True))
    with_levels = report_run(run, base, model=_surprise(levels))
    assert _flagged(with_levels, 50, 120).mean() > 0.8
    assert with_levels.channels["features"] > report.channels["features"]
    # judged on what matters, the free lists' arrangement alone is no anomaly
    assert not report_run(run, base, model=Reveal(config=levels)).anomalies
