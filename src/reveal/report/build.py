"""A :class:`Report` from an analysis: the numbers of :mod:`reveal.analysis.pipeline` with
the words (claims) of :mod:`reveal.report.claims`, episodes, and what decided the verdicts."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping

import numpy as np

from reveal._version import __version__
from reveal.analysis.constants import EPISODE_GAP_S
from reveal.analysis.evidence import Reason, named_subsystem, weigh_subsystems
from reveal.analysis.grouping import touching
from reveal.analysis.pipeline import Analysis, FittedAnalysis
from reveal.analysis.significance import gate_active
from reveal.catalog import default_catalog
from reveal.config import significance_of
from reveal.frame import channel_metric
from reveal.report.claims import window_claim
from reveal.report.schema import (
    Anomaly,
    DetectorSummary,
    Episode,
    Report,
    SteadyStateNote,
    WindowTable,
)
from reveal.report.steady_text import steady_claim


def episodes(anomalies: list[Anomaly], gap_s: float = EPISODE_GAP_S) -> list[Episode]:
    """Group flagged windows whose time spans overlap or touch
    (:func:`reveal.analysis.grouping.touching`); a group that starts within ``gap_s``
    seconds of the end of the episode before it and is named by the same subsystem
    continues that episode (a fault and its aftermath: the watch, too, keeps an episode
    open until ``--resolve-after``, 30 s, passes without a flagged window)."""
    ordered = sorted(anomalies, key=lambda a: a.start_ns)
    spans = touching(np.array([a.start_ns for a in ordered], dtype=np.int64),
                     np.array([a.end_ns for a in ordered], dtype=np.int64))
    gap_ns = int(gap_s * 1e9)
    joined: list[_Grouped] = []
    for first, last in spans:
        group = _Grouped().add(ordered[first:last + 1])
        previous = joined[-1] if joined else None
        if previous is not None and group.subsystem == previous.subsystem \
                and group.members[0].start_ns - previous.end_ns <= gap_ns:
            previous.add(group.members)
            continue
        joined.append(group)
    return [_summarise(g.members, g.subsystem) for g in joined]


class _Grouped:
    """Flagged windows of one episode as it is joined, with the evidence weights and
    leading subsystems that name it kept as they grow (each window weighed once)."""

    def __init__(self) -> None:
        self.members: list[Anomaly] = []
        self.weight: dict[str, float] = {}
        self.led: set[str] = set()
        self.end_ns = 0
        self.subsystem = ""

    def add(self, group: list[Anomaly]) -> _Grouped:
        for a in group:
            weigh_subsystems(self.weight, a.subsystem_shares, a.score)
            if a.subsystems and a.claim:
                self.led.add(a.subsystems[0])
            self.end_ns = max(self.end_ns, a.end_ns)
        self.members += group
        self.subsystem = named_subsystem(self.weight, self.led)
        return self


def _summarise(group: list[Anomaly], subsystem: str) -> Episode:
    """One episode of ``group``, named by ``subsystem``."""
    peak = max(group, key=lambda a: a.score)
    # the claim speaks of the subsystem the episode is named by: the strongest window
    # that subsystem led (the peak when it led none)
    led = [a for a in group if a.subsystems and a.subsystems[0] == subsystem and a.claim]
    told = max(led, key=lambda a: a.score) if led else peak
    return Episode(min(a.start_ns for a in group), max(a.end_ns for a in group),
                   [a.window_id for a in group], peak.score, subsystem, told.claim)


def decision(fitted: FittedAnalysis, analysis: Analysis) -> dict:
    """What decided the verdicts: thresholds, persistence, what they were fitted on, and
    whether a change must also matter (the least changes; a level that flags alone)."""
    v = analysis.verdicts
    least = getattr(fitted, "significance", None)
    judged = least is not None and gate_active(np.asarray(least, dtype=np.float64))
    return {"combined_threshold": float(v.combined_threshold),
            "detector_thresholds": {k: float(t) for k, t in v.thresholds.items()},
            "persistence_windows": int(analysis.persistence),
            "persistence_s": float(fitted.config.detect.persistence_s),
            "threshold_quantile": float(fitted.config.detect.threshold_quantile),
            "baseline_windows": int(fitted.baseline_windows),
            "self_fitted": bool(fitted.self_fitted),
            "preset": fitted.config.preset,
            "significance": judged,
            "level_alone_z": (significance_of(fitted.config).level_alone_z if judged
                              and not getattr(fitted, "matters_alone", False) else None),
            "matters_alone": bool(judged and getattr(fitted, "matters_alone", False)),
            "episode_gap_s": EPISODE_GAP_S}


class _WindowFeatures:
    """The scored features of a window, by the channel of a reason: what a claim quotes
    besides the reason itself (a burst's peak and median)."""

    def __init__(self, analysis: Analysis) -> None:
        fm = analysis.features
        self.values = fm.values
        self.columns = _columns_by_channel(tuple(fm.channels), tuple(fm.features))

    def of(self, row: int, reason: Reason) -> Mapping[str, float]:
        """Features of the reason's channel in window ``row``. A reason names the CPU of
        its window while the columns rank CPUs by load: the column is then the one of the
        same metric and feature holding the reason's value."""
        if not 0 <= row < len(self.values):
            return {}
        columns = self.columns.get(reason.channel)
        if columns is None or reason.feature not in columns:
            columns = self._by_value(row, reason)
        return {f: float(self.values[row, j]) for f, j in (columns or {}).items()}

    def _by_value(self, row: int, reason: Reason) -> dict[str, int] | None:
        for channel, columns in self.columns.items():
            j = columns.get(reason.feature)
            if j is None or channel_metric(channel) != reason.metric:
                continue
            value = float(self.values[row, j])
            if value == reason.value or (math.isnan(value) and math.isnan(reason.value)):
                return columns
        return None


@functools.lru_cache(maxsize=16)
def _columns_by_channel(channels: tuple[str, ...],
                        features: tuple[str, ...]) -> dict[str, dict[str, int]]:
    """Column of every (channel, feature), by channel then feature (shared: read only)."""
    columns: dict[str, dict[str, int]] = {}
    for j, (channel, feature) in enumerate(zip(channels, features, strict=True)):
        columns.setdefault(channel, {})[feature] = j
    return columns


def _claims(analysis: Analysis, interval_s: float | None) -> list[str]:
    catalog = default_catalog()
    features = _WindowFeatures(analysis) if analysis.evidence else None
    out = []
    for e in analysis.evidence:
        # the claim words the reasons as stored, so both name the same CPU, device, ...
        window = features.of(e.window_id, e.reasons[0]) if features and e.reasons else None
        out.append(window_claim(e.reasons, catalog, interval_s, window))
    return out


def build_report(fitted: FittedAnalysis, analysis: Analysis) -> Report:
    """The report of ``analysis`` (a run scored by ``fitted``)."""
    interval = analysis.run.get("interval_s")
    interval_s = float(interval) if interval and np.isfinite(interval) else fitted.interval_s
    claims = _claims(analysis, interval_s if np.isfinite(interval_s) else None)
    anomalies = [Anomaly(e.window_id, e.start_ns, e.end_ns, e.score, e.detectors,
                         e.subsystems, e.subsystem_shares, e.reasons, claim)
                 for e, claim in zip(analysis.evidence, claims, strict=True)]
    v = analysis.verdicts
    table = WindowTable(analysis.windows.start_ns, analysis.windows.end_ns, v.scores,
                        v.flags, v.combined, v.flagged)
    detectors = [DetectorSummary(n, float(v.thresholds[n]), int(v.flags[n].sum()))
                 for n in v.scores]
    return Report(
        run=analysis.run | {"reveal_version": __version__},
        baseline=({} if fitted.self_fitted else fitted.baseline)
        | {"self_fitted": fitted.self_fitted,
           "unhealthy": [f.to_dict() for f in getattr(fitted, "health", ())]},
        config=dataclasses.asdict(fitted.config)
        | {"window_used": dataclasses.asdict(fitted.window)},
        channels=dict(fitted.counts),
        detectors=detectors,
        windows=table,
        anomalies=anomalies,
        episodes=episodes(anomalies),
        warnings=list(analysis.warnings),
        decision=decision(fitted, analysis),
        steady_states=[SteadyStateNote(st.since_ns, st.first_window, st.last_window,
                                       list(st.changes),
                                       steady_claim(st.changes, st.since_ns, analysis.run,
                                                    default_catalog()))
                       for st in getattr(analysis, "steady", [])],
    )
