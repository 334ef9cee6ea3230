"""The ensemble: baseline-fitted verdicts, explanations, self-fit and bad inputs."""

from __future__ import annotations

import numpy as np
import pytest

from reveal.analysis.ensemble import (
    Ensemble,
    EnsembleOptions,
    Verdicts,
    persistence_windows,
    persistent,
)
from reveal.config import DetectConfig
from reveal.errors import InputError

FAST = DetectConfig(iforest_trees=50, gmm_max_components=3)


def _law(rng, n, mix):
    return rng.normal(size=(n, mix.shape[0])) @ mix + 0.3 * rng.normal(size=(n, mix.shape[1]))


@pytest.fixture(scope="module")
def setting():
    rng = np.random.default_rng(5)
    mix = rng.normal(size=(3, 10))
    base = _law(rng, 3000, mix)
    base[:, 9] = 1.0  # constant on the baseline: not scored
    run = _law(rng, 600, mix)
    run[:, 9] = 1.0
    run[300:330, [3, 4]] += 8.0 * base[:, [3, 4]].std(axis=0)  # planted shift
    clean = _law(rng, 2000, mix)
    clean[:, 9] = 1.0
    return base, run, clean


def test_planted_shift_flagged_and_explained(setting):
    base, run, _ = setting
    ens = Ensemble(FAST).fit(base)
    assert ens.columns_used_.tolist() == list(range(9))
    v = ens.score(run)
    assert isinstance(v, Verdicts) and not v.self_fitted
    assert set(v.scores) == {"Z", "MAHA", "IF", "GMM"}
    assert v.flagged[300:330].mean() >= 0.9
    assert v.flagged[:300].mean() <= 0.03
    assert (v.agreement[300:330] >= 3).mean() >= 0.8
    # the combined score rises with agreement
    assert np.median(v.combined[v.agreement == 4]) > np.median(v.combined[v.agreement <= 1])
    rows = np.flatnonzero(v.flagged[300:330]) + 300
    contrib = ens.explain(run, rows)
    assert contrib.shape == (rows.size, 10)
    assert (contrib >= 0).all() and (contrib[:, 9] == 0).all()
    top2 = np.argsort(-contrib, axis=1)[:, :2]
    assert np.mean(np.sort(top2, axis=1).tolist() == [[3, 4]] * rows.size) >= 0.8


def test_clean_run_yields_almost_no_anomaly(setting):
    base, _, clean = setting
    v = Ensemble(FAST).fit(base).score(clean)
    assert v.flagged.mean() <= 0.02
    for name, flags in v.flags.items():
        assert flags.mean() <= 0.03, name


def test_self_fit_is_marked_and_robust(setting):
    _, run, _ = setting
    ens = Ensemble(FAST).fit(run, robust_self_fit=True)
    v = ens.score(run)
    assert v.self_fitted
    assert v.flagged[300:330].mean() >= 0.8
    assert any("self-fit" in w for w in v.warnings)


def test_pot_threshold_option(setting):
    base, run, _ = setting
    v = Ensemble(FAST, EnsembleOptions(combined_threshold="pot", pot_risk=1e-3)).fit(base) \
        .score(run)
    assert v.flagged[300:330].mean() >= 0.9
    assert v.flagged[:300].mean() <= 0.01


def test_nan_and_inf_in_scored_features(setting):
    base, run, _ = setting
    ens = Ensemble(FAST).fit(base)
    bad = run[:50].copy()
    bad[10, 2] = np.nan  # imputed with the baseline median
    bad[20, 2] = np.inf  # treated as extreme
    v = ens.score(bad)
    assert np.isfinite(v.combined).all()
    assert v.flagged[20]
    assert any("infinite" in w for w in v.warnings)


def test_bad_inputs(setting):
    base, _, _ = setting
    with pytest.raises(InputError, match="baseline windows"):
        Ensemble(FAST).fit(base[:5])
    with pytest.raises(InputError, match="constant or undefined"):
        Ensemble(FAST).fit(np.ones((100, 4)))
    with pytest.raises(InputError, match="inf"):
        Ensemble(FAST).fit(np.where(np.arange(10) == 2, np.inf, base))
    with pytest.raises(InputError, match="2-D"):
        Ensemble(FAST).fit(base[:, 0])
    with pytest.raises(InputError, match="unknown detector"):
        Ensemble(DetectConfig(detectors=("zscore", "nope"))).fit(base)
    with pytest.raises(InputError, match="not fitted"):
        Ensemble(FAST).score(base)
    ens = Ensemble(DetectConfig(detectors=("zscore",))).fit(base)
    with pytest.raises(InputError, match="columns"):
        ens.score(base[:, :5])
    with pytest.raises(InputError, match="outside"):
        ens.explain(base[:10], np.array([10]))
    assert ens.explain(base[:10], np.array([], dtype=int)).shape == (0, 10)


def test_drift_following_centre(setting):
    base, run, _ = setting
    rng = np.random.default_rng(9)
    long_run = np.vstack([run] + [run[rng.permutation(300)] for _ in range(6)])
    long_run[600:, 0] += 6.0 * base[:, 0].std()  # a lasting change after the planted shift
    opts = EnsembleOptions(drift_window=400, drift_block=20)
    ens = Ensemble(FAST, opts).fit(base)
    v = ens.score(long_run)
    assert v.flagged[300:330].mean() >= 0.9  # the short shift is still found
    assert v.flagged[600:700].mean() >= 0.5  # the change is reported when it happens
    assert v.flagged[1200:].mean() <= 0.05  # ... then becomes the new normal
    fixed = Ensemble(FAST).fit(base).score(long_run)
    assert fixed.flagged[1200:].mean() >= 0.5
    rows = np.arange(300, 330)
    contrib = ens.explain(long_run, rows)
    assert np.mean(np.isin(contrib.argmax(axis=1), [3, 4])) >= 0.8


def test_persistence_needs_consecutive_windows_above_the_threshold():
    above = np.array([1, 0, 1, 1, 0, 1, 1, 1, 0], dtype=bool)
    assert persistent(above, 1).tolist() == above.tolist()
    assert persistent(above, 2).astype(int).tolist() == [0, 0, 0, 1, 0, 0, 1, 1, 0]
    assert persistent(above, 3).astype(int).tolist() == [0, 0, 0, 0, 0, 0, 0, 1, 0]
    assert not persistent(above[:2], 4).any()
    assert persistence_windows(1.0, 1.0) == 2  # 1 s stride: two windows
    assert persistence_windows(1.0, 0.5) == 3
    assert persistence_windows(1.0, 60.0) == 1  # minute-level rows: each window alone
    assert persistence_windows(0.0, 1.0) == 1
    assert persistence_windows(1.0, float("nan")) == 1


def test_persistence_drops_a_lone_window_and_keeps_a_lasting_shift():
    rng = np.random.default_rng(3)
    base = rng.standard_normal((200, 6))
    run = rng.standard_normal((40, 6))
    run[10] += 12.0  # one window
    run[25:32] += 12.0  # a lasting change
    ens = Ensemble(DetectConfig(detectors=("zscore", "pca_mahalanobis"))).fit(base)
    lone = ens.score(run)
    held = ens.score(run, persistence=2)
    assert lone.flagged[10] and lone.flagged[25:32].all()
    assert not held.flagged[10]
    assert held.flagged[26:32].all() and not held.flagged[25]
    assert (held.combined == lone.combined).all()  # scores unchanged, only the verdict


def test_forest_explains_floored_columns_only_when_asked_or_alone(setting):
    """On floored columns attributions draw on Z, MAHA and GMM; the forest's credits join
    only with ``explain_forest`` or on its own. Unfloored data keep them."""
    base, run, _ = setting
    rows = np.arange(300, 330)
    floors = 0.5 * base.std(axis=0)

    def explained(config, scale_floor=floors):
        return Ensemble(config).fit(base, scale_floor=scale_floor).explain(run, rows)

    both = DetectConfig(detectors=("zscore", "iforest"), iforest_trees=50)
    z_only = explained(DetectConfig(detectors=("zscore",)))
    without = Ensemble(both).fit(base, scale_floor=floors)
    assert "IF" in without.score(run).scores  # it still scores
    np.testing.assert_allclose(without.explain(run, rows), z_only)
    asked = explained(DetectConfig(detectors=("zscore", "iforest"), iforest_trees=50,
                                   explain_forest=True))
    assert not np.allclose(asked, z_only)
    unfloored = explained(both, None)
    assert not np.allclose(unfloored, explained(DetectConfig(detectors=("zscore",)), None))
    alone = explained(DetectConfig(detectors=("iforest",), iforest_trees=50))
    assert alone[:, [3, 4]].sum() > 0


def test_explain_takes_the_centres_score_used(setting):
    """``score`` returns the drift centres it scaled with; ``explain`` takes them, or computes
    them for the matrix it is given (nothing is remembered between calls)."""
    base, run, _ = setting
    ens = Ensemble(FAST, EnsembleOptions(drift_window=200, drift_block=20)).fit(base)
    v = ens.score(run)
    assert v.centres is not None and v.centres.shape == (600 // 20, 9)
    rows = np.arange(300, 330)
    given = ens.explain(run, rows, centres=v.centres)
    np.testing.assert_array_equal(given, ens.explain(run, rows))
    # another matrix (same shape, as an array at a reused address would be) gets its own
    moved = run + 3.0 * base.std(axis=0)
    own = ens.explain(moved, rows)
    np.testing.assert_array_equal(own, ens.explain(moved, rows,
                                                   centres=ens.score(moved).centres))
    assert not np.allclose(own, ens.explain(moved, rows, centres=v.centres))
    with pytest.raises(InputError, match="do not fit"):
        ens.explain(run[:100], np.arange(5), centres=v.centres)
    plain = Ensemble(DetectConfig(detectors=("zscore",))).fit(base)
    assert plain.score(run).centres is None
    with pytest.raises(InputError, match="no drift-following centre"):
        plain.explain(run, rows, centres=v.centres)


def test_self_fit_threshold_from_the_spread_of_the_inliers():
    """``self_fit_threshold_mads``: self-fitted on a clean run, the baseline quantile flags
    about 1 % of it; median + k robust sigmas of the refit windows' combined scores lifts
    the threshold above that (never below the usual one), and a baseline is unaffected."""
    rng = np.random.default_rng(8)
    run = rng.normal(size=(600, 6))
    config = DetectConfig(detectors=("zscore", "pca_mahalanobis"))
    usual = Ensemble(config).fit(run, robust_self_fit=True)
    wide = Ensemble(config, EnsembleOptions(self_fit_threshold_mads=6.0)) \
        .fit(run, robust_self_fit=True)
    combined = wide.baseline_combined_
    med = np.median(combined)
    spread = med + 6.0 * 1.4826 * np.median(np.abs(combined - med))
    assert spread > usual.combined_threshold_
    assert wide.combined_threshold_ == pytest.approx(spread)
    assert wide.score(run).combined_threshold == pytest.approx(spread)
    assert wide.score(run).flagged.sum() < usual.score(run).flagged.sum()
    narrow = Ensemble(config, EnsembleOptions(self_fit_threshold_mads=0.0)) \
        .fit(run, robust_self_fit=True)
    assert narrow.combined_threshold_ == usual.combined_threshold_
    with_baseline = Ensemble(config, EnsembleOptions(self_fit_threshold_mads=6.0)).fit(run)
    assert with_baseline.combined_threshold_ == Ensemble(config).fit(run).combined_threshold_
    with pytest.raises(InputError, match="self_fit_threshold_mads"):
        Ensemble(config, EnsembleOptions(self_fit_threshold_mads=-1.0)).fit(run)


def test_baseline_trim_leaves_a_burst_out_of_the_fit():
    """``baseline_trim_mads``: a burst inside the baseline raises every detector's
    threshold and hides a fault far smaller than it; left out of the fit, the fault is
    found. A baseline without such windows fits exactly as without the trim."""
    rng = np.random.default_rng(11)
    config = DetectConfig(detectors=("zscore", "pca_mahalanobis"))
    clean = rng.normal(size=(600, 6))
    burst = clean.copy()
    burst[300:306] += 12.0  # six windows of a burst in the baseline
    plain = Ensemble(config).fit(burst)
    trimmed = Ensemble(config, EnsembleOptions(baseline_trim_mads=8.0)).fit(burst)
    assert trimmed.baseline_trimmed_ == 6
    assert any("6 outlying baseline windows" in w for w in trimmed.warnings_)
    for tag, threshold in plain.baseline_threshold_.items():
        assert trimmed.baseline_threshold_[tag] < threshold, tag
    fault = rng.normal(size=(200, 6)) + 2.0  # a shift of 2 sigmas in every column
    assert trimmed.score(fault).flagged.mean() > 0.5 > 5 * plain.score(fault).flagged.mean()
    same = Ensemble(config, EnsembleOptions(baseline_trim_mads=8.0)).fit(clean)
    assert same.baseline_trimmed_ == 0
    assert same.combined_threshold_ == Ensemble(config).fit(clean).combined_threshold_
    with pytest.raises(InputError, match="baseline_trim_mads"):
        Ensemble(config, EnsembleOptions(baseline_trim_mads=-1.0)).fit(clean)
