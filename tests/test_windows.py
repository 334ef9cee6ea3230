"""make_windows: durations, rows, short runs, gaps in the timestamps."""

from __future__ import annotations

import numpy as np
import pytest

from reveal.analysis.windows import Windows, make_windows, sampling_interval_s, span_sums
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
    # the end is one (given) interval after the window's last sample, 0.25 s after its first
    assert np.array_equal(w2.end_ns - w2.start_ns, np.full(len(w2.start), 750_000_000))


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
    # every window ends one interval after its own last sample: 3 s after its start
    # where no sample is missing, 10 s where the 7 s hole lies inside it
    last = w.start + w.size - 1
    assert np.array_equal(w.end_ns, ts[last] + NS // 10)
    spans = (w.start < 100) & (last >= 100)
    assert spans.sum() == 2  # the windows starting at rows 80 and 90
    assert np.all(w.end_ns[spans] - w.start_ns[spans] == 10 * NS)
    assert np.all(w.end_ns[~spans] - w.start_ns[~spans] == 3 * NS)


def test_end_follows_the_last_sample_with_samples_missing_at_the_end() -> None:
    # rows config on minute data: the window's last two samples came 5 and 9 minutes late
    ts = _ts(12, interval_s=60.0)
    ts[10] += 5 * 60 * NS
    ts[11] += 9 * 60 * NS
    w = make_windows(ts, WindowConfig(size_rows=6, stride_rows=6))
    assert w.start.tolist() == [0, 6]
    assert w.end_ns.tolist() == [ts[5] + 60 * NS, ts[11] + 60 * NS]
    # no window ends before the last sample it holds
    assert np.all(w.end_ns > ts[w.start + w.size - 1])


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


def test_span_sums_count_rows_outside_as_zero_and_do_not_depend_on_what_precedes():
    x = np.arange(12, dtype=np.float64).reshape(6, 2)
    np.testing.assert_array_equal(span_sums(x, np.array([-1, 0, 4]), 3),
                                  [[0 + 2, 1 + 3], [0 + 2 + 4, 1 + 3 + 5], [8 + 10, 9 + 11]])
    rng = np.random.default_rng(1)
    y = np.vstack([rng.normal(0, 1e6, (100, 3)), rng.normal(0, 1, (30, 3))])
    whole = span_sums(y, np.arange(100, 110), 20)
    alone = span_sums(y[100:], np.arange(0, 10), 20)
    np.testing.assert_array_equal(whole, alone)  # bit for bit
