"""Write a report directory: ``report.md`` + ``report.json`` + PNG figures.

::

    DIR/report.md          summary, anomaly table, injected faults and whether each was
                           caught, the figures
    DIR/report.json        the report (docs/report-schema.md) plus ``injected`` episodes
    DIR/timeline.png       per-detector scores over time (paper Fig. 2)
    DIR/subsystems.png     anomaly causes by subsystem (Fig. 3)
    DIR/traces/trace_NN.png  implicated channels around each anomaly (Figs. 7–8)

Every tenant-controlled string (channel labels, paths, host names) is escaped for Markdown.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reveal.report.escape import markdown
from reveal.report.figures import channel_traces, detector_timeline, subsystem_counts
from reveal.report.text import clock, plural, render_table
from reveal.report.times import Clock, span_text


def _fault_rows(faults: Sequence[Any], scores: Sequence[Any], times: Clock) -> list[str]:
    rows = ["| Injected fault | Intensity | From | To | Detected | Time to detect (s) "
            "| Attributed to |", "|---|---|---|---|---|---|---|"]
    by_start = {getattr(s, "start_ns", None): s for s in scores}
    for ep in faults:
        s = by_start.get(ep.start_ns)
        detected = "yes" if s is not None and s.detected else "no"
        ttd = f"{s.ttd_s:.1f}" if s is not None and s.ttd_s is not None else "–"
        attributed = (markdown(s.attributed) if s is not None and s.attributed else "–")
        if s is not None and s.detected:
            attributed += " ✓" if s.attribution_ok else f" (injected: {ep.subsystem})"
        rows.append(f"| {markdown(ep.kind)} | {markdown(ep.intensity)} | "
                    f"{times.at(ep.start_ns)} | {times.at(ep.end_ns)} | "
                    f"{detected} | {ttd} | {attributed} |")
    return rows


def write_report_dir(report: Any, out_dir: Path, telemetry: Any = None, baseline: Any = None,
                     faults: Sequence[Any] = (), scores: Sequence[Any] = (),
                     title: str = "Reveal report") -> dict[str, Path]:
    """Write the directory; returns the paths written by role (``md``, ``json``, ...).

    ``telemetry``/``baseline``: derived Telemetry of the run and baseline (for the trace
    figures; skipped when None). ``faults``: injected episodes (shaded in figures, listed
    in the Markdown); ``scores``: their :class:`reveal.inject.scoring.EpisodeScore`.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = int(report.run.get("start_ns") or 0)
    written: dict[str, Path] = {}
    payload = report.to_dict()
    payload["injected"] = [f.to_dict() for f in faults]
    if scores:
        payload["injected_scores"] = [s.to_dict() for s in scores]
    written["json"] = out_dir / "report.json"
    written["json"].write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    written["timeline"] = detector_timeline(report, out_dir / "timeline.png", faults, t0)
    written["subsystems"] = subsystem_counts(report, out_dir / "subsystems.png")
    traces = []
    if telemetry is not None:
        traces = channel_traces(report, telemetry, out_dir / "traces", faults, baseline)
    summary = payload["summary"]
    lines = [f"# {markdown(title)}", "",
             f"Host {markdown(str(report.run.get('host')))}, run "
             f"{markdown(str(report.run.get('path')))}, "
             f"{span_text(float(report.run.get('duration_s') or 0))} sampled every "
             f"{span_text(float(report.run.get('interval_s') or 0))}; "
             f"baseline {markdown(str(report.baseline.get('path') or 'none'))}.", "",
             f"**Verdict: {summary['verdict']}** — {summary['anomalous_windows']:,} of "
             f"{plural(summary['windows'], 'window')} flagged, "
             f"{plural(summary['episodes'], 'episode')}; "
             f"{report.channels.get('analysed', '?')} channels analysed.", ""]
    if faults:
        lines += ["## Injected faults (ground truth)", "",
                  *_fault_rows(faults, scores, clock(report)), ""]
    lines += ["## Anomalies", "", render_table(report, json_path=written["json"].name), "",
              "## Figures", "",
              "Scores per detector over time, with thresholds, flagged windows and injected "
              "faults shaded:", "", "![per-detector timeline](timeline.png)", "",
              "Anomaly causes by subsystem:", "", "![anomalies by subsystem](subsystems.png)",
              ""]
    if traces:
        lines += ["Implicated channels around each anomaly (derived values; per-second "
                  "rates for counters):", ""]
        lines += [f"![trace {i}](traces/{p.name})" for i, p in enumerate(traces, 1)]
        written.update({f"trace{i}": p for i, p in enumerate(traces, 1)})
    written["md"] = out_dir / "report.md"
    written["md"].write_text("\n".join(lines) + "\n", encoding="utf-8")
    return written
