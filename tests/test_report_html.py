"""The HTML report in a real browser: a real analysis (a synthetic host with a level shift)
rendered to one page, opened offline in headless Chromium; the timeline drawn, one card per
episode, hover naming the window; tenant text inert in HTML, Markdown and the terminal;
``reveal report`` and ``reveal analyze --html`` end to end, and their errors."""

from __future__ import annotations

import dataclasses
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
from markdown_it import MarkdownIt

import chromium
from reveal.cli import main
from reveal.frame import Telemetry
from reveal.model import report_run
from reveal.report.html import render_html
from reveal.report.html_decimate import min_max, peak_rows
from reveal.report.html_page import script_json
from reveal.report.schema import Report
from reveal.report.terminal import render_text
from reveal.report.text import render_table
from reveal.store.run_writer import write_run
from synthetic import ar1_host

browser = chromium.browser

SCRIPT = "<script>document.title='pwned'</script>"
IMG = "\"><img src=x onerror=\"document.body.setAttribute('data-pwned','1')\">"
WALL = 1_700_000_000 * 1_000_000_000
FAULT_S = (30.0, 45.0)

#: every Figure view Bokeh drew: its title, where its canvas is, its frame, and the
#: x pixel of the time given (seconds since the run's start, or ms since the epoch)
FIGURES_JS = """(function (x) {
  var out = [];
  function walk(v) {
    if (!v) return;
    if (v.model.type === 'Figure') out.push(v);
    (v.child_views ? Array.from(v.child_views) : []).forEach(walk);
  }
  Object.values(Bokeh.index).forEach(walk);
  return out.map(function (v) {
    var r = v.el.getBoundingClientRect(), f = v.frame.bbox;
    return {title: v.model.title ? v.model.title.text : '', left: r.left, top: r.top,
            fx: f.left, fy: f.top, fw: f.width, fh: f.height,
            sx: x === null ? null : v.frame.x_scale.compute(x)};
  });
})(%s)"""
#: text and element counts of the page including Bokeh's shadow roots
DEEP_JS = """(function () {
  var text = [], canvases = 0, imgs = 0, scripts = 0;
  function walk(root) {
    root.querySelectorAll('*').forEach(function (e) {
      if (e.tagName === 'CANVAS') canvases++;
      if (e.tagName === 'IMG') imgs++;
      if (e.tagName === 'SCRIPT') scripts++;
      if (e.shadowRoot) { text.push(e.shadowRoot.textContent); walk(e.shadowRoot); }
    });
  }
  walk(document);
  return {shadowText: text.join(' '), canvases: canvases, imgs: imgs, scripts: scripts};
})()"""


def _evil(t: Telemetry, extra: bool = False) -> Telemetry:
    """``t`` from a host, a channel and an interface label named by a hostile tenant (the
    faulted CPU channel carries the ``onerror`` payload); ``extra``: one more channel,
    absent from the baseline, so a warning quotes it."""
    channels = list(t.channels)
    channels[0] = IMG
    channels[3] = f"net.rx_bytes{{iface={SCRIPT}}}"
    values = t.values
    if extra:
        channels.append(f"mem.Cached{{cgroup={IMG}}}")
        values = np.column_stack([values, values[:, 1]])
    return Telemetry(IMG + SCRIPT, t.timestamps_ns, values, channels,
                     dict(t.meta) | {"wall_offset_ns": WALL})


@pytest.fixture(scope="module")
def plain_case() -> tuple[Report, Telemetry, Telemetry]:
    run, base = ar1_host(90, 1, fault=FAULT_S), ar1_host(90, 2)
    return report_run(run, base), run, base


@pytest.fixture(scope="module")
def evil_case() -> tuple[Report, Telemetry, Telemetry]:
    run, base = _evil(ar1_host(90, 1, fault=FAULT_S), extra=True), _evil(ar1_host(90, 2))
    return report_run(run, base), run, base


def _open(browser: chromium.Browser, path: Path) -> chromium.Page:
    page = browser.page(width=1280, height=900)
    page.open(path)
    page.wait_for("window.Bokeh && document.querySelectorAll('.plot').length === "
                  "Object.keys(JSON.parse(document.getElementById('reveal-plots')"
                  ".textContent)).length && Array.from(document.querySelectorAll('.plot'))"
                  ".every(function (d) { return d.children.length > 0; })")
    page.wait_for(f"{FIGURES_JS % 'null'}.length > 0")
    return page


def _hover_episode(page: chromium.Page, x: float) -> None:
    """Move the mouse over the combined-score plot at time ``x`` (axis units)."""
    page.evaluate("document.getElementById('plot-timeline').scrollIntoView()")
    top = page.evaluate(FIGURES_JS % repr(x))[0]
    assert top["title"].startswith("Combined score")
    px = top["left"] + top["sx"]
    py = top["top"] + top["fy"] + top["fh"] / 2
    for dx in (-3, 0):  # a move into the plot, then onto the point
        page.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": px + dx, "y": py})
    page.wait_for(f"{DEEP_JS}.shadowText.indexOf('top reason') >= 0", timeout_s=10)


def test_page_draws_offline_in_chromium(browser, plain_case, tmp_path):
    report, run, base = plain_case
    assert report.episodes, "the level shift must give at least one episode"
    html = render_html(report, run, base)
    path = tmp_path / "report.html"
    path.write_text(html, encoding="utf-8")
    page = _open(browser, path)
    assert page.requests() == []  # nothing fetched: scripts and styles are inline
    assert page.errors() == []
    assert page.evaluate("document.querySelectorAll('section.episode').length") \
        == len(report.episodes)
    assert page.evaluate("document.querySelector('header.verdict h1').textContent") \
        == "Anomalies found"
    # Bokeh drew: its elements in the timeline's div, canvases in their shadow roots
    assert page.evaluate("document.querySelectorAll('#plot-timeline [class*=\"bk-\"]')"
                         ".length") > 0
    assert page.evaluate(DEEP_JS)["canvases"] >= 1 + len(report.detectors)
    figures = page.evaluate(FIGURES_JS % "null")
    assert len(figures) >= 1 + len(report.detectors) + 1  # timeline plots and a trace
    # the timeline's area is drawn, not blank
    rect = page.evaluate("(function () { var r = document.getElementById('plot-timeline')"
                         ".getBoundingClientRect(); return {x: r.left + scrollX, "
                         "y: r.top + scrollY, width: r.width, height: r.height}; })()")
    assert rect["height"] > 300
    from PIL import Image

    shot = np.asarray(Image.open(io.BytesIO(page.screenshot(clip=rect))).convert("RGB"))
    assert shot.shape[0] >= rect["height"] - 1
    inked = (shot < 235).any(axis=2).mean()
    assert inked > 0.03, f"timeline area is {inked:.1%} non-white"
    # the episode is shaded where the level shift is: red-dominant pixels in the top plot
    red = (shot[..., 0] > 200) & (shot[..., 1] < 225) & (shot[..., 2] < 225)
    assert red.sum() > 500


def test_hover_names_the_window_and_its_reason(browser, plain_case, tmp_path):
    report, run, base = plain_case
    path = tmp_path / "report.html"
    path.write_text(render_html(report, run, base), encoding="utf-8")
    page = _open(browser, path)
    mid = sum(FAULT_S) / 2  # seconds since the run's first sample
    _hover_episode(page, mid)
    text = page.evaluate(DEEP_JS)["shadowText"]
    assert re.search(r"time\s*:?\s*\+00:00:[34]\d", text), text[:500]
    assert "derived.cpu_busy_pct" in text  # the flagged window's strongest reason
    assert page.errors() == []


def test_tenant_text_is_escaped_in_the_page_source(evil_case):
    report, run, base = evil_case
    html = render_html(report, run, base)
    assert "onerror=\"document" not in html and "<img" not in html
    assert "<script>document" not in html
    # the plots' JSON cannot be closed from inside: no '<' in it at all
    data = re.search(r'<script type="application/json" id="reveal-plots">(.*?)</script>',
                     html, re.S).group(1)
    assert "<" not in data and ">" not in data
    assert any(IMG in s for s in _strings(json.loads(data)))  # tooltips quote the channel


def _strings(obj: object) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, list):
        return [s for v in obj for s in _strings(v)]
    return []


def test_tenant_text_is_inert_in_chromium(browser, evil_case, tmp_path):
    report, run, base = evil_case
    assert any(IMG in w for w in report.warnings)
    path = tmp_path / "report.html"
    path.write_text(render_html(report, run, base), encoding="utf-8")
    page = _open(browser, path)
    title = page.evaluate("document.title")
    assert title == f"Reveal report: {IMG}{SCRIPT}"  # shown as typed, not run
    assert page.evaluate("document.body.hasAttribute('data-pwned')") is False
    assert page.evaluate("document.querySelectorAll('[data-pwned], img').length") == 0
    text = page.evaluate("document.body.innerText")
    assert SCRIPT in text and IMG in text  # visible as text
    # the wall-clock axis: the fault's middle in ms since the epoch, hovered
    _hover_episode(page, (WALL / 1e6) + sum(FAULT_S) / 2 * 1e3)
    deep = page.evaluate(DEEP_JS)
    assert "data-pwned" in deep["shadowText"]  # the claim shows in the tooltip, as text
    assert deep["imgs"] == 0
    assert page.evaluate("document.body.hasAttribute('data-pwned')") is False
    assert page.evaluate("document.title") == title
    assert page.errors() == []
    # the tenant's text is in no script the page runs (only in the plots' JSON data)
    assert page.evaluate("Array.from(document.scripts).every(function (s) { return "
                         "s.type === 'application/json' || s.text.indexOf('pwned') < 0; })")
    assert deep["scripts"] == page.evaluate("document.scripts.length")


def test_tenant_text_is_inert_in_markdown_and_terminal(evil_case):
    report, _, _ = evil_case
    md = render_table(report, json_path="r.json")
    assert IMG not in md and SCRIPT not in md
    rendered = MarkdownIt("commonmark").render(md)  # raw HTML passes through CommonMark
    assert "<img" not in rendered and "<script" not in rendered
    assert "&lt;script&gt;" in rendered or "&lt;img" in rendered  # shown, as text
    for tty in (False, True):
        text = render_text(report, tty=tty, width=160)
        controls = re.sub(r"\x1b\[[0-9;]*m", "", text) if tty else text
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", controls)
    assert "data-pwned" in render_text(report, width=400)  # as typed, not dropped


def test_script_json_cannot_close_its_element():
    value = {"claim": "</script><script>alert(1)</script>&amp;\u2028\u2029", "n": [1.5]}
    text = script_json(value)
    assert not set("<>&\u2028\u2029") & set(text)
    assert json.loads(text) == value


def test_decimation_keeps_extremes_within_the_budget():
    x = np.arange(36_000, dtype=np.float64) * 0.1
    y = np.sin(x / 7.0)
    y[12_345], y[30_000] = 50.0, -40.0
    y[100:400] = np.nan
    xs, ys = min_max(x, y, buckets=900)
    assert len(xs) == len(ys) <= 1800
    assert ys.max() == 50.0 and ys.min() == -40.0
    assert np.all(np.diff(xs) >= 0) and np.isfinite(ys).all()
    rows = peak_rows(y, 500)
    assert len(rows) == 500 and 12_345 in rows and np.all(np.diff(rows) > 0)


def test_long_trace_is_drawn_from_few_points(plain_case):
    """An hour at 100 ms (36,000 samples) of one channel reaches the page as at most
    1,800 points, its spike kept, NaN gaps dropped."""
    from reveal.report.html_plots import Band, trace
    from reveal.report.units import Quantity

    report = plain_case[0]
    stamps = np.arange(36_000, dtype=np.int64) * 100_000_000
    values = np.random.default_rng(0).normal(size=36_000)
    values[20_000], values[5_000:5_100] = 99.0, np.nan
    plot = trace(report, stamps, values, Quantity("%"), (0, int(stamps[-1])),
                 (int(stamps[19_000]), int(stamps[21_000])), Band.of(values))
    data = plot.renderers[-1].data_source.data
    assert len(data["y"]) <= 1800 and float(np.max(data["y"])) == 99.0
    assert np.isfinite(data["y"]).all()


def test_a_clean_report_says_no_anomaly(plain_case):
    clean = dataclasses.replace(plain_case[0], anomalies=[], episodes=[])
    html = render_html(clean)
    assert '<header class="verdict clean"><h1>No anomaly</h1>' in html
    assert 'class="episode"' not in html and 'id="plot-timeline"' in html


def test_telemetry_not_covering_an_episode_draws_no_trace(plain_case):
    report, _, base = plain_case
    elsewhere = ar1_host(20, 1, start_s=500.0)  # the same host, long after the run
    html = render_html(report, elsewhere, base)
    assert html.count('<section class="episode"') == len(report.episodes)
    assert 'id="plot-e1-c1"' not in html


def test_saved_report_reads_back_whole(plain_case):
    report = plain_case[0]
    payload = json.loads(json.dumps(report.to_dict()))
    again = Report.from_dict(payload)
    assert again.to_dict() == payload
    bare = Report.from_dict(json.loads(json.dumps(report.to_dict(with_windows=False))))
    assert len(bare.windows.start_ns) == 0 and len(bare.episodes) == len(report.episodes)
    assert render_html(bare).count('<section class="episode"') == len(report.episodes)


@pytest.fixture(scope="module")
def saved(tmp_path_factory, plain_case) -> dict[str, Path]:
    """Run directories of the plain case and its analysis by ``reveal analyze``."""
    root = tmp_path_factory.mktemp("report-cli")
    _, run, base = plain_case
    paths = {"run": write_run(run, root / "run"), "base": write_run(base, root / "base"),
             "json": root / "report.json", "html": root / "analyze.html"}
    assert main(["analyze", str(paths["run"]), "--baseline", str(paths["base"]), "--json",
                 str(paths["json"]), "--html", str(paths["html"]), "--format", "none",
                 "--quiet"]) == 0
    return paths


def test_analyze_writes_html(saved):
    payload = json.loads(saved["json"].read_text())
    html = saved["html"].read_text()
    assert payload["summary"]["episodes"] >= 1
    assert html.count('<section class="episode"') == payload["summary"]["episodes"]
    assert 'id="plot-e1-c1"' in html  # traces of the run against the baseline


def test_report_command_renders_saved_json(saved, tmp_path, capsys):
    out = tmp_path / "again.html"
    assert main(["report", str(saved["json"]), "--html", str(out), "--run", str(saved["run"]),
                 "--baseline", str(saved["base"])]) == 0
    assert str(out) in capsys.readouterr().out
    payload = json.loads(saved["json"].read_text())
    html = out.read_text()
    assert html.startswith("<!DOCTYPE html>")
    assert html.count('<section class="episode"') == payload["summary"]["episodes"]
    assert 'id="plot-e1-c1"' in html
    plain = tmp_path / "plain.html"
    assert main(["report", str(saved["json"]), "--html", str(plain)]) == 0
    assert 'id="plot-e1-c1"' not in plain.read_text()  # no run given: no traces
    # a demo's report lists its injected faults: the page shows them
    start = payload["run"]["start_ns"] + 30 * 1_000_000_000
    demo = tmp_path / "demo.json"
    demo.write_text(json.dumps(payload | {"injected": [{
        "kind": "cpu_contention", "intensity": "high", "start_ns": start,
        "end_ns": start + 15 * 1_000_000_000}]}))
    assert main(["report", str(demo), "--html", str(plain)]) == 0
    html = plain.read_text()
    assert "Injected faults" in html and "cpu_contention" in html


@pytest.mark.parametrize("case, expected", [
    ("missing", "no such file"),
    ("truncated", "truncated JSON"),
    ("cut_in_a_string", "truncated JSON"),
    ("garbage", "not valid JSON"),
    ("foreign", "not a Reveal report"),
    ("version", "version 99 is not supported"),
    ("incomplete", "'anomalies' is missing"),
    ("malformed", "malformed Reveal report"),
    ("threshold", "decision.combined_threshold is not a number"),
])
def test_report_command_errors(saved, tmp_path, capsys, case, expected):
    good = json.loads(saved["json"].read_text())
    src = tmp_path / f"{case}.json"
    if case == "truncated":
        src.write_text(saved["json"].read_text()[: 3000])
    elif case == "cut_in_a_string":  # the file ends inside a string value
        text = saved["json"].read_text()
        cut = text[: text.index(': "', 2000) + 4]  # just after a string value's quote
        with pytest.raises(json.JSONDecodeError, match="Unterminated string"):
            json.loads(cut)
        src.write_text(cut)
    elif case == "garbage":
        src.write_text("{\"schema\": reveal}\n" + "x" * 100)
    elif case == "foreign":
        src.write_text(json.dumps({"hello": "world"}))
    elif case == "version":
        src.write_text(json.dumps(good | {"version": 99}))
    elif case == "incomplete":
        src.write_text(json.dumps({k: v for k, v in good.items() if k != "anomalies"}))
    elif case == "malformed":
        src.write_text(json.dumps(good | {"episodes": [{"start_ns": "x", "end_ns": 1,
                                                       "window_ids": [], "peak_score": 1,
                                                       "subsystem": "cpu", "claim": ""}]}))
    elif case == "threshold":
        src.write_text(json.dumps(good | {"decision": good["decision"]
                                          | {"combined_threshold": "</script>"}}))
    out = tmp_path / "out.html"
    out.write_text("earlier page")
    assert main(["report", str(src), "--html", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expected in err and str(src) in err
    assert out.read_text() == "earlier page"  # nothing lost


def test_report_command_argument_errors(saved, tmp_path, capsys):
    assert main(["report", str(saved["json"]), "--html", str(tmp_path / "no" / "x.html")]) == 2
    assert "no such directory" in capsys.readouterr().err
    assert main(["report", str(saved["json"]), "--html", str(tmp_path / "x.html"),
                 "--baseline", str(saved["base"])]) == 2
    assert "give --run too" in capsys.readouterr().err
    assert not (tmp_path / "x.html").exists()
