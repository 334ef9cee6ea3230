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
