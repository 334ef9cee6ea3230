"""The model object: fit once, score many, keep the fit in a file; presets by resolution."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from reveal.analysis.presets import MINUTE, TELEMETRY, preset_name_for, with_overrides
from reveal.errors import InputError, ModelFormatError
from reveal.model import MAGIC, Reveal, report_run
from synthetic import ar1_host

_synthetic = ar1_host


@pytest.fixture(scope="module")
def fitted():
    return Reveal().fit(_synthetic(600, seed=1))


def test_fit_once_score_many_finds_the_fault_and_passes_the_clean_run(fitted):
    faulted = fitted.report(_synthetic(120, seed=3, fault=(60, 80)))
    assert not faulted.no_anomaly
    assert {e.subsystem for e in faulted.episodes} >= {"cpu"}
    peak = max(faulted.episodes, key=lambda e: e.peak_score)
    assert 57e9 <= peak.start_ns <= 80e9 and peak.subsystem == "cpu"  # windows of 3 s
    assert "CPU busy" in peak.claim  # worded by report/
    clean = fitted.report(_synthetic(120, seed=2))
    assert len(clean.anomalies) <= 0.03 * len(clean.windows.start_ns)
    decision = faulted.to_dict()["decision"]  # what decided the verdicts is in the JSON
    assert decision["preset"] == "telemetry" and decision["persistence_windows"] == 2
    flagged = np.asarray(faulted.windows.flagged)
    assert decision["combined_threshold"] < np.asarray(faulted.windows.combined)[flagged].min()
    assert set(decision["detector_thresholds"]) == set(faulted.windows.scores)


def test_the_same_as_the_one_call_analysis(fitted):
    run = _synthetic(120, seed=3, fault=(60, 80))
    direct = report_run(run, _synthetic(600, seed=1))
    again = fitted.report(run)
    np.testing.assert_array_equal(direct.windows.flagged, again.windows.flagged)
    np.testing.assert_allclose(direct.windows.combined, again.windows.combined)


def test_save_and_load_give_the_same_verdicts(fitted, tmp_path):
    path = fitted.save(tmp_path / "host.model")
    assert path.read_bytes().startswith(MAGIC)
    assert not list(tmp_path.glob(".*tmp"))  # written atomically, nothing left behind
    loaded = Reveal.load(path)
    run = _synthetic(120, seed=3, fault=(60, 80))
    a, b = fitted.report(run).to_dict(), loaded.report(run).to_dict()
    assert a["windows"] == b["windows"] and a["anomalies"] == b["anomalies"]
    assert loaded.get_params() == fitted.get_params()



def test_params_are_kept_as_given_so_clone_and_set_params_work(fitted):
    from sklearn.base import clone

    overrides, channels = {"detect.persistence_s": 5.0}, ("cpu.user", "mem.free")
    model = Reveal(preset="minute", overrides=overrides, metric_set=channels)
    params = model.get_params(deep=True)
    assert params == {"preset": "minute", "config": None, "overrides": overrides,
                      "metric_set": channels}
    assert params["overrides"] is overrides and params["metric_set"] is channels
    assert model.get_params(deep=False) == params
    twin = clone(model)
    assert type(twin) is Reveal and twin is not model and twin.get_params() == params
    assert twin.overrides is not overrides  # a clone's parameters are copies
    assert twin.set_params(**params).get_params() == params  # a round trip
    assert twin.set_params(preset="telemetry", overrides=None) is twin
    assert twin.preset == "telemetry" and twin.overrides is None
    with pytest.raises(ValueError, match="Invalid parameter"):
        twin.set_params(window=3)
    fresh = clone(fitted)  # a clone of a fitted model is not fitted
    assert fresh.get_params() == fitted.get_params() and not hasattr(fresh, "fitted_")
    with pytest.raises(InputError, match="not fitted"):
        fresh.report(_synthetic(60, seed=2))


def test_a_bad_model_file_is_one_clear_error(fitted, tmp_path):
    good = fitted.save(tmp_path / "good.model").read_bytes()
    header_end = good.index(b"\n", len(MAGIC))
    header = json.loads(good[len(MAGIC):header_end])
    cases = {
        "truncated": good[: len(good) - 100],
        "altered": good[:-1] + bytes([good[-1] ^ 1]),
        "other_version": MAGIC + json.dumps({**header, "format_version": 99}).encode()
        + good[header_end:],
        "not_a_model": b"PK\x03\x04 a zip file",
    }
    expect = {"truncated": "checksum", "altered": "checksum", "other_version": "format 99",
              "not_a_model": "not a Reveal model"}
    for name, data in cases.items():
        path = tmp_path / f"{name}.model"
        path.write_bytes(data)
        with pytest.raises(InputError, match=expect[name]):
            Reveal.load(path)
    with pytest.raises(InputError, match="cannot read"):
        Reveal.load(tmp_path / "missing.model")


def test_a_model_of_another_release_is_told_apart_from_a_damaged_one(fitted, tmp_path):
    """Another format version, or an intact file whose classes this Reveal does not have,
    is a ModelFormatError (the watch learns again); a damaged file is not."""
    import hashlib
    import pickle

    good = fitted.save(tmp_path / "good.model").read_bytes()
    header_end = good.index(b"\n", len(MAGIC))
    header = json.loads(good[len(MAGIC):header_end])
    payload = b"\x80\x04cbuiltins\nno_such_class\n."  # a pickle of a class this one lacks
    with pytest.raises(AttributeError):
        pickle.loads(payload)
    foreign = {**header, "bytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}
    cases = {"other_version": (MAGIC + json.dumps({**header, "format_version": 99}).encode()
                               + good[header_end:], "format 99"),
             "other_classes": (MAGIC + json.dumps(foreign).encode() + b"\n" + payload,
                               "cannot be read by this Reveal")}
    for name, (data, message) in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(ModelFormatError, match=message):
            Reveal.load(tmp_path / name)
    (tmp_path / "damaged").write_bytes(good[:-1])
    with pytest.raises(InputError, match="checksum") as damaged:
        Reveal.load(tmp_path / "damaged")
    assert not isinstance(damaged.value, ModelFormatError)


def test_scoring_before_fitting_says_so():
    with pytest.raises(InputError, match="not fitted"):
        Reveal().report(_synthetic(30, seed=4))


def test_presets_follow_the_sampling_interval():
    assert preset_name_for(0.1) == "telemetry" and preset_name_for(1.0) == "telemetry"
    assert preset_name_for(60.0) == "minute" and preset_name_for(5.0) == "minute"
    assert Reveal().resolve_config(0.1) is TELEMETRY
    assert Reveal().resolve_config(60.0) is MINUTE
    model = Reveal(overrides={"window.size_s": 5.0, "detect.persistence_s": 0.0})
    config = model.resolve_config(0.1)
    assert (config.window.size_s, config.detect.persistence_s) == (5.0, 0.0)
    with pytest.raises(InputError, match="unknown analysis setting"):
        with_overrides(TELEMETRY, {"window.size_m": 1})
    with pytest.raises(InputError, match="unknown preset"):
        Reveal(preset="hourly").resolve_config(0.1)


def test_minute_data_gets_the_minute_preset_and_a_verdict_per_row():
    base = _synthetic(3000 * 60, seed=5, interval_s=60.0)
    run = _synthetic(400 * 60, seed=6, interval_s=60.0, start_s=3000 * 60,
                     fault=(200 * 60, 230 * 60))
    model = Reveal().fit(base)
    assert model.config_.preset == "minute"
    report = model.report(run, lead_in=base)  # the run continues the baseline
    assert len(report.windows.start_ns) == run.n_samples  # the lead-in completes row 0 too
    flagged_rows = np.flatnonzero(report.windows.flagged)
    assert flagged_rows.size and 195 <= flagged_rows.min() <= 215


def test_self_fit_says_so_and_finds_a_fault():
    report = Reveal().fit_report(_synthetic(300, seed=7, fault=(150, 170)))
    assert report.baseline["self_fitted"] and report.decision["self_fitted"]
    assert any("fitted on the run itself" in w for w in report.warnings)
    assert report.episodes and max(report.episodes, key=lambda e: e.peak_score).subsystem == "cpu"


def test_a_short_baseline_is_named_in_the_report():
    report = report_run(_synthetic(120, seed=3), _synthetic(30, seed=1))
    assert any("baseline is too short" in w for w in report.warnings)


def test_cli_saves_and_reuses_a_model(tmp_path):
    from reveal.store.run_writer import write_run

    base = write_run(_synthetic(300, seed=1), tmp_path / "base")
    run = write_run(_synthetic(120, seed=3, fault=(60, 80)), tmp_path / "run")
    model = tmp_path / "host.model"
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    cmd = [sys.executable, "-m", "reveal.cli", "analyze", "--quiet", "--format", "none"]
    subprocess.run([*cmd, str(run), "--baseline", str(base), "--save-model", str(model),
                    "--json", str(first)], check=True, timeout=300)
    subprocess.run([*cmd, str(run), "--model", str(model), "--json", str(second)], check=True,
                   timeout=300)
    a, b = json.loads(first.read_text()), json.loads(second.read_text())
    assert a["windows"]["flagged"] == b["windows"]["flagged"]
    assert a["summary"]["verdict"] == "anomalies found"


def test_partial_fit_adds_a_generation_that_must_agree(tmp_path):
    """partial_fit(analysis, refit=True) with refits off in the settings fits a generation
    on the analysis' own unflagged windows; both must then agree, the fault still shows,
    and the generations survive save and load (format 3, counted in the header)."""
    model = Reveal(overrides={"detect.iforest_trees": 50}).fit(_synthetic(600, seed=1))
    assert model.generations_ == 1 and model.scoring_fitted() is model.fitted_
    recent = model.score_windows(_synthetic(400, seed=8, start_s=600))
    model.partial_fit(recent, refit=True)
    assert model.generations_ == 2
    assert model.scoring_fitted().ensemble is model.consensus_
    faulted = model.score_windows(_synthetic(120, seed=3, fault=(60, 80), start_s=1000))
    flagged = np.flatnonzero(faulted.verdicts.flagged)
    assert flagged.size and 55 <= flagged.min() <= 80
    assert any("consensus of 2 model generations" in w for w in faulted.warnings)
    path = model.save(tmp_path / "host.model")
    header = json.loads(path.read_bytes()[len(MAGIC):].split(b"\n", 1)[0])
    assert header["format_version"] == 3 and header["generations"] == 2
    again = Reveal.load(path).score_windows(_synthetic(120, seed=3, fault=(60, 80), start_s=1000))
    np.testing.assert_array_equal(again.verdicts.flagged, faulted.verdicts.flagged)


def test_a_run_under_a_very_different_load_is_named_in_the_report(fitted):
    busy = fitted.report(_synthetic(60, seed=8, fault=(0, 60)))  # busy 85 % against 40 %
    assert any("very different load" in w and "85 %" in w for w in busy.warnings)
    clean = fitted.report(_synthetic(60, seed=9))
    assert not any("very different load" in w for w in clean.warnings)
