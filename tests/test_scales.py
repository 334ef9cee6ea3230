"""Windows of two sizes scored together (the minute preset: 10 rows and 5 beside them):
the joined score is the mean of each size's score over its threshold, flagged where the
10-row size flags or the 5-row one does with the mean above 1, window by window on the
same end row, through fit,
score, self-fit, save and load; a window only the short size flags keeps that size's
evidence."""

from __future__ import annotations

import numpy as np
import pytest

from reveal.analysis.presets import MINUTE
from reveal.errors import InputError
from reveal.model import Reveal
from synthetic import ar1_host

MINUTE_S = 60.0


def _runs():
    base = ar1_host(800 * MINUTE_S, seed=1, interval_s=MINUTE_S)
    # a fault of 4 rows: brief enough that the 10-row windows average much of it away
    run = ar1_host(200 * MINUTE_S, seed=3, fault=(100 * MINUTE_S, 104 * MINUTE_S),
                   interval_s=MINUTE_S, start_s=800 * MINUTE_S)
    return base, run


def _alone(rows: int) -> Reveal:
    return Reveal(overrides={"window.size_rows": rows, "extra_window_rows": ()})


def test_the_minute_preset_scores_two_sizes_and_joins_them(tmp_path):
    assert MINUTE.extra_window_rows == (5,)
    base, run = _runs()
    model = Reveal().fit(base)
    assert model.fitted_.config.preset == "minute"
    assert [s.window.size_rows for s in model.fitted_.scales] == [5]
    joined = model.score_windows(run, lead_in=base)
    ten = _alone(10).fit(base).score_windows(run, lead_in=base)
    five = _alone(5).fit(base).score_windows(run, lead_in=base)
    assert len(joined.windows) == run.n_samples == len(ten.windows) == len(five.windows)
    mean = (ten.verdicts.combined / ten.verdicts.combined_threshold
            + five.verdicts.combined / five.verdicts.combined_threshold) / 2
    np.testing.assert_allclose(joined.verdicts.combined, mean, rtol=1e-12)
    assert joined.verdicts.combined_threshold == 1.0
    np.testing.assert_array_equal(joined.verdicts.flagged, ten.verdicts.flagged | (
        five.verdicts.flagged & (mean > 1)))
    assert joined.verdicts.flagged[100:108].any()  # the fault
    # every flagged window has evidence, the main size's where it flagged
    by_window = {e.window_id: e for e in joined.evidence}
    assert set(by_window) == set(np.flatnonzero(joined.verdicts.flagged))
    for e in ten.evidence:
        assert by_window[e.window_id].reasons[0].channel == e.reasons[0].channel
    only_five = np.flatnonzero(joined.verdicts.flagged & ~ten.verdicts.flagged)
    assert only_five.size  # the brief fault, averaged away by the 10-row windows alone
    ends = joined.windows.end_ns
    for i in only_five:
        assert by_window[i].start_ns == joined.windows.start_ns[i] and by_window[i].end_ns \
            == ends[i]
    # the same after a save and load (the extra size travels in the model file)
    again = Reveal.load(model.save(tmp_path / "m.model")).score_windows(run, lead_in=base)
    np.testing.assert_array_equal(again.verdicts.combined, joined.verdicts.combined)


def test_without_lead_in_the_longer_size_starts_later_and_the_report_reads_it():
    base, run = _runs()
    model = Reveal().fit(base)
    report = model.report(run)  # no lead-in: rates start at row 1, 10-row windows 9 later
    assert len(report.windows.combined) == run.n_samples - 1 - 9
    assert report.decision["combined_threshold"] == 1.0
    assert any(a.window_id in range(90, 110) for a in report.anomalies)


def test_a_self_fit_scores_two_sizes_too():
    _, run = _runs()
    model = Reveal()
    report = model.fit_report(run)
    assert [s.window.size_rows for s in model.fitted_.scales] == [5]
    assert report.decision["combined_threshold"] == 1.0 and report.baseline["self_fitted"]


def test_extra_sizes_need_windows_by_rows():
    base, _ = _runs()
    with pytest.raises(InputError, match="windows by rows"):
        Reveal(preset="minute", overrides={"window.size_rows": None, "window.size_s": 600.0,
                                           "window.stride_s": 60.0}).fit(base)
    with pytest.raises(InputError, match="≥ 2"):
        Reveal(overrides={"extra_window_rows": (1,)}).fit(base)
