"""The words of a report: a one-line claim per flagged window, in the channel's unit.

The claim words the window's strongest reason (a metric–feature pair) as a reader would:
levels and rates as the window's value against the baseline's ("Disk read throughput on
vda rose to 412 MB/s (baseline 20 MB/s, +8.1σ)"), spread as a range ("varied by ±12 %
within the window"), trend per second, extremes as peaks and drops, shape features
(kurtosis, skewness, autocorrelation, ADF) in plain words, event counts per window. Units
come from the catalog through :mod:`reveal.report.units`; a metric with no known unit
(the scaled SMD/ASD columns) reads in plain numbers. A robust z of :data:`FLAT_Z` or more
means the baseline barely moved: the claim then says "from flat" and quotes no σ.

Tenant-given labels (cgroup, interface names) are passed through
:func:`reveal.report.escape.plain` (no control characters, bounded length); renderers
escape the whole claim again for their format.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import lru_cache

from reveal.analysis.evidence import SETTING, Reason
from reveal.catalog import Catalog
from reveal.frame import channel_metric, parse_channel
from reveal.report.escape import plain
from reveal.report.units import Quantity, number, quantity

#: Robust z from which a claim words the baseline as flat ("went from flat 0 B/s to
#: 412 MB/s"): the baseline's spread is then below 1 % of the change, and quoting sigmas
#: (up to the attribution's cap of 1000) would say more about the spread than the change.
FLAT_Z = 100.0

#: Sampling intervals from which a trend is worded per minute rather than per second.
PER_MINUTE_FROM_S = 30.0

FEATURE_PHRASES = {
    "mean": "mean level",
    "variance": "within-window spread",
    "std": "within-window spread",
    "skewness": "skewness",
    "kurtosis": "burstiness",
    "min": "minimum",
    "max": "maximum",
    "median": "median",
    "slope": "trend",
    "autocorr_lag1": "rhythm",
    "adf_stat": "steadiness",
    "sum": "event count",
}

NO_SINGLE_FEATURE = "Flagged by the detectors, with no single feature standing out."

_WHERE = {"cpu": "on CPU {}", "dev": "on {}", "iface": "on {}", "gpu": "on GPU {}",
          "cgroup": "in cgroup {}", "node": "on NUMA node {}", "irq": "for IRQ {}",
          "netns": "in network namespace {}", "container": "of container {}",
          "pod": "of pod {}", "service": "of service {}"}


def location(labels: Mapping[str, str]) -> str:
    """Where a channel is, in words: ``on vda``, ``on CPU 3 for IRQ 27``, ``in cgroup web``;
    other labels in parentheses: ``on NUMA node 0 (order 3, zone Normal)``."""
    known = [_WHERE[k].format(plain(v, 40)) for k, v in labels.items() if k in _WHERE]
    other = [f"{plain(k, 20)} {plain(v, 40)}" for k, v in labels.items() if k not in _WHERE]
    return " ".join(known + ([f"({', '.join(other)})"] if other else []))


def _short(description: str) -> str:
    """A catalog description cut to its noun phrase (before a colon or a parenthesis)."""
    for mark in (": ", " (", "; "):
        description = description.split(mark, 1)[0]
    return description.strip()


@lru_cache(maxsize=8)
def _exact_names(catalog: Catalog) -> frozenset[str]:
    return frozenset(e.name for e in catalog.entries() if not any(c in e.name for c in "*?["))


def _parse(channel: str) -> tuple[str, dict[str, str]]:
    """Metric and labels of a channel, also when a label holds a line break (a tenant's
    cgroup may be named so, and :func:`reveal.frame.parse_channel` reads one line)."""
    metric, labels = parse_channel(channel)
    if not labels and "{" in channel and channel.endswith("}"):
        metric, _, body = channel[:-1].partition("{")
        labels = dict(part.partition("=")[::2] for part in body.split(","))
    return metric, labels


def subject(channel: str, catalog: Catalog) -> str:
    """What a channel measures and where: ``disk read throughput on vda``."""
    metric, labels = _parse(channel)
    info = catalog.lookup(metric)
    text = _short(info.description or info.name) or metric
    if not quantity(info).known and metric not in _exact_names(catalog) \
            and info.description != metric.replace("_", " ").replace(".", " "):
        text += f" {plain(metric.rsplit('.', 1)[-1], 40)}"  # a family of anonymous columns
    where = location(labels)
    return f"{text} {where}" if where else text


def _sigma(z: float, flat: bool) -> str:
    return "" if flat or not math.isfinite(z) or z == 0 else f", {z:+.1f}σ"


def _direction(reason: Reason) -> int:
    z = reason.robust_z
    if math.isfinite(z) and z != 0:
        return 1 if z > 0 else -1
    if math.isfinite(reason.value) and math.isfinite(reason.baseline_median) \
            and reason.value != reason.baseline_median:
        return 1 if reason.value > reason.baseline_median else -1
    return 0


def _spread(value: float, feature: str) -> float:
    if not math.isfinite(value):
        return math.nan
    return math.sqrt(max(value, 0.0)) if feature == "variance" else abs(value)


def _level(r: Reason, q: Quantity, up: int, flat: bool, sig: str) -> str:
    v, b = q.format(r.value), q.format(r.baseline_median)
    what = "window median; " if r.feature == "median" else ""
    if flat and up:
        return f"went from flat {b} to {v}" + (" (window median)" if what else "")
    if up == 0:
        return f"was {v} ({what}baseline {b})"
    return f"{'rose' if up > 0 else 'fell'} to {v} ({what}baseline {b}{sig})"


def _extreme(r: Reason, q: Quantity, up: int, flat: bool, sig: str) -> str:
    v, b = q.format(r.value), q.format(r.baseline_median)
    if r.feature == "max":
        if up >= 0:
            return f"peaked at {v} from a flat {b}" if flat else \
                f"peaked at {v} (baseline peak {b}{sig})"
        return f"peaked only at {v} (baseline peak {b}{sig})"
    if up <= 0:
        return f"dropped to {v} from a flat {b}" if flat else \
            f"dropped to {v} (baseline low {b}{sig})"
    return f"went from flat {b} to no lower than {v}" if flat else \
        f"stayed above {v} throughout (baseline low {b}{sig})"


def _varied(r: Reason, q: Quantity, up: int, flat: bool, sig: str) -> str:
    s = "±" + q.format(_spread(r.value, r.feature))
    sb = "±" + q.format(_spread(r.baseline_median, r.feature))
    if up >= 0:
        return f"went from steady ({sb}) to varying by {s} within the window" if flat else \
            f"varied by {s} within the window (baseline {sb}{sig})"
    return f"held steadier than usual: {s} within the window (baseline {sb}{sig})"


def _trend(r: Reason, q: Quantity, flat: bool, sig: str, interval_s: float | None) -> str:
    if interval_s and interval_s > 0:
        per = "minute" if interval_s >= PER_MINUTE_FROM_S else "second"
        factor = (60.0 if per == "minute" else 1.0) / interval_s
    else:
        per, factor = "sample", 1.0

    def words(slope: float) -> str:
        if not math.isfinite(slope) or slope == 0:
            return "flat"
        way = "up" if slope > 0 else "down"
        return f"{way} by {q.format(abs(slope) * factor)} per {per}"

    still = flat or not abs(r.baseline_median) > 0.01 * abs(r.value)  # next to the change
    base = "baseline flat" if still else f"baseline trending {words(r.baseline_median)}"
    now = words(r.value)
    return f"trended {now} ({base}{sig})" if now != "flat" else f"stopped moving ({base}{sig})"


def _bursts(r: Reason, q: Quantity, up: int, window: Mapping[str, float]) -> str:
    if up < 0:
        return "lost its usual bursts: flatter peaks than the baseline"
    peak, mid = window.get("max", math.nan), window.get("median", math.nan)
    low = window.get("min", math.nan)
    if math.isfinite(low) and math.isfinite(mid) and math.isfinite(peak) \
            and mid - low > peak - mid:  # the rare values lie below: drops, not spikes
        return f"turned bursty: brief drops to {q.format(low)} from a median of {q.format(mid)}"
    if math.isfinite(peak) and math.isfinite(mid) and peak > 0:
        if mid > 0 and peak / mid >= 1.5:
            return f"turned bursty: peaks {number(peak / mid)}× the median " \
                   f"({q.format(peak)} over {q.format(mid)})"
        if mid <= 0:
            return f"turned bursty: spikes to {q.format(peak)} from {q.format(mid)}"
        return f"turned bursty: short spikes to {q.format(peak)}"
    return "turned bursty: short spikes over its usual level"


def _skewed(q: Quantity, up: int, window: Mapping[str, float]) -> str:
    if up >= 0:
        peak = window.get("max", math.nan)
        to = f" (to {q.format(peak)})" if math.isfinite(peak) else ""
        return f"skewed upwards: brief spikes above its usual level{to}"
    low = window.get("min", math.nan)
    to = f" (to {q.format(low)})" if math.isfinite(low) else ""
    return f"skewed downwards: brief drops below its usual level{to}"


def _events(r: Reason, q: Quantity, up: int, flat: bool, sig: str,
            interval_s: float | None) -> str:
    if not (interval_s and interval_s > 0):  # no interval: the sum of per-second rates
        return (f"{'rose' if up >= 0 else 'fell'} to {number(r.value)} in summed per-second "
                f"rates (baseline {number(r.baseline_median)}{sig})")
    amount = q.amount()
    n, b = r.value * interval_s, r.baseline_median * interval_s
    if flat and up >= 0:
        before = "none" if b == 0 else f"flat {amount.format(b)}"
        return f"went from {before} to {amount.format(n)} in the window"
    if up >= 0:
        return f"reached {amount.format(n)} in the window (baseline {amount.format(b)}{sig})"
    return f"fell to {amount.format(n)} in the window (baseline {amount.format(b)}{sig})"


def _setting(q: Quantity, value: float) -> str:
    """A setting as it is set: a size under 100 kB to the byte (an MTU: ``1,500 B``, not
    ``1.5 kB``), anything else as its unit reads."""
    x = value * q.scale
    if q.base == "B" and math.isfinite(x) and abs(x) < 1e5 and float(x).is_integer():
        return f"{x:,.0f} B"
    return q.format(value)


def predicate(reason: Reason, q: Quantity, interval_s: float | None = None,
              window: Mapping[str, float] | None = None) -> str:
    """What happened to the reason's feature, in the unit of ``q``: ``rose to 412 MB/s
    (baseline 20 MB/s, +8.1σ)``. ``interval_s``: the sampling interval (trends per second,
    event counts per window); ``window``: the window's other features of the same channel
    (``max``, ``median``, ``min``), to put numbers on bursts."""
    up = _direction(reason)
    z = reason.robust_z
    flat = math.isfinite(z) and abs(z) >= FLAT_Z
    sig = _sigma(z, flat)
    feature = reason.feature
    if feature == SETTING:
        return f"was set from {_setting(q, reason.baseline_median)} to " \
               f"{_setting(q, reason.value)}"
    if feature in ("mean", "median"):
        return _level(reason, q, up, flat, sig)
    if feature in ("max", "min"):
        return _extreme(reason, q, up, flat, sig)
    if feature in ("std", "variance"):
        return _varied(reason, q, up, flat, sig)
    if feature == "slope":
        return _trend(reason, q, flat, sig, interval_s)
    if feature == "kurtosis":
        return _bursts(reason, q, up, window or {})
    if feature == "skewness":
        return _skewed(q, up, window or {})
    if feature == "autocorr_lag1":
        return "changed its rhythm: " + ("smoother from sample to sample than usual"
                                         if up >= 0 else
                                         "jumpier from sample to sample than usual")
    if feature == "adf_stat":
        return ("stopped being steady: drifted within the window" if up >= 0 else
                "became unusually steady within the window")
    if feature == "sum":
        return _events(reason, q, up, flat, sig, interval_s)
    phrase = FEATURE_PHRASES.get(feature, feature)
    return (f"had a {'higher' if up >= 0 else 'lower'} {plain(phrase, 40)} than the baseline "
            f"({number(reason.value)} vs {number(reason.baseline_median)}{sig})")


def claim_for(reason: Reason, catalog: Catalog, others: list[str],
              interval_s: float | None = None,
              window: Mapping[str, float] | None = None) -> str:
    """One line: the reason's channel, what its feature did in its unit, other subsystems."""
    name = subject(reason.channel, catalog)
    q = quantity(catalog.lookup(channel_metric(reason.channel)))
    text = f"{name[:1].upper()}{name[1:]} {predicate(reason, q, interval_s, window)}"
    if others:
        text += "; also " + ", ".join(others)
    return text + "."


def window_claim(reasons: list[Reason], catalog: Catalog, interval_s: float | None = None,
                 window: Mapping[str, float] | None = None) -> str:
    """The claim for a flagged window from its reasons (strongest first): the strongest
    reason, and the strongest channels of other subsystems among the next two.

    ``interval_s``: the run's sampling interval; ``window``: the window's features of the
    strongest reason's channel by name (see :func:`predicate`)."""
    if not reasons:
        return NO_SINGLE_FEATURE
    others = list(dict.fromkeys(
        f"{r.subsystem}: {subject(r.channel, catalog)}"
        for r in reasons[1:3] if r.subsystem != reasons[0].subsystem))
    return claim_for(reasons[0], catalog, others, interval_s, window)
