"""The Python API: ``reveal.analyze`` on DataFrames, run paths and Telemetry; the result's
tables, JSON and HTML; ``reveal.analyze`` is the API function; one-line errors for bad
frames; untrusted column names kept as data and escaped."""

from __future__ import annotations

import html
import inspect
import io
import json
import pydoc
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest

import chromium
import reveal
import reveal.analysis.pipeline  # the package stays callable after this import
from reveal.api import analyze as api_analyze
from reveal.api import to_telemetry, window_features
from reveal.errors import RevealError
from reveal.frame import Telemetry
from reveal.report.escape import html_text
from reveal.result import NOTEBOOK_HEIGHT_PX
from reveal.store.labelled import default_data_root
from reveal.store.run_writer import write_run
from slices import smd_slice
from synthetic import CHANNELS, ar1_host

START = pd.Timestamp("2026-03-02 14:00:00", tz="UTC")
FAULT = (60.0, 80.0)  # seconds from the start: CPU busy 45 points higher
browser = chromium.browser
HOSTILE = '<script>alert("tenant")</script>\x1b[31m'  # a tenant-chosen channel name


def _frame(tel: Telemetry, start: pd.Timestamp = START) -> pd.DataFrame:
    """A frame as a user builds one: a DatetimeIndex and one column per channel."""
    index = start + pd.to_timedelta(tel.timestamps_ns, unit="ns")
    return pd.DataFrame(tel.values, index=index, columns=list(tel.channels))


def _at(seconds: float) -> pd.Timestamp:
    return START + pd.Timedelta(seconds, "s")


@pytest.fixture(scope="module")
def frames() -> tuple[pd.DataFrame, pd.DataFrame]:
    return _frame(ar1_host(200, seed=1)), _frame(ar1_host(120, seed=3, fault=FAULT))


@pytest.fixture(scope="module")
def result(frames):
    baseline, run = frames
    before = run.copy(), baseline.copy()
    out = reveal.analyze(run, baseline=baseline)
    pd.testing.assert_frame_equal(run, before[0])  # the caller's frames are left as they were
    pd.testing.assert_frame_equal(baseline, before[1])
    assert not np.shares_memory(out.telemetry.values, run.to_numpy())
    return out


# -- the one-call function -------------------------------------------------------------
def test_reveal_analyze_is_the_api_function() -> None:
    assert reveal.analyze is api_analyze
    from reveal.analysis import pipeline
    assert pipeline is sys.modules["reveal.analysis.pipeline"] and pipeline.score_windows
    assert inspect.signature(reveal.analyze) == inspect.signature(api_analyze)
    text = pydoc.render_doc(reveal.analyze, renderer=pydoc.plaintext)
    assert f"analyze{inspect.signature(api_analyze)}" in text
    assert "baseline : DataFrame, path or Telemetry" in text


def test_a_fresh_interpreter_imports_lightly_and_submodules_still_import() -> None:
    code = (
        "import sys, reveal\n"
        "heavy = [m for m in ('pandas', 'sklearn', 'numpy', 'reveal.model') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "import reveal.analysis.pipeline as p\n"
        "assert p.__name__ == 'reveal.analysis.pipeline' and callable(reveal.analyze)\n"
        "from reveal.analysis import windows\n"
        "assert windows.make_windows and 'Reveal' in dir(reveal)\n"
        "assert reveal.Reveal.__module__ == 'reveal.model' and reveal.Result\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr


# -- analysis on frames -------------------------------------------------------------------
def test_the_level_shift_is_found_in_its_span(result) -> None:
    assert result.verdict == "anomalies found" and not result.self_fitted
    a = result.anomalies
    assert len(a) >= 15  # most of the 20 s shift's windows (3 s windows, 1 s apart)
    overlaps = (a["end"] > _at(FAULT[0])) & (a["start"] < _at(FAULT[1]))
    assert overlaps.all(), a.loc[~overlaps, ["start", "end"]]
    assert (a["subsystem"] == "cpu").mean() >= 0.9
    assert (a["channel"] == "derived.cpu_busy_pct").mean() >= 0.9
    assert a["claim"].str.contains("CPU busy").all()
    assert (a["robust_z"].abs() > 3).all()


def test_the_tables_have_their_shapes_dtypes_and_times(result) -> None:
    a, w, e = result.anomalies, result.windows, result.episodes
    assert str(a["start"].dtype) == str(a["end"].dtype) == "datetime64[ns, UTC]"
    assert a["score"].dtype == np.float64 and a.index.name == "window"
    assert a["start"].is_monotonic_increasing
    assert ((a["end"] - a["start"]) == pd.Timedelta(3, "s")).all()  # the window size
    report = result.report
    assert len(w) == len(report.windows.start_ns) and w.index.name == "window"
    expected_start = START + pd.to_timedelta(np.asarray(report.windows.start_ns), unit="ns")
    np.testing.assert_array_equal(w["start"].to_numpy(), expected_start.to_numpy())
    np.testing.assert_array_equal(w["score"].to_numpy(), np.asarray(report.windows.combined))
    for name in report.windows.scores:
        assert w[f"{name}_score"].dtype == np.float64 and w[f"{name}_flag"].dtype == bool
    assert w["flagged"].dtype == bool
    assert list(w.index[w["flagged"]]) == sorted(a.index)
    # windows start at a whole stride after the first sample; none before the run
    assert w["start"].iloc[0] >= START and w["start"].diff().iloc[1:].eq(pd.Timedelta(1, "s")).all()
    assert len(e) == len(report.episodes) >= 1
    main = e.loc[e["windows"].idxmax()]
    assert main["start"] <= _at(FAULT[0] + 1) and main["end"] >= _at(FAULT[1] - 1)
    assert main["subsystem"] == "cpu"
    assert main["duration_s"] == (main["end"] - main["start"]).total_seconds()
    assert e["windows"].dtype == np.int64 and e["windows"].sum() == len(a)


def test_a_clean_run_has_empty_tables_with_the_same_columns(frames, result) -> None:
    clean = reveal.analyze(_frame(ar1_host(120, seed=2)), baseline=frames[0])
    assert clean.verdict == "no anomaly" or len(clean.anomalies) <= 3
    if clean.verdict == "no anomaly":
        assert clean.anomalies.empty and clean.episodes.empty
    assert list(clean.anomalies.columns) == list(result.anomalies.columns)
    assert (clean.anomalies.dtypes == result.anomalies.dtypes).all()
    assert (clean.episodes.dtypes == result.episodes.dtypes).all()


def test_a_run_path_gives_the_verdicts_of_its_frame(tmp_path, result) -> None:
    paths = []
    for name, tel in (("base", ar1_host(200, seed=1)),
                      ("run", ar1_host(120, seed=3, fault=FAULT))):
        tel.meta["wall_offset_ns"] = START.value
        paths.append(write_run(tel, tmp_path / name))
    by_path = reveal.analyze(str(paths[1]), baseline=paths[0])
    np.testing.assert_array_equal(by_path.report.windows.flagged, result.report.windows.flagged)
    np.testing.assert_allclose(by_path.report.windows.combined, result.report.windows.combined)
    pd.testing.assert_frame_equal(by_path.anomalies, result.anomalies)
    pd.testing.assert_frame_equal(by_path.episodes, result.episodes)
    # Telemetry as given works the same
    as_tel = reveal.analyze(to_telemetry(paths[1]), baseline=to_telemetry(paths[0]))
    np.testing.assert_array_equal(as_tel.report.windows.flagged, result.report.windows.flagged)


def test_tz_aware_and_naive_indexes_are_the_same_instants(frames, result) -> None:
    baseline, run = frames
    berlin = run.tz_convert("Europe/Berlin")
    naive = run.tz_convert("UTC").tz_localize(None)
    for other in (berlin, naive):
        tel = to_telemetry(other)
        assert tel.wall_offset_ns == START.value and tel.interval_s == pytest.approx(0.1)
        np.testing.assert_array_equal(tel.values, run.to_numpy())
    again = reveal.analyze(berlin, baseline=baseline)
    pd.testing.assert_frame_equal(again.anomalies, result.anomalies)


def test_without_a_baseline_the_run_is_fitted_on_itself(frames) -> None:
    run = _frame(ar1_host(240, seed=3, fault=(150, 160)))
    own = reveal.analyze(run)
    assert own.self_fitted and own.baseline is None
    assert own.report.baseline["self_fitted"] is True
    a = own.anomalies
    inside = (a["end"] > _at(150)) & (a["start"] < _at(160))
    assert inside.sum() >= 8 and inside.mean() >= 0.8


def test_a_fitted_model_scores_as_the_baseline_fit_does(frames, result) -> None:
    baseline, run = frames
    model = reveal.Reveal().fit(to_telemetry(baseline))
    scored = reveal.analyze(run, model=model)
    assert scored.model is model
    pd.testing.assert_frame_equal(scored.anomalies, result.anomalies)
    with pytest.raises(RevealError, match="not both"):
        reveal.analyze(run, baseline=baseline, model=model)
    with pytest.raises(RevealError, match="keeps its own settings"):
        reveal.analyze(run, model=model, preset="minute")
    with pytest.raises(RevealError, match="preset"):
        reveal.analyze(run, baseline=baseline, preset="hourly")


# -- bad frames ---------------------------------------------------------------------------
def _bad_frames() -> dict[str, tuple[object, str]]:
    good = _frame(ar1_host(30, seed=5))
    unsorted = good.iloc[::-1]
    repeated = pd.concat([good.iloc[:10], good.iloc[9:]])
    text = good.assign(state="busy")
    empty_col = good.assign(gone=np.nan)
    nat = good.copy()
    nat.index = nat.index.where(np.arange(len(nat)) != 5, pd.NaT)
    dup_names = good.copy()
    dup_names.columns = ["a", "a", "b", "c"]
    return {
        "range_index": (good.reset_index(drop=True), "needs a DatetimeIndex"),
        "unsorted": (unsorted, "df.sort_index()"),
        "repeated": (repeated, "1 repeated timestamp"),
        "text_column": (text, "non-numeric column(s) 'state'"),
        "all_nan_column": (empty_col, "df.dropna(axis=1, how='all')"),
        "one_row": (good.iloc[:1], "has 1 row(s); at least 2"),
        "nat": (nat, "missing timestamp(s) (NaT)"),
        "no_columns": (good[[]], "has no columns"),
        "repeated_names": (dup_names, "repeats column name(s) 'a'"),
        "a_list": ([1, 2, 3], "the run is a list: give a pandas DataFrame"),
        "missing_path": ("/nonexistent/run", "no such run directory"),
    }


@pytest.mark.parametrize("case", sorted(_bad_frames()))
def test_bad_input_is_one_line_saying_what_to_do(case: str, frames) -> None:
    data, expected = _bad_frames()[case]
    before = data.copy() if isinstance(data, pd.DataFrame) else None
    with pytest.raises(RevealError) as caught:
        reveal.analyze(data, baseline=frames[0])
    message = str(caught.value)
    assert expected in message and "\n" not in message, message
    if before is not None:  # the caller's frame is left as it was
        pd.testing.assert_frame_equal(data, before)


def test_a_bad_baseline_frame_is_named_as_the_baseline(frames) -> None:
    with pytest.raises(RevealError, match="the baseline DataFrame is not in time order"):
        reveal.analyze(frames[1], baseline=frames[0].iloc[::-1])
    with pytest.raises(RevealError, match="too short"):  # a frame fine but short
        reveal.analyze(frames[1], baseline=frames[0].iloc[:40])


def test_a_hostile_column_name_in_an_error_is_made_printable() -> None:
    good = _frame(ar1_host(30, seed=5))
    good[HOSTILE] = "x"
    with pytest.raises(RevealError) as caught:
        to_telemetry(good)
    assert "\x1b" not in str(caught.value) and "alert" in str(caught.value)


# -- untrusted names, outputs ---------------------------------------------------------------
@pytest.fixture(scope="module")
def hostile(frames):
    names = {CHANNELS[0]: HOSTILE}
    baseline, run = (f.rename(columns=names) for f in frames)
    return reveal.analyze(run, baseline=baseline)


def test_untrusted_column_names_are_kept_as_data(hostile) -> None:
    a = hostile.anomalies
    assert len(a) >= 10
    assert (a["channel"] == HOSTILE).mean() >= 0.9  # exactly as given, as data
    assert HOSTILE in hostile.report.channels.get("names", [HOSTILE])
    assert "\x1b" not in str(hostile) and "\x1b" not in repr(hostile)


def test_json_is_the_versioned_report(tmp_path, result) -> None:
    payload = json.loads(result.to_json())
    assert payload == result.to_dict()
    assert payload["schema"] == "reveal-report" and payload["version"] >= 1
    assert payload["summary"]["anomalous_windows"] == len(result.anomalies)
    path = result.to_json(tmp_path / "report.json", indent=1)
    assert json.loads(path.read_text()) == payload
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]  # written atomically


def test_window_features_are_rated_and_timed(frames) -> None:
    X = window_features(frames[1])
    sectors = X["disk.sectors_written{dev=vda}|mean"]
    assert sectors.median() == pytest.approx(2000.0, rel=0.05)  # 200 per 100 ms, per second
    cpu = X["derived.cpu_busy_pct|mean"]
    assert cpu[_at(65):_at(75)].min() > cpu[:_at(55)].max()  # the shift, as a level
    assert X.index[0] == START + pd.Timedelta(100, "ms") and X.index.tz is not None


def test_html_output_escapes_untrusted_names(tmp_path, hostile) -> None:
    pytest.importorskip("reveal.report.html", reason="the HTML report module is not present")
    page = hostile.to_html()
    assert page.lstrip().lower().startswith("<!doctype html")
    assert '<script>alert("tenant")' not in page and "\x1b" not in page
    assert f'<td class="channel">{html_text(HOSTILE)}</td>' in page  # shown, escaped
    path = hostile.to_html(tmp_path / "report.html")
    written = path.read_text(encoding="utf-8")
    assert written == page
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]
    view = hostile._repr_html_()
    assert view.startswith("<iframe srcdoc=\"") and view.endswith("</iframe>")
    srcdoc = view[len('<iframe srcdoc="'):view.index('" style=')]
    assert '"' not in srcdoc and "<" not in srcdoc  # the whole page, escaped once
    assert html.unescape(srcdoc) == page  # the page rendered once, shown as saved


def test_the_notebook_view_draws_in_chromium_sandboxed(browser, tmp_path, hostile) -> None:
    """The view as a notebook shows it (an output cell's HTML inside a page): the report
    draws in its iframe, offline, and its scripts run in an opaque origin, so they cannot
    reach the notebook page around it."""
    pytest.importorskip("reveal.report.html", reason="the HTML report module is not present")
    from PIL import Image

    wrapper = tmp_path / "notebook.html"
    wrapper.write_text('<!DOCTYPE html><html><body><div class="output_html">'
                       f"{hostile._repr_html_()}</div></body></html>", encoding="utf-8")
    page = browser.page(width=1280, height=900)
    page.open(wrapper)
    frame = page.evaluate("(function () { var r = document.querySelector('iframe')"
                          ".getBoundingClientRect(); return {x: r.left, y: r.top, "
                          "width: r.width, height: r.height}; })()")
    assert frame["height"] == NOTEBOOK_HEIGHT_PX and frame["width"] > 1000
    # sandboxed without allow-same-origin: the page around cannot see into it, nor it out
    assert page.evaluate("document.querySelector('iframe').contentDocument === null")
    deadline = time.monotonic() + 60
    while True:  # Bokeh draws inside the frame: the flagged episode's light-red shading
        shot = np.asarray(Image.open(io.BytesIO(page.screenshot(clip=frame))).convert("RGB"))
        r, g, b = (shot[..., i].astype(int) for i in range(3))
        shaded = int(((r >= 240) & (g >= 200) & (g <= 225) & (b >= 200) & (b <= 225)).sum())
        if shaded > 5000 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert shaded > 5000, "the timeline was not drawn in the notebook view"
    assert page.requests() == []  # nothing fetched: the page is self-contained


# -- a real recording ---------------------------------------------------------------------
@pytest.mark.skipif(default_data_root() is None, reason="labelled data (REVEAL_DATA) absent")
def test_a_labelled_machine_as_frames_gives_its_verdicts() -> None:
    """SMD machine-1-2 (minute samples, no wall clock): the frames of its recording give
    the verdicts of the recording itself, on the minute preset, at the labelled faults."""
    lm = smd_slice(default_data_root())
    base_df, run_df = reveal.frame_from_telemetry(lm.train), reveal.frame_from_telemetry(lm.test)
    assert run_df.shape == (lm.test.n_samples, lm.test.n_channels)
    by_frames = reveal.analyze(run_df, baseline=base_df)
    direct = reveal.analyze(lm.test, baseline=lm.train)
    assert by_frames.report.decision["preset"] == "minute"
    np.testing.assert_array_equal(by_frames.report.windows.flagged,
                                  direct.report.windows.flagged)
    pd.testing.assert_frame_equal(by_frames.anomalies, direct.anomalies)
    a = by_frames.anomalies  # one row per flagged window: its span, channel and claim
    assert (a["start"] < a["end"]).all() and a["channel"].isin(run_df.columns).all()
    assert a["claim"].str.len().gt(0).all() and a["score"].gt(0).all()
    labelled = run_df.index[np.asarray(lm.labels, dtype=bool)]
    hit = [((labelled >= s) & (labelled < e)).any() for s, e in zip(a["start"], a["end"],
                                                                    strict=True)]
    assert np.mean(hit) >= 0.5  # most flagged windows hold labelled anomalous minutes
