"""PNG figures of a report (matplotlib; nothing is shown on screen).

- :func:`detector_timeline` (paper Fig. 2): one row per detector, score over time with its
  threshold and the flagged windows; injected episodes shaded.
- :func:`subsystem_counts` (Fig. 3): flagged windows per top subsystem.
- :func:`channel_traces` (Figs. 7–8): the implicated channels' (derived) values around each
  anomaly episode, the episode and any injected fault shaded.

Times on the x axis are seconds from the run's first sample. Channel names are tenant text:
they are passed through :func:`reveal.report.escape.plain` and matplotlib's mathtext is
disabled for them (a ``$`` in an interface name stays a ``$``).

Figures are built with matplotlib's object-oriented API (``Figure`` drawn by an Agg
canvas), not through pyplot: importing this module leaves the process's matplotlib backend
as it was, and no figure is registered with pyplot (nothing to close, nothing leaks).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from reveal.report.escape import plain

SUBSYSTEM_COLOURS = {"cpu": "#d62728", "memory": "#1f77b4", "storage": "#2ca02c",
                     "network": "#9467bd", "gpu": "#ff7f0e", "software": "#8c564b",
                     "unknown": "#7f7f7f"}
FAULT_COLOUR = "#f2b134"


def _figure(figsize: tuple[float, float]) -> Figure:
    """A figure drawn by its own Agg canvas (no backend switch, not tracked by pyplot)."""
    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig


def _label(text: str, limit: int = 70) -> str:
    return plain(text, limit).replace("$", r"\$")


def _shade_faults(ax: Any, faults: Sequence[Any], t0_ns: int, label: bool,
                  clamp: tuple[float, float] | None = None) -> None:
    for i, ep in enumerate(sorted(faults, key=lambda f: f.start_ns)):
        x_label = (ep.start_ns - t0_ns) / 1e9
        if clamp is not None:
            x_label = min(max(x_label, clamp[0]), clamp[1])
        ax.axvspan((ep.start_ns - t0_ns) / 1e9, (ep.end_ns - t0_ns) / 1e9, color=FAULT_COLOUR,
                   alpha=0.25, lw=0, label="injected fault" if (label and i == 0) else None)
        if label:  # staggered so neighbouring names do not overlap
            ax.text(x_label, 0.98 - 0.13 * (i % 2),
                    f" {_label(ep.kind, 30)} ({_label(ep.intensity, 8)})",
                    transform=ax.get_xaxis_transform(), fontsize=7, va="top", ha="left",
                    color="#8a5a00")


def detector_timeline(report: Any, path: Path, faults: Sequence[Any] = (),
                      t0_ns: int | None = None) -> Path:
    """Fig. 2: per-detector score over time, threshold, flagged windows, injected faults."""
    table = report.windows
    start = np.asarray(table.start_ns, dtype=np.int64)
    end = np.asarray(table.end_ns, dtype=np.int64)
    t0 = int(t0_ns if t0_ns is not None else (report.run.get("start_ns") or
                                              (start[0] if len(start) else 0)))
    mid = ((start + end) / 2 - t0) / 1e9
    thresholds = {d.name: d.threshold for d in report.detectors}
    names = list(table.scores)
    rows = len(names) + 1
    fig = _figure((11, 1.6 * rows + 0.6))
    axes = fig.subplots(rows, 1, sharex=True, squeeze=False)
    for ax, name in zip(axes[:, 0], names, strict=False):
        score = np.asarray(table.scores[name], dtype=float)
        flags = np.asarray(table.flags[name], dtype=bool)
        ax.plot(mid, score, lw=0.9, color="#333333")
        thr = thresholds.get(name)
        if thr is not None and np.isfinite(thr):
            ax.axhline(thr, color="#d62728", lw=0.8, ls="--", label="threshold")
        ax.scatter(mid[flags], score[flags], s=10, color="#d62728", zorder=3, label="flagged")
        _shade_faults(ax, faults, t0, label=ax is axes[0, 0])
        ax.set_ylabel(_label(name, 14), rotation=0, ha="right", va="center", fontsize=9)
        ax.tick_params(labelsize=8)
        if len(score) and np.nanmax(score) > 50 * max(np.nanmedian(np.abs(score)), 1e-9):
            ax.set_yscale("symlog", linthresh=max(thr or 1.0, 1e-3))
    ax = axes[-1, 0]
    flagged = np.asarray(table.flagged, dtype=bool)
    for s, e in zip(start[flagged], end[flagged], strict=True):
        ax.axvspan((s - t0) / 1e9, (e - t0) / 1e9, color="#d62728", alpha=0.15, lw=0)
    ax.plot(mid, np.asarray(table.combined, dtype=float), lw=0.9, color="#000000")
    _shade_faults(ax, faults, t0, label=False)
    ax.set_ylabel("combined", rotation=0, ha="right", va="center", fontsize=9)
    ax.set_xlabel("time since run start (s)")
    ax.tick_params(labelsize=8)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="upper right", fontsize=8, ncol=3, frameon=False)
    fig.suptitle("Anomaly scores per detector (flagged windows shaded in the bottom row)",
                 fontsize=10, x=0.01, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(path, dpi=110)
    return path


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
    ax.set_ylabel("flagged windows")
    ax.set_title("Anomaly causes by subsystem", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def channel_traces(report: Any, telemetry: Any, out_dir: Path, faults: Sequence[Any] = (),
                   baseline: Any = None, max_episodes: int = 4, channels_per: int = 3,
                   margin_s: float = 20.0) -> list[Path]:
    """Figs. 7–8: one PNG per anomaly episode (the strongest ``max_episodes``) with the
    ``channels_per`` channels its reasons implicate most, ``margin_s`` around it.

    ``telemetry``: the run as analysed (derived rates, so counters read per second);
    ``baseline``: the same for the baseline, to draw its median as a reference line.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    episodes = sorted(report.episodes, key=lambda e: -e.peak_score)[:max_episodes]
    by_window = {a.window_id: a for a in report.anomalies}
    t0 = int(report.run.get("start_ns") or telemetry.timestamps_ns[0])
    t_rel = (telemetry.timestamps_ns - t0) / 1e9
    paths = []
    for n, episode in enumerate(sorted(episodes, key=lambda e: e.start_ns), 1):
        weight: dict[str, float] = {}
        for wid in episode.window_ids:
            for reason in getattr(by_window.get(wid), "reasons", []):
                weight[reason.channel] = weight.get(reason.channel, 0.0) + reason.contribution
        chosen = [c for c in sorted(weight, key=lambda c: -weight[c])
                  if c in telemetry.channels][:channels_per]
        if not chosen:
            continue
        lo = (episode.start_ns - t0) / 1e9 - margin_s
        hi = (episode.end_ns - t0) / 1e9 + margin_s
        mask = (t_rel >= lo) & (t_rel <= hi)
        if not mask.any():
            continue
        span = (max(lo, float(t_rel[mask][0])), min(hi, float(t_rel[mask][-1])))
        fig = _figure((9, 1.9 * len(chosen) + 0.7))
        axes = fig.subplots(len(chosen), 1, sharex=True, squeeze=False)
        for ax, channel in zip(axes[:, 0], chosen, strict=True):
            values = telemetry.values[:, telemetry.channels.index(channel)]
            ax.plot(t_rel[mask], values[mask], lw=0.8, color="#1f77b4")
            if baseline is not None and channel in baseline.channels:
                ref = baseline.values[:, baseline.channels.index(channel)]
                if np.isfinite(ref).any():
                    ax.axhline(float(np.nanmedian(ref)), color="#555555", lw=0.8, ls=":",
                               label="baseline median")
            ax.axvspan((episode.start_ns - t0) / 1e9, (episode.end_ns - t0) / 1e9,
                       facecolor="none", edgecolor="#d62728", hatch="///", lw=0,
                       label="flagged (Reveal)")
            _shade_faults(ax, [f for f in faults
                               if f.end_ns >= t0 + lo * 1e9 and f.start_ns <= t0 + hi * 1e9],
                          t0, label=ax is axes[0, 0], clamp=span)
            ax.set_title(_label(channel, 90), fontsize=8, loc="left")
            ax.set_xlim(*span)
            ax.tick_params(labelsize=8)
        axes[-1, 0].set_xlabel("time since run start (s)")
        handles, labels = axes[0, 0].get_legend_handles_labels()
        if handles:
            fig.legend(handles, labels, loc="upper right", fontsize=7, ncol=3, frameon=False)
        fig.suptitle(f"Anomaly {n}: {_label(episode.subsystem, 20)}, "
                     f"{(episode.start_ns - t0) / 1e9:.0f}–{(episode.end_ns - t0) / 1e9:.0f} s",
                     fontsize=10, x=0.01, ha="left")
        fig.tight_layout(rect=(0, 0, 1, 0.95))
        path = out_dir / f"trace_{n:02d}.png"
        fig.savefig(path, dpi=110)
        paths.append(path)
    return paths
