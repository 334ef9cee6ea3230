"""The interactive plots of the HTML report (Bokeh models; no file, no server).

- :func:`timeline`: the combined score (surprise) with its threshold, flagged episodes and
  injected faults shaded, and below it one small plot per detector with its own threshold;
  all share one time axis (zoom or pan one, all follow). Hovering shows the window's time,
  its scores, and for a flagged window its strongest reason and claim.
- :func:`trace`: one implicated channel around an episode, decimated to the plot's width
  (:mod:`reveal.report.html_decimate`), against the baseline's band (5th–95th percentile)
  and median, in the channel's unit (:mod:`reveal.report.units`).

The time axis is wall-clock (UTC) where the run recorded its offset, else seconds since
the run's first sample. Tenant text (channel names, claims) reaches Bokeh only as data
shown in tooltips, which Bokeh inserts as text, never as HTML; plot titles and axis labels
are the report's own words.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from bokeh.layouts import column
from bokeh.models import (
    BasicTickFormatter,
    BoxAnnotation,
    ColumnDataSource,
    DatetimeTickFormatter,
    HoverTool,
    Range1d,
    Span,
)
from bokeh.plotting import figure

from reveal.report.escape import plain
from reveal.report.html_decimate import min_max, peak_rows
from reveal.report.schema import Report
from reveal.report.text import FEATURE_SHORT, clock, reason_size
from reveal.report.times import NS
from reveal.report.units import Quantity

FLAGGED = "#d62728"
FAULT = "#f2b134"
LINE = "#1f4e79"
BAND = "#9aa7b4"
#: Rows of the timeline at most (the highest combined score per bucket of windows).
TIMELINE_ROWS = 6000
TOOLS = "xpan,xwheel_zoom,box_zoom,reset,save"
NOT_FLAGGED = "-"


@dataclass(frozen=True)
class Axis:
    """x coordinates of monotonic-clock nanoseconds: milliseconds since the Unix epoch
    (Bokeh's datetime axis) with a wall clock, else seconds since the run's start."""

    t0_ns: int
    wall_offset_ns: int

    @classmethod
    def of(cls, report: Report) -> Axis:
        start = report.windows.start_ns
        t0 = int(report.run.get("start_ns") or (start[0] if len(start) else 0))
        return cls(t0, int(report.run.get("wall_offset_ns") or 0))

    @property
    def wall(self) -> bool:
        return self.wall_offset_ns != 0

    def x(self, ns: Any) -> Any:
        ns = np.asarray(ns, dtype=np.int64)
        if self.wall:
            return (ns + self.wall_offset_ns) / 1e6
        return (ns - self.t0_ns) / NS

    @property
    def label(self) -> str:
        return "time (UTC)" if self.wall else "time since the run's first sample (s)"

    def figure(self, height: int, x_range: Any = None, **kw: Any) -> Any:
        """A figure on this time axis, as wide as the page."""
        p = figure(height=height, sizing_mode="stretch_width", tools=TOOLS,
                   x_axis_type="datetime" if self.wall else "linear",
                   x_range=x_range if x_range is not None else (0, 1),
                   toolbar_location="right", **kw)
        if self.wall:
            p.xaxis.formatter = DatetimeTickFormatter(seconds="%H:%M:%S", minsec="%H:%M:%S",
                                                      minutes="%H:%M", hourmin="%H:%M",
                                                      hours="%H:%M")
        p.toolbar.logo = None
        p.yaxis.formatter = BasicTickFormatter(power_limit_high=7, power_limit_low=-3)
        p.xaxis.axis_label = self.label
        p.min_border_left = 70
        p.yaxis.major_label_text_font_size = "8pt"
        p.xaxis.major_label_text_font_size = "8pt"
        return p


def _reason_text(anomaly: Any) -> str:
    if not anomaly.reasons:
        return "no single feature"
    r = anomaly.reasons[0]
    return (f"{plain(r.channel, 120)} {FEATURE_SHORT.get(r.feature, r.feature)} "
            f"({reason_size(r)})")


def _shade(p: Any, axis: Axis, spans: Sequence[tuple[int, int]], colour: str,
           alpha: float, legend: str | None = None) -> None:
    """Vertical strips over ``spans`` (monotonic ns), one glyph for all of them."""
    if not spans:
        return
    lo = axis.x(np.array([s for s, _ in spans], dtype=np.int64))
    hi = axis.x(np.array([e for _, e in spans], dtype=np.int64))
    kw = {"legend_label": legend} if legend else {}
    p.vstrip(x0=lo, x1=hi, fill_color=colour, fill_alpha=alpha, line_alpha=0, **kw)


def timeline(report: Report, faults: Sequence[Any] = ()) -> Any:
    """The combined score and each detector's, linked in time (a Bokeh layout)."""
    axis = Axis.of(report)
    table = report.windows
    start = np.asarray(table.start_ns, dtype=np.int64)
    end = np.asarray(table.end_ns, dtype=np.int64)
    combined = np.asarray(table.combined, dtype=np.float64)
    rows = peak_rows(combined, TIMELINE_ROWS)
    mid = start[rows] + (end[rows] - start[rows]) // 2
    c = clock(report)
    by_start = {a.start_ns: a for a in report.anomalies}
    chosen = [by_start.get(int(s)) for s in start[rows]]
    data: dict[str, Any] = {
        "x": axis.x(mid),
        "t": [c.at(int(s)) for s in start[rows]],
        "combined": combined[rows],
        "top": [_reason_text(a) if a else NOT_FLAGGED for a in chosen],
        "claim": [plain(a.claim, 300) if a else NOT_FLAGGED for a in chosen],
    }
    names = list(table.scores)
    for i, name in enumerate(names):
        data[f"s{i}"] = np.asarray(table.scores[name], dtype=np.float64)[rows]
    source = ColumnDataSource(data)
    lo = float(axis.x(start.min())) if len(start) else 0.0
    hi = float(axis.x(end.max())) if len(end) else 1.0
    x_range = Range1d(lo, max(hi, lo + 1e-3), bounds=(lo, max(hi, lo + 1e-3)))
    episodes = [(e.start_ns, e.end_ns) for e in report.episodes]
    fault_spans = [(f.start_ns, f.end_ns) for f in faults]

    top = axis.figure(260, x_range, title="Combined score (surprise): the mean over the "
                                          "detectors; flagged episodes shaded red")
    _shade(top, axis, episodes, FLAGGED, 0.18, "flagged episode")
    _shade(top, axis, fault_spans, FAULT, 0.25, "injected fault")
    line = top.line("x", "combined", source=source, color="#111111", line_width=1.2,
                    legend_label="combined score")
    flagged = np.asarray(table.flagged, dtype=bool)[rows]
    if flagged.any():
        top.scatter(axis.x(mid[flagged]), combined[rows][flagged], size=4, color=FLAGGED,
                    legend_label="flagged window")
    thr = report.decision.get("combined_threshold")
    if thr is not None and np.isfinite(thr):
        top.add_layout(Span(location=float(thr), dimension="width", line_color=FLAGGED,
                            line_dash="dashed", line_width=1.2))
    top.yaxis.axis_label = "combined score"
    top.legend.location = "top_left"
    top.legend.label_text_font_size = "8pt"
    top.legend.background_fill_alpha = 0.6
    top.add_tools(HoverTool(renderers=[line], mode="vline", tooltips=[
        ("time", "@t"), ("combined", "@combined{0.00}"), ("top reason", "@top"),
        ("claim", "@claim")]))
    plots = [top]
    thresholds = {d.name: d.threshold for d in report.detectors}
    for i, name in enumerate(names):
        p = axis.figure(120, x_range, title=f"{plain(name, 20)} score")
        _shade(p, axis, episodes, FLAGGED, 0.12)
        r = p.line("x", f"s{i}", source=source, color=LINE, line_width=1.0)
        t = thresholds.get(name)
        if t is not None and np.isfinite(t):
            p.add_layout(Span(location=float(t), dimension="width", line_color=FLAGGED,
                              line_dash="dashed", line_width=1.0))
        p.add_tools(HoverTool(renderers=[r], mode="vline", tooltips=[
            ("time", "@t"), (plain(name, 20), f"@s{i}{{0.000}}"), ("top reason", "@top")]))
        p.title.text_font_size = "9pt"
        plots.append(p)
    for p in plots[:-1]:
        p.xaxis.axis_label = None
    return column(plots, sizing_mode="stretch_width")


@dataclass(frozen=True)
class Band:
    """The baseline's spread of one channel (in the channel's stored values)."""

    low: float  # 5th percentile
    median: float
    high: float  # 95th percentile

    @classmethod
    def of(cls, values: np.ndarray) -> Band | None:
        finite = values[np.isfinite(values)]
        if not len(finite):
            return None
        low, median, high = np.percentile(finite, [5, 50, 95])
        return cls(float(low), float(median), float(high))


def trace(report: Report, stamps_ns: np.ndarray, values: np.ndarray, q: Quantity,
          span: tuple[int, int], episode: tuple[int, int], band: Band | None = None,
          faults: Sequence[Any] = ()) -> Any:
    """One channel's values over ``span`` (monotonic ns), decimated, with ``episode``
    shaded and the baseline ``band``; values and band scaled to ``q``'s axis unit."""
    axis = Axis.of(report)
    mask = (stamps_ns >= span[0]) & (stamps_ns <= span[1])
    scale, unit = _axis_unit(q, values[mask], band)
    x, y = min_max(axis.x(stamps_ns[mask]), values[mask] * scale)
    source = ColumnDataSource({"x": x, "y": y})
    lo, hi = float(axis.x(span[0])), float(axis.x(span[1]))
    p = axis.figure(170, Range1d(lo, hi, bounds=(lo, hi)))
    _shade(p, axis, [episode], FLAGGED, 0.15)
    _shade(p, axis, [(f.start_ns, f.end_ns) for f in faults
                     if f.end_ns >= span[0] and f.start_ns <= span[1]], FAULT, 0.25)
    if band is not None:
        p.add_layout(BoxAnnotation(bottom=band.low * scale, top=band.high * scale,
                                   fill_color=BAND, fill_alpha=0.3, line_alpha=0))
        p.add_layout(Span(location=band.median * scale, dimension="width",
                          line_color="#555555", line_dash="dotted", line_width=1.2))
    r = p.line("x", "y", source=source, color=LINE, line_width=1.1)
    p.yaxis.axis_label = unit
    when = ("@x{%H:%M:%S.%3N}", {"@x": "datetime"}) if axis.wall else ("@x{0.0} s", {})
    p.add_tools(HoverTool(renderers=[r], mode="vline", formatters=when[1],
                          tooltips=[("time", when[0]), ("value", f"@y{{0.[000]}} {unit}")]))
    return p



#: Bases whose axis takes an SI prefix (``MB/s``), and the symbol after the prefix.
_PREFIXED = {"B": "B", "B/s": "B/s", "W": "W", "J": "J", "Hz": "Hz"}
_PREFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def _axis_unit(q: Quantity, values: np.ndarray, band: Band | None) -> tuple[float, str]:
    """Factor from stored values to the axis, and the axis's unit: SI-prefixed where the
    unit takes prefixes (``MB/s`` for values in the millions of bytes per second)."""
    scale = q.plot_scale()
    label = q.axis_label() or "value (no unit)"
    symbol = _PREFIXED.get(q.base)
    if symbol is None:
        return scale, label
    seen = np.abs(values[np.isfinite(values)]) * scale
    top = max(float(seen.max()) if len(seen) else 0.0,
              abs(band.high * scale) if band is not None else 0.0)
    for factor, prefix in _PREFIXES:
        if top >= factor:
            return scale / factor, f"{prefix}{symbol}"
    return scale, symbol
