"""The baseline's own health: a fault present through the learn is learned as normal.

Every rule of the analysis is relative to the baseline, so a cgroup throttled in most of
its CPU-quota periods all along, steady swap-in, memory pressure or retransmissions in the
baseline are what the model calls normal, and a run that keeps them is never flagged. The
catalog says what a healthy level is (an entry's ``healthy`` range,
:class:`reveal.catalog.Healthy`); here every channel of a derived baseline whose metric has
one is measured over the fit's windows, and those whose level lay outside the range in
more than a share of the baseline's time (``baseline_unhealthy_share``, or the entry's
own ``share``) are named, with their typical level, at fit time.

A window's level is the channel's mean over the window in its derived unit (rates per
second), times the entry's ``scale``; for a level ``per`` another metric, the ratio of the
two channels' window means (the same labels), judged only where the other's mean is at
least the entry's ``least``. A window without a level (no finite sample, too little
traffic) counts as healthy time.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings

import numpy as np

from reveal.analysis.direct import window_means
from reveal.catalog import Catalog, Healthy, default_catalog
from reveal.config import AnalyzeConfig
from reveal.frame import Telemetry, parse_channel

#: The share of a baseline's time a level must lie outside its healthy range to be named,
#: by default (the setting ``baseline_unhealthy_share``).
DEFAULT_SHARE = AnalyzeConfig.baseline_unhealthy_share


@dataclasses.dataclass(frozen=True)
class UnhealthyChannel:
    """A channel whose level lay outside its healthy range through much of a baseline.

    ``typical``: the median over the baseline's windows with a level, in ``unit``;
    ``share``: the share of the baseline's windows (0–1) whose level lay outside the range;
    ``windows``: the windows with a level; ``max`` / ``min``: the healthy range's bounds
    (None: unbounded on that side), in ``unit``; ``message``: one line naming the channel
    and its level.
    """

    channel: str
    typical: float
    share: float
    windows: int
    max: float | None
    min: float | None
    unit: str
    message: str

    def to_dict(self) -> dict[str, object]:
        """The finding as plain JSON values."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class _Plan:
    """Which columns of a layout have a healthy range, and how their levels are made."""

    cols: np.ndarray  # (C,) the channels with a range
    per: np.ndarray  # (C,) the column of each one's ``per`` channel (-1: none)
    healthy: tuple[Healthy, ...]
    units: tuple[str, ...]
    descriptions: tuple[str, ...]


@functools.lru_cache(maxsize=16)
def _plan(channels: tuple[str, ...], catalog: Catalog) -> _Plan:
    """The channels of ``channels`` whose metric has a healthy range, each with its
    ``per`` channel (same labels) where the range asks one; a ``per`` channel absent here
    leaves its channel out."""
    index = {}
    for j, name in enumerate(channels):
        metric, labels = parse_channel(name)
        index[metric, tuple(sorted(labels.items()))] = j
    cols, per, healthy, units, texts = [], [], [], [], []
    for j, name in enumerate(channels):
        info = catalog.lookup(name)
        if info.healthy is None:
            continue
        k = -1
        if info.healthy.per:
            _, labels = parse_channel(name)
            k = index.get((info.healthy.per, tuple(sorted(labels.items()))), -1)
            if k < 0:
                continue
        cols.append(j)
        per.append(k)
        healthy.append(info.healthy)
        units.append(info.healthy_unit)
        texts.append(info.description)
    return _Plan(np.array(cols, dtype=np.intp), np.array(per, dtype=np.intp),
                 tuple(healthy), tuple(units), tuple(texts))


def window_levels(tel: Telemetry, start_ns: np.ndarray, size: int,
                  catalog: Catalog | None = None) -> tuple[list[str], np.ndarray]:
    """The channels of derived ``tel`` with a healthy range and their level in each window
    of ``size`` samples from ``start_ns`` (W, C), in each range's unit; NaN where a
    window has no level."""
    plan = _plan(tuple(tel.channels), catalog or default_catalog())
    names = [tel.channels[j] for j in plan.cols.tolist()]
    if not len(plan.cols) or not len(start_ns):
        return names, np.full((len(start_ns), len(names)), np.nan)
    means = window_means(tel, plan.cols, start_ns, size)
    scale = np.array([h.scale for h in plan.healthy])
    ratio = plan.per >= 0
    if ratio.any():
        least = np.array([h.least for h in plan.healthy])[ratio]
        other = window_means(tel, plan.per[ratio], start_ns, size)
        judged = np.isfinite(other) & (other > 0) & (other >= least)
        with np.errstate(divide="ignore", invalid="ignore"):
            means[:, ratio] = np.where(judged, means[:, ratio] / np.where(judged, other, 1.0),
                                       np.nan)
    return names, means * scale


def baseline_health(tel: Telemetry, start_ns: np.ndarray, size: int,
                    catalog: Catalog | None = None,
                    share: float | None = DEFAULT_SHARE) -> list[UnhealthyChannel]:
    """The channels of derived baseline ``tel`` whose level lay outside their healthy range
    (catalog) in more than ``share`` of the windows of ``size`` samples from ``start_ns``
    (an entry's own ``share`` wins; None: none is named), worst first."""
    if share is None:
        return []
    catalog = catalog or default_catalog()
    names, levels = window_levels(tel, start_ns, size, catalog)
    if not names or not levels.shape[0]:
        return []
    plan = _plan(tuple(tel.channels), catalog)
    high = np.array([np.inf if h.max is None else h.max for h in plan.healthy])
    low = np.array([-np.inf if h.min is None else h.min for h in plan.healthy])
    allowed = np.array([share if h.share is None else h.share for h in plan.healthy])
    with np.errstate(invalid="ignore"):
        outside = (levels > high) | (levels < low)  # NaN compares False: healthy time
    shares = outside.sum(axis=0) / levels.shape[0]
    counted = np.isfinite(levels).sum(axis=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a channel with no level
        typical = np.nanmedian(levels, axis=0)
    found = []
    for c in np.flatnonzero((shares > allowed) & (counted > 0)).tolist():
        h = plan.healthy[c]
        finding = UnhealthyChannel(names[c], float(typical[c]), float(shares[c]),
                                   int(counted[c]), h.max, h.min, plan.units[c], "")
        found.append(dataclasses.replace(finding,
                                         message=_message(finding, plan.descriptions[c])))
    return sorted(found, key=lambda f: (-f.share, f.channel))


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _level(value: float, unit: str) -> str:
    return f"{_number(value)} {unit}".strip()


def _percent(share: float) -> str:
    value = 100.0 * share
    return f"{value:.0f} %" if value >= 1 else f"{value:.2g} %"


def bound_text(finding: UnhealthyChannel) -> str:
    """The healthy range in words: ``≤ 25 %``, ``≥ 1 GB``, ``between 1 and 5 ms``."""
    if finding.min is None:
        return f"≤ {_level(finding.max, finding.unit)}"
    if finding.max is None:
        return f"≥ {_level(finding.min, finding.unit)}"
    return f"between {_number(finding.min)} and {_level(finding.max, finding.unit)}"


def _message(finding: UnhealthyChannel, description: str) -> str:
    what = f"{finding.channel} ({description})" if description else finding.channel
    return (f"unhealthy baseline: {what} was {_level(finding.typical, finding.unit)} in a "
            f"typical window and outside its healthy range ({bound_text(finding)}) in "
            f"{_percent(finding.share)} of the baseline's time: a fault present during the "
            f"learn is learned as normal")
