"""Documented settings for the two resolutions Reveal meets, chosen from the sampling interval.

``telemetry`` — what ``reveal collect`` records (one sample every 100 ms or so): windows of
3 s sliding by 1 s, every feature, correlated channels pruned on the baseline, per-CPU
channels by busy rank, scale floors (the least change that counts, from the catalog's
units), and a flag only once the combined score has stayed above its threshold for 1 s.

``minute`` — one row every few seconds or minutes (the SMD and ASD data sets, a Prometheus
scrape): windows of 10 rows sliding by one row (a window's verdict belongs to its last
row), four features (mean, std, median, slope), no pruning, no scale floors (such data
rarely carries units), and a feature centre that follows the last 2 days of past windows in
hourly blocks. That centre is causal — a window's centre uses only earlier
windows — but on a scored run it follows the run's own past: it adapts to the scored data.
Window minimum and maximum are left out: one row's extreme, they are the noisiest level
features; without them the SMD machines' clean rows flagged fell by a fifth for 3 % fewer
anomalous rows found (chosen by 2-fold cross-fitting between machines, docs/evaluation.md).

Both presets leave refits off (``refit.every_s`` None): a model given scored data back by
``Reveal.partial_fit`` (``evaluate --mode stream``, the API) moves its drift-following
centre on but fits no new generation unless ``refit.every_s`` is set (see
:mod:`reveal.analysis.consensus`). Refits with a consensus of generations were measured on
SMD and ASD, chosen by 2-fold cross-fitting between machines, and lowered the
automatic-threshold F1 there (docs/evaluation.md, "Stream mode"); on the collector's
telemetry they are not measured yet.

:func:`preset_for` picks ``telemetry`` when a 3 s window holds at least three samples
(interval ≤ 1 s), ``minute`` otherwise. ``reveal analyze`` and ``reveal evaluate`` both go
through it, so the figures in docs/evaluation.md are those of ``analyze``'s defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from reveal.config import AnalyzeConfig, DetectConfig, SelectConfig, WindowConfig
from reveal.errors import InputError
from reveal.settings import replace_dotted

TELEMETRY = AnalyzeConfig(preset="telemetry")

MINUTE = AnalyzeConfig(
    preset="minute",
    window=WindowConfig(size_rows=10, stride_rows=1),
    select=SelectConfig(prune=False),
    detect=DetectConfig(scale_floors=False),
    features=("mean", "std", "median", "slope"),
    drift_window_s=2 * 86400.0,
    drift_block_s=3600.0,
    rank_cpus=False,
    extra_window_rows=(5,),
)

PRESETS: dict[str, AnalyzeConfig] = {"telemetry": TELEMETRY, "minute": MINUTE}

#: Fewest samples a telemetry window must hold; coarser data gets the ``minute`` preset.
MIN_ROWS_PER_WINDOW = 3


def preset_name_for(interval_s: float) -> str:
    """``telemetry`` when a telemetry window holds ≥ :data:`MIN_ROWS_PER_WINDOW` samples of
    ``interval_s`` seconds, else ``minute``."""
    if not (np.isfinite(interval_s) and interval_s > 0):
        raise InputError("cannot tell the sampling interval (fewer than two samples)")
    return ("telemetry" if TELEMETRY.window.size_s / interval_s >= MIN_ROWS_PER_WINDOW
            else "minute")


def preset(name: str) -> AnalyzeConfig:
    """The preset called ``name``."""
    if name not in PRESETS:
        raise InputError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
    return PRESETS[name]


def preset_for(interval_s: float) -> AnalyzeConfig:
    """The preset for data sampled every ``interval_s`` seconds."""
    return PRESETS[preset_name_for(interval_s)]


#: ways a model keeps itself current (``refit.scheme``; docs/model.md)
REFIT_SCHEMES = ("generations", "quiet_span")


def with_overrides(config: AnalyzeConfig, overrides: Mapping[str, Any] | None) -> AnalyzeConfig:
    """``config`` with dotted-key overrides applied, e.g. ``{"window.size_s": 5.0,
    "detect.detectors": ("zscore",)}``; an unknown key, or a value of the wrong kind, is an
    :class:`InputError` (:func:`reveal.settings.replace_dotted`), as is a number of
    robust sigmas that is no finite number ≥ 0."""
    out = replace_dotted(config, overrides, "analysis")
    for name in ("baseline_trim_mads", "self_fit_threshold_mads"):
        value = getattr(out, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                  or not (np.isfinite(value) and value >= 0)):
            raise InputError(f"analysis setting {name} takes a number of robust sigmas "
                             f">= 0 or null, got {value!r}")
    if out.refit.scheme not in REFIT_SCHEMES:
        raise InputError(f"analysis setting refit.scheme takes one of "
                         f"{', '.join(REFIT_SCHEMES)}, got {out.refit.scheme!r}")
    if out.baseline_trim_mads is not None:
        out = replace(out, baseline_trim_mads=float(out.baseline_trim_mads))
    return out
