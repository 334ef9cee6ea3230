"""The quiet-span refit: the watch's way of keeping a model current, as a model scheme."""

from __future__ import annotations

import numpy as np
import pytest

from reveal.analysis.quietspan import QuietSpan
from reveal.errors import InputError
from reveal.frame import Telemetry
from reveal.model import Reveal
from synthetic import ar1_host

S = 1_000_000_000  # ns per second
QUIET = {"refit.scheme": "quiet_span", "refit.every_s": 60.0, "refit.span_s": 120.0,
         "detect.iforest_trees": 30}


def test_the_clock_refuses_a_span_with_a_window_above_or_before_the_model():
    clock = QuietSpan(span_ns=60 * S, every_ns=100 * S, retry_ns=5 * S)
    clock.adopted(1000 * S)
    assert not clock.due(1099 * S) and clock.due(1100 * S)
    assert "less than the span" in clock.why_not(1050 * S)  # the span reaches before it
    clock.seen(np.array([1101, 1102]) * S, np.array([False, True]))
    assert "above the threshold 8 s ago" in clock.why_not(1110 * S)
    assert clock.postpone(1110 * S) and not clock.postpone(1115 * S)  # said once
    assert clock.next_due_ns == 1120 * S and clock.refused == 2
    assert clock.why_not(1163 * S) == ""  # 61 s after the window above: quiet
    assert "alert is open" in clock.why_not(1163 * S, alert_open=True)
    assert "less than --learn" in clock.why_not(1163 * S, recorded_from_ns=1110 * S,
                                                span_name="--learn")
    assert clock.span(1163 * S) == (1103 * S, 1163 * S) and not clock.waiting


def _stream(model: Reveal, run: Telemetry, lead: Telemetry, chunk_rows: int):
    """Score ``run`` chunk by chunk, each given back with partial_fit; the windows' end
    times (ns), verdicts and whether each was above the threshold, and every fit used."""
    ends, flagged, above, fits = [], [], [], [model.fitted_]

    def span(start_ns: int, end_ns: int) -> Telemetry:
        a, b = np.searchsorted(run.timestamps_ns, [start_ns, end_ns], side="right")
        return run.slice_rows(int(a), int(b))

    for a in range(0, run.n_samples, chunk_rows):
        b = min(a + chunk_rows, run.n_samples)
        prior = lead if a == 0 else run.slice_rows(max(0, a - 60), a)
        analysis = model.score_windows(run.slice_rows(a, b), lead_in=prior)
        v = analysis.verdicts
        ends.append(analysis.windows.end_ns)
        flagged.append(v.flagged)
        above.append(v.combined > v.combined_threshold)
        model.partial_fit(analysis, span=span)
        if model.fitted_ is not fits[-1]:
            fits.append(model.fitted_)
    return np.concatenate(ends), np.concatenate(flagged), np.concatenate(above), fits


def test_refits_learn_quiet_spans_and_never_the_fault():
    """Every 60 s of data the model is fitted again on the latest 120 s, but only when no
    window in them was above the threshold: each refit learned a quiet span of the run,
    the fault is flagged, and no refit learns from it."""
    base = ar1_host(300, seed=1)
    model = Reveal(overrides=QUIET).fit(base)
    run = ar1_host(300, seed=8, fault=(150, 180), start_s=300)
    ends, flagged, above, fits = _stream(model, run, base, chunk_rows=100)
    above_ns = ends[above]
    clock = model.quiet_
    assert clock.refits >= 1 and clock.refused >= 1 and len(fits) == clock.refits + 1
    for fit in fits[1:]:  # 120 s of the run with no window above the threshold
        start, seconds = fit.baseline["start_ns"], fit.baseline["duration_s"]
        assert start >= 300 * S and 119 <= seconds <= 120
        assert not ((above_ns > start) & (above_ns <= start + 120 * S)).any()
        assert start + seconds * S < 450 * S or start > 480 * S  # the fault is not learned
    fault = (ends >= 453 * S) & (ends < 480 * S)
    assert flagged[fault].mean() > 0.5 and flagged[ends < 450 * S].mean() < 0.05


def test_a_lasting_change_is_not_learned():
    """A fault that lasts to the end keeps every later span from being quiet: no refit
    after it begins, and it stays flagged."""
    base = ar1_host(300, seed=1)
    model = Reveal(overrides=QUIET).fit(base)
    run = ar1_host(300, seed=9, fault=(100, 300), start_s=300)
    ends, flagged, above, _ = _stream(model, run, base, chunk_rows=100)
    assert model.quiet_.model_since_ns < 400 * S
    late = ends >= 420 * S
    assert above[late].all() and flagged[late].mean() > 0.8


def test_the_scheme_is_checked_and_needs_the_raw_span():
    with pytest.raises(InputError, match=r"refit\.scheme takes one of generations, quiet_span"):
        Reveal(overrides={"refit.scheme": "often"}).fit(ar1_host(120, seed=1))
    model = Reveal(overrides=QUIET).fit(ar1_host(300, seed=1))
    analysis = model.score_windows(ar1_host(200, seed=2, start_s=300))
    with pytest.raises(InputError, match="pass span="):
        model.partial_fit(analysis, refit=True)
