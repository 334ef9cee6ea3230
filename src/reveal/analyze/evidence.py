"""Structured evidence the analysis returns: numbers only (words come from ``report/``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Reason:
    """One metric–feature pair behind a flagged window."""

    channel: str
    metric: str
    feature: str
    subsystem: str
    contribution: float  # share of the window's explanation, 0..1
    value: float  # the feature's value in this window
    baseline_median: float
    robust_z: float  # (value - baseline median) / (1.4826 · baseline MAD)


@dataclass
class WindowEvidence:
    """One flagged window: when, how strongly, which detectors, where and why (numbers)."""

    window_id: int
    start_ns: int
    end_ns: int
    score: float  # combined ensemble score
    detectors: list[str]  # detectors whose own threshold the window exceeds
    subsystems: list[str]  # by evidence, strongest first
    subsystem_shares: dict[str, float]
    reasons: list[Reason]  # strongest first; CPU channels named by CPU, not by rank
