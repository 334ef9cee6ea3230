"""Detectors on synthetic data: planted shifts are scored high and explained by their column."""

from __future__ import annotations

import numpy as np
import pytest

from reveal.analysis.detectors import GMM, IsolationForest, PCAMahalanobis, ZScore
from reveal.analysis.preprocess import RobustScaler
from reveal.errors import InputError

ALL = [ZScore, PCAMahalanobis, IsolationForest, GMM]


def _fast(cls):
    if cls is IsolationForest:
        return cls(n_estimators=50)
    if cls is GMM:
        return cls(max_components=3, bic_rows=1500)
    return cls()


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(1)
    mix = rng.normal(size=(3, 8))

    def draw(n):
        return rng.normal(size=(n, 3)) @ mix + 0.3 * rng.normal(size=(n, 8))

    base, run, clean = draw(2000), draw(400), draw(1000)
    run[200:220, 5] += 10.0 * base[:, 5].std()  # planted level shift in column 5
    return base, run, clean


@pytest.mark.parametrize("cls", ALL)
def test_planted_shift_is_scored_high_and_explained(cls, data):
    base, run, _ = data
    if cls is IsolationForest:
        # a forest cannot isolate a point beyond the baseline range in one column better
        # than the baseline's own extreme points; it needs the shift in several columns
        run = run.copy()
        run[200:220, [2, 6]] += 10.0 * base[:, [2, 6]].std(axis=0)
    det = _fast(cls).fit(base)
    scores = det.decision_function(run)
    assert scores.shape == (400,)
    shifted, clean = scores[200:220], np.r_[scores[:200], scores[220:]]
    assert np.median(shifted) > np.quantile(clean, 0.95)
    contrib = det.explain(run[200:220])
    assert contrib.shape == (20, 8)
    assert (contrib >= 0).all()
    top = contrib.argmax(axis=1)
    assert np.mean(np.isin(top, [2, 5, 6] if cls is IsolationForest else [5])) >= 0.8


@pytest.mark.parametrize("cls", ALL)
def test_threshold_from_baseline_and_clean_run(cls, data):
    base, _, clean = data
    det = _fast(cls).fit(base)
    assert det.decision_scores_.shape == (2000,)
    assert det.threshold_ == pytest.approx(np.quantile(det.decision_scores_, 0.99))
    assert det.predict(base).mean() == pytest.approx(0.01, abs=0.003)
    # a fresh clean draw from the baseline's law: about the baseline's 1 %, not more
    assert det.predict(clean).mean() <= 0.03


def test_mahalanobis_decomposition_sums_to_score(data):
    base, run, _ = data
    det = PCAMahalanobis().fit(base)
    assert det.n_components_ < 8
    np.testing.assert_allclose(det.explain(run).sum(axis=1), det.decision_function(run),
                               rtol=1e-8)


def test_zscore_contributions_sum_to_score(data):
    base, run, _ = data
    det = ZScore().fit(base)
    np.testing.assert_allclose(det.explain(run).sum(axis=1), det.decision_function(run))


def test_gmm_picks_mixture_size_by_bic():
    rng = np.random.default_rng(3)
    base = np.vstack([rng.normal(-4, 1, size=(800, 4)), rng.normal(4, 1, size=(800, 4))])
    det = GMM(max_components=4, bic_rows=1600).fit(base)
    assert det.n_mixture_components_ >= 2
    # a point between the modes is unusual for a 2-mode mixture
    assert det.decision_function(np.zeros((1, 4)))[0] > det.threshold_


@pytest.mark.parametrize("cls", ALL)
def test_bad_inputs(cls):
    det = _fast(cls)
    with pytest.raises(InputError, match="at least"):
        det.fit(np.zeros((1, 3)))
    with pytest.raises(InputError, match="NaN or inf"):
        det.fit(np.full((50, 3), np.nan))
    with pytest.raises(InputError, match="2-D"):
        det.fit(np.zeros(10))
    with pytest.raises(InputError, match="not fitted"):
        _fast(cls).decision_function(np.zeros((5, 3)))
    fitted = _fast(cls).fit(np.random.default_rng(0).normal(size=(300, 3)))
    with pytest.raises(InputError, match="columns"):
        fitted.decision_function(np.zeros((5, 4)))


def test_subsampled_fit_keeps_threshold_over_all_rows(data):
    base, _, _ = data
    det = PCAMahalanobis(max_fit_rows=500).fit(base)
    assert det.decision_scores_.shape == (2000,)


def test_scaler_handles_nan_constant_and_inf():
    rng = np.random.default_rng(0)
    base = rng.normal(size=(200, 4))
    base[:, 1] = 3.0  # constant
    base[:150, 2] = np.nan  # mostly undefined
    base[5, 3] = np.nan  # one gap: imputed
    sc = RobustScaler().fit(base)
    assert sc.columns_used_.tolist() == [0, 3]
    run = rng.normal(size=(3, 4))
    run[0, 0] = np.inf
    run[1, 3] = np.nan
    z = sc.transform(run)
    assert z.shape == (3, 2)
    assert z[0, 0] == sc.clip and z[1, 1] == 0.0
    assert sc.n_nonfinite_ == 1
    with pytest.raises(InputError, match="inf"):
        RobustScaler().fit(np.where(np.arange(4) == 0, np.inf, base))
    with pytest.raises(InputError, match="columns"):
        sc.transform(np.zeros((2, 5)))


def test_drift_centre_is_causal_and_follows_a_persistent_level():
    rng = np.random.default_rng(4)
    base = rng.normal(size=(1200, 3))
    run = rng.normal(size=(2400, 3))
    run[600:, 0] += 8.0  # a level change that persists
    sc = RobustScaler(drift_window=600, drift_block=50).fit(base)
    centres = sc.centres(run)
    # causal: changing the future does not move the centres of earlier blocks
    later = run.copy()
    later[1000:] += 50.0
    np.testing.assert_array_equal(sc.centres(later)[: 1000 // 50], centres[: 1000 // 50])
    z = sc.transform(run, centres)
    assert np.median(np.abs(z[600:700, 0])) > 5  # the change is seen at first
    assert np.median(np.abs(z[1500:, 0])) < 1  # ... and has become the new normal
    assert np.median(np.abs(sc.transform(run)[1500:, 0])) > 5  # fixed centre keeps flagging
    # the baseline's own centres start from its median and use only its past
    own = sc.centres(base, own_history=True)
    np.testing.assert_allclose(own[0], sc.median_[sc.columns_used_])
    with pytest.raises(InputError, match="drift window"):
        RobustScaler(drift_window=10, drift_block=50).fit(base)


def test_forest_on_a_grid_does_not_isolate_a_move_below_one_floor():
    """A forest splits only between a node's smallest and largest value, so any value just
    beyond the baseline's range is isolated as fast as its most extreme point. Columns
    with a scale floor are in units of it and rounded: a window a hundredth of a floor
    beyond the range falls in the range's last bucket, with many baseline windows."""
    rng = np.random.default_rng(4)
    base = rng.uniform(-2.2, 2.2, size=(1000, 1))
    typical = rng.uniform(-2.2, 2.2, size=(50, 1))
    plain = IsolationForest(n_estimators=100).fit(base)
    gridded = IsolationForest(n_estimators=100, grid=np.array([True])).fit(base)

    def median(det: IsolationForest, value: float) -> float:
        run = typical.copy()
        run[:, 0] = value
        return float(np.median(det.decision_function(run)))

    beyond = float(base.max()) + 0.01
    assert median(plain, beyond) > plain.threshold_  # isolated at once
    assert median(gridded, beyond) < gridded.threshold_  # not told from the baseline
    assert median(gridded, beyond) < median(gridded, -beyond) + 0.02  # like the other end
    with pytest.raises(InputError, match="grid"):
        IsolationForest(n_estimators=10, grid=np.array([True, False])).fit(base)


@pytest.mark.parametrize("cls", [PCAMahalanobis, GMM])
def test_no_direction_narrower_than_one_floor(cls):
    """Few baseline windows in many columns (floored z, one unit = the least change that
    counts), a quarter of them quiet: the baseline leaves directions, and a residual, of
    almost no variance. With ``min_variance=1`` a one-floor step of a quiet column adds
    about one floor² to a held-out window's score (MAHA; half that for GMM's
    log-likelihood), not tens; a step of twelve floors still stands out and is explained
    by that column."""
    rng = np.random.default_rng(7)

    def draw(m):
        x = rng.normal(size=(m, 400))
        x[:, :100] *= 0.02  # within a fiftieth of a floor
        return x

    base, fresh = draw(60), draw(20)
    small, large = fresh.copy(), fresh.copy()
    small[:, 3] += 1.0
    large[:, 3] += 12.0
    kwargs = {"max_components": 3, "bic_rows": 1500} if cls is GMM else {}
    per_floor = 1.0 if cls is PCAMahalanobis else 0.5

    def excess(det, x):
        return float(np.median(det.decision_function(x) - det.decision_function(fresh)))

    plain = cls(**kwargs).fit(base)
    floored = cls(min_variance=1.0, **kwargs).fit(base)
    assert excess(plain, small) > 3 * per_floor
    assert excess(floored, small) < 1.5 * per_floor
    assert excess(floored, large) > 50 * per_floor
    assert (floored.explain(large).argmax(axis=1) == 3).all()


def test_forest_walk_gives_scikit_learns_scores_bit_for_bit() -> None:
    """The all-trees-at-once walk used for a few windows equals scikit-learn's scoring."""
    from reveal.analysis.detectors.iforest import IsolationForest as Forest
    from reveal.analysis.detectors.iforest import _forest_scores

    rng = np.random.default_rng(3)
    for shape in [(600, 40), (30, 3)]:
        base = rng.normal(size=shape)
        det = Forest(n_estimators=60, random_state=1).fit(base)
        windows = rng.normal(size=(50, shape[1])) * 2.0
        windows[:2] = 1e6  # beyond every split
        on_grid = det._on_grid(windows)
        walked = _forest_scores(det._walk_table(), on_grid)
        np.testing.assert_array_equal(walked, -det.forest_.score_samples(on_grid))
        np.testing.assert_array_equal(det.decision_function(windows[:5]), walked[:5])
