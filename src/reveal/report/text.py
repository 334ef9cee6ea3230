"""The words around a report's tables, and the Markdown rendering (``report.md``).

The same sentences serve every renderer: the overview (what was analysed, when), the
verdict, the decision (what flags a window: the combined threshold, persistence, preset,
whether self-fitted), every warning once, and what a table leaves out. Each takes ``esc``,
the renderer's escaping of tenant-given text (host, path); claims are escaped whole.
:func:`render_table` writes Markdown for files; the terminal's table is
:mod:`reveal.report.terminal`'s.

Tables list episodes first (time order), then the strongest flagged windows (score order),
at most ``limit`` rows each; a line says how many were left out and, when a JSON report was
written (``json_path``), that all are there.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from reveal.analysis.evidence import Reason
from reveal.report.escape import markdown, plain
from reveal.report.schema import Anomaly, Episode, Report
from reveal.report.times import Clock, span_text
from reveal.report.units import number

FEATURE_SHORT = {"autocorr_lag1": "autocorr", "adf_stat": "ADF"}
Escape = Callable[[str], str]


def plural(n: int, one: str, many: str | None = None) -> str:
    """``1 episode``, ``2 episodes``, ``1,204 windows``."""
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


def clock(report: Report) -> Clock:
    """The report's clock (its run's start, the end of its last window, wall offset)."""
    ends = report.windows.end_ns
    return Clock.of(report.run, int(max(ends)) if len(ends) else None)


def _ordinal(q: float) -> str:
    pct = q * 100
    text = f"{pct:.4g}"
    if "." in text:
        return f"{text}th"
    n = round(pct)
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def window_shape(report: Report) -> str:
    """``of 3 s every 1 s`` (rows at the run's interval where windows are rows)."""
    used = report.config.get("window_used") or {}
    interval = float(report.run.get("interval_s") or 0)
    size, stride = used.get("size_s"), used.get("stride_s")
    if used.get("size_rows") and interval > 0:
        size = used["size_rows"] * interval
        stride = (used.get("stride_rows") or 1) * interval
    if not size:
        return ""
    return f"of {span_text(float(size))} every {span_text(float(stride or size))}"


def overview(report: Report, esc: Escape = plain) -> str:
    """What was analysed: ``Run R on host H: 17 windows of 3 s every 1 s, 14:01:16–...``"""
    run, c = report.run, clock(report)
    n = len(report.windows.start_ns)
    path, host = esc(str(run.get("path") or "(in memory)")), esc(str(run.get("host")))
    text = f"Run {path} on host {host}: {plural(n, 'window')} {window_shape(report)}".rstrip()
    if n:
        text += (f", {c.between(c.start_ns, c.end_ns)} "
                 f"({span_text((c.end_ns - c.start_ns) / 1e9)}); {c.note()}")
    return text + "."


def verdict(report: Report) -> tuple[str, str]:
    """``("No anomaly", "none of the 900 windows ...")`` or ``("Anomalies found", "12 of 900
    windows flagged, in 2 episodes (by subsystem: cpu 10, storage 2).")``"""
    n = len(report.windows.start_ns)
    if report.no_anomaly:
        return "No anomaly", f"none of the {plural(n, 'window')} scored above the thresholds."
    by: dict[str, int] = {}
    for a in report.anomalies:
        top = a.subsystems[0] if a.subsystems else "unknown"
        by[top] = by.get(top, 0) + 1
    parts = ", ".join(f"{k} {v:,}" for k, v in sorted(by.items(), key=lambda kv: -kv[1]))
    return "Anomalies found", (f"{len(report.anomalies):,} of {plural(n, 'window')} flagged, "
                               f"in {plural(len(report.episodes), 'episode')} "
                               f"(by subsystem: {parts}).")


def decision_text(report: Report) -> str:
    """What flags a window: the combined threshold, persistence, where the thresholds come
    from, the preset, and whether the detectors were fitted on the run itself."""
    d = report.decision
    if not d:
        return ""
    names = ", ".join(x.name for x in report.detectors) or "the detectors"
    thr = d.get("combined_threshold")
    windows = int(d.get("persistence_windows") or 1)
    seconds = float(d.get("persistence_s") or 0.0)
    persist = ("in a single window (no persistence)" if windows <= 1 else
               f"for {windows} consecutive windows ({span_text(seconds)})")
    n = int(d.get("baseline_windows") or 0)
    quantile = d.get("threshold_quantile")
    where = (f"this run's own {plural(n, 'window')}" if d.get("self_fitted") else
             f"{plural(n, 'baseline window')}")
    source = (f"the {_ordinal(float(quantile))} percentile of the scores of {where}"
              if quantile is not None else f"the scores of {where}")
    fitted = ("self-fitted: no baseline given, the detectors were fitted on this run itself "
              "(robustly)" if d.get("self_fitted") else "fitted on the baseline")
    level = number(float(thr)) if thr is not None else "?"
    matter = ""
    if d.get("significance"):
        z = d.get("level_alone_z")
        matter = (" and some change in it matters: a channel moved by at least the least "
                  "change of its unit and kind (reveal analyze --explain-floors lists them)"
                  + (f"; such a change in a window's mean or median at least {number(float(z))} "
                     f"robust σ from the baseline flags the window even below the threshold"
                     if z is not None else ""))
    if d.get("significance") and d.get("matters_alone"):
        return (f"Decision: a window is flagged when a change in it matters {persist}: a "
                f"channel that can be a cause moved past the levels the baseline itself "
                f"reached, window by window or over the span it lasted, by at least the "
                f"least change of its unit against this host's capacity, in the direction "
                f"that hurts (reveal analyze --explain-floors lists them); or when its "
                f"combined score (surprise, the mean over {names}) is above {level} and "
                f"some change in it matters; or a direct sign shows (a quota throttling, "
                f"drops, a rare event, a setting changed). Thresholds at {source}; the "
                f"detectors rank the windows and say where the change lies; preset "
                f"{d.get('preset', '?')}; {fitted}.{_episodes(d)}")
    gap = d.get("episode_gap_s")
    episodes = (f" Flagged windows of the same subsystem within {span_text(float(gap))} "
                f"of each other are one episode." if gap else "")
    return (f"Decision: a window is flagged when the combined score (surprise, the mean over "
            f"{names}) is above {level} {persist}{matter}; thresholds at {source}; "
            f"preset {d.get('preset', '?')}; {fitted}.{episodes}")


def _episodes(d: dict) -> str:
    gap = d.get("episode_gap_s")
    return (f" Flagged windows of the same subsystem within {span_text(float(gap))} of each "
            f"other are one episode." if gap else "")


def warnings(report: Report) -> list[str]:
    """Every warning once, as a sentence."""
    out = []
    for text in dict.fromkeys(report.warnings):
        text = text.strip()
        if text:
            out.append(text[:1].upper() + text[1:] + ("" if text.endswith(".") else "."))
    return out


def truncated(shown: int, total: int, one: str, json_path: str | None,
              esc: Escape = plain, which: str = "") -> str:
    """``showing 50 of 503 flagged windows; all are in the JSON report (r.json)``, or ''
    when nothing is left out. ``which``: how the shown ones were chosen, in parentheses."""
    if total <= shown:
        return ""
    text = f"showing {shown:,} of {total:,} {one if total == 1 else one + 's'}"
    if which:
        text += f" ({which})"
    if json_path:
        text += f"; all are in the JSON report, {esc(str(json_path))}"
    return text


def shown_episodes(report: Report, limit: int) -> list[tuple[int, Episode]]:
    """At most ``limit`` episodes (the strongest), numbered and listed in time order."""
    numbered = list(enumerate(sorted(report.episodes, key=lambda e: e.start_ns), 1))
    if len(numbered) > limit:
        keep = sorted(numbered, key=lambda ie: -ie[1].peak_score)[:limit]
        numbered = sorted(keep, key=lambda ie: ie[0])
    return numbered


def shown_windows(report: Report, limit: int) -> list[Anomaly]:
    """The ``limit`` strongest flagged windows, strongest first."""
    return sorted(report.anomalies, key=lambda a: (-a.score, a.window_id))[:limit]


def evidence(anomaly: Anomaly, n: int = 3) -> list[str]:
    """The window's main reasons, unescaped: ``channel feature (size)``, the size in least
    changes that matter where the change matters (``4.2× what matters``), else the
    reason's share of the detectors' surprise (``3 % of the surprise``)."""
    return [f"{r.channel} {FEATURE_SHORT.get(r.feature, r.feature)} ({reason_size(r)})"
            for r in anomaly.reasons[:n]]


def reason_size(reason: Reason) -> str:
    """How large a reason is, in the terms of the model that decided (see
    :func:`evidence`)."""
    if reason.matters is not None and math.isfinite(reason.matters):
        return f"{times(reason.matters)} what matters"
    return f"{reason.contribution:.0%} of the surprise"


def times(size: float) -> str:
    """A size in least changes that matter: ``4.2×``, ``14×``, ``1,250×``."""
    return f"{size:.2g}×" if size < 10 else f"{size:,.0f}×"


def _md_row(cells: Sequence[Any]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def render_table(report: Report, limit: int = 50, json_path: str | None = None) -> str:
    """The report in Markdown: overview, verdict, decision, warnings, then the episodes and
    the strongest windows as tables (``limit`` rows each). ``json_path``: where the JSON
    report was written (said when rows are left out), None if nowhere.

    Every tenant-controlled string (host, path, channel labels, claims) is escaped."""
    c = clock(report)
    lines = [overview(report, markdown), ""]
    head, rest = verdict(report)
    lines.append(f"**{head}**: {rest}")
    if report.decision:
        lines += ["", decision_text(report)]
    for text in warnings(report):
        lines += ["", f"Warning: {markdown(text, 400)}"]
    if report.no_anomaly:
        return "\n".join(lines) + "\n"
    episodes = shown_episodes(report, limit)
    lines += ["", f"### {plural(len(report.episodes), 'Episode')}", ""]
    note = truncated(len(episodes), len(report.episodes), "episode", json_path, markdown,
                     "the strongest, in time order")
    if note:
        lines += [f"{note[:1].upper()}{note[1:]}.", ""]
    lines += [_md_row(["#", "When", "Length", "Windows", "Peak score", "Subsystem",
                       "Claim at the peak"]), _md_row(["---"] * 7)]
    for i, e in episodes:
        lines.append(_md_row([i, c.between(e.start_ns, e.end_ns),
                              span_text((e.end_ns - e.start_ns) / 1e9), len(e.window_ids),
                              f"{e.peak_score:.2f}", markdown(e.subsystem, 20),
                              markdown(e.claim, 400)]))
    rows = shown_windows(report, limit)
    lines += ["", "### Strongest windows", ""]
    note = truncated(len(rows), len(report.anomalies), "flagged window", json_path, markdown)
    if note:
        lines += [f"{note[:1].upper()}{note[1:]}.", ""]
    lines += [_md_row(["Window", "Time", "Score", "Detectors", "Subsystems", "Claim",
                       "Main reasons"]), _md_row(["---"] * 7)]
    for a in rows:
        lines.append(_md_row([a.window_id, c.at(a.start_ns), f"{a.score:.2f}",
                              markdown(", ".join(a.detectors)),
                              markdown(", ".join(a.subsystems[:2]), 40) or "-",
                              markdown(a.claim, 400),
                              "; ".join(markdown(x, 100) for x in evidence(a))]))
    return "\n".join(lines) + "\n"
