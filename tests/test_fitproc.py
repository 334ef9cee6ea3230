"""The watch's model fitted in a child process: the same model as a fit in this process
(same scores on the same run), a one-line reason when the span cannot be fitted, and the
child ended when the watch stops meanwhile."""

from __future__ import annotations

import numpy as np
import pytest

from reveal.errors import InputError
from reveal.live.fitproc import fit_in_child
from reveal.model import Reveal
from reveal.store.run_reader import read_run
from reveal.store.run_writer import write_run
from synthetic import ar1_host


def test_the_child_fits_the_model_this_process_would(tmp_path):
    tel = ar1_host(120, seed=4)
    run = write_run(tel, tmp_path / "run")
    start, end = int(tel.timestamps_ns[0]), int(tel.timestamps_ns[-1]) + 1
    path = fit_in_child(run, start, end, tmp_path / "model.reveal")
    child = Reveal.load(path)
    here = Reveal().fit(read_run(run, start_ns=start, end_ns=end))
    scored = ar1_host(40, seed=9, fault=(15, 30))
    a, b = child.score_windows(scored).verdicts, here.score_windows(scored).verdicts
    np.testing.assert_allclose(a.combined, b.combined, rtol=1e-9)
    np.testing.assert_array_equal(a.flagged, b.flagged)
    assert a.flagged.any()  # the fault is there


def test_a_span_without_data_is_a_one_line_reason(tmp_path):
    tel = ar1_host(30, seed=4)
    run = write_run(tel, tmp_path / "run")
    late = int(tel.timestamps_ns[-1]) + 10**12
    with pytest.raises(InputError) as caught:
        fit_in_child(run, late, late + 10**10, tmp_path / "model.reveal")
    assert str(caught.value).startswith("model fit failed: ")
    assert "\n" not in str(caught.value) and "Traceback" not in str(caught.value)
    assert not (tmp_path / "model.reveal").exists()


def test_a_stop_request_ends_the_child(tmp_path):
    tel = ar1_host(120, seed=4)
    run = write_run(tel, tmp_path / "run")
    with pytest.raises(InterruptedError):
        fit_in_child(run, int(tel.timestamps_ns[0]), int(tel.timestamps_ns[-1]) + 1,
                     tmp_path / "model.reveal", should_stop=lambda: True)
    assert not (tmp_path / "model.reveal").exists()


def test_the_spans_of_the_watchs_own_work_are_left_out_of_the_fit(tmp_path):
    """A learn holding 20 s of the watch's own fit (CPU busy +45 points): left out, the
    windows that overlap it are not in the model, and the same 45 points in a run to score
    are flagged; learned with them, that level is the baseline's own and is not."""
    tel = ar1_host(240, seed=4, fault=(100, 120))  # the burst inside the learn
    run = write_run(tel, tmp_path / "run")
    start, end = int(tel.timestamps_ns[0]), int(tel.timestamps_ns[-1]) + 1
    burst = (start + 100 * 10**9, start + 120 * 10**9)
    left_out = Reveal.load(fit_in_child(run, start, end, tmp_path / "left_out.reveal",
                                        skip_ns=[burst]))
    learned = Reveal.load(fit_in_child(run, start, end, tmp_path / "learned.reveal"))
    assert learned.fitted_.baseline_windows - left_out.fitted_.baseline_windows >= 20
    assert any("overlap the analysis' own work" in w for w in left_out.fitted_.warnings)
    assert not any("own work" in w for w in learned.fitted_.warnings)
    scored = ar1_host(60, seed=9, fault=(20, 40), start_s=400)
    assert left_out.score_windows(scored).verdicts.flagged.sum() >= 10
    assert learned.score_windows(scored).verdicts.flagged.sum() \
        < left_out.score_windows(scored).verdicts.flagged.sum()


def test_spans_that_are_not_pairs_of_integers_are_a_one_line_reason(tmp_path):
    import subprocess
    import sys

    tel = ar1_host(30, seed=4)
    run = write_run(tel, tmp_path / "run")
    done = subprocess.run([sys.executable, "-m", "reveal.live.fitproc", str(run), "0",
                           str(10**18), str(tmp_path / "m.reveal"), "{}", '[["a", 1]]'],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert done.stderr.strip() == ("error: the spans to leave out must be a JSON list of "
                                   "[start_ns, end_ns]")


def test_bursts_left_out_are_named_by_their_place_in_the_whole_span():
    """A burst at 150–160 s of a 240 s learn is left out of the fit (the watch's learn
    settings) and named "at 148–159 s" whether or not the watch's own fit at 50–70 s was
    left out before it: the times count every window of the span."""
    from reveal.live.keeper import learn_settings, left_out_text, left_out_windows

    tel = ar1_host(240, seed=4, fault=(150, 160))
    first = int(tel.timestamps_ns[0])
    plain = Reveal(overrides=learn_settings(None)).fit(tel)
    skipped = Reveal(overrides=learn_settings(None)).fit(
        tel, skip_ns=[(first + 50 * 10**9, first + 70 * 10**9)])
    assert len(skipped.fitted_.skipped_windows) >= 20
    assert skipped.fitted_.skipped_windows[0] >= 47 and skipped.fitted_.skipped_windows[-1] < 70
    for model in (plain, skipped):
        rows = left_out_windows(model)
        assert rows.size >= 8 and rows.min() >= 147 and rows.max() <= 160, rows
        assert "of 237 windows of the span" in left_out_text(model)
