"""A baseline that keeps itself current: refits on unflagged windows, generations that agree."""

from __future__ import annotations

import numpy as np
import pytest

from reveal.analysis.consensus import Consensus
from reveal.analysis.ensemble import Ensemble, EnsembleOptions
from reveal.config import DetectConfig, RefitConfig
from reveal.errors import InputError
from reveal.frame import Telemetry
from reveal.model import MAGIC, Reveal
from synthetic import ar1_host

MINUTE = 60.0
# small models, a 10-hour drift window in 1-hour blocks, refits every 6 h on 12 h
FAST = {"detect.iforest_trees": 30, "detect.gmm_max_components": 2,
        "drift_window_s": 10 * 3600.0, "drift_block_s": 3600.0}
SMALL = {"detect.iforest_trees": 30}
REFITS = {**FAST, "refit.every_s": 6 * 3600.0, "refit.span_s": 12 * 3600.0,
          "refit.generations": 3, "refit.min_windows": 100}


def _minutes(rows: int, seed: int, start_row: int = 0, noise: float = 1.0,
             fault: tuple[int, int] | None = None, channels: int = 4) -> Telemetry:
    """AR(1) gauges one row a minute; ``noise`` scales them from ``start_row`` on; a level
    shift of +8 sigma in the first channel over the ``fault`` rows."""
    rng = np.random.default_rng(seed)
    e = rng.normal(size=(rows, channels))
    x = np.empty_like(e)
    x[0] = e[0]
    for t in range(1, rows):
        x[t] = 0.5 * x[t - 1] + e[t]
    x = 50 + noise * x
    if fault is not None:
        x[fault[0]:fault[1], 0] += 8
    ts = (np.arange(rows, dtype=np.int64) + start_row) * np.int64(60e9)
    names = [f"smd.m{j}" for j in range(channels)]
    return Telemetry("host", ts, x, names, {"interval_s": MINUTE})


def _walk(model: Reveal, run: Telemetry, lead: Telemetry, rows: int):
    combined, flagged = [], []
    for a in range(0, run.n_samples, rows):
        chunk = run.slice_rows(a, min(a + rows, run.n_samples))
        analysis = model.score_windows(chunk, lead_in=lead if a == 0 else run.slice_rows(a - 20, a))
        combined.append(analysis.verdicts.combined)
        flagged.append(analysis.verdicts.flagged)
        model.partial_fit(analysis)
    return np.concatenate(combined), np.concatenate(flagged)


@pytest.fixture(scope="module")
def data():
    base = _minutes(3000, seed=1)
    run = _minutes(2400, seed=2, start_row=3000, fault=(1500, 1560))
    return base, run


@pytest.mark.parametrize("rows", [60, 97, 500])
def test_chunk_by_chunk_without_refits_is_the_batch_verdict(data, rows):
    """Live is the batch path fed chunk by chunk: with no refit the verdicts are the same,
    whatever the chunk size (drift centre and persistence carried across chunks)."""
    base, run = data
    batch = Reveal(overrides={**FAST, "detect.persistence_s": 120.0}).fit(base)
    expected = batch.score_windows(run, lead_in=base).verdicts
    model = Reveal(overrides={**FAST, "detect.persistence_s": 120.0}).fit(base)
    combined, flagged = _walk(model, run, base, rows)
    np.testing.assert_allclose(combined, expected.combined, rtol=0, atol=1e-9)
    np.testing.assert_array_equal(flagged, expected.flagged)
    assert model.generations_ == 1 and model.consensus_.refits == 0


def test_persistence_judged_for_significance_is_carried_from_chunk_to_chunk():
    """Collector telemetry (judged for significance, persistence of two 1 s windows): a
    fault that a chunk boundary cuts is flagged from the boundary on, as scored at once."""
    def with_host(tel: Telemetry) -> Telemetry:
        meta = dict(tel.meta, mem_total_bytes=24 * 2**30, n_cpus=2)
        return Telemetry(tel.host, tel.timestamps_ns, tel.values, list(tel.channels), meta)

    base = with_host(ar1_host(120.0, seed=5))
    run = with_host(ar1_host(60.0, seed=6, fault=(20.0, 40.0), start_s=200.0))
    expected = Reveal(overrides=SMALL).fit(base).score_windows(run, lead_in=base)
    assert expected.persistence == 2 and expected.verdicts.flagged[23:40].all()
    model = Reveal(overrides=SMALL).fit(base)
    flagged = []
    for a in range(0, run.n_samples, 100):  # chunks of 10 s: boundaries at 30 s and 40 s
        chunk = run.slice_rows(a, min(a + 100, run.n_samples))
        analysis = model.score_windows(chunk, lead_in=base if a == 0
                                       else run.slice_rows(a - 40, a))
        flagged.append(analysis.verdicts.flagged)
        model.partial_fit(analysis)
    np.testing.assert_array_equal(np.concatenate(flagged), expected.verdicts.flagged)


@pytest.mark.slow
def test_refits_add_generations_and_the_fault_is_not_learned(data):
    base, run = data
    model = Reveal(overrides=REFITS).fit(base)
    _, flagged = _walk(model, run, base, 360)
    consensus = model.consensus_
    assert consensus.refits == 2400 // 360 - 1 or consensus.refits >= 4  # every 6 h of data
    assert model.generations_ == 3  # the baseline's and the two newest
    assert [g.origin for g in consensus.generations] == ["baseline", "refit", "refit"]
    assert flagged[1500:1560].mean() > 0.8  # the fault is caught
    # clean parts near the 99th percentile's 1 %: overlapping windows flag in clusters of a
    # few rows, so 800 rows vary by a few clusters either way
    assert flagged[:1500].mean() < 0.03 and flagged[1600:].mean() < 0.03
    # a generation fitted after the fault never saw it: the fault's windows were left out
    again = Reveal(overrides=REFITS).fit(base)
    _walk(again, run.slice_rows(0, 1800), base, 360)
    newest = again.consensus_.generations[-1]
    assert newest.fitted_windows < 720 - 50  # 12 h of windows less the flagged ones


@pytest.mark.slow
def test_a_noisier_normal_is_learned_and_stops_alarming():
    """Train quiet, then the host gets noisier for good: the baseline's model alone flags
    much of it for ever; with refits (the baseline's model dropped) it stops."""
    base = _minutes(3000, seed=3)
    run = _minutes(4000, seed=4, start_row=3000, noise=1.2)
    alone = Reveal(overrides=FAST).fit(base).score_windows(run, lead_in=base).verdicts.flagged
    model = Reveal(overrides={**REFITS, "refit.keep_baseline": False}).fit(base)
    _, flagged = _walk(model, run, base, 360)
    assert alone[2000:].mean() > 0.08  # the 99th percentile of train: ~1 % expected
    assert flagged[2000:].mean() < alone[2000:].mean() / 4
    assert model.consensus_.refits >= 8


def test_a_window_is_flagged_only_when_every_generation_agrees():
    rng = np.random.default_rng(0)
    calm = Ensemble(DetectConfig(detectors=("zscore",)), EnsembleOptions()).fit(
        rng.normal(size=(2000, 3)))
    wide = Ensemble(DetectConfig(detectors=("zscore",)), EnsembleOptions()).fit(
        3 * rng.normal(size=(2000, 3)))
    consensus = Consensus(calm, RefitConfig(generations=2, keep_baseline=True),
                          DetectConfig(detectors=("zscore",)), EnsembleOptions(), None, 60.0)
    X = np.array([[0.0, 0, 0], [5.0, 0, 0], [30.0, 0, 0]])
    alone = consensus.score(X)
    assert alone.flagged.tolist() == [False, True, True]
    np.testing.assert_allclose(alone.combined, calm.score(X).combined)
    from reveal.analysis.consensus import Generation

    consensus.generations.append(Generation(wide, "refit", 2000, 0))
    both = consensus.score(X)
    assert both.flagged.tolist() == [False, False, True]  # 5 calm sigmas: inside wide's range
    margins = [e.score(X).combined - e.combined_threshold_ for e in (calm, wide)]
    np.testing.assert_allclose(both.combined, calm.combined_threshold_ + np.minimum(*margins))
    contrib = consensus.explain(X, np.array([2]))
    assert contrib.shape == (1, 3) and contrib[0].argmax() == 0


def test_generations_survive_save_and_load(data, tmp_path):
    base, run = data
    model = Reveal(overrides=REFITS).fit(base)
    _walk(model, run.slice_rows(0, 1200), base, 360)
    assert model.generations_ > 1
    path = model.save(tmp_path / "host.model")
    header = path.read_bytes()[len(MAGIC):].split(b"\n", 1)[0]
    assert b'"generations": ' in header
    loaded = Reveal.load(path)
    rest = run.slice_rows(1200, 1500)
    lead = run.slice_rows(1180, 1200)
    a = model.score_windows(rest, lead_in=lead).verdicts
    b = loaded.score_windows(rest, lead_in=lead).verdicts
    np.testing.assert_array_equal(a.flagged, b.flagged)
    np.testing.assert_allclose(a.combined, b.combined)
    assert loaded.generations_ == model.generations_


def test_bad_refit_settings_are_input_errors(data):
    base, run = data
    model = Reveal(overrides={**FAST, "refit.generations": 0}).fit(base)
    with pytest.raises(InputError, match="generations"):
        model.partial_fit(run.slice_rows(0, 100), lead_in=base)
    model = Reveal(overrides={**FAST, "refit.every_s": -1.0}).fit(base)
    with pytest.raises(InputError, match="positive"):
        model.partial_fit(run.slice_rows(0, 100), lead_in=base)


def test_a_refit_waits_for_enough_unflagged_windows(data):
    base, run = data
    model = Reveal(overrides={**REFITS, "refit.min_windows": 5000}).fit(base)
    _walk(model, run.slice_rows(0, 800), base, 400)
    assert model.generations_ == 1 and model.consensus_.refits_waiting >= 1


def test_refits_learn_only_clearly_normal_windows_when_asked():
    """With refit.learn_quantile, windows scoring above that quantile of the baseline's
    combined scores stay out of refits (alone, without their neighbours); flagged windows
    take their neighbours with them."""
    rng = np.random.default_rng(1)
    base = Ensemble(DetectConfig(detectors=("zscore",)), EnsembleOptions()).fit(
        rng.normal(size=(2000, 3)))
    refit = RefitConfig(every_s=3600.0, span_s=10 * 3600.0, learn_quantile=0.5)
    consensus = Consensus(base, refit, DetectConfig(detectors=("zscore",)), EnsembleOptions(),
                          None, 60.0, guard=2)
    X = rng.normal(size=(100, 3))
    combined = base.score(X).combined
    flagged = np.zeros(100, dtype=bool)
    flagged[50] = True
    consensus.advance(X, flagged, flagged, combined=combined)
    kept = consensus.recent_unflagged()
    loud = combined > np.quantile(base.baseline_combined_, 0.5)
    expect = ~loud
    expect[48:53] = False
    np.testing.assert_array_equal(kept, X[expect])
    with pytest.raises(InputError, match="learn_quantile"):
        Consensus(base, RefitConfig(learn_quantile=1.5), DetectConfig(), EnsembleOptions(),
                  None, 60.0)
