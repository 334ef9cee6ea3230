"""HTML report: page size and time to first paint in headless Chromium.

Two reports are rendered with their traces: a demo-sized one (a minute at 100 ms with a CPU
contention and a second shift, as ``reveal demo`` records) and an hour at 100 ms with a fault
every ten minutes (3,600 windows); with ``--demo DIR`` also the report of a real demo's runs
(every channel the collector recorded on this host). Each page is opened offline in headless
Chromium over the DevTools pipe (tests/chromium.py), in a fresh tab per repeat, and the
page's own performance entries are read back: first paint, first contentful paint (when the
frame was presented, and when it was painted), the load event, and when every Bokeh plot was
drawn (milliseconds since navigation start). Targets: at most 5 MB for the hour, first paint
within 2 s.

Writes bench/results/report_html.json and a screenshot of the demo-sized page's top,
bench/results/report_html.png.

    python bench/bench_report_html.py [--demo DIR] [--repeats 3]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import chromium  # noqa: E402
from provenance import analysis_settings, arguments, write_result  # noqa: E402
from reveal.frame import Telemetry  # noqa: E402
from reveal.model import report_run  # noqa: E402
from reveal.report.html import render_html  # noqa: E402
from reveal.report.html_page import bokeh_script  # noqa: E402
from synthetic import ar1_host  # noqa: E402

RESULTS = ROOT / "bench" / "results"
SIZE_BUDGET_MB = 5.0
PAINT_TARGET_MS = 2000.0

#: milliseconds since navigation start when every plot div holds Bokeh's drawing
READY_JS = """new Promise(function (resolve) {
  var data = JSON.parse(document.getElementById('reveal-plots').textContent);
  var want = Object.keys(data).length;
  function drawn() {
    var n = 0;
    function walk(v) { if (!v) return; if (v.model.type === 'Figure') n++;
      (v.child_views ? Array.from(v.child_views) : []).forEach(walk); }
    if (window.Bokeh) Object.values(Bokeh.index).forEach(walk);
    var filled = Array.from(document.querySelectorAll('.plot'))
      .filter(function (d) { return d.children.length > 0; }).length;
    return n >= want && filled >= want;
  }
  (function check() { if (drawn()) resolve(performance.now());
                      else requestAnimationFrame(check); })();
})"""
#: milliseconds since navigation start when the timeline is drawn (or now, if it was)
TIMELINE_JS = """new Promise(function (resolve) {
  (function check() {
    var v = window.Bokeh && Object.values(Bokeh.index).find(function (r) {
      return r.el && document.getElementById('plot-timeline').contains(r.el); });
    if (v) resolve(performance.now()); else requestAnimationFrame(check);
  })();
})"""
ENTRIES_JS = """(function () {
  var out = {};
  performance.getEntriesByType('paint').forEach(function (e) {
    out[e.name] = e.startTime;  // when the frame was presented
    if (e.paintTime !== undefined) out[e.name + ' (painted)'] = e.paintTime; });
  var nav = performance.getEntriesByType('navigation')[0];
  out.dom_content_loaded = nav.domContentLoadedEventEnd; out.load = nav.loadEventEnd;
  return out;
})()"""


def _shifted(t: Telemetry, spans_s: list[tuple[float, float]], column: int,
             amount: float) -> Telemetry:
    """``t`` with ``amount`` added to one column over each span (seconds from the start)."""
    values = t.values.copy()
    step = t.interval_s
    for a, b in spans_s:
        values[int(a / step):int(b / step), column] += amount
    return Telemetry(t.host, t.timestamps_ns, values, list(t.channels), dict(t.meta))


def demo_sized() -> tuple[Any, Telemetry, Telemetry, str]:
    """A minute at 100 ms against a minute's baseline: CPU contention, then dirty memory."""
    run = ar1_host(60, 11, fault=(12, 22))
    run = _shifted(run, [(36, 46)], 1, 3e6)
    base = ar1_host(60, 12)
    return report_run(run, base), run, base, "synthetic: 60 s at 100 ms, 4 channels, 2 faults"


def from_demo(directory: Path) -> tuple[Any, Telemetry, Telemetry, str]:
    """The runs a ``reveal demo`` recorded in ``directory``."""
    from reveal.store.run_reader import read_run

    runs = directory / "runs" / "demo"
    run, base = read_run(runs / "run1"), read_run(runs / "baseline1")
    what = (f"reveal demo recorded on this host: {run.n_samples * run.interval_s:.0f} s at "
            f"{run.interval_s * 1e3:.0f} ms, {len(run.channels):,} channels")
    return report_run(run, base), run, base, what


def hour() -> tuple[Any, Telemetry, Telemetry, str]:
    """An hour at 100 ms with a CPU shift every ten minutes, against ten clean minutes."""
    run = ar1_host(3600, 21)
    run = _shifted(run, [(600 * k + 300, 600 * k + 330) for k in range(6)], 0, 45.0)
    base = ar1_host(600, 22)
    return report_run(run, base), run, base, "synthetic: 1 h at 100 ms, 4 channels, 6 faults"


def measure(browser: chromium.Browser, path: Path, repeats: int,
            screenshot: Path | None = None) -> dict[str, Any]:
    """Paint and drawing times (ms since navigation start), median over ``repeats``."""
    runs = []
    for i in range(repeats):
        page = chromium.Page(browser, 1280, 900)
        page.open(path, timeout_s=120)
        timeline = page.evaluate(TIMELINE_JS, timeout_s=120)
        ready = page.evaluate(READY_JS, timeout_s=120)
        entries = page.evaluate(ENTRIES_JS)
        entries["plots_drawn"] = ready
        entries["timeline_drawn"] = timeline
        errors = page.errors()
        if errors:
            raise RuntimeError(f"{path.name}: page errors: {errors[:3]}")
        if page.requests():
            raise RuntimeError(f"{path.name}: page asked the network for {page.requests()}")
        if screenshot is not None and i == 0:
            from PIL import Image

            image = Image.open(io.BytesIO(page.screenshot()))
            image.thumbnail((800, 800))
            image.convert("P", palette=Image.Palette.ADAPTIVE, colors=128).save(
                screenshot, optimize=True)
        page.send("Page.close")
        runs.append(entries)
    keys = sorted({k for r in runs for k in r})
    return {k: round(statistics.median(r[k] for r in runs if k in r), 1) for k in keys}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--demo", type=Path, metavar="DIR",
                        help="also measure the report of the runs a `reveal demo` recorded "
                             "in DIR (demo_recorded)")
    parser.add_argument("--repeats", type=int, default=3, help="page loads per report")
    args = parser.parse_args()
    if not chromium.available():
        print(f"{chromium.CHROMIUM} is not installed", file=sys.stderr)
        return 2
    RESULTS.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {
        "bench": "report_html",
        "host": {"machine": platform.machine(), "python": platform.python_version()},
        "chromium": None,
        "bokeh_bundle_bytes": len(bokeh_script().encode()),
        "load_average_before": [round(x, 2) for x in os.getloadavg()],
        "targets": {"size_mb_max": SIZE_BUDGET_MB, "first_paint_ms_max": PAINT_TARGET_MS},
        "reports": {},
    }
    cases = {"demo": demo_sized, "hour_100ms": hour}
    if args.demo:
        cases["demo_recorded"] = lambda: from_demo(args.demo)
    browser = chromium.start()
    try:
        out["chromium"] = browser.send("Browser.getVersion")["product"]
        with tempfile.TemporaryDirectory(prefix="reveal-bench-html-") as tmp:
            for name, make in cases.items():
                print(f"{name}: analysing", file=sys.stderr, flush=True)
                report, run, base, what = make()
                t = time.perf_counter()
                html = render_html(report, run, base)
                render_s = time.perf_counter() - t
                path = Path(tmp) / f"{name}.html"
                path.write_text(html, encoding="utf-8")
                size = path.stat().st_size
                print(f"{name}: {size / 1e6:.2f} MB, opening in Chromium", file=sys.stderr,
                      flush=True)
                shot = RESULTS / "report_html.png" if name == "demo" else None
                timings = measure(browser, path, args.repeats, shot)
                out["reports"][name] = {
                    "what": what,
                    "windows": len(report.windows.start_ns),
                    "episodes": len(report.episodes),
                    "samples": int(run.n_samples),
                    "html_bytes": size,
                    "html_mb": round(size / 1e6, 3),
                    "within_size_budget": size / 1e6 <= SIZE_BUDGET_MB,
                    "render_s": round(render_s, 3),
                    "paint_ms": timings,
                    "first_paint_within_target": timings.get("first-paint", np.inf)
                    <= PAINT_TARGET_MS,
                }
    finally:
        browser.close()
    out["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    target = RESULTS / "report_html.json"
    write_result(target, out, {**arguments(args), "cases": list(cases),
                               "size_budget_mb": SIZE_BUDGET_MB,
                               "paint_target_ms": PAINT_TARGET_MS,
                               "analysis": analysis_settings()}, indent=2)
    print(json.dumps(out["reports"], indent=2))
    print(f"written: {target}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
