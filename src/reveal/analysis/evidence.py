"""Structured evidence the analysis returns: numbers only (words come from ``report/``)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace


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
    # the change in least changes that matter (the model's own measure of it: how many
    # times the least change of the channel it moved, where that change matters); None
    # where it is no change that matters, or the model judges surprise alone
    matters: float | None = None


#: The feature of a reason that is a setting changed within the window
#: (:func:`reveal.analysis.direct.setting_changes`): its value is the setting at the window's
#: end, its baseline the setting at the window's start.
SETTING = "setting"


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


def named_by_claim(evidence: WindowEvidence) -> WindowEvidence:
    """``evidence`` with the subsystem of its first reason (the one its claim speaks of)
    first among its subsystems: a window, and the alert it opens, is named by what its claim
    says, whichever path ordered the reasons (a direct sign, a change that matters, or the
    detectors' contributions alone)."""
    if not evidence.reasons:
        return evidence
    lead = evidence.reasons[0].subsystem
    if evidence.subsystems[:1] == [lead]:
        return evidence
    return replace(evidence, subsystems=[lead, *(s for s in evidence.subsystems if s != lead)])


def weigh_subsystems(weights: dict[str, float], shares: Mapping[str, float],
                     score: float) -> dict[str, float]:
    """Add one flagged window to an episode's evidence by subsystem: each subsystem's share
    of the window's explanation (``WindowEvidence.subsystem_shares``), times the window's
    ``score``, is added to ``weights`` (changed in place and returned)."""
    for name, share in shares.items():
        weights[name] = weights.get(name, 0.0) + share * score
    return weights


def heaviest_subsystem(weights: Mapping[str, float], default: str = "unknown") -> str:
    """The subsystem that weighs most in ``weights`` (from :func:`weigh_subsystems`; the
    first of equals), ``default`` when there is none."""
    return max(weights, key=weights.__getitem__) if weights else default


def named_subsystem(weights: Mapping[str, float], led: Collection[str],
                    default: str = "unknown") -> str:
    """The subsystem an episode (batch or live) is named by: the heaviest in ``weights``
    (:func:`heaviest_subsystem`), unless it led none of the episode's windows that have a
    claim (``led``: the leading subsystem of each), since the episode's claim, the
    strongest window its subsystem led, could not speak of it; then the heaviest of those
    that led one."""
    top = heaviest_subsystem(weights, default)
    if not led or top in led:
        return top
    return max(led, key=lambda s: weights.get(s, 0.0))
