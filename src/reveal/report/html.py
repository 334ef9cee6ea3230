"""The report as one self-contained HTML page: opens anywhere, with no network.

:func:`render_html` writes, in order: the verdict and what was analysed (the sentences of
:mod:`reveal.report.text`), every warning once, an interactive timeline of the combined and
per-detector scores (:mod:`reveal.report.html_plots`), one card per episode with its claim,
evidence by subsystem, reasons and the implicated channels' traces against the baseline
(:mod:`reveal.report.html_cards`), injected faults when given, then the facts of the run,
the baseline and the decision. Plots are Bokeh, its core bundle inlined once
(:mod:`reveal.report.html_page`); see docs/report-html.md.

Every string that can come from a tenant (host, paths, channel and label names, claims)
is escaped with :func:`reveal.report.escape.html_text`; the plots' JSON with
:func:`reveal.report.html_page.script_json`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from reveal.analysis.derive import derive
from reveal.catalog import default_catalog
from reveal.frame import Telemetry, channel_metric
from reveal.report.escape import html_text
from reveal.report.html_cards import card
from reveal.report.html_page import page
from reveal.report.html_plots import Band, timeline, trace
from reveal.report.schema import Anomaly, Episode, Report
from reveal.report.text import (
    clock,
    decision_text,
    overview,
    plural,
    shown_episodes,
    truncated,
    verdict,
    warnings,
)
from reveal.report.times import Clock, span_text
from reveal.report.units import quantity

#: Episode cards at most (the strongest, in time order); all are in the JSON report.
MAX_CARDS = 200
#: Episodes whose channels are drawn (the strongest), and channels per episode.
MAX_TRACED = 8
CHANNELS_PER = 3
#: Seconds of the run drawn either side of an episode.
MARGIN_S = 20.0


def _esc(text: Any, limit: int = 2000) -> str:
    return html_text(str(text), limit)


def _header(report: Report) -> str:
    head, rest = verdict(report)
    cls = "verdict clean" if report.no_anomaly else "verdict"
    parts = [f'<header class="{cls}"><h1>{_esc(head)}</h1><p>{_esc(rest)}</p>',
             f'<p class="muted">{overview(report, html_text)}</p>']
    if report.decision:
        parts.append(f'<p class="muted small">{_esc(decision_text(report))}</p>')
    return "\n".join(parts) + "</header>"


def _warnings(report: Report) -> str:
    said = warnings(report)
    if not said:
        return ""
    items = "".join(f"<li>{_esc(w, 600)}</li>" for w in said)
    return (f'<section class="warnings"><h2>{plural(len(said), "Warning")}</h2>'
            f"<ul>{items}</ul></section>")


def _facts_table(rows: Sequence[tuple[str, Any]]) -> str:
    body = "".join(f"<tr><th>{_esc(k)}</th><td>{_esc(v, 400)}</td></tr>" for k, v in rows
                   if v not in (None, ""))
    return f"<table>{body}</table>"


def _source_rows(facts: Mapping[str, Any]) -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = [("path", facts.get("path") or "(in memory)"),
                                   ("host", facts.get("host"))]
    if facts.get("samples") is not None:
        rows.append(("samples", f"{int(facts['samples']):,}"))
    if facts.get("channels") is not None:
        rows.append(("channels recorded", f"{int(facts['channels']):,}"))
    if facts.get("duration_s") is not None:
        rows.append(("length", span_text(float(facts["duration_s"]))))
    if facts.get("interval_s"):
        rows.append(("sampled every", span_text(float(facts["interval_s"]))))
    if facts.get("wall_offset_ns") and facts.get("start_ns") is not None:
        ns = int(facts["start_ns"]) + int(facts["wall_offset_ns"])
        rows.append(("started", datetime.fromtimestamp(ns / 1e9, tz=UTC)
                     .strftime("%Y-%m-%d %H:%M:%S UTC")))
    known = {"path", "host", "samples", "channels", "duration_s", "interval_s", "start_ns",
             "wall_offset_ns", "self_fitted"}
    rows += [(k, v) for k, v in facts.items()
             if k not in known and isinstance(v, str | int | float | bool)]
    return rows


def _facts(report: Report) -> str:
    run = _facts_table(_source_rows(report.run))
    if report.baseline.get("self_fitted"):
        base = ('<p class="muted">No baseline: the detectors were fitted on the run itself, '
                "robustly.</p>")
    else:
        base = _facts_table(_source_rows(report.baseline))
    d = report.decision
    rows: list[tuple[str, Any]] = []
    if d.get("combined_threshold") is not None:
        rows.append(("combined threshold", f"{float(d['combined_threshold']):.4g}"))
    for det in report.detectors:
        rows.append((f"{det.name} threshold", f"{det.threshold:.4g} "
                     f"({plural(det.flagged, 'window')} above)"))
    for key in ("persistence_windows", "threshold_quantile", "baseline_windows", "preset"):
        if d.get(key) is not None:
            rows.append((key.replace("_", " "), d[key]))
    channels = report.channels
    for key in ("analysed", "features", "pruned", "empty_or_static"):
        if isinstance(channels.get(key), int):
            rows.append((f"channels {key.replace('_', ' ')}" if key != "features"
                         else "feature columns", f"{channels[key]:,}"))
    return ('<section id="facts"><h2>Facts</h2><div class="facts">'
            f"<div><h3>Run</h3>{run}</div><div><h3>Baseline</h3>{base}</div>"
            f"<div><h3>Decision</h3>{_facts_table(rows)}</div></div></section>")


def _faults(faults: Sequence[Any], c: Clock) -> str:
    if not faults:
        return ""
    rows = "".join(f"<tr><td>{_esc(getattr(f, 'kind', '?'), 60)}</td>"
                   f"<td>{_esc(getattr(f, 'intensity', ''), 30)}</td>"
                   f"<td>{_esc(c.between(f.start_ns, f.end_ns))}</td></tr>"
                   for f in sorted(faults, key=lambda f: f.start_ns))
    return ('<section id="faults"><h2>Injected faults (ground truth)</h2><table><thead><tr>'
            "<th>Fault</th><th>Intensity</th><th>When</th></tr></thead>"
            f"<tbody>{rows}</tbody></table></section>")


def _is_raw(tel: Telemetry, report: Report) -> bool:
    """Whether ``tel`` holds counters as recorded (not yet per-second rates): it lacks
    a derived channel the analysis had, or a counter column never decreases."""
    derived = report.channels.get("derived") or []
    if any(name not in tel.channels for name in derived):
        return True
    catalog = default_catalog()
    for j, name in enumerate(tel.channels):
        if catalog.lookup(channel_metric(name)).kind not in ("counter", "event"):
            continue
        column = tel.values[:, j]
        column = column[np.isfinite(column)]
        if len(column) >= 3 and column[-1] > column[0] and (np.diff(column) >= 0).all():
            return True
    return False


def as_analysed(tel: Telemetry | None, report: Report) -> Telemetry | None:
    """``tel`` as the analysis saw it: counters as per-second rates, derived channels
    added (left as it is when it already is so)."""
    if tel is None or not _is_raw(tel, report):
        return tel

    return derive(tel, default_catalog())[0]


def _implicated(windows: Sequence[Anomaly], limit: int, tel: Telemetry) -> list[str]:
    """The channels an episode's reasons weigh most (those ``tel`` has), at most ``limit``."""
    weight: dict[str, float] = {}
    for a in windows:
        for r in a.reasons:
            weight[r.channel] = weight.get(r.channel, 0.0) + r.contribution
    return [ch for ch in sorted(weight, key=lambda ch: -weight[ch]) if ch in tel.channels][:limit]


def _windows_of(episode: Episode, by_window: Mapping[int, Anomaly]) -> list[Anomaly]:
    return [by_window[w] for w in episode.window_ids if w in by_window]


def _traces(report: Report, n: int, episode: Episode, windows: Sequence[Anomaly],
            tel: Telemetry, base: Telemetry | None, faults: Sequence[Any],
            plots: dict[str, Any]) -> list[tuple[str, str]]:
    """Plots of the channels episode ``n`` implicates most, :data:`MARGIN_S` either side
    (within the recording), added to ``plots``; (channel, div id) of each, none when
    ``tel`` does not cover the episode."""
    stamps = tel.timestamps_ns
    if not len(stamps):
        return []
    margin = int(MARGIN_S * 1e9)
    span = (max(episode.start_ns - margin, int(stamps[0])),
            min(episode.end_ns + margin, int(stamps[-1])))
    if not ((stamps >= span[0]) & (stamps <= span[1])).any():
        return []
    catalog = default_catalog()
    drawn = []
    for k, channel in enumerate(_implicated(windows, CHANNELS_PER, tel)):
        band = None
        if base is not None and channel in base.channels:
            band = Band.of(base.values[:, base.channels.index(channel)])
        q = quantity(catalog.lookup(channel_metric(channel)))
        div_id = f"plot-e{n}-c{k + 1}"
        plots[div_id] = trace(report, stamps, tel.values[:, tel.channels.index(channel)], q,
                              span, (episode.start_ns, episode.end_ns), band, faults)
        drawn.append((channel, div_id))
    return drawn


def render_html(report: Report, telemetry: Telemetry | None = None,
                baseline: Telemetry | None = None, faults: Sequence[Any] = (), *,
                title: str = "Reveal report", max_cards: int = MAX_CARDS,
                max_traced: int = MAX_TRACED) -> str:
    """The report as one HTML page (a string; scripts and styles inline).

    ``telemetry``/``baseline``: the run and the baseline, recorded or as analysed
    (counters are rated here when they are not yet), to draw the implicated channels of
    the ``max_traced`` strongest episodes against the baseline's band; None: no traces.
    ``faults``: injected episodes (``start_ns``, ``end_ns``, ``kind``, ``intensity``),
    shaded and listed. ``max_cards``: episode cards at most (the strongest, in time order).
    """
    c = clock(report)
    tel = as_analysed(telemetry, report)
    base = as_analysed(baseline, report)
    interval = report.run.get("interval_s")
    interval_s = float(interval) if interval and math.isfinite(float(interval)) else None
    plots: dict[str, Any] = {"plot-timeline": timeline(report, faults)}
    body = [_header(report), _warnings(report),
            '<section id="timeline"><h2>Timeline</h2><p class="muted small">Drag to pan, '
            "scroll to zoom, hover for a window's time, scores and strongest reason. Each "
            "dashed line is a threshold.</p>"
            '<div class="plot" id="plot-timeline"></div></section>']
    shown = shown_episodes(report, max_cards)
    by_window = {a.window_id: a for a in report.anomalies}
    traced = {id(e) for e in sorted(report.episodes, key=lambda e: -e.peak_score)[:max_traced]}
    cards = []
    for n, episode in shown:
        windows = _windows_of(episode, by_window)
        drawn: list[tuple[str, str]] = []
        if tel is not None and id(episode) in traced:
            drawn = _traces(report, n, episode, windows, tel, base, faults, plots)
        cards.append(card(n, episode, windows, c, interval_s, drawn))
    if report.episodes:
        note = truncated(len(shown), len(report.episodes), "episode", None,
                         which="the strongest, in time order")
        body.append(f'<section id="episodes"><h2>{plural(len(report.episodes), "Episode")}'
                    "</h2>" + (f'<p class="muted">{_esc(note)}; all are in the JSON '
                               "report.</p>" if note else "") + "\n".join(cards) + "</section>")
    body += [_faults(faults, c), _facts(report)]
    host = report.run.get("host")
    page_title = f"{_esc(title, 120)}: {_esc(host, 120)}" if host else _esc(title, 120)
    return page(page_title, "\n".join(part for part in body if part), plots)
