"""The watch's model fitted in a child process: the same model as a fit in this process
(same scores on the same run), a one-line reason when the span cannot be fitted, and the
child ended when the watch stops meanwhile."""

from __future__ import annotations

import numpy as np
import pytest

from reveal.errors import InputError
from reveal.live.fitproc import fit_in_child, without_spans
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
    a, b = child.analyse(scored).verdicts, here.analyse(scored).verdicts
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


def test_spans_left_out_are_not_learned(tmp_path):
    """A burst inside the span (the watch's own provisional fit, in a watch) left out:
    the child's model is the in-process fit of the span without it, and flags that burst
    when it comes again; the model that learned the burst takes it for ordinary."""
    tel = ar1_host(150, seed=4, fault=(60, 70))
    run = write_run(tel, tmp_path / "run")
    start, end = int(tel.timestamps_ns[0]), int(tel.timestamps_ns[-1]) + 1
    burst = (start + 60 * 10**9, start + 70 * 10**9)
    left = Reveal.load(fit_in_child(run, start, end, tmp_path / "left.reveal",
                                    leave_out=[burst]))
    here = Reveal().fit(without_spans(read_run(run, start_ns=start, end_ns=end), [burst]))
    learned = Reveal.load(fit_in_child(run, start, end, tmp_path / "learned.reveal"))
    assert left.fitted_.baseline_windows < learned.fitted_.baseline_windows
    scored = ar1_host(40, seed=9, fault=(15, 30))
    a, b = left.analyse(scored).verdicts, here.analyse(scored).verdicts
    np.testing.assert_allclose(a.combined, b.combined, rtol=1e-9)
    assert a.flagged.any()
    assert not learned.analyse(scored).verdicts.flagged.any()


def test_without_spans_drops_only_the_samples_inside_them():
    tel = ar1_host(2, seed=1)  # 20 samples, 0.1 s apart
    t0 = int(tel.timestamps_ns[0])
    kept = without_spans(tel, [(t0 + 300_000_000, t0 + 500_000_000), (t0 - 10, t0 + 1)])
    assert kept.n_samples == 17  # 0.3 s and 0.4 s, and the first sample
    np.testing.assert_array_equal(kept.values, np.delete(tel.values, [0, 3, 4], axis=0))
    assert without_spans(tel, []) is tel
