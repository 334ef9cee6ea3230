"""The words of a report: a one-line claim per flagged window, in the spirit of the paper's
Table 4 ("<metric> shows a higher <feature> than the baseline (value vs median, robust z)").

Tenant-given labels (cgroup, interface names) are escaped with :func:`reveal.report.escape.plain`.
"""

from __future__ import annotations

import numpy as np

from reveal.analyze.attribute import ROBUST_Z_CAP
from reveal.analyze.evidence import Reason
from reveal.catalog import Catalog
from reveal.frame import channel_metric, parse_channel
from reveal.report.escape import plain

FEATURE_PHRASES = {
    "mean": "mean level",
    "variance": "within-window variance",
    "std": "standard deviation",
    "skewness": "skewness",
    "kurtosis": "kurtosis (burstiness)",
    "min": "minimum",
    "max": "maximum",
    "median": "median",
    "slope": "trend (slope)",
    "autocorr_lag1": "lag-1 autocorrelation",
    "adf_stat": "stationarity (ADF statistic)",
    "sum": "event count",
}


def _z_text(z: float) -> str:
    if abs(z) >= ROBUST_Z_CAP:
        return f"robust z beyond {'+' if z > 0 else '-'}{ROBUST_Z_CAP:g}, a baseline that " \
               "barely moved"
    return f"robust z {z:+.1f}"


def _describe(channel: str, catalog: Catalog) -> str:
    info = catalog.lookup(channel_metric(channel))
    _, labels = parse_channel(channel)
    where = ", ".join(f"{k} {plain(v, 40)}" for k, v in labels.items())
    return f"{info.description or info.name}" + (f" ({where})" if where else "")


def _fmt(x: float) -> str:
    if not np.isfinite(x):
        return "n/a"
    ax = abs(x)
    if ax >= 1e6 or (0 < ax < 1e-3):
        return f"{x:.3g}"
    return f"{x:.4g}"


def claim_for(reason: Reason, catalog: Catalog, others: list[str]) -> str:
    """One line in the spirit of the paper's Table 4."""
    phrase = FEATURE_PHRASES.get(reason.feature, reason.feature)
    subject = _describe(reason.channel, catalog)
    if not np.isfinite(reason.robust_z) or reason.robust_z == 0:
        direction = "a different"
    else:
        direction = "a higher" if reason.robust_z > 0 else "a lower"
    text = (f"{subject[0].upper()}{subject[1:]} shows {direction} {phrase} than the baseline "
            f"({_fmt(reason.value)} vs median {_fmt(reason.baseline_median)}, "
            f"{_z_text(reason.robust_z)})" if np.isfinite(reason.robust_z) else
            f"{subject[0].upper()}{subject[1:]} shows {direction} {phrase} than the baseline")
    if reason.feature == "max" and reason.robust_z > 0:
        text += ", a spike within the window"
    if others:
        text += "; also " + ", ".join(others)
    return text + "."


NO_SINGLE_FEATURE = "Flagged by the detectors, with no single feature standing out."


def window_claim(reasons: list[Reason], catalog: Catalog) -> str:
    """The claim for a flagged window from its reasons (strongest first): the strongest
    reason, and the strongest channels of other subsystems among the next two."""
    if not reasons:
        return NO_SINGLE_FEATURE
    others = list(dict.fromkeys(
        f"{r.subsystem}: {_describe(r.channel, catalog)}"
        for r in reasons[1:3] if r.subsystem != reasons[0].subsystem))
    return claim_for(reasons[0], catalog, others)
