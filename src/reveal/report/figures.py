"""PNG figures of a report (matplotlib; nothing is shown on screen).

- :func:`detector_timeline` (paper Fig. 2): one row per detector, score over time with its
  threshold and flagged windows, and a bottom row with the combined score (surprise), its
  threshold (``Report.decision["combined_threshold"]``) and the flagged windows shaded;
  injected episodes shaded.
- :func:`subsystem_counts` (Fig. 3): flagged windows per top subsystem.
- :func:`channel_traces` (Figs. 7–8): the implicated channels' (derived) values around each
  anomaly episode in the channel's unit (:mod:`reveal.report.units`), the episode and any
  injected fault shaded.

The time axis is wall-clock (UTC) where the run recorded its wall-clock offset, else time
since the run's first sample in seconds, minutes, hours or days by its length. Every axis is
labelled, with the channel's unit where it has one. Channel names are tenant text: they are
passed through :func:`reveal.report.escape.plain` and matplotlib's mathtext is disabled for
them (a ``$`` in an interface name stays a ``$``).

Figures are built with matplotlib's object-oriented API (``Figure`` drawn by an Agg
canvas), not through pyplot: importing this module leaves the process's matplotlib backend
as it was, and no figure is registered with pyplot (nothing to close, nothing leaks).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib import dates as mdates
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter

from reveal.catalog import default_catalog
from reveal.frame import channel_metric
from reveal.report.escape import plain
from reveal.report.times import Clock, span_text
from reveal.report.units import Quantity, quantity

SUBSYSTEM_COLOURS = {"cpu": "#d62728", "memory": "#1f77b4", "storage": "#2ca02c",
                     "network": "#9467bd", "gpu": "#ff7f0e", "software": "#8c564b",
                     "unknown": "#7f7f7f"}
FAULT_COLOUR = "#f2b134"
FLAGGED_COLOUR = "#d62728"
#: Time units of a relative axis, by the run's length: (longest span, divisor, name).
_RELATIVE_UNITS = ((600.0, 1.0, "s"), (3 * 3600.0, 60.0, "min"), (3 * 86400.0, 3600.0, "h"),
                   (float("inf"), 86400.0, "days"))
#: Units an engineering formatter prefixes on the axis (``412 MB/s``), by base.
_ENG_UNITS = {"B": "B", "B/s": "B/s", "s": "s", "W": "W", "J": "J", "Hz": "Hz"}


def _figure(figsize: tuple[float, float]) -> Figure:
    """A figure drawn by its own Agg canvas (no backend switch, not tracked by pyplot)."""
    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig


def _label(text: str, limit: int = 70) -> str:
    return plain(text, limit).replace("$", r"\$")


@dataclass(frozen=True)
class TimeAxis:
    """Where a time lands on the x axis: wall-clock (matplotlib dates, UTC) when the run
    has a wall-clock offset, else time since ``t0_ns`` in a unit fitted to the span."""

    t0_ns: int
    wall_offset_ns: int = 0
    span_s: float = 0.0

    @classmethod
    def of(cls, report: Any, t0_ns: int | None = None, span_s: float | None = None) -> TimeAxis:
        run = report.run
        start = np.asarray(report.windows.start_ns, dtype=np.int64)
        end = np.asarray(report.windows.end_ns, dtype=np.int64)
        t0 = int(t0_ns if t0_ns is not None else (run.get("start_ns") or
                                                  (start[0] if len(start) else 0)))
        if span_s is None:
            span_s = float((end.max() - t0) / 1e9) if len(end) else 0.0
        return cls(t0, int(run.get("wall_offset_ns") or 0), span_s)

    @property
    def wall(self) -> bool:
        return self.wall_offset_ns != 0

    @property
    def _unit(self) -> tuple[float, str]:
        for longest, divisor, name in _RELATIVE_UNITS:
            if self.span_s <= longest:
                return divisor, name
        return 1.0, "s"

    def x(self, ns: Any) -> Any:
        """x coordinates of monotonic-clock nanoseconds (a number or an array)."""
        ns = np.asarray(ns, dtype=np.int64)
        if self.wall:
            return mdates.date2num((ns + self.wall_offset_ns).astype("datetime64[ns]"))
        return (ns - self.t0_ns) / 1e9 / self._unit[0]

    def seconds(self, s: float) -> float:
        """An x distance of ``s`` seconds."""
        return s / 86400.0 if self.wall else s / self._unit[0]

    @property
    def label(self) -> str:
        return "time (UTC)" if self.wall else f"time since run start ({self._unit[1]})"

    def apply(self, ax: Any) -> None:
        """Label the x axis (and format wall-clock ticks as times)."""
        if self.wall:
            locator = mdates.AutoDateLocator()
            ax.xaxis.set_major_locator(locator)
            ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
        ax.set_xlabel(self.label, fontsize=9)


def _spans(start: np.ndarray, end: np.ndarray) -> list[tuple[int, int]]:
    """Overlapping or touching [start, end) spans merged (flagged windows as episodes)."""
    out: list[tuple[int, int]] = []
    for s, e in sorted(zip(start.tolist(), end.tolist(), strict=True)):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _shade_faults(ax: Any, faults: Sequence[Any], axis: TimeAxis, label: bool,
                  clamp: tuple[float, float] | None = None) -> None:
    for i, ep in enumerate(sorted(faults, key=lambda f: f.start_ns)):
        x0, x1 = float(axis.x(ep.start_ns)), float(axis.x(ep.end_ns))
        x_label = x0 if clamp is None else min(max(x0, clamp[0]), clamp[1])
        ax.axvspan(x0, x1, color=FAULT_COLOUR, alpha=0.25, lw=0,
                   label="injected fault" if (label and i == 0) else None)
        if label:  # staggered so neighbouring names do not overlap
            ax.text(x_label, 0.98 - 0.13 * (i % 2),
                    f" {_label(ep.kind, 30)} ({_label(ep.intensity, 8)})",
                    transform=ax.get_xaxis_transform(), fontsize=7, va="top", ha="left",
                    color="#8a5a00")


def timeline_figure(report: Any, faults: Sequence[Any] = (),
                    t0_ns: int | None = None) -> Figure:
    """The figure of :func:`detector_timeline` (not saved)."""
    table = report.windows
    start = np.asarray(table.start_ns, dtype=np.int64)
    end = np.asarray(table.end_ns, dtype=np.int64)
    axis = TimeAxis.of(report, t0_ns)
    mid = axis.x(start + (end - start) // 2)
    thresholds = {d.name: d.threshold for d in report.detectors}
    names = list(table.scores)
    rows = len(names) + 1
    fig = _figure((11, 1.6 * rows + 0.9))
    axes = fig.subplots(rows, 1, sharex=True, squeeze=False)
    for ax, name in zip(axes[:, 0], names, strict=False):
        score = np.asarray(table.scores[name], dtype=float)
        flags = np.asarray(table.flags[name], dtype=bool)
        ax.plot(mid, score, lw=0.9, color="#333333")
        thr = thresholds.get(name)
        if thr is not None and np.isfinite(thr):
            ax.axhline(thr, color=FLAGGED_COLOUR, lw=0.8, ls="--", label="threshold")
        ax.scatter(mid[flags], score[flags], s=10, color=FLAGGED_COLOUR, zorder=3,
                   label="above its threshold")
        _shade_faults(ax, faults, axis, label=ax is axes[0, 0])
        ax.set_ylabel(f"{_label(name, 14)} score", fontsize=8)
        ax.tick_params(labelsize=8)
        if len(score) and np.nanmax(score) > 50 * max(np.nanmedian(np.abs(score)), 1e-9):
            ax.set_yscale("symlog", linthresh=max(thr or 1.0, 1e-3))
    ax = axes[-1, 0]
    flagged = np.asarray(table.flagged, dtype=bool)
    for i, (s, e) in enumerate(_spans(start[flagged], end[flagged])):
        ax.axvspan(float(axis.x(s)), float(axis.x(e)), color=FLAGGED_COLOUR, alpha=0.2, lw=0,
                   label="flagged windows" if i == 0 else None)
    combined = np.asarray(table.combined, dtype=float)
    ax.plot(mid, combined, lw=0.9, color="#000000", label="combined score")
    ax.scatter(mid[flagged], combined[flagged], s=8, color=FLAGGED_COLOUR, zorder=3)
    combined_thr = (getattr(report, "decision", None) or {}).get("combined_threshold")
    if combined_thr is not None and np.isfinite(combined_thr):
        ax.axhline(float(combined_thr), color=FLAGGED_COLOUR, lw=0.9, ls="--",
                   label=f"combined threshold ({combined_thr:.3g})")
    _shade_faults(ax, faults, axis, label=False)
    ax.set_ylabel("combined score\n(surprise)", fontsize=8)
    ax.tick_params(labelsize=8)
    ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), fontsize=7, frameon=False, ncol=3,
              borderaxespad=0.1)
    axis.apply(ax)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    if handles and rows > 1:
        fig.legend(handles, labels, loc="upper right", fontsize=8, ncol=3, frameon=False)
    fig.suptitle("Anomaly scores per detector; bottom: the combined score, its threshold and "
                 "the flagged windows", fontsize=10, x=0.01, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    return fig


def detector_timeline(report: Any, path: Path, faults: Sequence[Any] = (),
                      t0_ns: int | None = None) -> Path:
    """Fig. 2: per-detector score over time, thresholds, flagged windows, injected faults;
    the combined score with its threshold line and the flagged windows shaded."""
    timeline_figure(report, faults, t0_ns).savefig(path, dpi=110)
    return path


def unit_axis(ax: Any, q: Quantity, which: str = "y") -> None:
    """Label an axis with the unit of ``q`` (values already times ``q.plot_scale()``);
    prefixed ticks (``412 MB/s``) where the unit takes SI prefixes."""
    target = ax.yaxis if which == "y" else ax.xaxis
    if not q.known:
        target.set_label_text("value (no unit)", fontsize=8)
        return
    if q.base in _ENG_UNITS:
        target.set_major_formatter(EngFormatter(unit=_ENG_UNITS[q.base], sep=" "))
    target.set_label_text(q.axis_label(), fontsize=8)


def subsystem_counts(report: Any, path: Path) -> Path:
    """Fig. 3: flagged windows per top subsystem (and the detectors behind them)."""
    counts: dict[str, int] = {}
    for anomaly in report.anomalies:
        top = anomaly.subsystems[0] if anomaly.subsystems else "unknown"
        counts[top] = counts.get(top, 0) + 1
    fig = _figure((6, 3.2))
    ax = fig.subplots()
    if counts:
        names = sorted(counts, key=lambda k: -counts[k])
        ax.bar(names, [counts[n] for n in names],
               color=[SUBSYSTEM_COLOURS.get(n, "#7f7f7f") for n in names])
        for i, n in enumerate(names):
            ax.text(i, counts[n], str(counts[n]), ha="center", va="bottom", fontsize=9)
        ax.set_ylim(0, max(counts.values()) * 1.15)
    else:
        ax.text(0.5, 0.5, "no anomaly", ha="center", va="center", transform=ax.transAxes)
    ax.set_ylabel("flagged windows (count)")
    ax.set_xlabel("subsystem with the most evidence")
    ax.set_title("Anomaly causes by subsystem", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def channel_traces(report: Any, telemetry: Any, out_dir: Path, faults: Sequence[Any] = (),
                   baseline: Any = None, max_episodes: int = 4, channels_per: int = 3,
                   margin_s: float = 20.0) -> list[Path]:
    """Figs. 7–8: one PNG per anomaly episode (the strongest ``max_episodes``) with the
    ``channels_per`` channels its reasons implicate most, ``margin_s`` around it, each in
    its unit (counters as per-second rates).

    ``telemetry``: the run as analysed (derived rates, so counters read per second);
    ``baseline``: the same for the baseline, to draw its median as a reference line.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for n, fig in trace_figures(report, telemetry, faults, baseline, max_episodes,
                                channels_per, margin_s):
        path = out_dir / f"trace_{n:02d}.png"
        fig.savefig(path, dpi=110)
        paths.append(path)
    return paths


def trace_figures(report: Any, telemetry: Any, faults: Sequence[Any] = (),
                  baseline: Any = None, max_episodes: int = 4, channels_per: int = 3,
                  margin_s: float = 20.0) -> list[tuple[int, Figure]]:
    """The figures of :func:`channel_traces` (not saved), numbered by episode."""
    catalog = default_catalog()
    episodes = sorted(report.episodes, key=lambda e: -e.peak_score)[:max_episodes]
    by_window = {a.window_id: a for a in report.anomalies}
    t0 = int(report.run.get("start_ns") or telemetry.timestamps_ns[0])
    stamps = np.asarray(telemetry.timestamps_ns, dtype=np.int64)
    figures: list[tuple[int, Figure]] = []
    for n, episode in enumerate(sorted(episodes, key=lambda e: e.start_ns), 1):
        weight: dict[str, float] = {}
        for wid in episode.window_ids:
            for reason in getattr(by_window.get(wid), "reasons", []):
                weight[reason.channel] = weight.get(reason.channel, 0.0) + reason.contribution
        chosen = [c for c in sorted(weight, key=lambda c: -weight[c])
                  if c in telemetry.channels][:channels_per]
        if not chosen:
            continue
        lo_ns = episode.start_ns - int(margin_s * 1e9)
        hi_ns = episode.end_ns + int(margin_s * 1e9)
        mask = (stamps >= lo_ns) & (stamps <= hi_ns)
        if not mask.any():
            continue
        axis = TimeAxis(t0, int(report.run.get("wall_offset_ns") or 0),
                        (hi_ns - lo_ns) / 1e9)
        x = axis.x(stamps[mask])
        span = (float(x[0]), float(x[-1]))
        fig = _figure((9, 1.9 * len(chosen) + 0.9))
        axes = fig.subplots(len(chosen), 1, sharex=True, squeeze=False)
        for ax, channel in zip(axes[:, 0], chosen, strict=True):
            q = quantity(catalog.lookup(channel_metric(channel)))
            scale = q.plot_scale()
            values = telemetry.values[:, telemetry.channels.index(channel)]
            ax.plot(x, values[mask] * scale, lw=0.8, color="#1f77b4")
            if baseline is not None and channel in baseline.channels:
                ref = baseline.values[:, baseline.channels.index(channel)]
                if np.isfinite(ref).any():
                    ax.axhline(float(np.nanmedian(ref)) * scale, color="#555555", lw=0.8,
                               ls=":", label="baseline median")
            ax.axvspan(float(axis.x(episode.start_ns)), float(axis.x(episode.end_ns)),
                       facecolor="none", edgecolor=FLAGGED_COLOUR, hatch="///", lw=0,
                       label="flagged (Reveal)")
            _shade_faults(ax, [f for f in faults
                               if f.end_ns >= lo_ns and f.start_ns <= hi_ns],
                          axis, label=ax is axes[0, 0], clamp=span)
            ax.set_title(_label(channel, 90), fontsize=8, loc="left")
            unit_axis(ax, q)
            ax.set_xlim(*span)
            ax.tick_params(labelsize=8)
        axis.apply(axes[-1, 0])
        handles, labels = axes[0, 0].get_legend_handles_labels()
        if handles:
            fig.legend(handles, labels, loc="upper right", fontsize=7, ncol=3, frameon=False)
        when = _label(_when(report, episode.start_ns, episode.end_ns), 60)
        fig.suptitle(f"Anomaly {n}: {_label(episode.subsystem, 20)}, {when}",
                     fontsize=10, x=0.01, ha="left")
        fig.tight_layout(rect=(0, 0, 1, 0.95))
        figures.append((n, fig))
    return figures


def _when(report: Any, start_ns: int, end_ns: int) -> str:
    ends = np.asarray(report.windows.end_ns, dtype=np.int64)
    c = Clock.of(report.run, int(ends.max()) if len(ends) else None)
    return f"{c.between(start_ns, end_ns)} ({span_text((end_ns - start_ns) / 1e9)})"
