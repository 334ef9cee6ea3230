"""Terminal / Markdown rendering of a report: the anomaly table and a plain verdict."""

from __future__ import annotations

from datetime import UTC, datetime

from reveal.report.escape import markdown
from reveal.report.model import Report

FEATURE_SHORT = {"autocorr_lag1": "autocorr", "adf_stat": "ADF"}


def format_time(ns: int, wall_offset_ns: int) -> str:
    """Wall-clock HH:MM:SS when the offset is known, else seconds from the run start."""
    if wall_offset_ns:
        moment = datetime.fromtimestamp((ns + wall_offset_ns) / 1e9, tz=UTC)
        return moment.strftime("%H:%M:%S")
    return f"{ns / 1e9:.1f}s"


def render_table(report: Report, limit: int = 50) -> str:
    """A Markdown table of anomalies (window id / time, detectors, subsystem, reasons, claim).

    Tenant-controlled text (channel labels) is escaped. ``limit`` rows at most, strongest
    first; a line says how many were left out.
    """
    run = report.run
    offset = int(run.get("wall_offset_ns") or 0)
    head = [f"Run {markdown(str(run.get('path', '?')))} on host {markdown(str(run.get('host')))}:"
            f" {len(report.windows.start_ns)} windows, {len(report.anomalies)} flagged."]
    if report.baseline.get("self_fitted"):
        head.append("No baseline given: detectors were fitted on this run itself (robustly); "
                    "thresholds are relative to the run's own typical behaviour.")
    for warning in report.warnings:
        head.append(f"Note: {markdown(warning, 300)}")
    if report.no_anomaly:
        head.append("")
        head.append("**No anomaly**: no window scored above the baseline thresholds.")
        return "\n".join(head) + "\n"
    rows = sorted(report.anomalies, key=lambda a: -a.score)[:limit]
    rows.sort(key=lambda a: a.window_id)
    lines = ["", "| Window (ID / time) | Detectors | Subsystem | Main reasons | Claim |",
             "|---|---|---|---|---|"]
    for a in rows:
        reasons = "; ".join(
            f"{markdown(r.channel, 80)} {FEATURE_SHORT.get(r.feature, r.feature)}"
            f" ({r.contribution:.0%})" for r in a.reasons[:3])
        lines.append(f"| {a.window_id} / {format_time(a.start_ns, offset)} | "
                     f"{', '.join(a.detectors)} | {', '.join(a.subsystems[:2]) or '-'} | "
                     f"{reasons} | {markdown(a.claim, 400)} |")
    if len(report.anomalies) > limit:
        lines.append(f"\n{len(report.anomalies) - limit} more flagged windows are in the JSON "
                     "report.")
    if report.episodes:
        lines += ["", "| Episode | From | To | Windows | Subsystem | Claim |",
                  "|---|---|---|---|---|---|"]
        for i, e in enumerate(report.episodes[:limit], 1):
            lines.append(f"| {i} | {format_time(e.start_ns, offset)} | "
                         f"{format_time(e.end_ns, offset)} | {len(e.window_ids)} | "
                         f"{e.subsystem} | {markdown(e.claim, 400)} |")
    return "\n".join(head + lines) + "\n"
