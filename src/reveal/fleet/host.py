"""One host's side of the fleet comparison: its window features on the wall clock.

The single host's front end (:mod:`reveal.analysis.frontend`: usable channels, window
features without the levels of ``state`` channels, per-CPU ranks, the catalog's unit
floors), with the fleet's feature set, channels matched by role
(:mod:`reveal.fleet.roles`), a floor at the window statistic's sampling error, and the
host's configuration (``static``) channels set aside to compare as values.
"""

from __future__ import annotations

import warnings as pywarnings

import numpy as np

from reveal.analysis import frontend
from reveal.analysis.derive import derive
from reveal.analysis.floors import SAMPLING_SE
from reveal.analysis.percpu import BUSY_METRIC
from reveal.analysis.pipeline import FittedAnalysis, rows_per_window, score_windows, window_config
from reveal.catalog import Catalog, default_catalog
from reveal.config import AnalyzeConfig
from reveal.errors import InputError
from reveal.fleet.channels import compared_channels
from reveal.fleet.config import FleetConfig
from reveal.fleet.records import HostFeatures, OwnVerdicts
from reveal.fleet.roles import device_ranks, ranking_channels, renamed
from reveal.frame import Telemetry, channel_metric, parse_channel

#: rows a channel's level (for its floor) is taken from, evenly spread over the run
LEVEL_SAMPLES = 1000
#: the kurtosis the peers' sampling errors assume (the fleet computes no shape features)
GAUSSIAN_KURTOSIS = 3.0


def host_features(telemetry: Telemetry, config: FleetConfig | None = None, *,
                  baseline: FittedAnalysis | None = None) -> HostFeatures:
    """Window features of one host for the peer comparison.

    Parameters
    ----------
    telemetry : Telemetry
        One host's run (counters raw); its ``meta["wall_offset_ns"]`` puts it on the wall
        clock.
    config : FleetConfig, optional
    baseline : FittedAnalysis, optional
        The host's own fitted analysis (``Reveal(...).fit(baseline).fitted_``): the run is
        also scored against it, and the verdicts travel in ``HostFeatures.own``.

    Raises
    ------
    InputError
        A run shorter than one window, or without any channel to compare.
    """
    config = config or FleetConfig()
    catalog = default_catalog()
    where = str(telemetry.meta.get("path", telemetry.host))
    if telemetry.n_samples < 2:
        raise InputError("the run holds fewer than two samples", where)
    compared = telemetry.select(compared_channels(telemetry.channels, catalog,
                                                  config.channels, config.job_network_only))
    d, report = derive(compared, catalog)
    warnings = [str(w) for w in telemetry.meta.get("warnings", [])]
    if report.resets:
        warnings.append(f"counter resets handled in {len(report.resets)} channels")
    interval = d.interval_s if d.n_samples > 1 else telemetry.interval_s
    window = window_config(AnalyzeConfig(window=config.window), interval)
    finite = frontend.finite_channels(d)
    kinds = [catalog.lookup(channel_metric(c)).kind for c in d.channels]
    roles = renamed(d.channels, _device_ranks(telemetry, compared, d, catalog))
    statics = _statics(d, kinds, finite, roles)
    names = frontend.usable(d, catalog)
    if not names:
        raise InputError("no channel with data to compare (all empty or static)", where)
    fm = frontend.window_features(d, names, window, interval, features=config.features,
                                  n_jobs=1)
    fm, ranks = frontend.ranked(fm, d)
    windows = fm.windows
    values, channels, features = fm.values, fm.channels, fm.features
    rows = rows_per_window(window, interval)
    step = max(1, d.n_samples // LEVEL_SAMPLES)
    floors = frontend.scale_floors(names, frontend.channel_levels(d, names, step), fm,
                                   config.relative_floor, interval, rows,
                                   sources=ranks.sources)
    if config.sampling_floor > 0:
        usable_cols = frontend.columns_of(tuple(d.channels), tuple(names))
        sigma = dict(zip(names, _window_sigma(d.values[:, usable_cols], windows.start,
                                              windows.size), strict=True))
        floors = np.maximum(floors, config.sampling_floor * sampling_errors(
            channels, features, sigma, ranks.sources, rows))
    shown = {new: old for old, new in roles.items()}
    channels = [roles.get(c, c) for c in channels]
    offset = telemetry.wall_offset_ns
    # nominal, as the size: measured steps differ between recordings by microseconds
    stride_ns = round(windows.stride * interval * 1e9)
    own = own_verdicts(telemetry, baseline) if baseline is not None else None
    source = {"path": str(telemetry.meta.get("path", "")), "samples": telemetry.n_samples,
              "channels": telemetry.n_channels, "interval_s": float(interval),
              "wall_offset_ns": offset}
    return HostFeatures(
        host=telemetry.host, start_ns=windows.start_ns + offset, stride_ns=stride_ns,
        size_ns=round(windows.size * interval * 1e9),
        values=np.ascontiguousarray(values, dtype=np.float32), channels=channels,
        features=features, floors=floors, statics=statics,
        activity=_activity(d, windows.start, windows.size), roles=shown, source=source,
        warnings=warnings, own=own)


def _device_ranks(telemetry: Telemetry, compared: Telemetry, d: Telemetry,
                  catalog: Catalog) -> dict[str, dict[str, str]]:
    """Devices' roles from the traffic of the whole run, whichever channels are compared:
    a role is the host's, so every channel set names a device alike. ``d``: the compared
    channels derived, used as they are where they hold every device channel."""
    ranked = ranking_channels(telemetry.channels)
    if not set(ranked) <= set(compared.channels):
        d, _report = derive(telemetry.select(ranked), catalog)
    return device_ranks(d.channels, d.values)


def _statics(d: Telemetry, kinds: list[str], finite: np.ndarray,
             roles: dict[str, str]) -> dict[str, float]:
    """Configuration channels (role-matched names) and their median value over the run."""
    cols = [i for i, (k, ok) in enumerate(zip(kinds, finite, strict=True))
            if ok and k == "static"]
    if not cols:
        return {}
    with pywarnings.catch_warnings():
        pywarnings.simplefilter("ignore", RuntimeWarning)
        med = np.nanmedian(d.values[:, cols], axis=0)
    return {roles.get(d.channels[i], d.channels[i]): float(v)
            for i, v in zip(cols, med, strict=True)}


def sampling_errors(channels: list[str], features: list[str], sigma: dict[str, float],
                    sources: dict[str, list[str]], rows: float) -> np.ndarray:
    """Per feature column, the spread chance alone gives the statistic in one window
    (feature units): :data:`reveal.analysis.floors.SAMPLING_SE` (Gaussian shape) × the
    channel's typical within-window spread σ
    (``sigma``, by channel; a CPU rank takes its group's largest). Peers whose window
    means agree more closely than that (steady hosts) do not make a small difference read
    as many sigmas."""
    n = max(float(rows), 3.0)
    out = np.zeros(len(channels), dtype=np.float64)
    for k, (channel, feature) in enumerate(zip(channels, features, strict=True)):
        if feature not in SAMPLING_SE:
            continue
        se, power = SAMPLING_SE[feature]
        sd = sigma.get(channel)
        if sd is None:
            sd = max((sigma.get(c, 0.0) for c in sources.get(channel, ())), default=0.0)
        if sd <= 0:
            continue
        out[k] = float(se(n, GAUSSIAN_KURTOSIS)) * sd ** power
    return out


#: windows, evenly spread over the run, a channel's typical within-window spread is taken from
SIGMA_WINDOWS = 64


def _window_sigma(x: np.ndarray, starts: np.ndarray, size: int) -> np.ndarray:
    """Every channel's typical within-window standard deviation, (C,): the median over up
    to :data:`SIGMA_WINDOWS` windows evenly spread over the run (rows × channels ``x``;
    NaN rows skipped; 0 where unknown)."""
    if x.shape[0] == 0 or len(starts) == 0 or size < 2:
        return np.zeros(x.shape[1])
    pick = np.asarray(starts, dtype=np.int64)[
        np.unique(np.linspace(0, len(starts) - 1, SIGMA_WINDOWS).astype(np.int64))]
    block = x[pick[:, None] + np.arange(size)[None, :]]  # (m, size, C)
    ok = np.isfinite(block)
    n = ok.sum(axis=1)
    y = np.where(ok, block, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"), pywarnings.catch_warnings():
        pywarnings.simplefilter("ignore", RuntimeWarning)
        mean = y.sum(axis=1) / n
        dev = np.where(ok, block - mean[:, None, :], 0.0)
        var = (dev * dev).sum(axis=1) / (n - 1)
        sd = np.sqrt(np.where(n >= 2, var, np.nan))
        return np.nan_to_num(np.nanmedian(sd, axis=0))


def _activity(d: Telemetry, starts: np.ndarray, size: int) -> np.ndarray:
    """Mean CPU busy % per window (all CPUs), the fleet's common signal; NaN when absent."""
    total = [i for i, c in enumerate(d.channels) if c == BUSY_METRIC]
    cols = total or [i for i, c in enumerate(d.channels)
                     if channel_metric(c) == BUSY_METRIC and set(parse_channel(c)[1]) == {"cpu"}]
    if not cols:
        return np.full(len(starts), np.nan)
    with pywarnings.catch_warnings():
        pywarnings.simplefilter("ignore", RuntimeWarning)
        x = np.nanmean(d.values[:, cols], axis=1)
    ok = np.isfinite(x)
    c = np.concatenate([[0.0], np.cumsum(np.where(ok, x, 0.0))])
    n = np.concatenate([[0], np.cumsum(ok)])
    s = np.asarray(starts, dtype=np.int64)
    count = n[s + size] - n[s]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, (c[s + size] - c[s]) / np.maximum(count, 1), np.nan)


def own_verdicts(telemetry: Telemetry, fitted: FittedAnalysis) -> OwnVerdicts:
    """``telemetry`` scored against the host's own fitted baseline, per window (wall clock)."""
    analysis = score_windows(fitted, telemetry)
    v = analysis.verdicts
    threshold = v.combined_threshold if v.combined_threshold > 0 else 1.0
    subsystem = [""] * len(analysis.windows)
    for ev in analysis.evidence:
        subsystem[ev.window_id] = ev.subsystems[0] if ev.subsystems else ""
    return OwnVerdicts(analysis.windows.start_ns + telemetry.wall_offset_ns,
                       np.asarray(v.flagged, dtype=bool),
                       np.asarray(v.combined, dtype=np.float64) / threshold, subsystem)
