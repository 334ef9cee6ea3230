"""The least change that matters per channel of a fitted model, as a table for a person
(``reveal analyze --explain-floors``; the rules are in :mod:`reveal.analysis.significance`)."""

from __future__ import annotations

import math
from typing import Any

from reveal.analysis.pipeline import reach_of, rows_per_window
from reveal.catalog import default_catalog
from reveal.frame import channel_metric
from reveal.report.escape import plain
from reveal.report.units import quantity, si


def render_floors(fitted: Any, limit: int | None = None) -> str:
    """The host's capacity, then one line per analysed channel: its least change that
    matters in the channel's unit and the rule that gave it."""
    matters: dict[str, tuple[float, str]] = getattr(fitted, "matters", {}) or {}
    capacity: dict[str, Any] = getattr(fitted, "capacity", {}) or {}
    if getattr(fitted, "significance", None) is None:
        return ("Least change that matters: off for this model (surprise alone decides; "
                "fit with detect.significance on)\n")
    reach = _reach(fitted)
    lines = ["Least change that matters (a window is an anomaly only when some change in it "
             "is at least this large and 3 robust σ from the baseline"
             + ("; a window's level past the levels the baseline itself reached, its 1st "
                "and 99th percentile windows, where a reach is shown)" if reach else ")")]
    if capacity:
        links = ", ".join(f"{plain(k, 40)} {si(v * 8, 'bit/s')}"
                          for k, v in capacity.get("link_bytes_per_s", {}).items())
        disks = ", ".join(f"{plain(k, 40)} {si(v, 'B/s')}"
                          for k, v in capacity.get("disk_bytes_per_s", {}).items())
        lines.append(f"host: {si(capacity.get('memory_bytes', 0.0), 'B')} memory, "
                     f"{capacity.get('n_cpus', 1)} CPUs"
                     + (f"; links {links}" if links else "")
                     + (f"; disks seen at most {disks}" if disks else ""))
    catalog = default_catalog()
    raised = _raised_by_tail(fitted)
    rows = sorted(matters.items())
    width = max((len(plain(c, 80)) for c, _ in rows), default=10)
    for channel, (least, rule) in rows[:limit]:
        q = quantity(catalog.lookup(channel_metric(channel)))
        amount = q.format(least) if q.known else f"{least:,.4g}"
        if raised.get(channel, 0.0) > least * (1 + 1e-9):
            tail = raised[channel]
            rule += (f"; raised to {q.format(tail) if q.known else f'{tail:,.4g}'} by the "
                     "baseline's own bursts (99th percentile − median)")
        up, down = reach.get(channel, (0.0, 0.0))
        if up > 0 or down > 0:
            shown = (q.format if q.known else "{:,.4g}".format)
            rule += f"; past the baseline's reach +{shown(up)} / −{shown(down)}"
        lines.append(f"  {plain(channel, 80):<{width}}  {amount:>14}  {rule}")
    if limit is not None and len(rows) > limit:
        lines.append(f"  ... {len(rows) - limit} more channels")
    return "\n".join(lines) + "\n"


def _levels(fitted: Any, values: Any) -> list[tuple[str, Any]]:
    """``(channel, value per row)`` for each fitted column of a window's level (median,
    mean; a sum over the window divided by its rows) of per-column ``values``."""
    rows = rows_per_window(fitted.window, fitted.interval_s)
    return [(channel, value / rows if feature == "sum" else value)
            for channel, feature, value in zip(fitted.column_channels, fitted.column_features,
                                               values, strict=True)
            if feature in ("median", "mean", "sum")]


def _raised_by_tail(fitted: Any) -> dict[str, float]:
    """Per channel, the least change of its window level (median or mean; a sum per row) as
    fitted, in the channel's unit: above the rule's own where the baseline's tail raised it
    (a channel that moves in bursts, :func:`reveal.analysis.significance.tail_matters`)."""
    least = getattr(fitted, "significance", None)
    out: dict[str, float] = {}
    if least is None:
        return out
    for channel, level in _levels(fitted, least):
        if math.isfinite(level):
            out[channel] = max(out.get(channel, 0.0), float(level))
    return out


def _reach(fitted: Any) -> dict[str, tuple[float, float]]:
    """Per channel, how far its baseline's window level (median, mean; a sum per row)
    reached above and below the baseline's median
    (:func:`reveal.analysis.pipeline.reach_of`), where the model measures changes past it;
    empty where it does not."""
    tails = reach_of(fitted)
    if tails is None:
        return {}
    out: dict[str, tuple[float, float]] = {}
    for channel, (up, down) in _levels(fitted, tails.T):
        was_up, was_down = out.get(channel, (0.0, 0.0))
        out[channel] = (max(was_up, float(up)), max(was_down, float(down)))
    return out
