"""The analysis of one host, in two steps: fit on a baseline, then score a run's windows.

:func:`fit_analysis` learns from the baseline what the detectors need — the channels kept
(derived, non-empty, pruned), the windows, the scale floors, the fitted ensemble with its
thresholds, and each feature column's baseline median and MAD. :func:`score_windows` scores a
run with it: windows, every verdict, and the evidence behind each flagged window, as
numbers. :class:`reveal.model.Reveal` wraps both (and saving); ``report/`` words the result.

Every fallback taken (self-fit without a baseline, channels missing on one side, a
baseline too short, dropped columns) is a warning in the result, never silent.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings as pywarnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from reveal.analysis import frontend
from reveal.analysis.attribute import attribute
from reveal.analysis.baseline_health import UnhealthyChannel, baseline_health
from reveal.analysis.constants import MAD_TO_SIGMA
from reveal.analysis.derive import derive
from reveal.analysis.direct import (
    DirectSigns,
    baseline_levels,
    direct_signs,
    lead_with,
    merge_signs,
)
from reveal.analysis.ensemble import (
    MIN_BASELINE_WINDOWS,
    Ensemble,
    EnsembleOptions,
    Verdicts,
    persistence_windows,
    persistent,
)
from reveal.analysis.evidence import WindowEvidence, named_by_claim
from reveal.analysis.features import FeatureMatrix
from reveal.analysis.floors import (
    blank_flat_shapes,
    flat_shape_mask_plan,
    sampling_floors,
)
from reveal.analysis.frontend import CpuRanks
from reveal.analysis.hostconfig import configuration, configuration_warnings
from reveal.analysis.lasting import lasting_cells, lasting_reach, lasting_windows
from reveal.analysis.percpu import (
    cpu_siblings,
    rank_cpu_rows,
)
from reveal.analysis.presets import MIN_ROWS_PER_WINDOW
from reveal.analysis.rare_events import event_envelopes, rare_event_signs
from reveal.analysis.scales import combine, scale_configs
from reveal.analysis.select import prune
from reveal.analysis.served import kernel_level, kernel_rise
from reveal.analysis.significance import (
    NO_RULE,
    REACH_FEATURES,
    against_capacity,
    channel_matters,
    feature_matters,
    gate_active,
    is_side_effect,
    lead_with_cause,
    level_changes_alone,
    level_tails,
    matter_directions,
    significant_cells,
    tail_matters,
)
from reveal.analysis.steady import SteadyState, state_columns, steady_states, steady_windows
from reveal.analysis.subsystems import channel_subsystems, irq_names
from reveal.analysis.windows import Windows
from reveal.catalog import default_catalog
from reveal.config import AnalyzeConfig, WindowConfig, significance_of
from reveal.errors import InputError
from reveal.frame import Telemetry, channel_metric

Progress = Callable[[str], None]


def describe(tel: Telemetry) -> dict[str, Any]:
    """Where a recording came from and its extent (seconds, samples, channels)."""
    duration = (tel.timestamps_ns[-1] - tel.timestamps_ns[0]) / 1e9 if tel.n_samples else 0.0
    return {"path": str(tel.meta.get("path", "")), "host": tel.host,
            "samples": tel.n_samples, "channels": tel.n_channels,
            "duration_s": float(duration), "interval_s": float(tel.interval_s),
            "start_ns": int(tel.timestamps_ns[0]) if tel.n_samples else 0,
            "wall_offset_ns": tel.wall_offset_ns}


def window_config(config: AnalyzeConfig, interval_s: float) -> WindowConfig:
    """The windows of ``config`` for data sampled every ``interval_s`` seconds."""
    window = config.window
    if window.size_rows is not None:
        return window
    if not np.isfinite(interval_s) or interval_s <= 0:
        raise InputError("cannot tell the sampling interval (fewer than two samples)")
    if window.size_s / interval_s < MIN_ROWS_PER_WINDOW:
        raise InputError(f"windows of {window.size_s:g} s hold fewer than "
                         f"{MIN_ROWS_PER_WINDOW} samples {interval_s:g} s apart: use the "
                         f"'minute' preset or windows by rows")
    return window


def stride_seconds(window: WindowConfig, interval_s: float) -> float:
    """Seconds between consecutive window starts."""
    return (window.stride_s if window.size_rows is None
            else (window.stride_rows or 1) * interval_s)


def rows_per_window(window: WindowConfig, interval_s: float) -> int:
    """Samples in one window."""
    if window.size_rows is not None:
        return int(window.size_rows)
    return max(1, round(window.size_s / interval_s))


def ensemble_options(config: AnalyzeConfig, stride_s: float) -> EnsembleOptions:
    """The ensemble's options: the drift-following centre converted from seconds to windows."""
    extra: dict[str, Any] = {}
    if config.self_fit_threshold_mads is not None:
        extra["self_fit_threshold_mads"] = config.self_fit_threshold_mads
    if config.baseline_trim_mads is not None:
        extra["baseline_trim_mads"] = config.baseline_trim_mads
    if config.drift_window_s is None:
        return EnsembleOptions(drift_window=None, **extra)
    block = max(1, round(config.drift_block_s / stride_s))
    window = max(block, round(config.drift_window_s / stride_s))
    return EnsembleOptions(drift_window=window, drift_block=block, **extra)


def reason_scales(fitted: FittedAnalysis) -> np.ndarray | None:
    """The least scale of each column's robust z in reasons (its units): the detectors'
    scale floor, and where the baseline's MAD is 0 but the column still varied (a mostly
    idle counter with bursts), the detectors' own scale of it (the standard deviation), so
    that a burst like the baseline's is not worded as leaving a flat baseline."""
    ensemble = fitted.ensemble  # or, given scored data back, a consensus of generations
    scaler = (ensemble.scaler_ if hasattr(ensemble, "scaler_")
              else ensemble.generations[0].ensemble.scaler_)  # the oldest kept
    varied = (np.asarray(fitted.mad) == 0) & scaler.keep_
    if fitted.floors is None and not varied.any():
        return None
    least = (np.zeros(len(fitted.mad)) if fitted.floors is None
             else np.asarray(fitted.floors, dtype=np.float64))
    return np.where(varied, np.maximum(least, scaler.scale_), least)


@dataclasses.dataclass
class FittedAnalysis:
    """What :func:`fit_analysis` learned from a baseline (numbers and names only)."""

    config: AnalyzeConfig  # the settings used (preset and overrides applied)
    window: WindowConfig  # the windows used
    interval_s: float  # the baseline's sampling interval, seconds
    channels: list[str]  # derived channels scored, in column order (before CPU ranking)
    column_channels: list[str]  # channel of each feature column (CPU ranks renamed)
    column_features: list[str]  # feature of each column
    floors: np.ndarray | None  # (K,) least change that counts per column, its units
    ensemble: Ensemble  # fitted: scaling, detectors, thresholds
    median: np.ndarray  # (K,) baseline median per column
    mad: np.ndarray  # (K,) baseline MAD per column
    baseline: dict[str, Any]  # describe() of the baseline
    baseline_windows: int  # windows the detectors were fitted on
    self_fitted: bool  # fitted on the scored run itself
    warnings: list[str]
    baseline_channels: list[str]  # derived channels with data in the baseline (pre-pruning)
    counts: dict[str, Any]  # analysed / pruned / empty_or_static / derived channels
    # the baseline's typical load (median CPU busy %, 1-minute load average), to say when a
    # run was recorded under a very different one
    load: dict[str, float] = dataclasses.field(default_factory=dict)
    # baseline window means (median, MAD, 99th percentile) of the channels that carry
    # direct evidence
    direct_levels: dict[str, tuple[float, ...]] = dataclasses.field(default_factory=dict)
    # the mean, variance and largest of the baseline's window counts per event channel
    # (reveal.analysis.rare_events); None: a model fitted before rare events were judged
    event_envelopes: dict[str, tuple[float, float, float]] | None = None
    # a change that matters is an anomaly on its own (detect.matters_alone when fitted;
    # False for a model fitted before: it must be surprising too)
    matters_alone: bool = False
    # windows a lasting level is averaged over and how far the baseline's own averages over
    # as long reached (reveal.analysis.lasting); 0 and None: not judged
    lasting_windows: int = 0
    lasting_reach: np.ndarray | None = None
    # the baseline's level of the host's kernel and interrupt time, ticks per second
    # (reveal.analysis.served; None: a busy rise is not split)
    kernel_ticks: float | None = None
    # (K,) least change that matters per column, its units (see
    # reveal.analysis.significance; None: surprise alone decides), the host's capacity and
    # per channel its least change and the rule that gave it
    significance: np.ndarray | None = None
    capacity: dict[str, Any] = dataclasses.field(default_factory=dict)
    matters: dict[str, tuple[float, str]] = dataclasses.field(default_factory=dict)
    # the baseline's configuration channels: first and last value (reveal.analysis.hostconfig)
    configuration: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)
    # (2, K) how far the baseline's levels (mean, median, a count's sum) reach above and
    # below their median (reveal.analysis.significance.level_tails; None: a run fitted on
    # itself, and models saved before it)
    level_tails: np.ndarray | None = None
    # the analyses of the extra window sizes (config.extra_window_rows), scored beside this
    # one and joined with it (reveal.analysis.scales)
    scales: list[FittedAnalysis] = dataclasses.field(default_factory=list)
    # channels whose level lay outside their healthy range (catalog) through much of the
    # baseline, worst first (reveal.analysis.baseline_health; empty in models saved before)
    health: tuple[UnhealthyChannel, ...] = ()
    # windows of the baseline (indices among all of its windows) left out before the fit
    # because they overlap the analysis' own work (fit_analysis' skip_ns; empty in models
    # saved before): the fitted windows are the others, in order
    skipped_windows: tuple[int, ...] = ()

    @functools.cached_property
    def shape_plan(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Which shape columns to blank in flat windows (see :func:`flat_shape_mask_plan`)."""
        if self.floors is None:
            return None
        return flat_shape_mask_plan(self.column_channels, self.column_features, self.floors)


@dataclasses.dataclass
class Analysis:
    """A run scored by a fitted analysis: every window's verdict and, for each flagged
    window, its evidence (numbers only)."""

    run: dict[str, Any]  # describe() of the run
    windows: Windows
    verdicts: Verdicts
    persistence: int  # consecutive windows above the threshold before a flag
    evidence: list[WindowEvidence]
    warnings: list[str]
    features: FeatureMatrix  # the scored matrix, columns as the fitted ones
    meta: dict[str, Any]  # the run's metadata (IRQ names, probes)
    # new steady states: windows not flagged because their only changes that matter are
    # levels that held still (see reveal.analysis.steady)
    steady: list[SteadyState] = dataclasses.field(default_factory=list)
    # with extra window sizes (FittedAnalysis.scales): the run as each size scored it on its
    # own, the main size first, joined into these verdicts (reveal.analysis.scales); a
    # stream gives each back to its own size
    sizes: list[Analysis] = dataclasses.field(default_factory=list)
    # (W,) the states persistence counted, before it: above the threshold (and mattering,
    # where judged for significance), and showing a direct sign; a stream carries the last
    # ones on to its next call (Reveal.partial_fit)
    above: np.ndarray | None = None
    signs: np.ndarray | None = None


#: CPU busy % (points) and load-average ratio between baseline and run above which the
#: report says they were recorded under very different loads.
LOAD_BUSY_POINTS = 30.0
LOAD_RATIO = 3.0


def load_level(d: Telemetry) -> dict[str, float]:
    """Median CPU busy % (all CPUs) and 1-minute load average of derived telemetry."""
    out: dict[str, float] = {}
    index = {c: i for i, c in enumerate(d.channels)}
    for name, channel in (("busy_pct", "derived.cpu_busy_pct"), ("load1", "loadavg.load1")):
        j = index.get(channel)
        if j is not None and d.n_samples and np.isfinite(d.values[:, j]).any():
            out[name] = float(np.nanmedian(d.values[:, j]))
    return out


def load_warnings(baseline: dict[str, float], run: dict[str, float]) -> list[str]:
    """A warning when the run's load is far from the baseline's: its verdicts then compare
    a host doing other work (what would be enough: a baseline under a similar load)."""
    busy_b, busy_r = baseline.get("busy_pct"), run.get("busy_pct")
    load_b, load_r = baseline.get("load1"), run.get("load1")
    far = []
    if busy_b is not None and busy_r is not None and abs(busy_r - busy_b) > LOAD_BUSY_POINTS:
        far.append(f"CPU busy {busy_r:.0f} % against {busy_b:.0f} %")
    if load_b is not None and load_r is not None and max(load_b, load_r) >= 1.0 \
            and max(load_b, load_r) > LOAD_RATIO * max(min(load_b, load_r), 0.1):
        far.append(f"load average {load_r:.1f} against {load_b:.1f}")
    if not far:
        return []
    return [f"the run was recorded under a very different load than the baseline "
            f"({'; '.join(far)}): much of what differs may be that work, not a fault; a "
            f"baseline recorded under a similar load would say more"]


def _check_decision_settings(config: AnalyzeConfig) -> None:
    """Refuse settings of the decision that cannot mean anything, naming the setting."""
    detect = config.detect
    bad = []
    if not 0.0 < float(detect.rare_event_p) < 1.0:
        bad.append(f"detect.rare_event_p must lie between 0 and 1, got {detect.rare_event_p!r}")
    if not float(detect.rare_event_least) > 0.0:
        bad.append(f"detect.rare_event_least must be more than 0 events, "
                   f"got {detect.rare_event_least!r}")
    if not float(detect.lasting_s) >= 0.0:
        bad.append(f"detect.lasting_s must be 0 (off) or more seconds, got {detect.lasting_s!r}")
    if not int(detect.lasting_min_spans) >= 1:
        bad.append(f"detect.lasting_min_spans must be at least 1, "
                   f"got {detect.lasting_min_spans!r}")
    if not float(detect.settle_s) >= 0.0:
        bad.append(f"detect.settle_s must be 0 (never adopt) or more seconds, "
                   f"got {detect.settle_s!r}")
    sig = significance_of(config)
    for f in dataclasses.fields(sig):
        value = float(getattr(sig, f.name))
        if f.name in ("direct_share", "detector_lead"):
            if not 0.0 <= value <= 1.0:
                bad.append(f"significance.{f.name} must lie between 0 and 1, got {value!r}")
        elif f.name.endswith("_z"):
            if not 0.0 <= value < math.inf:
                bad.append(f"significance.{f.name} must be 0 or more robust sigmas, "
                           f"got {value!r}")
        elif not 0.0 < value < math.inf:
            bad.append(f"significance.{f.name} must be more than 0, got {value!r}")
    if bad:
        raise InputError("; ".join(bad))


def without_spans(fm: FeatureMatrix, spans_ns: Sequence[tuple[int, int]]) -> FeatureMatrix:
    """``fm`` without the windows that overlap any of ``spans_ns`` (``[start, end)``,
    monotonic ns of the recording host: work of the analysis itself, such as a live
    watch's own model fits, that its baseline must not learn as the host's normal)."""
    if not spans_ns or not len(fm.values):
        return fm
    w = fm.windows
    spans = np.asarray(spans_ns, dtype=np.int64).reshape(-1, 2)
    hit = ((w.start_ns[:, None] < spans[None, :, 1])
           & (w.end_ns[:, None] > spans[None, :, 0])).any(axis=1)
    if not hit.any():
        return fm
    keep = ~hit
    windows = dataclasses.replace(w, start=w.start[keep], start_ns=w.start_ns[keep],
                                  end_ns=w.end_ns[keep])
    return FeatureMatrix(fm.values[keep], list(fm.channels), list(fm.features), windows)


def _fit(base: Telemetry, config: AnalyzeConfig, channels: Sequence[str] | None,
         metric_set: Sequence[str] | None, robust: bool,
         say: Progress, skip_ns: Sequence[tuple[int, int]] = ()
         ) -> tuple[FittedAnalysis, FeatureMatrix, Telemetry, CpuRanks]:
    catalog = default_catalog()
    _check_decision_settings(config)
    warnings: list[str] = [str(w) for w in base.meta.get("warnings", [])]
    say("deriving rates and metrics")
    d_base, derive_report = derive(base, catalog)
    if derive_report.resets:
        warnings.append(f"counter resets handled in {len(derive_report.resets)} channels")
    usable = frontend.usable(d_base, catalog)
    baseline_channels = list(usable)
    empty = d_base.n_channels - len(usable)
    if channels is not None:  # only the channels the run to score has
        wanted = set(channels)
        only_base = [c for c in usable if c not in wanted]
        usable = [c for c in usable if c in wanted]
        if only_base:
            warnings.append(f"{len(only_base)} baseline channels are absent from the run "
                            f"(e.g. {', '.join(only_base[:3])})")
    if metric_set is not None:
        wanted = set(metric_set)
        missing = [c for c in metric_set if c not in set(usable)]
        usable = [c for c in usable if c in wanted]
        if missing:
            warnings.append(f"{len(missing)} channels of the metric set are not in this run "
                            f"(e.g. {', '.join(missing[:3])})")
    if not usable:
        raise InputError("no channel usable for analysis (none in common with the baseline, "
                         "or all empty/static)", str(base.meta.get("path", base.host)))
    pruned = 0
    if metric_set is None and config.select.prune and len(usable) > 1:
        say(f"pruning correlated channels among {len(usable)}")
        selection = prune(d_base.select(usable), config.select.corr_threshold, catalog,
                          config.select.min_std, same_subsystem=config.select.same_subsystem)
        keep = set(selection.kept) | set(selection.constant)
        if config.rank_cpus:  # a per-CPU channel is kept with all its CPUs
            keep |= set(cpu_siblings(usable, keep))
        pruned = len(usable) - len(keep)
        usable = [c for c in usable if c in keep]
        say(f"kept {len(usable)} of {len(usable) + pruned} channels after pruning")
    interval = d_base.interval_s
    window = window_config(config, interval)
    say(f"computing features for {len(usable)} channels")
    s_base = rank_cpu_rows(d_base) if config.rank_cpus and config.rank_cpu_samples else d_base
    fm = frontend.window_features(s_base, usable, window, interval,
                                  config.detect.state_levels, config.features)
    ranks = CpuRanks()
    if config.rank_cpus:
        fm, ranks = frontend.ranked(fm, s_base, named_by=d_base)
    all_starts = fm.windows.start_ns
    fm = without_spans(fm, skip_ns)
    skipped = tuple(int(i) for i in np.flatnonzero(~np.isin(all_starts, fm.windows.start_ns)))
    if skipped:
        warnings.append(f"{len(skipped)} windows of the baseline left out: they overlap the "
                        f"analysis' own work (a model fit)")
    stride_s = stride_seconds(window, interval)
    if fm.values.shape[0] < MIN_BASELINE_WINDOWS:
        what = "the run" if robust else "the baseline"
        need = (MIN_BASELINE_WINDOWS - 1) * stride_s + rows_per_window(window, interval) * interval
        raise InputError(f"{what} is too short to fit the detectors on: "
                         f"{fm.values.shape[0]} windows; at least {MIN_BASELINE_WINDOWS} "
                         f"(about {need:.0f} s of samples) are needed",
                         str(base.meta.get("path", base.host)))
    say(f"fitting detectors on {fm.values.shape[0]} baseline windows")
    rows = window.size_rows if window.size_rows is not None else window.size_s / interval
    floors = (frontend.scale_floors(usable, frontend.channel_levels(d_base, usable), fm,
                                    config.detect.relative_floor, interval, rows,
                                    config.detect.shape_floors, ranks.sources)
              if config.detect.scale_floors else None)
    if floors is not None and config.detect.sampling_floors:
        floors = np.maximum(floors, sampling_floors(
            fm.channels, fm.features, fm.values, rows_per_window(window, interval)))
    capacity, matters = channel_matters(d_base, usable, catalog, significance_of(config))
    per_channel = dict(zip(usable, matters, strict=True))
    for name, originals in ranks.sources.items():  # a CPU rank: the group's largest
        per_channel[name] = max((per_channel[c] for c in originals), key=lambda m: m.least)
    # levels measured past the baseline's own reach (detect.past_baseline) take no tail on
    # their least change too; a run fitted on itself keeps the median (its own anomaly
    # would sit in its tails)
    reached = (np.isin(np.asarray(fm.features), REACH_FEATURES)
               if config.detect.past_baseline and not robust else None)
    significance = (tail_matters(feature_matters(fm.channels, fm.features, per_channel,
                                                 rows_per_window(window, interval),
                                                 sustained=config.detect.sustained),
                                 fm.channels, fm.values, reached)
                    if config.detect.significance else None)
    fit_values = fm.values
    if floors is not None:
        fit_values = fit_values.copy()
        blank_flat_shapes(fit_values, flat_shape_mask_plan(fm.channels, fm.features, floors))
    ensemble = Ensemble(config.detect, ensemble_options(config, stride_s)).fit(
        fit_values, robust_self_fit=robust, scale_floor=floors)
    with np.errstate(all="ignore"), pywarnings.catch_warnings():
        pywarnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns give NaN
        med = np.nanmedian(fit_values, axis=0)
        mad = np.nanmedian(np.abs(fit_values - med), axis=0)
    n_windows = int(fm.values.shape[0])
    if robust:
        warnings.append("no baseline given: detectors were fitted on the run itself "
                        "(robustly, median/MAD); a persistent anomaly may look normal")
    elif n_windows < config.min_baseline_windows:
        need = config.min_baseline_windows * stride_s
        warnings.append(f"the baseline is too short to judge by: {n_windows} windows "
                        f"({n_windows * stride_s:g} s); at least {config.min_baseline_windows} "
                        f"({need:g} s) are needed to place a 99th-percentile threshold, so "
                        f"verdicts may flag ordinary variation")
    health = tuple(baseline_health(d_base, fm.windows.start_ns, fm.windows.size, catalog,
                                   config.baseline_unhealthy_share))
    warnings += [finding.message for finding in health]
    fitted = FittedAnalysis(
        config=config, window=window, interval_s=float(interval), channels=list(usable),
        column_channels=list(fm.channels), column_features=list(fm.features),
        floors=floors, ensemble=ensemble, median=np.nan_to_num(med), mad=np.nan_to_num(mad),
        baseline=describe(base), baseline_windows=n_windows, self_fitted=robust,
        warnings=warnings, baseline_channels=baseline_channels, load=load_level(d_base),
        counts={"analysed": len(usable), "features": int(fm.values.shape[1]),
                "pruned": pruned, "empty_or_static": empty,
                "derived": derive_report.derived},
        direct_levels=baseline_levels(d_base, fm.windows.start_ns, fm.windows.size),
        matters_alone=bool(config.detect.matters_alone),
        lasting_windows=0 if robust else lasting_windows(config.detect.lasting_s, stride_s),
        lasting_reach=None if robust else lasting_reach(
            fit_values, lasting_windows(config.detect.lasting_s, stride_s),
            tuple(fm.features), config.detect.lasting_min_spans),
        event_envelopes=(event_envelopes(d_base, fm.windows.start_ns, fm.windows.size)
                         if config.detect.rare_events else None),
        kernel_ticks=kernel_level(d_base, fm.windows.start_ns, fm.windows.size),
        significance=significance, capacity=capacity.to_dict(),
        matters={c: (m.least, m.rule) for c, m in per_channel.items()},
        configuration=configuration(base),
        level_tails=None if robust else level_tails(fit_values, tuple(fm.features)),
        health=health, skipped_windows=skipped)
    return fitted, fm, d_base, ranks


def fit_analysis(baseline: Telemetry, config: AnalyzeConfig, *,
                 channels: Sequence[str] | None = None,
                 metric_set: Sequence[str] | None = None, robust: bool = False,
                 progress: Progress | None = None,
                 skip_ns: Sequence[tuple[int, int]] = ()) -> FittedAnalysis:
    """Fit on ``baseline``; ``channels``: only these derived channels (those of the run to
    score); ``robust``: the baseline may hold anomalies (self-fit, see :class:`Ensemble`);
    ``skip_ns``: spans (monotonic ns) whose windows are left out (:func:`without_spans`).
    Extra window sizes (``config.extra_window_rows``) are fitted too, on the same
    channels."""
    say = progress or (lambda _m: None)
    scales = scale_configs(config)  # a wrong extra size fails before any work
    fitted = _fit(baseline, config, channels, metric_set, robust, say, skip_ns)[0]
    for scale in scales:
        say(f"fitting windows of {scale.window.size_rows} rows beside them")
        fitted.scales.append(_fit(baseline, scale, fitted.channels, None, robust, say,
                                  skip_ns)[0])
    return fitted


def usable_channels(run: Telemetry) -> list[str]:
    """Derived channels of ``run`` with data, the ones a baseline is fitted on for it."""
    catalog = default_catalog()
    return frontend.usable(derive(run, catalog)[0], catalog)


def _with_lead_in(run: Telemetry, lead_in: Telemetry, rows: int) -> tuple[Telemetry, int]:
    """``run`` preceded by the last ``rows`` samples of ``lead_in`` (channels as the run's)."""
    rows = min(rows, lead_in.n_samples)
    if rows <= 0:
        return run, 0
    index = {c: i for i, c in enumerate(lead_in.channels)}
    tail = np.full((rows, run.n_channels), np.nan)
    for j, c in enumerate(run.channels):
        if c in index:
            tail[:, j] = lead_in.values[lead_in.n_samples - rows:, index[c]]
    ts = lead_in.timestamps_ns[lead_in.n_samples - rows:]
    if ts[-1] >= run.timestamps_ns[0]:
        raise InputError("the lead-in does not precede the run in time")
    joined = Telemetry(run.host, np.r_[ts, run.timestamps_ns], np.vstack([tail, run.values]),
                       list(run.channels), dict(run.meta))
    return joined, rows


def _aligned(fm: FeatureMatrix, fitted: FittedAnalysis) -> tuple[np.ndarray, int]:
    """``fm``'s values in the fitted column order (NaN where the run lacks a column)."""
    take = _alignment(tuple(fm.channels), tuple(fm.features),
                      tuple(fitted.column_channels), tuple(fitted.column_features))
    if take is None:
        return fm.values, 0
    present = take >= 0
    out = np.full((fm.values.shape[0], len(take)), np.nan, dtype=fm.values.dtype)
    out[:, present] = fm.values[:, take[present]]
    return out, int((~present).sum())


@functools.lru_cache(maxsize=16)
def _alignment(have_channels: tuple[str, ...], have_features: tuple[str, ...],
               want_channels: tuple[str, ...], want_features: tuple[str, ...],
               ) -> np.ndarray | None:
    """Column of ``have`` for every (channel, feature) of ``want`` (-1: absent); None when
    the two are the same columns in the same order."""
    want = list(zip(want_channels, want_features, strict=True))
    have = list(zip(have_channels, have_features, strict=True))
    if have == want:
        return None
    index = {key: k for k, key in enumerate(have)}
    return np.array([index.get(key, -1) for key in want], dtype=np.intp)


@functools.lru_cache(maxsize=16)
def _column_subsystems(columns: tuple[str, ...], catalog,
                       irqs: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    """The subsystem of every feature column's channel (CPU ranks renamed, labels kept)."""
    scored = sorted(set(columns))
    subsystem_of = dict(zip(scored, channel_subsystems(scored, catalog, dict(irqs)),
                            strict=True))
    return tuple(subsystem_of[c] for c in columns)


def significance_scales(fitted: FittedAnalysis) -> np.ndarray:
    """Per column, the scale a significant change must exceed ``significance.significant_z``
    times: the baseline's robust σ, at least the reasons' scale (floors, spread of idle
    counters)."""
    scale = MAD_TO_SIGMA * np.asarray(fitted.mad, dtype=np.float64)
    least = reason_scales(fitted)
    return scale if least is None else np.maximum(scale, least)


def significant_cells_of(fitted: FittedAnalysis, values: np.ndarray,
                         history: np.ndarray | None = None) -> np.ndarray | None:
    """(W, K) changes that matter in each window (see :mod:`reveal.analysis.significance`),
    or None where the model judges surprise alone: a window's own level, or the level
    averaged over the windows it lasted (:mod:`reveal.analysis.lasting`; ``history``: the
    feature rows of the windows just before, a live scorer's)."""
    least = getattr(fitted, "significance", None)
    if least is None or not gate_active(least):
        return None
    scale, direction = significance_scales(fitted), directions_of(fitted)
    cells = significant_cells(values, fitted.median, scale, least,
                              significance_of(fitted.config).significant_z,
                              direction=direction, reach=reach_of(fitted))
    windows = getattr(fitted, "lasting_windows", 0)
    reach = getattr(fitted, "lasting_reach", None)
    if windows and reach is not None:
        cells |= lasting_cells(values, history, windows, fitted.median, scale, least,
                               direction, reach)
    return cells


def reach_of(fitted: FittedAnalysis) -> np.ndarray | None:
    """(2, K) how far the baseline's own levels reached above and below its median, that a
    change must go past to matter (``detect.past_baseline``), or None: from the median."""
    if not getattr(fitted.config.detect, "past_baseline", False):  # a model saved before it
        return None
    return getattr(fitted, "level_tails", None)


def directions_of(fitted: FittedAnalysis) -> np.ndarray:
    """(K,) the direction of a change that can matter per fitted column (see
    :func:`reveal.analysis.significance.matter_directions`)."""
    return matter_directions(tuple(fitted.column_channels), tuple(fitted.column_features))


def settle_windows(fitted: FittedAnalysis, interval_s: float) -> int:
    """Windows a changed level must hold still to be a new steady state (0: never)."""
    settle = fitted.config.detect.settle_s
    if settle <= 0:
        return 0
    return max(1, round(settle / stride_seconds(fitted.window, interval_s)))


def held_levels(fitted: FittedAnalysis, values: np.ndarray, cells: np.ndarray,
                history: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(W,) windows of ``values`` whose changes that matter (``cells``) are all levels
    that held still (a new steady state), and (W,) windows where some changed level holds
    (see :mod:`reveal.analysis.steady`). ``history``: feature rows of the windows just
    before (the live scorer's), so that a level can be seen to hold across calls."""
    windows = settle_windows(fitted, fitted.interval_s)
    none = np.zeros(len(values), dtype=bool)
    if windows == 0:
        return none, none
    least = np.asarray(fitted.significance, dtype=np.float64)
    before = 0 if history is None else len(history)
    if before:
        values = np.vstack([history, values])
        cells = np.vstack([np.zeros(history.shape, dtype=bool), cells])
    held, holding = steady_windows(values, cells, least, _state_columns(fitted), windows)
    return held[before:], holding[before:]


@functools.lru_cache(maxsize=8)
def _state_columns_of(channels: tuple[str, ...], features: tuple[str, ...]) -> np.ndarray:
    return state_columns(channels, features)


def _state_columns(fitted: FittedAnalysis) -> np.ndarray:
    """(K,) the fitted columns that are levels of state-like gauges (see
    :mod:`reveal.analysis.steady`)."""
    return _state_columns_of(tuple(fitted.column_channels), tuple(fitted.column_features))


@functools.lru_cache(maxsize=8)
def _deciding_columns_of(channels: tuple[str, ...],
                         rules: tuple[tuple[str, str], ...]) -> np.ndarray:
    by_channel = dict(rules)
    return np.array([not is_side_effect(channel_metric(c))
                     and against_capacity(by_channel.get(c, NO_RULE)) for c in channels],
                    dtype=bool)


def _deciding_columns(fitted: FittedAnalysis) -> np.ndarray:
    """(K,) the columns whose change that matters decides on its own: a channel that can be
    a cause (not a catalog side effect) whose least change was measured against capacity
    (:func:`reveal.analysis.significance.against_capacity`); the others need the detectors'
    surprise as well."""
    rules = tuple((c, rule) for c, (_, rule) in fitted.matters.items())
    return _deciding_columns_of(tuple(fitted.column_channels), rules)


def led_by_sign(evidence: list[WindowEvidence],
                signs: dict[int, list]) -> set[int]:
    """Windows whose first reason is a direct sign (it keeps its place)."""
    return {e.window_id for e in evidence
            if e.reasons and any(r.channel == e.reasons[0].channel
                                 and r.metric == e.reasons[0].metric
                                 for r in signs.get(e.window_id, []))}


def _lead_with_causes(fitted: FittedAnalysis, evidence: list[WindowEvidence],
                      values: np.ndarray, columns: tuple[str, ...], subsystems: Sequence[str],
                      signed: set[int], ranks: CpuRanks,
                      cells_of_all: np.ndarray | None = None,
                      kernel_ticks: np.ndarray | None = None) -> list[WindowEvidence]:
    """Each window's evidence with the change that names the cause first (see
    :func:`reveal.analysis.significance.lead_with_cause`); unchanged where the model judges
    surprise alone. ``kernel_ticks``: per window of ``evidence``, the rise of the host's
    kernel and interrupt time (:func:`reveal.analysis.served.kernel_rise`)."""
    least = getattr(fitted, "significance", None)
    if least is None or not gate_active(least) or not evidence:
        return evidence
    scale = significance_scales(fitted)
    n_cpus = int(getattr(fitted, "capacity", {}).get("n_cpus", 0))
    rows = np.array([e.window_id for e in evidence], dtype=np.intp)
    cells = (cells_of_all[rows] if cells_of_all is not None else
             significant_cells(values[rows], fitted.median, scale, least,
                               significance_of(fitted.config).significant_z,
                               direction=directions_of(fitted), reach=reach_of(fitted)))
    return [lead_with_cause(e, values[w], cells[i], least, scale, fitted.median, columns,
                            fitted.column_features, subsystems,
                            keep_first=e.window_id in signed,
                            name=functools.partial(ranks.name, window=int(w)),
                            settings=significance_of(fitted.config), n_cpus=n_cpus,
                            kernel_ticks=float(kernel_ticks[i]) if kernel_ticks is not None
                            else 0.0)
            for i, (e, w) in enumerate(zip(evidence, rows, strict=True))]


def _score(fitted: FittedAnalysis, run: Telemetry, d_run: Telemetry, fm: FeatureMatrix,
           ranks: CpuRanks, warnings: list[str], say: Progress,
           history: np.ndarray | None = None) -> Analysis:
    config = fitted.config
    catalog = default_catalog()
    values, missing_columns = _aligned(fm, fitted)
    if missing_columns:
        warnings.append(f"{missing_columns} of {values.shape[1]} feature columns of the model "
                        f"are absent from the run and were scored as ordinary")
    if fitted.floors is not None:
        plan = fitted.shape_plan
        assert plan is not None
        if values is fm.values:
            values = values.copy()
        blank_flat_shapes(values, plan)
    interval = d_run.interval_s if d_run.n_samples > 1 else fitted.interval_s
    persistence = persistence_windows(config.detect.persistence_s,
                                      stride_seconds(fitted.window, interval))
    ensemble = fitted.ensemble
    cells = significant_cells_of(fitted, values,
                                 history if history is not None and len(history) else None)
    # persistence is applied here, to every window's state before it, counting the states
    # of the windows a stream scored before this call (a consensus carries them)
    carried = getattr(ensemble, "carried", None)
    above_before, signs_before = (carried(persistence) if carried is not None
                                  else (np.zeros(0, dtype=bool),) * 2)
    verdicts = ensemble.score(values, 1)
    warnings += [w for w in verdicts.warnings if w not in warnings]
    above = verdicts.flagged
    steady: list[SteadyState] = []
    if cells is not None:
        # judged for significance, a window must stay above the threshold *and* matter
        held, holding = held_levels(fitted, values, cells)
        matters = cells.any(axis=1)
        steady = steady_states(holding, cells, values, fitted.median,
                               np.asarray(fitted.significance, dtype=np.float64),
                               fitted.column_channels, fm.windows.start_ns,
                               settle_windows(fitted, fitted.interval_s),
                               flagged=verdicts.flagged & held)
        alone = level_changes_alone(cells, values, fitted.median,
                                    significance_scales(fitted), tuple(fitted.column_features),
                                    reach_of(fitted), significance_of(config))
        # on its own, a change decides only where it can be a cause and was measured
        # against capacity (a side effect, catalog ``follows``, joins the evidence; a
        # channel with no capacity needs the detectors' surprise, as every change did
        # before the model judged changes that matter alone)
        decided = (verdicts.flagged | alone) & matters
        if getattr(fitted, "matters_alone", False):
            decided = decided | (cells & _deciding_columns(fitted)).any(axis=1)
        above = decided & ~held
    signs = window_signs(fitted, d_run, fm.windows.start_ns, fm.windows.size)
    flagged = _persistent_after(above_before, above, persistence)
    if signs.shown.any():
        flagged = flagged | _persistent_after(signs_before, signs.shown, persistence)
    verdicts = dataclasses.replace(verdicts, flagged=flagged)
    rows = np.flatnonzero(verdicts.flagged)
    say(f"attributing {len(rows)} flagged windows")
    evidence: list[WindowEvidence] = []
    if len(rows):
        contributions = ensemble.explain(values, rows, centres=verdicts.centres)
        columns = fitted.column_channels
        irqs = irq_names(run.meta)
        attributions = attribute(contributions, values[rows], columns,
                                 fitted.column_features, fitted.median, fitted.mad,
                                 catalog, config.top_reasons,
                                 _column_subsystems(tuple(columns), catalog,
                                                    tuple(sorted(irqs.items()))),
                                 reason_scales(fitted))
        names = list(verdicts.scores)
        for w, att in zip(rows, attributions, strict=True):
            reasons = [dataclasses.replace(r, channel=ranks.name(r.channel, w))
                       for r in att.reasons]  # the CPU of this window, not its rank
            evidence.append(WindowEvidence(
                int(w), int(fm.windows.start_ns[w]), int(fm.windows.end_ns[w]),
                float(verdicts.combined[w]),
                [n for n in names if verdicts.flags[n][w]]
                or (["direct"] if signs.shown[w] else ["ensemble"]),
                att.subsystems, att.shares, reasons))
        evidence = [lead_with(e, signs.reasons.get(e.window_id, []), significance_of(config))
                    for e in evidence]
        evidence = _lead_with_causes(fitted, evidence, values, tuple(columns),
                                     _column_subsystems(tuple(columns), catalog,
                                                        tuple(sorted(irqs.items()))),
                                     led_by_sign(evidence, signs.reasons), ranks, cells,
                                     kernel_rise(d_run, fm.windows.start_ns[rows],
                                                 fm.windows.size,
                                                 getattr(fitted, "kernel_ticks", None)))
        evidence = [named_by_claim(e) for e in evidence]
    scored_fm = FeatureMatrix(values, list(fitted.column_channels),
                              list(fitted.column_features), fm.windows)
    return Analysis(describe(run), fm.windows, verdicts, persistence, evidence, warnings,
                    scored_fm, dict(run.meta), steady, above=above,
                    signs=np.asarray(signs.shown, dtype=bool))


def window_signs(fitted: FittedAnalysis, d_run: Telemetry, start_ns: np.ndarray,
                 size: int) -> DirectSigns:
    """The direct evidence of each window (``size`` samples from ``start_ns``) of a derived
    run: the catalog's signs and configuration changes (:func:`direct_signs`), then the
    rare events (:func:`rare_event_signs`) where the model judges them."""
    config = fitted.config
    catalog = default_catalog()

    def subsystem_of(metric: str) -> str:
        return catalog.lookup(metric).subsystem

    signs = direct_signs(d_run, start_ns, size, getattr(fitted, "direct_levels", {}),
                         settings=getattr(fitted, "configuration", {}),
                         subsystem_of=subsystem_of, significance=significance_of(config))
    envelopes = getattr(fitted, "event_envelopes", None)
    if envelopes is not None and config.detect.rare_events:
        signs = merge_signs(signs, rare_event_signs(
            d_run, start_ns, size, envelopes, config.detect.rare_event_least,
            config.detect.rare_event_p, subsystem_of=subsystem_of))
    return signs


def _persistent_after(before: np.ndarray, states: np.ndarray, persistence: int) -> np.ndarray:
    """:func:`persistent` over ``states`` (W,) that follow the states ``before`` (oldest
    first, windows of an earlier call), for the ``states`` windows only."""
    return persistent(np.r_[before, states], persistence)[before.size:]


def _run_features(fitted: FittedAnalysis, d_run: Telemetry,
                  warnings: list[str]) -> tuple[FeatureMatrix, CpuRanks]:
    config = fitted.config
    present = set(d_run.channels)
    missing = [c for c in fitted.channels if c not in present]
    if missing:
        warnings.append(f"{len(missing)} channels of the model are absent from the run "
                        f"(e.g. {', '.join(missing[:3])})")
        filler = np.full((d_run.n_samples, len(missing)), np.nan)
        d_run = Telemetry(d_run.host, d_run.timestamps_ns, np.hstack([d_run.values, filler]),
                          [*d_run.channels, *missing], d_run.meta)
    interval = d_run.interval_s if d_run.n_samples > 1 else fitted.interval_s
    window = window_config(config, interval)
    s_run = rank_cpu_rows(d_run) if config.rank_cpus and config.rank_cpu_samples else d_run
    fm = frontend.window_features(s_run, fitted.channels, window, interval,
                                  config.detect.state_levels, config.features)
    ranks = CpuRanks()
    if config.rank_cpus:
        fm, ranks = frontend.ranked(fm, s_run, named_by=d_run)
    return fm, ranks


def _windows_from(fm: FeatureMatrix, first_row: int) -> FeatureMatrix:
    """The windows of ``fm`` that end at or after row ``first_row`` (drop lead-in-only ones)."""
    w = fm.windows
    keep = np.flatnonzero(w.start + w.size - 1 >= first_row)
    if keep.size == len(w):
        return fm
    windows = Windows(w.start[keep] - first_row, w.size, w.stride, w.start_ns[keep],
                      w.end_ns[keep])
    return FeatureMatrix(np.ascontiguousarray(fm.values[keep]), fm.channels, fm.features,
                         windows)


def score_windows(fitted: FittedAnalysis, run: Telemetry, *,
                  lead_in: Telemetry | None = None,
                  progress: Progress | None = None,
                  history: np.ndarray | None = None) -> Analysis:
    """Score ``run`` with a fitted analysis.

    ``lead_in``: a recording that directly precedes the run (the baseline, when the run
    continues it): its last samples complete the run's first windows, so every window
    ends inside the run and the first samples get a verdict too. ``history``: the scored
    feature rows of the windows just before the run's first (a live scorer's), so that a
    level that has lasted across calls is judged as lasting.
    """
    say = progress or (lambda _m: None)
    warnings = list(fitted.warnings)
    warnings += [str(w) for w in run.meta.get("warnings", []) if str(w) not in warnings]
    lead_rows = 0
    source = run
    if lead_in is not None:
        # a window's worth: derive may drop the first sample (rates need two)
        rows = rows_per_window(fitted.window, fitted.interval_s)
        source, lead_rows = _with_lead_in(run, lead_in, rows)
    say("deriving rates and metrics")
    d_run, derive_report = derive(source, default_catalog())
    lead_rows -= source.n_samples - d_run.n_samples  # lead-in rows left after deriving
    if derive_report.resets:
        text = f"counter resets handled in {len(derive_report.resets)} channels of the run"
        warnings.append(text)
    warnings += load_warnings(getattr(fitted, "load", {}), load_level(d_run))
    warnings += [w for w in configuration_warnings(getattr(fitted, "configuration", {}),
                                                   configuration(run))
                 if w not in warnings]
    known = set(fitted.baseline_channels)
    only_run = [c for c in frontend.usable(d_run, default_catalog()) if c not in known]
    if only_run:
        warnings.append(f"{len(only_run)} channels are absent from the baseline and were "
                        f"not scored by the detectors (e.g. {', '.join(only_run[:3])}); "
                        f"those counting throttling, drops and retransmissions are judged "
                        f"against zero")
    say(f"computing features for {len(fitted.channels)} channels")
    fm, ranks = _run_features(fitted, d_run, warnings)
    if lead_rows > 0:
        fm = _windows_from(fm, lead_rows)
        if ranks.order is not None:
            ranks.order = ranks.order[len(ranks.order) - len(fm.windows):]
    if len(fm.windows) == 0:
        raise InputError("the run is shorter than one window",
                         str(run.meta.get("path", run.host)))
    analysis = _score(fitted, run, d_run, fm, ranks, warnings, say, history)
    scales = getattr(fitted, "scales", None)  # absent from models saved before them
    if not scales:
        return analysis
    return combine(analysis, [score_windows(s, run, lead_in=lead_in) for s in scales])


def fit_and_score_windows(run: Telemetry, config: AnalyzeConfig, *,
                          metric_set: Sequence[str] | None = None,
                          progress: Progress | None = None
                          ) -> tuple[FittedAnalysis, Analysis]:
    """Self-fit: fit robustly on ``run`` itself and score it (features computed once)."""
    say = progress or (lambda _m: None)
    scales = scale_configs(config)
    fitted, fm, d_run, ranks = _fit(run, config, None, metric_set, True, say)
    warnings = list(fitted.warnings)
    analysis = _score(fitted, run, d_run, fm, ranks, warnings, say)
    others = []
    for scale in scales:
        fitted_scale, other = fit_and_score_windows(run, scale, metric_set=metric_set,
                                                    progress=progress)
        fitted.scales.append(fitted_scale)
        others.append(other)
    return fitted, combine(analysis, others) if others else analysis


def explain_windows(fitted: FittedAnalysis, analysis: Analysis, rows: np.ndarray) -> np.ndarray:
    """Per-column contributions (len(rows), K) of any windows of a scored run."""
    return fitted.ensemble.explain(analysis.features.values, rows,
                                   centres=analysis.verdicts.centres)
