"""Correlation pruning, union over runs, metric-set files and the Figure 4 curves."""

from __future__ import annotations

import numpy as np
import pytest

from reveal.analysis.select import (
    load_metric_set,
    prune,
    pruning_curves,
    save_metric_set,
    union,
)
from reveal.catalog import Catalog, MetricInfo
from reveal.errors import InputError
from reveal.frame import Telemetry

CATALOG = Catalog([
    MetricInfo("util", "cpu", "gauge", priority=100),
    MetricInfo("stalls", "cpu", "gauge", priority=10),
    MetricInfo("noise", "cpu", "gauge", priority=0),
    MetricInfo("flat", "cpu", "gauge", priority=50),
])


def _run(seed: int = 0, n: int = 3000) -> Telemetry:
    rng = np.random.default_rng(seed)
    util = rng.normal(size=n)
    stalls = 5 * util + rng.normal(scale=0.5, size=n)  # |r| ≈ 0.995 with util
    noise = rng.normal(size=n)
    values = np.column_stack([stalls, util, noise, np.full(n, 3.0)])
    return Telemetry("h", np.arange(n) * 10**8, values, ["stalls", "util", "noise", "flat"],
                     {"path": f"run{seed}"})


def test_priority_picks_the_representative_and_constants_are_separate():
    selection = prune(_run(), 0.5, CATALOG)
    assert selection.kept == ["util", "noise"]
    assert selection.redundant == {"stalls": "util"}
    assert selection.constant == ["flat"]
    assert selection.selected_ratio == pytest.approx(2 / 3)


def test_a_channel_stands_only_for_its_own_subsystem_when_asked():
    """A job's memory that grew with its CPU use in the baseline still measures memory:
    pruned across subsystems it would be represented by a CPU's busy share, which says
    nothing when memory alone moves."""
    rng = np.random.default_rng(3)
    n = 2000
    busy = np.cumsum(rng.normal(size=n))  # the job warming up: CPU and memory together
    memory = 1e6 * busy + rng.normal(scale=1e5, size=n)
    catalog = Catalog([MetricInfo("busy", "cpu", "gauge", priority=100),
                       MetricInfo("available", "memory", "gauge", "bytes", priority=85),
                       MetricInfo("anon", "memory", "gauge", "bytes", priority=75)])
    tel = Telemetry("h", np.arange(n) * 10**8, np.column_stack([busy, memory, -memory]),
                    ["busy", "available", "anon"], {})
    assert prune(tel, 0.5, catalog).redundant == {"available": "busy", "anon": "busy"}
    within = prune(tel, 0.5, catalog, same_subsystem=True)
    assert within.kept == ["busy", "available"]  # in the run's channel order
    assert within.redundant == {"anon": "available"}  # still pruned inside memory


def test_variance_breaks_priority_ties():
    rng = np.random.default_rng(3)
    a = rng.normal(size=2000)
    values = np.column_stack([a + 10.0, 3 * a + 10.0])  # same |r|, b spreads more per mean
    tel = Telemetry("h", np.arange(2000), values, ["x.a", "x.b"])
    assert prune(tel, 0.5, Catalog([])).kept == ["x.b"]


def test_high_threshold_keeps_everything_that_varies():
    assert prune(_run(), 0.999, CATALOG).kept == ["stalls", "util", "noise"]


def test_union_and_metric_set_round_trip(tmp_path):
    first = prune(_run(0), 0.5, CATALOG)
    second_tel = _run(1)
    second_tel.values[:, 0] = np.random.default_rng(9).normal(size=second_tel.n_samples)
    second = prune(second_tel, 0.5, CATALOG)
    merged = union([first, second])
    assert set(merged.kept) == {"util", "noise", "stalls"}
    assert "stalls" not in merged.redundant
    path = tmp_path / "set.json"
    save_metric_set(merged, path)
    assert load_metric_set(path) == merged.kept


def test_bad_metric_set_files(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(InputError, match=r"bad\.json"):
        load_metric_set(bad)
    bad.write_text('{"format": "reveal-metric-set", "channels": "util"}')
    with pytest.raises(InputError, match="list of channel names"):
        load_metric_set(bad)
    with pytest.raises(InputError, match="threshold"):
        prune(_run(), 1.5, CATALOG)


def test_curves_are_monotone_in_the_expected_directions():
    rng = np.random.default_rng(5)
    base = rng.normal(size=(4000, 4))
    mix = base @ rng.normal(size=(4, 12)) + 0.3 * rng.normal(size=(4000, 12))
    tel = Telemetry("h", np.arange(4000), mix, [f"m{i}" for i in range(12)])
    curves = pruning_curves(tel, np.array([0.2, 0.5, 0.8, 0.99]), Catalog([]))
    ratio, r2 = curves["selected_ratio"], curves["avg_multi_r2"]
    assert ratio == sorted(ratio) and ratio[-1] == 1.0
    assert r2 == sorted(r2) and r2[-1] == pytest.approx(1.0)
    assert all(0.0 <= v <= 1.0 for v in curves["avg_max_abs_r"])
