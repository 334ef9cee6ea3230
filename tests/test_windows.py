"""make_windows: durations, rows, short runs, gaps in the timestamps."""

from __future__ import annotations

import numpy as np
import pytest

from reveal.analyze.windows import Windows, make_windows, sampling_interval_s
from reveal.config import WindowConfig
from reveal.errors import InputError

NS = 1_000_000_000


def _ts(n: int, interval_s: float = 0.1, t0: int = 5 * NS) -> np.ndarray:
    return t0 + np.arange(n, dtype=np.int64) * round(interval_s * NS)


def test_default_duration_windows_at_100ms() -> None:
    ts = _ts(100)
    w = make_windows(ts, WindowConfig())
    assert isinstance(w, Windows)
    assert (w.size, w.stride) == (30, 10)
    # starts 0, 10, ..., 70: the window at 70 ends at row 100, the one at 80 would not fit
    assert w.start.tolist() == list(range(0, 71, 10))
    assert w.start.dtype == np.int64 and w.start_ns.dtype == np.int64
    assert np.array_equal(w.start_ns, ts[w.start])
    assert np.array_equal(w.end_ns - w.start_ns, np.full(len(w.start), 3 * NS))
    assert np.array_equal(w.ids, np.arange(8))
    assert int(w.start[-1]) + w.size <= len(ts)


def test_duration_rounding_and_explicit_interval() -> None:
    ts = _ts(50, interval_s=0.25)
    w = make_windows(ts, WindowConfig(size_s=1.0, stride_s=0.5))
    assert (w.size, w.stride) == (4, 2)
    assert len(w.start) == (50 - 4) // 2 + 1
    # an explicit interval overrides the one inferred from the timestamps
    w2 = make_windows(ts, WindowConfig(size_s=1.0, stride_s=0.5), interval_s=0.5)
    assert (w2.size, w2.stride) == (2, 1)
    assert np.array_equal(w2.end_ns - w2.start_ns, np.full(len(w2.start), NS))


def test_rows_config_for_minute_data() -> None:
    ts = _ts(1000, interval_s=60.0)
    w = make_windows(ts, WindowConfig(size_rows=10, stride_rows=5))
    assert (w.size, w.stride) == (10, 5)
    assert w.start.tolist() == list(range(0, 991, 5))
    assert np.array_equal(w.end_ns - w.start_ns, np.full(len(w.start), 600 * NS))
    # stride_rows defaults to one row
    w1 = make_windows(ts, WindowConfig(size_rows=10))
    assert w1.stride == 1 and len(w1.start) == 991


def test_single_window_exact_fit() -> None:
    w = make_windows(_ts(30), WindowConfig())
    assert w.start.tolist() == [0]


def test_short_run_is_one_line_input_error() -> None:
    with pytest.raises(InputError) as err:
        make_windows(_ts(29), WindowConfig())
    msg = str(err.value)
    assert "\n" not in msg
    assert "29 samples" in msg and "2.9 s" in msg and "window of 3 s" in msg
    with pytest.raises(InputError, match="shorter than one window of 10 rows"):
        make_windows(_ts(9, 60.0), WindowConfig(size_rows=10))
    with pytest.raises(InputError):
        make_windows(_ts(1), WindowConfig())


def test_gaps_do_not_change_row_windows() -> None:
    ts = _ts(200)
    ts[100:] += 7 * NS  # a 7 s hole: samples missed
    w = make_windows(ts, WindowConfig())
    assert sampling_interval_s(ts) == pytest.approx(0.1)
    assert (w.size, w.stride) == (30, 10)
    assert w.start.tolist() == list(range(0, 171, 10))
    assert np.array_equal(w.start_ns, ts[w.start])
    # the nominal end is start + 3 s even for a window that spans the hole
    assert np.all(w.end_ns - w.start_ns == 3 * NS)


def test_bad_timestamps_and_sizes() -> None:
    ts = _ts(100)
    with pytest.raises(InputError, match="not strictly increasing"):
        make_windows(ts[::-1].copy(), WindowConfig())
    with pytest.raises(InputError, match="1-D"):
        make_windows(ts.reshape(10, 10), WindowConfig())
    with pytest.raises(InputError, match="shorter than the sampling interval"):
        make_windows(_ts(100, 60.0), WindowConfig())
    with pytest.raises(InputError):
        make_windows(ts, WindowConfig(size_rows=0))
    with pytest.raises(InputError):
        make_windows(ts, WindowConfig(), interval_s=-1.0)
