"""compute_features against tsfresh's feature calculators (the oracle, test-time only)."""

from __future__ import annotations

import platform
import subprocess
import sys
import warnings
from collections import Counter

import numpy as np
import pytest

import reveal.analysis.features as features_module
from reveal.analysis.features import (
    DYNAMIC_FEATURES,
    EVENT_FEATURES,
    FeatureMatrix,
    compute_features,
)
from reveal.analysis.windows import Windows, make_windows
from reveal.config import WindowConfig
from reveal.errors import InputError

fc = pytest.importorskip("tsfresh.feature_extraction.feature_calculators")
stattools = pytest.importorskip("statsmodels.tsa.stattools")

# the oracles' own warnings (statsmodels' tuple-return deprecation, rank-deficient designs,
# log(0) of a perfect fit); warnings from our code still show
pytestmark = [
    pytest.mark.filterwarnings("ignore::FutureWarning:tsfresh"),
    pytest.mark.filterwarnings("ignore::UserWarning:statsmodels"),
    pytest.mark.filterwarnings("ignore::RuntimeWarning:statsmodels"),
]

RTOL = 1e-9
OFFSET = 1e9


def _adf_oracle(x: np.ndarray) -> tuple[float, str]:
    """tsfresh's ADF statistic and its status: "ok", "tie", "search_perfect" or "perfect".

    "tie": the AIC lag choice was an exact tie (statsmodels breaks it by round-off, we take
    the smaller lag). "search_perfect": the chosen search model fits perfectly, its RSS is
    round-off and so is statsmodels' lag choice among the perfect models (we take the
    first). "perfect": the refit has zero residual, the statistic is ±inf in exact
    arithmetic and round-off in statsmodels; we return NaN there.
    """
    value = fc.augmented_dickey_fuller(x, [{"attr": "teststat", "autolag": "AIC"}])[0][1]
    if not np.isfinite(value):
        return value, "ok"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = stattools.adfuller(x, autolag="AIC", regresults=True, result_object=False)
    store = res[-1]

    def at_roundoff(fit: object) -> bool:
        y = fit.model.endog  # type: ignore[attr-defined]
        tss = max(float(((y - y.mean()) ** 2).sum()), float((y**2).sum()))
        return fit.ssr <= 1e-12 * tss  # type: ignore[attr-defined]

    if at_roundoff(store.resols):
        return value, "perfect"
    fits = store.autolag_results
    best = min(fits, key=lambda k: (fits[k].aic, k))
    if at_roundoff(fits[best]):
        return value, "search_perfect"
    aics = sorted(r.aic for r in fits.values())
    if len(aics) > 1 and abs(aics[1] - aics[0]) <= 1e-9 * max(1.0, abs(aics[0])):
        return value, "tie"
    return value, "ok"


def _oracle(x: np.ndarray) -> dict[str, float]:
    x = np.array(x, dtype=np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        slope = fc.linear_trend(x, [{"attr": "slope"}])[0][1] if len(x) > 1 else np.nan
        return {
            "mean": fc.mean(x),
            "variance": fc.variance(x),
            "std": fc.standard_deviation(x),
            "skewness": fc.skewness(x),
            "kurtosis": fc.kurtosis(x),
            "min": fc.minimum(x),
            "max": fc.maximum(x),
            "median": fc.median(x),
            "slope": slope,
            "autocorr_lag1": fc.autocorrelation(x, 1),
            "sum": fc.sum_values(x),
        }


def _rows_windows(n_rows: int, size: int, stride: int) -> Windows:
    ts = np.arange(n_rows, dtype=np.int64) * 100_000_000
    return make_windows(ts, WindowConfig(size_rows=size, stride_rows=stride))


def _features_of(
    values: np.ndarray, size: int, stride: int, kinds: list[str] | None = None, **kw: object
) -> FeatureMatrix:
    n_rows, n_ch = values.shape
    kinds = kinds or ["gauge"] * n_ch
    return compute_features(
        values, [f"ch{c}" for c in range(n_ch)], kinds, _rows_windows(n_rows, size, stride), **kw
    )


def _check(
    fmx: FeatureMatrix, values: np.ndarray, shift: float = 0.0, atol: dict[str, float] | None = None
) -> int:
    """Compare every column with the oracle; translation-invariant features on x - shift.

    Returns how many ADF windows had each oracle status: "ok", "tie" and "search_perfect"
    (not compared), "perfect" (we must return NaN).
    """
    atol = atol or {}
    size = fmx.windows.size
    status_count: Counter[str] = Counter()
    col = {(c, f): k for k, (c, f) in enumerate(zip(fmx.channels, fmx.features, strict=True))}
    invariant = {"variance", "std", "skewness", "kurtosis", "slope", "autocorr_lag1", "adf_stat"}
    for c in range(values.shape[1]):
        name = f"ch{c}"
        for w, s in enumerate(fmx.windows.start):
            x = values[s : s + size, c]
            ref = _oracle(x)
            ref_shift = _oracle(x - shift) if shift else ref
            for feat in DYNAMIC_FEATURES:
                if (name, feat) not in col:
                    continue
                got = float(fmx.values[w, col[(name, feat)]])
                if feat == "adf_stat":
                    want, status = _adf_oracle(x - shift)
                    status_count[status] += 1
                    if status in ("tie", "search_perfect"):
                        continue
                    if status == "perfect":
                        assert np.isnan(got), (name, w, feat, got, x.tolist())
                        continue
                else:
                    want = (ref_shift if feat in invariant else ref)[feat]
                if np.isnan(want):
                    assert np.isnan(got), (name, w, feat, got, x)
                    continue
                tol = RTOL * abs(want) + atol.get(feat, 0.0)
                assert abs(got - want) <= tol, (name, w, feat, got, want, x.tolist())
    return status_count


def _telemetry(n_rows: int, rng: np.random.Generator) -> np.ndarray:
    """Columns: white noise, random walk, AR(1), spiky zeros, integer walk, uniform."""
    cols = [
        rng.standard_normal(n_rows) * 3 + 10,
        np.cumsum(rng.standard_normal(n_rows)),
        np.zeros(n_rows),
        np.where(rng.random(n_rows) < 0.15, rng.exponential(5.0, n_rows), 0.0),
        np.cumsum(rng.integers(-1, 2, n_rows)).astype(np.float64),
        rng.random(n_rows) * 100,
    ]
    e = rng.standard_normal(n_rows)
    for t in range(1, n_rows):
        cols[2][t] = 0.8 * cols[2][t - 1] + e[t]
    return np.column_stack(cols)


# near-zero values (a symmetric window's skew, a flat window's slope) are compared with an
# absolute tolerance at tsfresh's own round-off
ATOL = {"slope": 1e-13, "skewness": 1e-12, "autocorr_lag1": 1e-13, "mean": 1e-13}


def test_random_telemetry_windows_match_tsfresh() -> None:
    rng = np.random.default_rng(1)
    values = _telemetry(400, rng)
    fmx = _features_of(values, 30, 10)
    status = _check(fmx, values, atol=ATOL)
    # the spiky series has exact ties and perfect fits; everything else is compared
    assert status["ok"] >= 0.9 * sum(status.values()), status


@pytest.mark.parametrize("size", [4, 5, 6, 7, 8])
def test_short_windows_match_tsfresh(size: int) -> None:
    rng = np.random.default_rng(size)
    values = _telemetry(80, rng)[:, [0, 1, 2, 5]]
    fmx = _features_of(values, size, 3)
    _check(fmx, values, atol=ATOL)


@pytest.mark.parametrize("size", [1, 2, 3])
def test_tiny_windows_match_tsfresh(size: int) -> None:
    rng = np.random.default_rng(10 + size)
    values = rng.standard_normal((20, 2))
    fmx = _features_of(values, size, 1)
    _check(fmx, values, atol=ATOL)


def test_constant_windows() -> None:
    n = 40
    values = np.column_stack(
        [np.zeros(n), np.full(n, 7.5), np.full(n, OFFSET), np.r_[np.full(30, 2.0), np.arange(10.0)]]
    )
    fmx = _features_of(values, 30, 10)
    _check(fmx, values)
    col = fmx.columns
    w0 = fmx.values[0]
    for c in range(3):
        for feat in ("skewness", "kurtosis", "autocorr_lag1", "adf_stat"):
            assert np.isnan(w0[col.index(f"ch{c}|{feat}")])
        assert w0[col.index(f"ch{c}|variance")] == 0.0
        assert w0[col.index(f"ch{c}|slope")] == 0.0


def test_autocorrelation_cutoff_follows_the_channel_scale() -> None:
    # small-unit gauges (1e-6 scale, fractions in 0..1e-4) vary: their lag-1
    # autocorrelation is that of the same signal in larger units, not NaN
    rng = np.random.default_rng(6)
    n = 300
    walk = np.cumsum(rng.standard_normal(n))
    frac = rng.random(n)
    values = np.column_stack([walk, walk * 1e-6, frac, frac * 1e-4])
    fmx = _features_of(values, 30, 10)
    col = fmx.columns
    for feat in ("autocorr_lag1", "skewness", "kurtosis", "adf_stat"):
        for big, small in ((0, 1), (2, 3)):
            want = fmx.values[:, col.index(f"ch{big}|{feat}")]
            got = fmx.values[:, col.index(f"ch{small}|{feat}")]
            assert np.isfinite(want).all(), feat
            np.testing.assert_allclose(got, want, rtol=1e-9, err_msg=feat)
    # and the original units agree with tsfresh
    for w, s in enumerate(fmx.windows.start):
        want = fc.autocorrelation(walk[s : s + 30], 1)
        assert abs(fmx.values[w, col.index("ch0|autocorr_lag1")] - want) <= 1e-9 * abs(want)


def test_autocorrelation_of_constant_windows_is_nan() -> None:
    n = 30
    # 0.3 and 0.1 + 0.2 differ by one unit of round-off: constant for the autocorrelation
    ulp = np.where(np.arange(n) % 3 == 0, 0.1 + 0.2, 0.3)
    assert ulp.var() > 0
    values = np.column_stack([np.zeros(n), np.full(n, 3e-7), np.full(n, OFFSET), ulp])
    fmx = _features_of(values, n, 1)
    col = fmx.columns
    for c in range(values.shape[1]):
        assert np.isnan(fmx.values[0, col.index(f"ch{c}|autocorr_lag1")]), c


def test_nan_windows() -> None:
    rng = np.random.default_rng(3)
    values = np.cumsum(rng.standard_normal((60, 3)), axis=0)
    values[5, 0] = np.nan
    values[[12, 13, 40], 1] = np.nan
    values[:, 2] = np.nan
    values[20:27, 2] = rng.standard_normal(7)  # only 7 sampled values -> kurtosis defined
    fmx = _features_of(values, 30, 10)
    _check(fmx, values, atol=ATOL)
    col = fmx.columns
    # kurtosis skips NaN (pandas default), the others propagate it
    k = fmx.values[0, col.index("ch0|kurtosis")]
    assert np.isfinite(k)
    assert np.isnan(fmx.values[0, col.index("ch0|mean")])
    assert np.isfinite(fmx.values[0, col.index("ch2|kurtosis")])


def test_large_offsets_lose_no_digits() -> None:
    rng = np.random.default_rng(4)
    n = 300
    noise = np.column_stack(
        [
            rng.standard_normal(n) * 0.01,
            np.cumsum(rng.standard_normal(n)),
            np.cumsum(rng.standard_normal(n)) * 1e-3,
        ]
    )
    values = OFFSET + noise
    fmx = _features_of(values, 30, 10)
    # x - 1e9 is exact here, so tsfresh on it sees the same window shifted: the
    # shift-invariant features must equal tsfresh's there (tsfresh's own ADF on x itself is
    # off by orders of magnitude at this offset, its lag-1 autocorrelation by ~1e-9)
    status = _check(fmx, values, shift=OFFSET, atol=ATOL)
    assert status["ok"] == sum(status.values()), status


def test_adf_random_walks_and_ar() -> None:
    rng = np.random.default_rng(7)
    n = 600
    walks = np.cumsum(rng.standard_normal((n, 2)), axis=0)
    ar = np.zeros(n)
    e = rng.standard_normal(n)
    for t in range(1, n):
        ar[t] = 0.3 * ar[t - 1] + e[t]
    values = np.column_stack([walks, ar])
    fmx = _features_of(values, 30, 7, features=["adf_stat"])
    assert fmx.features == ["adf_stat"] * 3
    status = _check(fmx, values)
    assert status["ok"] == sum(status.values()), status
    assert np.isfinite(fmx.values).all()


def test_adf_degenerate_windows() -> None:
    n = 30
    cases = {
        "step_at_last_row": np.r_[np.full(n - 1, 3.0), 5.0],  # intercept dropped
        "spike_at_last_row": np.r_[np.zeros(n - 1), 5.0],  # x_{t-1} all zero -> NaN
        "spike_mid": np.r_[np.zeros(20), 5.0, np.zeros(n - 21)],
        "spike_early": np.r_[0.0, 5.0, np.zeros(n - 2)],
        "two_levels": np.r_[np.zeros(15), np.ones(15)],
        "integer_walk": np.cumsum(np.random.default_rng(2).integers(-1, 2, n)).astype(float),
        "ramp_with_noise": np.arange(n) * 2.0 + np.random.default_rng(0).normal(0, 0.1, n),
        # a lag column constant on the search sample: statsmodels drops the intercept
        "ramp_head": np.r_[np.arange(21) * 3.0, 60.0 + np.random.default_rng(1).normal(0, 1, 9)],
        # x_{t-1} constant and non-zero on the search sample
        "step_early": np.r_[0.0, 1.0, np.full(n - 2, 5.0)],
    }
    values = np.column_stack(list(cases.values()))
    fmx = _features_of(values, n, 1, features=["adf_stat"])
    _check(fmx, values)
    assert fmx.values[0, 0] == pytest.approx(1.0, rel=1e-9)


def test_adf_perfect_fit_is_nan() -> None:
    """Exact ramps: zero residual, tsfresh returns round-off noise, we return NaN."""
    n = 30
    values = np.column_stack([np.arange(n) * 2.0, 5.0 + np.arange(n) * 0.5])
    fmx = _features_of(values, n, 1, features=["adf_stat", "slope"])
    assert np.isnan(fmx.values[0, 0]) and np.isnan(fmx.values[0, 2])
    assert fmx.values[0, 1] == pytest.approx(2.0)


def test_layout_kinds_and_columns() -> None:
    rng = np.random.default_rng(5)
    values = rng.random((50, 4)) * 10
    kinds = ["gauge", "event", "static", "counter"]
    fmx = _features_of(values, 10, 5, kinds=kinds)
    n_dyn = len(DYNAMIC_FEATURES)
    assert fmx.channels == ["ch0"] * n_dyn + ["ch1"] + ["ch3"] * n_dyn
    assert fmx.features == [*DYNAMIC_FEATURES, *EVENT_FEATURES, *DYNAMIC_FEATURES]
    assert fmx.columns[0] == "ch0|mean" and fmx.columns[n_dyn] == "ch1|sum"
    assert fmx.values.shape == (len(fmx.windows.start), 2 * n_dyn + 1)
    sums = [values[s : s + 10, 1].sum() for s in fmx.windows.start]
    np.testing.assert_allclose(fmx.values[:, n_dyn], sums, rtol=1e-12)
    _check(fmx, values, atol=ATOL)


def test_subset_order_dtype_and_threads_agree() -> None:
    rng = np.random.default_rng(6)
    # enough values for worker threads (features.SERIAL_BELOW_VALUES)
    values = np.cumsum(rng.standard_normal((3000, 200)), axis=0)
    sub = ["adf_stat", "mean", "median"]
    a = _features_of(values, 30, 10, features=sub, n_jobs=1)
    b = _features_of(values, 30, 10, features=sub, n_jobs=2)
    assert a.values.shape[0] * 30 * values.shape[1] >= features_module.SERIAL_BELOW_VALUES
    assert a.features[:3] == sub
    np.testing.assert_array_equal(a.values, b.values)
    c = _features_of(values, 30, 10, features=sub, dtype=np.float32)
    assert c.values.dtype == np.float32
    np.testing.assert_allclose(c.values, a.values, rtol=1e-6)


def test_bad_inputs_raise_input_error() -> None:
    values = np.zeros((50, 2))
    w = _rows_windows(50, 10, 5)
    with pytest.raises(InputError, match="unknown kind"):
        compute_features(values, ["a", "b"], ["gauge", "histogram"], w)
    with pytest.raises(InputError, match="2 columns"):
        compute_features(values, ["a"], ["gauge"], w)
    with pytest.raises(InputError, match="unknown feature"):
        compute_features(values, ["a", "b"], ["gauge"] * 2, w, features=["mean", "entropy"])
    with pytest.raises(InputError, match="past the end"):
        compute_features(values[:20], ["a", "b"], ["gauge"] * 2, w)
    with pytest.raises(InputError, match="2-D"):
        compute_features(values[:, 0], ["a"], ["gauge"], w)


def test_allocator_settings_change_only_when_features_are_computed() -> None:
    # a fresh interpreter: importing the feature code leaves malloc alone; the first
    # computation sets the thresholds (glibc) and records that it did
    code = (
        "import numpy as np\n"
        "import reveal.analysis.features as f\n"
        "from reveal.analysis import _feat_alloc as a\n"
        "from reveal.analysis.windows import make_windows\n"
        "from reveal.config import WindowConfig\n"
        "print(a._configured, a._libc is not None)\n"
        "w = make_windows(np.arange(40) * 100_000_000, WindowConfig())\n"
        "f.compute_features(np.random.default_rng(0).random((40, 2)), ['a', 'b'],"
        " ['gauge', 'gauge'], w)\n"
        "print(a._configured, a._libc is not None)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    after_import, after_compute = done.stdout.splitlines()
    assert after_import == "False False"
    glibc = platform.libc_ver()[0] == "glibc"
    assert after_compute == f"True {glibc}"


def test_runtime_does_not_import_oracles() -> None:
    code = (
        "import sys, reveal.analysis.features;"
        "bad = [m for m in ('tsfresh', 'statsmodels') if m in sys.modules];"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
