"""The ``significance`` settings group: listed and set like every setting, checked by name,
and kept in the model, so a saved model scores the same after the code's defaults change."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import reveal.config
from reveal.config import SignificanceConfig
from reveal.errors import InputError
from reveal.frame import Telemetry
from reveal.model import Reveal
from synthetic import ar1_host

GIB = 2.0**30


def _host(tel: Telemetry, change: float, seed: int) -> Telemetry:
    """``tel`` with anonymous memory on a 24 GiB, 2-CPU host that holds ``change`` bytes
    more from 20 s to 40 s."""
    rng = np.random.default_rng(seed)
    anon = 2 * GIB + rng.normal(0.0, 4e6, tel.n_samples)
    anon[200:400] += change
    meta = dict(tel.meta, mem_total_bytes=24 * GIB, n_cpus=2)
    return Telemetry(tel.host, tel.timestamps_ns, np.column_stack([tel.values, anon]),
                     [*tel.channels, "mem.AnonPages"], meta)


@pytest.fixture(scope="module")
def recordings() -> tuple[Telemetry, Telemetry]:
    base = _host(ar1_host(120.0, seed=41), 0.0, seed=1)
    run = _host(ar1_host(60.0, seed=42, start_s=200.0), 0.5 * GIB, seed=2)  # 2 % of memory
    return base, run


#: Defaults a later version of the code might have: every share and z far larger.
LATER = SignificanceConfig(**{f.name: (0.9 if f.name in ("direct_share", "detector_lead")
                                       else 50.0 * f.default)
                              for f in dataclasses.fields(SignificanceConfig)})


def _flags(report: object) -> np.ndarray:
    return np.asarray(report.windows.flagged, dtype=bool)  # type: ignore[attr-defined]


def test_a_saved_model_scores_the_same_after_the_codes_defaults_change(
        tmp_path, monkeypatch, recordings) -> None:
    base, run = recordings
    model = Reveal().fit(base)
    assert model.fitted_.config.significance == SignificanceConfig()
    path = model.save(tmp_path / "model.reveal")
    kept = Reveal.load(path).report(run)
    assert _flags(kept).sum() >= 10  # 500 MiB of 24 GiB held for 20 s: it matters
    assert kept.anomalies[0].reasons[0].metric == "mem.AnonPages"

    monkeypatch.setattr(reveal.config, "DEFAULT_SIGNIFICANCE", LATER)
    again = Reveal.load(path).report(run)
    assert np.array_equal(_flags(again), _flags(kept))
    assert [a.reasons[0].channel for a in again.anomalies] == \
        [a.reasons[0].channel for a in kept.anomalies]
    # the later settings do change a model fitted with them: 2 % of memory no longer
    # matters, so the comparison above is not one that cannot fail
    later = Reveal(overrides={f"significance.{k}": v
                              for k, v in dataclasses.asdict(LATER).items()}).fit(base)
    assert later.fitted_.config.significance == LATER
    assert _flags(later.report(run)).sum() < _flags(kept).sum() // 2


def test_a_setting_of_the_group_is_set_by_name_and_changes_the_verdict(recordings) -> None:
    base, run = recordings
    default = _flags(Reveal().fit(base).report(run)).sum()
    strict = Reveal(overrides={"significance.memory_share": 0.05}).fit(base)
    assert strict.fitted_.config.significance.memory_share == 0.05
    assert _flags(strict.report(run)).sum() < default // 2  # 2 % of memory < 5 %


@pytest.mark.parametrize(("name", "value", "says"), [
    ("significance.memory_share", 0.0, "significance.memory_share must be more than 0"),
    ("significance.significant_z", -1.0, "significance.significant_z must be 0 or more"),
    ("significance.direct_share", 1.5, "significance.direct_share must lie between 0 and 1"),
])
def test_a_setting_that_cannot_mean_anything_is_refused_by_name(recordings, name, value,
                                                                  says) -> None:
    with pytest.raises(InputError, match=says):
        Reveal(overrides={name: value}).fit(recordings[0])
