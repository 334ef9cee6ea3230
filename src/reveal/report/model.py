"""The report model: what ``reveal analyze`` found, in a versioned JSON schema.

See docs/report-schema.md. Times are int64 ns on the run's monotonic clock plus the run's
``wall_offset_ns`` (so wall time = ``start_ns + wall_offset_ns``); durations in seconds.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from reveal.analyze.evidence import Reason

SCHEMA_NAME = "reveal-report"
SCHEMA_VERSION = 1


@dataclass
class Anomaly:
    """One flagged window."""

    window_id: int
    start_ns: int
    end_ns: int
    score: float  # combined ensemble score
    detectors: list[str]  # detectors that flagged this window
    subsystems: list[str]  # by summed contribution, strongest first
    subsystem_shares: dict[str, float]
    reasons: list[Reason]
    claim: str


@dataclass
class Episode:
    """Consecutive (overlapping) flagged windows, summarised."""

    start_ns: int
    end_ns: int
    window_ids: list[int]
    peak_score: float
    subsystem: str
    claim: str


@dataclass
class DetectorSummary:
    name: str
    threshold: float
    flagged: int


@dataclass
class WindowTable:
    """Per-window arrays: every verdict is kept, flagged or not."""

    start_ns: np.ndarray
    end_ns: np.ndarray
    scores: dict[str, np.ndarray]
    flags: dict[str, np.ndarray]
    combined: np.ndarray
    flagged: np.ndarray

    def to_dict(self) -> dict[str, Any]:
        return {
            "start_ns": self.start_ns.tolist(),
            "end_ns": self.end_ns.tolist(),
            "scores": {k: _floats(v) for k, v in self.scores.items()},
            "flags": {k: v.astype(bool).tolist() for k, v in self.flags.items()},
            "combined": _floats(self.combined),
            "flagged": self.flagged.astype(bool).tolist(),
        }


@dataclass
class Report:
    run: dict[str, Any]
    baseline: dict[str, Any]
    config: dict[str, Any]
    channels: dict[str, Any]
    detectors: list[DetectorSummary]
    windows: WindowTable
    anomalies: list[Anomaly]
    episodes: list[Episode]
    warnings: list[str] = field(default_factory=list)
    # what decided the verdicts: the combined threshold, each detector's threshold, the
    # windows a score must stay above it (persistence), and whether fitted on the run
    decision: dict[str, Any] = field(default_factory=dict)

    @property
    def no_anomaly(self) -> bool:
        return not self.anomalies

    def to_dict(self, with_windows: bool = True) -> dict[str, Any]:
        by_subsystem: dict[str, int] = {}
        for anomaly in self.anomalies:
            if anomaly.subsystems:
                top = anomaly.subsystems[0]
                by_subsystem[top] = by_subsystem.get(top, 0) + 1
        payload: dict[str, Any] = {
            "schema": SCHEMA_NAME,
            "version": SCHEMA_VERSION,
            "run": self.run,
            "baseline": self.baseline,
            "config": self.config,
            "channels": self.channels,
            "detectors": [asdict(d) for d in self.detectors],
            "summary": {
                "windows": len(self.windows.start_ns),
                "anomalous_windows": len(self.anomalies),
                "episodes": len(self.episodes),
                "by_subsystem": by_subsystem,
                "verdict": "no anomaly" if self.no_anomaly else "anomalies found",
            },
            "anomalies": [asdict(a) for a in self.anomalies],
            "episodes": [asdict(e) for e in self.episodes],
            "decision": self.decision,
            "warnings": self.warnings,
        }
        if with_windows:
            payload["windows"] = self.windows.to_dict()
        return _json_safe(payload)


def _floats(values: np.ndarray) -> list[float | None]:
    return [None if not math.isfinite(v) else float(v) for v in np.asarray(values, dtype=float)]


def _json_safe(obj: Any) -> Any:
    """Replace NaN/inf by None and NumPy scalars by Python ones, recursively."""
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
