"""The analysis flow for one host: source → derive → select → features → detect → attribute.

``analyze_run`` is what ``reveal analyze`` and ``reveal profile`` call. Every fallback it
takes (self-fit without a baseline, channels missing on one side, row windows for coarse
data, dropped empty channels) is written into the report's ``warnings``, never silent.
"""

from __future__ import annotations

import dataclasses
import warnings as pywarnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

from reveal import __version__
from reveal.analyze.attribute import attribute
from reveal.analyze.derive import derive
from reveal.analyze.ensemble import Ensemble, persistence_windows
from reveal.analyze.features import FeatureMatrix, compute_features
from reveal.analyze.floors import (
    ChannelFloor,
    blank_flat_shapes,
    channel_floors,
    feature_floors,
    flat_shape_mask_plan,
)
from reveal.analyze.percpu import (
    cpu_order,
    cpu_siblings,
    rank_cpu_columns,
    rank_cpu_rows,
    unrank,
    window_busy,
)
from reveal.analyze.select import prune
from reveal.analyze.subsystems import channel_subsystems, irq_names
from reveal.analyze.windows import make_windows
from reveal.catalog import NOT_DETECTED, default_catalog
from reveal.config import AnalyzeConfig, WindowConfig
from reveal.errors import InputError
from reveal.frame import Telemetry, channel_metric
from reveal.report.model import (
    Anomaly,
    DetectorSummary,
    Episode,
    Report,
    WindowTable,
)
from reveal.store.sources import default_baseline, open_source

Progress = Callable[[str], None]


def _load(source: str | Path | Telemetry) -> Telemetry:
    return source if isinstance(source, Telemetry) else open_source(source)


def _describe(tel: Telemetry) -> dict:
    duration = (tel.timestamps_ns[-1] - tel.timestamps_ns[0]) / 1e9 if tel.n_samples else 0.0
    return {"path": str(tel.meta.get("path", "")), "host": tel.host,
            "samples": tel.n_samples, "channels": tel.n_channels,
            "duration_s": float(duration), "interval_s": float(tel.interval_s),
            "start_ns": int(tel.timestamps_ns[0]) if tel.n_samples else 0,
            "wall_offset_ns": tel.wall_offset_ns}


def _window_config(config: AnalyzeConfig, interval_s: float, warnings: list[str]) -> WindowConfig:
    window = config.window
    if window.size_rows is not None:
        return window
    if not np.isfinite(interval_s) or interval_s <= 0:
        raise InputError("cannot tell the sampling interval (fewer than two samples)")
    if window.size_s / interval_s < config.min_rows_per_window:
        size, stride = config.fallback_rows
        warnings.append(f"samples are {interval_s:g} s apart, too coarse for {window.size_s:g} s "
                        f"windows: using windows of {size} rows, stride {stride}")
        return WindowConfig(size_rows=size, stride_rows=stride)
    return window


def _finite_channels(tel: Telemetry) -> np.ndarray:
    """Mask of channels with at least one finite value."""
    return np.isfinite(tel.values).any(axis=0)


#: Features that describe a window's level; ``state`` channels (see the catalog) keep only
#: the others (spread, trend, shape): their level records history, their change activity.
LEVEL_FEATURES = ("mean", "median", "min", "max")


def _features(tel: Telemetry, channels: list[str], window: WindowConfig,
              interval_s: float, state_levels: bool = False) -> FeatureMatrix:
    catalog = default_catalog()
    index = {c: i for i, c in enumerate(tel.channels)}
    cols = [index[c] for c in channels]
    kinds = ["event" if catalog.lookup(channel_metric(c)).kind == "event" else "gauge"
             for c in channels]
    windows = make_windows(tel.timestamps_ns, window, interval_s)
    values = np.where(np.isfinite(tel.values[:, cols]), tel.values[:, cols], np.nan)
    fm = compute_features(values, channels, kinds, windows)
    if state_levels:
        return fm
    keep = [k for k, (c, f) in enumerate(zip(fm.channels, fm.features, strict=True))
            if not (f in LEVEL_FEATURES and catalog.lookup(channel_metric(c)).kind == "state")]
    if len(keep) == len(fm.features):
        return fm
    return FeatureMatrix(np.ascontiguousarray(fm.values[:, keep]),
                         [fm.channels[k] for k in keep], [fm.features[k] for k in keep],
                         fm.windows)


def _scale_floors(base: Telemetry, channels: list[str], fm: FeatureMatrix, relative: float,
                  window: WindowConfig, interval_s: float,
                  shape_floors: bool = True,
                  sources: dict[str, list[str]] | None = None) -> np.ndarray:
    """Per feature column, the least change that counts (see :mod:`reveal.analyze.floors`)."""
    with pywarnings.catch_warnings():
        pywarnings.simplefilter("ignore", RuntimeWarning)  # all-NaN channels
        levels = np.nanmedian(base.select(channels).values, axis=0)
    per_channel = dict(zip(channels, channel_floors(channels, levels, relative, interval_s),
                           strict=True))
    for name, originals in (sources or {}).items():  # a CPU rank: the group's largest floor
        group = [per_channel[c] for c in originals]
        per_channel[name] = ChannelFloor(max(f.level for f in group), max(f.spike for f in group),
                                         max(f.quantum for f in group))
    rows = window.size_rows if window.size_rows is not None else window.size_s / interval_s
    return feature_floors(fm.channels, fm.features, per_channel, rows, shape_floors)


@dataclasses.dataclass
class _Ranks:
    """Per-CPU columns by rank: the channels each rank draws from (for floors), and the
    CPUs with their order in every window of the run (to name the CPU in reports)."""

    sources: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    cpus: list[str] = dataclasses.field(default_factory=list)
    order: np.ndarray | None = None

    def name(self, text: str, window: int) -> str:
        return text if self.order is None else unrank(text, self.order[window], self.cpus)


def _ranked(fm: FeatureMatrix, tel: Telemetry,
            named_by: Telemetry | None = None) -> tuple[FeatureMatrix, _Ranks]:
    """``fm`` with per-CPU columns ranked per window by CPU busy share (see
    :func:`reveal.analyze.percpu.rank_cpu_columns`); reports name the CPUs by their order
    in ``named_by`` (the telemetry before any per-sample ranking; default ``tel``)."""
    cpus, busy = window_busy(tel, fm.windows.start, fm.windows.size)
    values, names, sources = rank_cpu_columns(fm.values, fm.channels, fm.features, cpus, busy)
    if named_by is not None and named_by is not tel:
        busy = window_busy(named_by, fm.windows.start, fm.windows.size)[1]
    ranks = _Ranks(sources, cpus, cpu_order(busy) if sources else None)
    return FeatureMatrix(values, names, list(fm.features), fm.windows), ranks


def _episodes(anomalies: list[Anomaly]) -> list[Episode]:
    """Group flagged windows whose time spans overlap or touch."""
    episodes: list[Episode] = []
    current: list[Anomaly] = []
    for anomaly in sorted(anomalies, key=lambda a: a.start_ns):
        if current and anomaly.start_ns > max(a.end_ns for a in current):
            episodes.append(_summarise(current))
            current = []
        current.append(anomaly)
    if current:
        episodes.append(_summarise(current))
    return episodes


def _summarise(group: list[Anomaly]) -> Episode:
    peak = max(group, key=lambda a: a.score)
    weight: dict[str, float] = {}
    for a in group:
        for subsystem, share in a.subsystem_shares.items():
            weight[subsystem] = weight.get(subsystem, 0.0) + share * a.score
    subsystem = max(weight, key=weight.__getitem__) if weight else "unknown"
    return Episode(min(a.start_ns for a in group), max(a.end_ns for a in group),
                   [a.window_id for a in group], peak.score, subsystem, peak.claim)


def analyze_run(
    run: str | Path | Telemetry,
    baseline: str | Path | Telemetry | None = None,
    config: AnalyzeConfig | None = None,
    metric_set: list[str] | None = None,
    progress: Progress | None = None,
) -> Report:
    """Analyse one run, with detectors fitted on ``baseline`` (or on the run, robustly).

    ``run``/``baseline``: a run directory, CSV file, ``smd:``/``asd:`` spec or Telemetry.
    For an ``smd:M``/``asd:M`` run with no baseline, its ``train`` part is the baseline.
    """
    config = config or AnalyzeConfig()
    say = progress or (lambda _msg: None)
    catalog = default_catalog()
    warnings: list[str] = []
    tel = _load(run)
    if baseline is None and not isinstance(run, Telemetry):
        baseline = default_baseline(run)
    base = _load(baseline) if baseline is not None else None
    self_fit = base is None
    if tel.meta.get("warnings"):
        warnings += [str(w) for w in tel.meta["warnings"]]

    say("deriving rates and metrics")
    d_run, derive_report = derive(tel, catalog)
    d_base = derive(base, catalog)[0] if base is not None else d_run
    if derive_report.resets:
        warnings.append(f"counter resets handled in {len(derive_report.resets)} channels")

    usable = [c for c, ok in zip(d_run.channels, _finite_channels(d_run), strict=True)
              if ok and catalog.lookup(channel_metric(c)).kind not in NOT_DETECTED]
    empty = d_run.n_channels - len(usable)
    if base is not None:
        base_ok = {c for c, ok in zip(d_base.channels, _finite_channels(d_base), strict=True)
                   if ok}
        only_run = [c for c in usable if c not in base_ok]
        only_base = sorted(base_ok - set(d_run.channels))
        usable = [c for c in usable if c in base_ok]
        if only_run:
            warnings.append(f"{len(only_run)} channels are absent from the baseline and were "
                            f"not scored (e.g. {', '.join(only_run[:3])})")
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
                         "or all empty/static)", str(tel.meta.get("path", tel.host)))

    pruned = 0
    if metric_set is None and config.select.prune and len(usable) > 1:
        say(f"pruning {len(usable)} correlated channels")
        selection = prune(d_base.select(usable), config.select.corr_threshold, catalog,
                          config.select.min_std)
        keep = set(selection.kept) | set(selection.constant)
        if config.rank_cpus:  # a per-CPU channel is kept with all its CPUs
            keep |= set(cpu_siblings(usable, keep))
        pruned = len(usable) - len(keep)
        usable = [c for c in usable if c in keep]

    interval = d_run.interval_s
    window = _window_config(config, interval, warnings)
    say(f"computing features for {len(usable)} channels")
    state_levels = config.detect.state_levels
    s_run, s_base = d_run, d_base  # per-CPU channels by rank in every sample
    if config.rank_cpus and config.rank_cpu_samples:
        s_run = rank_cpu_rows(d_run)
        s_base = s_run if self_fit else rank_cpu_rows(d_base)
    fm_run = _features(s_run, usable, window, interval, state_levels)
    fm_base = fm_run if self_fit else _features(s_base, usable, window, d_base.interval_s,
                                                state_levels)
    ranks = _Ranks()
    if config.rank_cpus:
        fm_run, ranks = _ranked(fm_run, s_run, named_by=d_run)
        fm_base = fm_run if self_fit else _ranked(fm_base, s_base)[0]
    if self_fit:
        warnings.append("no baseline given: detectors were fitted on the run itself "
                        "(robustly, median/MAD); a persistent anomaly may look normal")

    say(f"fitting detectors on {fm_base.values.shape[0]} baseline windows")
    floors = (_scale_floors(d_base, usable, fm_base, config.detect.relative_floor, window,
                            d_base.interval_s, config.detect.shape_floors, ranks.sources)
              if config.detect.scale_floors else None)
    if floors is not None:
        plan = flat_shape_mask_plan(fm_base.channels, fm_base.features, floors)
        blank_flat_shapes(fm_run.values, plan)
        if not self_fit:
            blank_flat_shapes(fm_base.values, plan)
    ensemble = Ensemble(config.detect).fit(fm_base.values, robust_self_fit=self_fit,
                                           scale_floor=floors)
    stride_s = (window.stride_s if window.size_rows is None
                else (window.stride_rows or 1) * interval)
    verdicts = ensemble.score(fm_run.values,
                              persistence_windows(config.detect.persistence_s, stride_s))
    rows = np.flatnonzero(verdicts.flagged)
    say(f"attributing {len(rows)} flagged windows")
    with np.errstate(all="ignore"), pywarnings.catch_warnings():
        pywarnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns give NaN
        med = np.nanmedian(fm_base.values, axis=0)
        mad = np.nanmedian(np.abs(fm_base.values - med), axis=0)
    anomalies: list[Anomaly] = []
    if len(rows):
        contributions = ensemble.explain(fm_run.values, rows)
        scored = sorted(set(fm_run.channels))  # CPU ranks renamed, labels kept
        subsystem_of = dict(zip(scored, channel_subsystems(scored, catalog, irq_names(tel.meta)),
                                strict=True))
        attributions = attribute(contributions, fm_run.values[rows], fm_run.channels,
                                 fm_run.features, np.nan_to_num(med), np.nan_to_num(mad),
                                 catalog, config.top_reasons,
                                 [subsystem_of[c] for c in fm_run.channels], floors)
        names = list(verdicts.scores)
        for w, att in zip(rows, attributions, strict=True):
            reasons = [dataclasses.replace(r, channel=ranks.name(r.channel, w))
                       for r in att.reasons]  # the CPU of this window, not its rank
            anomalies.append(Anomaly(
                int(w), int(fm_run.windows.start_ns[w]), int(fm_run.windows.end_ns[w]),
                float(verdicts.combined[w]),
                [n for n in names if verdicts.flags[n][w]] or ["ensemble"],
                att.subsystems, att.shares, reasons, ranks.name(att.claim, w)))

    table = WindowTable(fm_run.windows.start_ns, fm_run.windows.end_ns, verdicts.scores,
                        verdicts.flags, verdicts.combined, verdicts.flagged)
    detectors = [DetectorSummary(n, float(verdicts.thresholds[n]), int(verdicts.flags[n].sum()))
                 for n in verdicts.scores]
    return Report(
        run=_describe(tel) | {"reveal_version": __version__},
        baseline=(_describe(base) if base is not None else {}) | {"self_fitted": self_fit},
        config=dataclasses.asdict(config) | {"window_used": dataclasses.asdict(window)},
        channels={"analysed": len(usable), "features": int(fm_run.values.shape[1]),
                  "pruned": pruned, "empty_or_static": empty,
                  "derived": derive_report.derived},
        detectors=detectors,
        windows=table,
        anomalies=anomalies,
        episodes=_episodes(anomalies),
        warnings=warnings,
    )
