"""PNG figures of a fleet result (matplotlib, drawn off screen).

- :func:`heatmap`: hosts × time, each host's deviation score per window, flagged windows
  outlined; hosts that stand apart first.
- :func:`peer_traces`: an episode's implicated columns, the host's values against the peer
  band (median and 10-90 % across hosts), the episode shaded.

Host and channel names are tenant text: passed through :func:`reveal.report.escape.plain`
with ``$`` escaped (no mathtext).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib import dates as mdates
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from reveal.catalog import default_catalog
from reveal.fleet.records import FleetResult, HostEpisode
from reveal.frame import channel_metric
from reveal.report.claims import subject
from reveal.report.escape import plain
from reveal.report.units import quantity

#: most host rows labelled by name on the heatmap
LABELLED_HOSTS = 40


def _label(text: str, limit: int = 70) -> str:
    return plain(text, limit).replace("$", r"\$")


def _figure(size: tuple[float, float]) -> Figure:
    fig = Figure(figsize=size)
    FigureCanvasAgg(fig)
    return fig


def _dates(ns: np.ndarray) -> np.ndarray:
    return mdates.date2num(np.asarray(ns, dtype="datetime64[ns]"))


def heatmap(result: FleetResult, path: str | Path) -> Path:
    """Scores of every host (rows) over time (columns), flagged hosts first."""
    order = sorted(range(len(result.hosts)),
                   key=lambda i: (-int(result.flagged[i].any()), i))
    scores = np.asarray(result.scores[order], dtype=float)
    h = len(order)
    fig = _figure((10, max(2.5, min(12.0, 0.25 * h + 1.5))))
    ax = fig.add_subplot()
    t = _dates(result.grid_start_ns)
    t1 = t[-1] + (t[1] - t[0] if len(t) > 1 else result.stride_ns / 86400e9)
    top = max(float(np.nanmax(result.cut)) * 2 if result.cut.size else 1.0, 1.0)
    image = ax.imshow(np.ma.masked_invalid(scores), aspect="auto", interpolation="nearest",
                      cmap="magma", vmin=0.0, vmax=top, extent=(t[0], t1, h, 0))
    flagged = result.flagged[order]
    if flagged.any():
        ax.contour(np.linspace(t[0], t1, flagged.shape[1]), np.arange(h) + 0.5,
                   flagged.astype(float), levels=[0.5], colors="#00e5ff", linewidths=0.8)
    if h <= LABELLED_HOSTS:
        ax.set_yticks(np.arange(h) + 0.5, [_label(result.hosts[i], 30) for i in order])
    else:
        ax.set_ylabel(f"{h} hosts (those standing apart at the top)")
    ax.xaxis_date()
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))
    ax.set_xlabel("time (UTC)")
    ax.set_title("Deviation from the peers (robust sigmas; flagged windows outlined)")
    fig.colorbar(image, ax=ax, label="score (σ)")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=100)
    return path


def peer_traces(result: FleetResult, episode: HostEpisode, path: str | Path,
                margin: int = 30) -> Path | None:
    """The episode's host against the peer band in its implicated columns (None: no
    trace kept for it)."""
    traces = result.traces.get(episode.host, {})
    where = {c: k for k, c in enumerate(result.columns)}
    cols = [where[(r.channel, r.feature)] for r in episode.reasons
            if (r.channel, r.feature) in where and where[(r.channel, r.feature)] in traces]
    if not cols:
        return None
    a = max(0, episode.first - margin)
    b = min(len(result.grid_start_ns), episode.last + margin + 1)
    t = _dates(result.grid_start_ns[a:b] + result.size_ns // 2)
    fig = _figure((9, 2.2 * len(cols) + 0.6))
    host_names = {r.channel: r.host_channel for r in episode.reasons}
    for i, k in enumerate(cols):
        ax = fig.add_subplot(len(cols), 1, i + 1)
        channel, feature = result.columns[k]
        q = quantity(default_catalog().lookup(channel_metric(channel)))
        scale = q.plot_scale() if q.known else 1.0
        ax.fill_between(t, result.peer_p10[a:b, k] * scale, result.peer_p90[a:b, k] * scale,
                        color="#bbbbbb", label="all hosts 10-90 %", step="mid")
        ax.plot(t, result.peer_median[a:b, k] * scale, color="#555555", lw=1,
                label="peer median")
        ax.plot(t, traces[k][a:b] * scale, color="#d62728", lw=1.4,
                label=_label(episode.host, 40))
        ax.axvspan(_dates(np.array([episode.start_ns]))[0],
                   _dates(np.array([episode.end_ns]))[0], color="#f2b134", alpha=0.25)
        name = subject(host_names.get(channel, channel), default_catalog())
        ax.set_title(_label(f"{feature} of {name}", 90), fontsize=9)
        ax.set_ylabel(q.axis_label() or "value", fontsize=8)
        ax.xaxis_date()
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))
        if i == 0:
            ax.legend(fontsize=7, loc="upper left")
    fig.axes[-1].set_xlabel("time (UTC)")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=100)
    return path
