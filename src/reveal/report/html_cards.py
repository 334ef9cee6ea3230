"""One HTML card per anomaly episode: when, the claim, evidence by subsystem, the reasons
table (channel, feature, value, baseline, unit) and places for the channels' traces.

Reasons are gathered over the episode's windows: per channel and feature, the summed share
of the windows' explanations ranks them, and the values quoted are those of the window
where that pair weighed most. Values read in the channel's unit
(:mod:`reveal.report.units`): levels and extremes as they are, spreads as ± one standard
deviation, trends per second, event features as counts per window, shape features
(kurtosis, skewness, autocorrelation, ADF) as plain numbers. Every string that can come
from a tenant is escaped by :func:`reveal.report.escape.html_text`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from reveal.analysis.evidence import Reason, weigh_subsystems
from reveal.catalog import default_catalog
from reveal.report.escape import html_text
from reveal.report.figures import SUBSYSTEM_COLOURS
from reveal.report.schema import Anomaly, Episode
from reveal.report.text import FEATURE_SHORT, plural, times
from reveal.report.times import Clock, span_text
from reveal.report.units import Quantity, number, quantity

#: Reasons listed per episode at most.
REASONS_SHOWN = 8
_SHAPES = ("kurtosis", "skewness", "autocorr_lag1", "adf_stat")


@dataclass(frozen=True)
class Reading:
    """A reason's value and its baseline's as text, and the unit they read in."""

    value: str
    baseline: str
    unit: str


def reading(reason: Reason, q: Quantity, interval_s: float | None) -> Reading:
    """The reason's feature value and baseline median in the channel's unit."""
    label = q.axis_label() or "no unit"
    v, b, f = reason.value, reason.baseline_median, reason.feature
    if f in ("variance", "std"):
        def spread(x: float) -> str:
            if not math.isfinite(x):
                return "n/a"
            return "±" + q.format(math.sqrt(max(x, 0.0)) if f == "variance" else abs(x))
        return Reading(spread(v), spread(b), f"{label}, ± one standard deviation")
    if f == "slope":
        per = 1.0 / interval_s if interval_s and interval_s > 0 else 1.0
        unit = f"{label} per second" if interval_s else f"{label} per sample"
        return Reading(q.format(v * per, signed=True), q.format(b * per, signed=True), unit)
    if f == "sum" and interval_s and interval_s > 0:
        amount = q.amount()
        return Reading(amount.format(v * interval_s), amount.format(b * interval_s),
                       f"{amount.axis_label() or 'count'} in the window")
    if f in _SHAPES:
        return Reading(number(v), number(b), "no unit (shape of the window)")
    return Reading(q.format(v), q.format(b), label)


@dataclass
class _Gathered:
    reason: Reason
    weight: float  # summed share over the episode's windows


def _strength(r: Reason) -> tuple[bool, float]:
    """A reason's strength: a change that matters by its size in least changes, before
    any change that does not, by its share of the surprise."""
    sized = r.matters is not None and math.isfinite(r.matters)
    return sized, (float(r.matters) if sized else r.contribution)  # type: ignore[arg-type]


def gather(anomalies: Sequence[Anomaly]) -> list[tuple[Reason, float]]:
    """Reasons of an episode's windows by channel and feature, strongest first (the
    changes that matter by their largest size in least changes, then the others by their
    summed share), each with its mean share over the episode's windows (0..1); each kept
    as it was in the window where it was strongest."""
    by: dict[tuple[str, str], _Gathered] = {}
    for a in anomalies:
        for r in a.reasons:
            g = by.get((r.channel, r.feature))
            if g is None:
                by[(r.channel, r.feature)] = _Gathered(r, r.contribution)
                continue
            g.weight += r.contribution
            if _strength(r) > _strength(g.reason):
                g.reason = r
    n = max(len(anomalies), 1)
    ranked = sorted(by.values(), key=lambda g: (not _strength(g.reason)[0],
                                                -(g.reason.matters or 0.0), -g.weight))
    return [(g.reason, g.weight / n) for g in ranked]


def subsystem_shares(anomalies: Sequence[Anomaly]) -> list[tuple[str, float]]:
    """Evidence by subsystem over an episode: shares weighted by each window's score
    (:func:`reveal.analysis.evidence.weigh_subsystems`; a score below 0 counts as 0),
    normalised to 1, strongest first."""
    weight: dict[str, float] = {}
    for a in anomalies:
        weigh_subsystems(weight, a.subsystem_shares, max(a.score, 0.0))
    total = sum(weight.values())
    if not total > 0:
        return []
    return sorted(((k, v / total) for k, v in weight.items()), key=lambda kv: -kv[1])


def _evidence_html(shares: list[tuple[str, float]]) -> str:
    if not shares:
        return '<p class="muted">No subsystem stands out.</p>'
    rows = []
    for name, share in shares:
        colour = SUBSYSTEM_COLOURS.get(name, "#7f7f7f")
        rows.append(f'<div class="bar"><span class="name">{html_text(name, 30)}</span>'
                    f'<span class="track"><span class="fill" style="width:{share * 100:.1f}%;'
                    f'background:{colour}"></span></span>'
                    f'<span class="pct">{share:.0%}</span></div>')
    return '<div class="evidence">' + "".join(rows) + "</div>"


def _size(r: Reason) -> str:
    """A reason's size in least changes that matter ("—" where its change does not)."""
    sized, size = _strength(r)
    return times(size) if sized else "—"


def _reasons_html(reasons: list[tuple[Reason, float]], interval_s: float | None) -> str:
    if not reasons:
        return '<p class="muted">No single feature stands out.</p>'
    catalog = default_catalog()
    head = ("<tr><th>Channel</th><th>Subsystem</th><th>Feature</th><th>Value</th>"
            "<th>Baseline (median)</th><th>Robust z</th><th>Unit</th>"
            "<th>Least changes that matter</th><th>Share of the surprise</th></tr>")
    body = []
    for r, share in reasons[:REASONS_SHOWN]:
        q = quantity(catalog.lookup(r.metric or r.channel.split("{", 1)[0]))
        read = reading(r, q, interval_s)
        z = f"{r.robust_z:+.1f}" if math.isfinite(r.robust_z) else "n/a"
        body.append(f'<tr><td class="channel">{html_text(r.channel, 160)}</td>'
                    f"<td>{html_text(r.subsystem, 20)}</td>"
                    f"<td>{html_text(FEATURE_SHORT.get(r.feature, r.feature), 30)}</td>"
                    f'<td class="num">{html_text(read.value)}</td>'
                    f'<td class="num">{html_text(read.baseline)}</td>'
                    f'<td class="num">{z}</td><td>{html_text(read.unit)}</td>'
                    f'<td class="num">{_size(r)}</td><td class="num">{share:.0%}</td></tr>')
    more = ""
    if len(reasons) > REASONS_SHOWN:
        more = (f'<p class="muted">{len(reasons) - REASONS_SHOWN:,} weaker reasons are in '
                "the JSON report.</p>")
    return (f'<table class="reasons"><thead>{head}</thead><tbody>{"".join(body)}</tbody>'
            f"</table>{more}")


def card(number_: int, episode: Episode, anomalies: Sequence[Anomaly], c: Clock,
         interval_s: float | None, traces: Sequence[tuple[str, str]] = ()) -> str:
    """The ``<section class="episode">`` of one episode. ``anomalies``: its flagged
    windows; ``traces``: (channel, id of the plot's div) for the channels drawn."""
    length = span_text((episode.end_ns - episode.start_ns) / 1e9)
    detectors = sorted({d for a in anomalies for d in a.detectors})
    colour = SUBSYSTEM_COLOURS.get(episode.subsystem, "#7f7f7f")
    parts = [
        f'<section class="episode" id="episode-{number_}" style="border-left-color:{colour}">',
        f"<h3>Episode {number_}: {html_text(episode.subsystem, 30)}, "
        f"{html_text(c.between(episode.start_ns, episode.end_ns))} ({length})</h3>",
        f'<p class="claim">{html_text(episode.claim, 600)}</p>',
        f'<p class="muted">{plural(len(episode.window_ids), "flagged window")}, peak combined '
        f"score {episode.peak_score:.2f}; flagged by "
        f"{html_text(', '.join(detectors) or 'the combined score alone', 200)}.</p>",
        "<h4>Evidence by subsystem</h4>", _evidence_html(subsystem_shares(anomalies)),
        "<h4>Reasons</h4>", _reasons_html(gather(anomalies), interval_s),
    ]
    if traces:
        parts.append("<h4>Implicated channels against the baseline</h4>"
                     '<p class="muted">The run (line), the baseline\'s 5th–95th percentile '
                     "(grey band) and median (dotted), the episode shaded; counters as "
                     "per-second rates.</p>")
        for channel, div_id in traces:
            parts.append(f'<div class="trace"><p class="channel">{html_text(channel, 200)}'
                         f'</p><div class="plot" id="{div_id}"></div></div>')
    parts.append("</section>")
    return "\n".join(parts)
