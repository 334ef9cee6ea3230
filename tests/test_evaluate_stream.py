"""reveal evaluate --mode stream: the live logic walked over labelled test data, causally."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from reveal.cli import main
from reveal.evaluate.labelled import EvalSettings, reveal_model, run_reveal, score_run
from reveal.evaluate.metrics import false_alarm_episodes
from reveal.evaluate.stream import run_stream
from reveal.store.labelled import default_data_root
from slices import smd_slice

ROOT = default_data_root()
needs_data = pytest.mark.skipif(ROOT is None or not (ROOT / "smd" / "test").is_dir(),
                                reason="no labelled SMD data (../shared/data) here")
FAST = EvalSettings(overrides=(("detect.iforest_trees", 30), ("detect.gmm_max_components", 2),
                               ("drift_window_s", 600 * 60.0), ("drift_block_s", 30 * 60.0)))
REFITS = dataclasses.replace(FAST, overrides=(*FAST.overrides, ("refit.every_s", 12 * 3600.0),
                                              ("refit.span_s", 12 * 3600.0),
                                              ("refit.min_windows", 100)))


@pytest.fixture(scope="module")
def machine():
    if ROOT is None or not (ROOT / "smd" / "test").is_dir():
        pytest.skip("no labelled SMD data (../shared/data) here")
    lm = smd_slice(ROOT)
    return lm


@needs_data
def test_stream_without_refits_is_batch(machine):
    """Walked chunk by chunk (chunks not aligned to anything), with no refit, the verdicts,
    scores and explanations are those of the batch path."""
    batch = run_reveal(machine, FAST)
    stream = run_stream(machine, reveal_model(FAST), chunk_s=97 * 60.0)
    assert stream.extra["chunks"] == -(-machine.test.n_samples // 97)
    np.testing.assert_allclose(stream.scores, batch.scores, rtol=0, atol=1e-9)
    np.testing.assert_array_equal(stream.flagged, batch.flagged)
    np.testing.assert_allclose(stream.metric_scores, batch.metric_scores, rtol=0, atol=1e-9)


@needs_data
@pytest.mark.slow
def test_stream_with_refits_is_causal(machine):
    """Changing test rows after row 1,500 changes no verdict before it, refits included."""
    cut = 1500
    base = run_stream(machine, reveal_model(REFITS))
    assert base.extra["refits"] >= 2 and base.extra["generations"] >= 2
    altered = dataclasses.replace(machine, test=machine.test.slice_rows(0, machine.test.n_samples))
    altered.test.values = altered.test.values.copy()
    altered.test.values[cut:] = np.random.default_rng(0).random(altered.test.values[cut:].shape)
    other = run_stream(altered, reveal_model(REFITS))
    np.testing.assert_allclose(other.scores[:cut], base.scores[:cut])
    np.testing.assert_array_equal(other.flagged[:cut], base.flagged[:cut])
    result = score_run(machine, base)
    assert 0.0 <= result["auto"]["f1"] <= result["best_f1"] + 1e-12
    assert result["false_episodes_per_day"] >= 0


@needs_data
def test_stream_measures_the_watchs_quiet_span_scheme(machine):
    """With refit.scheme=quiet_span the walk refits whole models on quiet spans of the test
    rows (the watch's scheme): before any refit the verdicts are the batch ones, and a
    refit's model learned 6 h of the test rows."""
    quiet = dataclasses.replace(FAST, overrides=(
        *FAST.overrides, ("refit.scheme", "quiet_span"), ("refit.every_s", 6 * 3600.0),
        ("refit.span_s", 6 * 3600.0)))
    model = reveal_model(quiet)
    run = run_stream(machine, model, chunk_s=3600.0)
    assert run.extra["refits"] + run.extra["refits_waiting"] >= 1
    batch = run_reveal(machine, quiet)
    clock = model.quiet_
    first = 6 * 60  # minute rows: no refit can happen before 6 h of test rows
    np.testing.assert_array_equal(run.flagged[:first], batch.flagged[:first])
    assert clock.refits == run.extra["refits"]
    if clock.refits:  # the model in use was fitted on 6 h of test rows, not on train
        span = model.fitted_.baseline
        assert span["start_ns"] >= int(machine.test.timestamps_ns[0])
        assert 6 * 3600 - 120 <= span["duration_s"] <= 6 * 3600


def test_false_alarm_episodes_count_runs_away_from_labels():
    labels = np.array([0, 0, 1, 1, 0, 0, 0, 0, 0, 0])
    flagged = np.array([1, 0, 0, 1, 1, 0, 1, 1, 0, 1], dtype=bool)
    # runs: [0], [3, 4] (touches the label), [6, 7], [9]: three false ones; 8 clean rows
    assert false_alarm_episodes(labels, flagged) == (3, 8)
    assert false_alarm_episodes(labels, np.zeros(10, bool)) == (0, 8)


@needs_data
def test_cli_both_modes_side_by_side(tmp_path, capsys):
    out = tmp_path / "eval.json"
    assert main(["evaluate", "--datasets", "asd", "--machines", "omi-2", "--mode", "both",
                 "--set", "detect.iforest_trees=30", "--set", "refit.every_s=172800",
                 "--json", str(out), "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "batch" in text and "stream" in text and "FA/d" in text
    data = json.loads(out.read_text())
    assert data["mode"] == "both"
    machine = data["datasets"]["asd"]["machines"]["omi-2"]
    assert set(machine) == {"reveal", "stream", "pca_raw"}
    assert machine["stream"]["false_episodes_per_day"] >= 0
    assert machine["stream"]["refits"]["chunks"] >= 1 and "refits" not in machine["reveal"]
    assert main(["evaluate", "--datasets", "asd", "--set", "refit.every_z=1"]) == 2
