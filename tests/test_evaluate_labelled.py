"""reveal evaluate on a slice of real SMD data: causal, fitted on train only, sane figures."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from reveal.cli import main
from reveal.evaluate.labelled import EvalSettings, run_pca_baseline, run_reveal, score_run
from reveal.store.labelled import default_data_root, load_machine
from slices import smd_slice

ROOT = default_data_root()
needs_data = pytest.mark.skipif(ROOT is None or not (ROOT / "smd" / "test").is_dir(),
                                reason="no labelled SMD data (../shared/data) here")
# smaller models and a 10-hour drift window in 30-minute blocks, so the slice below (4,000
# train rows) gets a drift-following centre that moves within it
FAST = EvalSettings(overrides=(("detect.iforest_trees", 50), ("detect.gmm_max_components", 3),
                               ("drift_window_s", 600 * 60.0), ("drift_block_s", 30 * 60.0)))


@pytest.fixture(scope="module")
def machine():
    if ROOT is None or not (ROOT / "smd" / "test").is_dir():
        pytest.skip("no labelled SMD data (../shared/data) here")
    lm = smd_slice(ROOT)
    assert lm.labels.sum() > 0
    return lm


@needs_data
def test_real_slice_scores_and_metrics(machine):
    run = run_reveal(machine, FAST)
    assert run.scores.shape == machine.labels.shape  # one verdict per test row
    result = score_run(machine, run)
    share = float(machine.labels.mean())
    assert result["auprc"] > 2 * share  # far better than chance
    # the automatic verdict is one threshold on the same score: never above the best F1
    assert 0.0 <= result["auto"]["f1"] <= result["best_f1"] + 1e-12
    assert result["best_f1"] > 0.2
    assert 0.0 <= result["hitrate_150"] <= 1.0
    assert result["hitrate_150"] >= result["hitrate_100"] - 1e-12
    assert result["point_adjusted_f1_inflated"] >= result["auto"]["f1"]
    pca = score_run(machine, run_pca_baseline(machine, FAST))
    assert 0.0 <= pca["best_f1"] <= 1.0


@needs_data
def test_protocol_is_causal(machine):
    """Changing later test rows must not change any earlier verdict."""
    cut = 1500
    base = run_reveal(machine, FAST)
    altered = dataclasses.replace(machine, test=machine.test.slice_rows(0, machine.test.n_samples))
    altered.test.values = altered.test.values.copy()
    altered.test.values[cut:] = np.random.default_rng(0).random(altered.test.values[cut:].shape)
    other = run_reveal(altered, FAST)
    np.testing.assert_allclose(other.scores[:cut], base.scores[:cut])
    np.testing.assert_array_equal(other.flagged[:cut], base.flagged[:cut])
    assert not np.allclose(other.scores[cut + 20:], base.scores[cut + 20:])


@needs_data
def test_cli_json_on_one_machine(tmp_path, capsys):
    out = tmp_path / "eval.json"
    assert main(["evaluate", "--datasets", "asd", "--machines", "omi-2", "--json", str(out),
                 "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "omi-2" in text and "inflated" in text
    data = json.loads(out.read_text())
    block = data["datasets"]["asd"]
    assert block["n_machines"] == 1
    assert set(block["mean"]) == {"reveal", "pca_raw"}


def test_cli_bad_data_root(tmp_path, capsys):
    assert main(["evaluate", "--data", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert "nowhere" in err and len(err.strip().splitlines()) == 1
    (tmp_path / "smd" / "test").mkdir(parents=True)
    assert main(["evaluate", "--data", str(tmp_path), "--datasets", "asd"]) == 2


def test_drift_window_is_set_in_time():
    from reveal.analysis.pipeline import ensemble_options
    from reveal.analysis.presets import MINUTE

    smd = ensemble_options(MINUTE, 60.0)  # one row a minute: 2 days, hourly blocks
    assert (smd.drift_window, smd.drift_block) == (2880, 60)
    asd = ensemble_options(MINUTE, 300.0)
    assert (asd.drift_window, asd.drift_block) == (576, 12)
    off = ensemble_options(dataclasses.replace(MINUTE, drift_window_s=None), 60.0)
    assert off.drift_window is None


def test_settings_reach_the_model():
    """The evaluation's overrides are the settings the model is fitted with."""
    from reveal.evaluate.labelled import reveal_model

    config = reveal_model(FAST).resolve_config(60.0)
    assert config.preset == "minute"
    assert (config.drift_window_s, config.drift_block_s) == (36000.0, 1800.0)
    assert (config.detect.iforest_trees, config.detect.gmm_max_components) == (50, 3)
    assert reveal_model(EvalSettings()).resolve_config(60.0).drift_window_s == 2 * 86400.0


@needs_data
@pytest.mark.parametrize(("dataset", "name"), [("smd", "machine-1-6"), ("asd", "omi-2")])
def test_analyze_and_evaluate_give_the_same_verdicts(tmp_path, dataset, name):
    """`reveal analyze DATASET:M` (what users run) and `reveal evaluate --machines M` are one
    path: the figures evaluate reports are those of analyze's verdicts and scores."""
    from reveal.evaluate.metrics import best_f1, point_prf

    report_path, figures_path = tmp_path / "report.json", tmp_path / "figures.json"
    assert main(["analyze", f"{dataset}:{name}", "--json", str(report_path), "--format",
                 "none", "--quiet"]) == 0
    assert main(["evaluate", "--datasets", dataset, "--machines", name, "--json",
                 str(figures_path), "--quiet"]) == 0
    windows = json.loads(report_path.read_text())["windows"]
    figures = json.loads(figures_path.read_text())["datasets"][dataset]["machines"][name]
    labels = load_machine(ROOT, dataset, name).labels.astype(bool)
    flagged = np.asarray(windows["flagged"], dtype=bool)
    combined = np.asarray(windows["combined"], dtype=float)
    assert flagged.shape == labels.shape  # one verdict per test row, in both
    auto = point_prf(labels, flagged)
    assert auto.f1 == pytest.approx(figures["reveal"]["auto"]["f1"], abs=1e-12)
    assert auto.precision == pytest.approx(figures["reveal"]["auto"]["precision"], abs=1e-12)
    assert float(flagged.mean()) == pytest.approx(figures["reveal"]["flagged_share"], abs=1e-12)
    assert best_f1(labels, combined)[0].f1 == pytest.approx(figures["reveal"]["best_f1"],
                                                           abs=1e-9)
