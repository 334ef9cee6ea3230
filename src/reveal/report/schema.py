"""The report model: what ``reveal analyze`` found, in a versioned JSON schema.

See docs/report-schema.md. Times are int64 ns on the run's monotonic clock plus the run's
``wall_offset_ns`` (so wall time = ``start_ns + wall_offset_ns``); durations in seconds.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from reveal.analysis.evidence import Reason
from reveal.errors import InputError

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
    """Flagged windows that overlap or touch, or of one subsystem at most
    :data:`reveal.analysis.constants.EPISODE_GAP_S` apart, summarised."""

    start_ns: int
    end_ns: int
    window_ids: list[int]
    peak_score: float
    subsystem: str
    claim: str


@dataclass
class SteadyStateNote:
    """A new steady state after a change (a fault's aftermath), named once: since when,
    the windows it covers (not flagged), the levels that changed (channel, baseline
    median, level now) and the sentence."""

    since_ns: int
    first_window: int
    last_window: int
    changes: list[tuple[str, float, float]]
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

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WindowTable:
        """The table of :meth:`to_dict` (None read back as NaN)."""
        start = np.asarray(d["start_ns"], dtype=np.int64)
        scores = {str(k): _array(v) for k, v in d["scores"].items()}
        flags = {str(k): np.asarray(v, dtype=bool) for k, v in d["flags"].items()}
        table = cls(start, np.asarray(d["end_ns"], dtype=np.int64), scores, flags,
                    _array(d["combined"]), np.asarray(d["flagged"], dtype=bool))
        n = len(start)
        if any(len(a) != n for a in (table.end_ns, table.combined, table.flagged,
                                     *scores.values(), *flags.values())):
            raise ValueError("windows: arrays of different lengths")
        return table

    @classmethod
    def empty(cls) -> WindowTable:
        """A table of no windows (a report saved without them)."""
        none = np.zeros(0, dtype=np.int64)
        return cls(none, none.copy(), {}, {}, np.zeros(0), np.zeros(0, dtype=bool))


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
    # new steady states after a change, each named once (their windows are not flagged)
    steady_states: list[SteadyStateNote] = field(default_factory=list)

    @property
    def no_anomaly(self) -> bool:
        return not self.anomalies

    @classmethod
    def from_dict(cls, payload: Any) -> Report:
        """The report of :meth:`to_dict` (see :func:`report_from_dict`)."""
        return report_from_dict(payload)

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
            "steady_states": [asdict(n) for n in self.steady_states],
        }
        if with_windows:
            payload["windows"] = self.windows.to_dict()
        return _json_safe(payload)


def _array(values: list[float | None]) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)


def _ns(value: Any) -> int:
    """A time in int64 nanoseconds (ValueError outside int64's range)."""
    ns = int(value)
    if not -(2**63) <= ns < 2**63:
        raise ValueError(f"time {ns} ns is out of range")
    return ns


def _float(value: Any) -> float:
    return math.nan if value is None else float(value)


def _reason(d: dict[str, Any]) -> Reason:
    matters = d.get("matters")  # absent from reports written before it
    return Reason(str(d["channel"]), str(d["metric"]), str(d["feature"]), str(d["subsystem"]),
                  _float(d["contribution"]), _float(d["value"]), _float(d["baseline_median"]),
                  _float(d["robust_z"]), None if matters is None else _float(matters))


def _anomaly(d: dict[str, Any]) -> Anomaly:
    return Anomaly(int(d["window_id"]), _ns(d["start_ns"]), _ns(d["end_ns"]),
                   _float(d["score"]), [str(x) for x in d["detectors"]],
                   [str(x) for x in d["subsystems"]],
                   {str(k): _float(v) for k, v in d["subsystem_shares"].items()},
                   [_reason(r) for r in d["reasons"]], str(d["claim"]))


def _episode(d: dict[str, Any]) -> Episode:
    return Episode(_ns(d["start_ns"]), _ns(d["end_ns"]), [int(w) for w in d["window_ids"]],
                   _float(d["peak_score"]), str(d["subsystem"]), str(d["claim"]))


def _steady(d: dict[str, Any]) -> SteadyStateNote:
    return SteadyStateNote(_ns(d["since_ns"]), int(d["first_window"]), int(d["last_window"]),
                           [(str(c), _float(b), _float(n)) for c, b, n in d["changes"]],
                           str(d["claim"]))


def _check_numbers(d: Any, where: str, keys: tuple[str, ...]) -> None:
    """Raise ValueError unless each of ``keys`` in ``d`` is a finite number (or absent,
    None), nanoseconds (``*_ns``) within int64."""
    if not isinstance(d, dict):
        raise ValueError(f"{where} is not an object")
    for key in keys:
        value = d.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not math.isfinite(value):
            raise ValueError(f"{where}.{key} is not a number")
        if key.endswith("_ns"):
            _ns(value)


def report_from_dict(payload: Any) -> Report:
    """A :class:`Report` from its JSON form (:meth:`Report.to_dict`, schema version
    :data:`SCHEMA_VERSION`); raises :class:`reveal.errors.InputError` naming what is
    wrong when ``payload`` is not such a report."""
    if not isinstance(payload, dict) or payload.get("schema") != SCHEMA_NAME:
        raise InputError(f"not a Reveal report (no \"schema\": \"{SCHEMA_NAME}\")")
    version = payload.get("version")
    if version != SCHEMA_VERSION:
        raise InputError(f"report schema version {version!r} is not supported (this Reveal "
                         f"reads version {SCHEMA_VERSION})")
    try:
        _check_numbers(payload["run"], "run", ("start_ns", "wall_offset_ns", "interval_s",
                                              "duration_s", "samples", "channels"))
        _check_numbers(payload["baseline"], "baseline", ("start_ns", "wall_offset_ns",
                                                        "interval_s", "duration_s", "samples",
                                                        "channels"))
        _check_numbers(payload.get("decision") or {}, "decision",
                       ("combined_threshold", "persistence_windows", "persistence_s",
                        "threshold_quantile", "baseline_windows", "level_alone_z",
                        "episode_gap_s"))
        _check_numbers(dict(payload["config"]).get("window_used") or {},
                       "config.window_used", ("size_s", "stride_s", "size_rows", "stride_rows"))
        windows = payload.get("windows")
        return Report(
            run=dict(payload["run"]), baseline=dict(payload["baseline"]),
            config=dict(payload["config"]), channels=dict(payload["channels"]),
            detectors=[DetectorSummary(str(d["name"]), _float(d["threshold"]),
                                       int(d["flagged"])) for d in payload["detectors"]],
            windows=WindowTable.from_dict(windows) if windows else WindowTable.empty(),
            anomalies=[_anomaly(a) for a in payload["anomalies"]],
            episodes=[_episode(e) for e in payload["episodes"]],
            warnings=[str(w) for w in payload.get("warnings", [])],
            decision=dict(payload.get("decision") or {}),
            steady_states=[_steady(n) for n in payload.get("steady_states") or []],
        )
    except KeyError as exc:
        raise InputError(f"incomplete Reveal report: {exc.args[0]!r} is missing") from None
    except (TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise InputError(f"malformed Reveal report: {exc}") from None


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
