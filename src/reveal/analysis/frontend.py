"""Telemetry to feature matrix and its floors: the one front end of every analysis path.

Fitting and scoring a host (:mod:`reveal.analysis.pipeline`), the fleet's peer comparison
(:mod:`reveal.fleet.host`) and the Python API's :func:`reveal.api.window_features` take
derived telemetry (rates, ``derive``) through the same steps here:

1. the channels detection scores (:func:`usable`): with data, of a kind that is not
   ``static`` or ``smoothed``;
2. their window features (:func:`window_features`), the level features of ``state``
   channels set aside (their level is host history, their movement is not);
3. per-CPU columns ranked by load in every window (:func:`ranked`,
   :mod:`reveal.analysis.percpu`);
4. every column's least change that counts (:func:`scale_floors`, from the catalog's unit
   floors at each channel's own level, :mod:`reveal.analysis.floors`).
"""

from __future__ import annotations

import dataclasses
import functools
import warnings as pywarnings
from collections.abc import Sequence

import numpy as np

from reveal.analysis.constants import LEVEL_FEATURES
from reveal.analysis.features import FeatureMatrix, compute_features
from reveal.analysis.floors import ChannelFloor, channel_floors, feature_floors
from reveal.analysis.percpu import cpu_order, rank_cpu_columns, unrank, window_busy
from reveal.analysis.windows import make_windows
from reveal.catalog import NOT_DETECTED, Catalog, default_catalog
from reveal.config import WindowConfig
from reveal.frame import Telemetry, channel_metric


def finite_channels(tel: Telemetry) -> np.ndarray:
    """Mask (C,) of the channels with at least one finite value."""
    return np.isfinite(tel.values).any(axis=0)


@functools.lru_cache(maxsize=16)
def detected_kinds(channels: tuple[str, ...], catalog: Catalog) -> np.ndarray:
    """Which channels are of a kind detection scores (not ``static``/``smoothed``)."""
    return np.array([catalog.lookup(channel_metric(c)).kind not in NOT_DETECTED
                     for c in channels], dtype=bool)


def usable(d: Telemetry, catalog: Catalog | None = None) -> list[str]:
    """Derived channels of ``d`` that detection scores: with data, of a detected kind."""
    catalog = catalog or default_catalog()
    detected = detected_kinds(tuple(d.channels), catalog)
    return [c for c, ok in zip(d.channels, finite_channels(d) & detected, strict=True) if ok]


@functools.lru_cache(maxsize=16)
def columns_of(have: tuple[str, ...], want: tuple[str, ...]) -> np.ndarray:
    """Positions in ``have`` of the channels ``want`` (all present)."""
    index = {c: i for i, c in enumerate(have)}
    return np.array([index[c] for c in want], dtype=np.intp)


@functools.lru_cache(maxsize=16)
def feature_kinds(channels: tuple[str, ...]) -> tuple[str, ...]:
    """``event`` or ``gauge`` per channel, from the catalog (kept per channel layout: a
    live call scores the same layout every second)."""
    catalog = default_catalog()
    return tuple("event" if catalog.lookup(channel_metric(c)).kind == "event" else "gauge"
                 for c in channels)


@functools.lru_cache(maxsize=16)
def level_columns_kept(channels: tuple[str, ...], features: tuple[str, ...]) -> list[int]:
    """Feature columns kept: all but the level features of ``state`` channels."""
    catalog = default_catalog()
    return [k for k, (c, f) in enumerate(zip(channels, features, strict=True))
            if not (f in LEVEL_FEATURES and catalog.lookup(channel_metric(c)).kind == "state")]


def window_features(tel: Telemetry, channels: Sequence[str], window: WindowConfig,
                    interval_s: float, state_levels: bool = False,
                    features: Sequence[str] | None = None,
                    n_jobs: int | None = None) -> FeatureMatrix:
    """Window features of ``channels`` of derived telemetry ``tel`` (non-finite values read
    as missing); ``state_levels``: keep the level features of ``state`` channels;
    ``n_jobs``: worker threads (None: the feature code's default)."""
    channels = list(channels)
    cols = columns_of(tuple(tel.channels), tuple(channels))
    windows = make_windows(tel.timestamps_ns, window, interval_s)
    values = np.where(np.isfinite(tel.values[:, cols]), tel.values[:, cols], np.nan)
    fm = compute_features(values, channels, list(feature_kinds(tuple(channels))), windows,
                          features=None if features is None else list(features),
                          n_jobs=n_jobs)
    if state_levels:
        return fm
    keep = level_columns_kept(tuple(fm.channels), tuple(fm.features))
    if len(keep) == len(fm.features):
        return fm
    return FeatureMatrix(np.ascontiguousarray(fm.values[:, keep]),
                         [fm.channels[k] for k in keep], [fm.features[k] for k in keep],
                         fm.windows)


@dataclasses.dataclass
class CpuRanks:
    """Per-CPU columns by rank: the channels each rank draws from (for floors), and the
    CPUs with their order in every window of the run (to name the CPU in reports)."""

    sources: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    cpus: list[str] = dataclasses.field(default_factory=list)
    order: np.ndarray | None = None

    def name(self, text: str, window: int) -> str:
        return text if self.order is None else unrank(text, self.order[window], self.cpus)


def ranked(fm: FeatureMatrix, tel: Telemetry,
           named_by: Telemetry | None = None) -> tuple[FeatureMatrix, CpuRanks]:
    """``fm`` with per-CPU columns ranked per window by CPU busy share (see
    :func:`reveal.analysis.percpu.rank_cpu_columns`); reports name the CPUs by their order
    in ``named_by`` (the telemetry before any per-sample ranking; default ``tel``)."""
    cpus, busy = window_busy(tel, fm.windows.start, fm.windows.size)
    values, names, sources = rank_cpu_columns(fm.values, fm.channels, fm.features, cpus, busy)
    if named_by is not None and named_by is not tel:
        busy = window_busy(named_by, fm.windows.start, fm.windows.size)[1]
    ranks = CpuRanks(sources, cpus, cpu_order(busy) if sources else None)
    return FeatureMatrix(values, names, list(fm.features), fm.windows), ranks


def channel_levels(d: Telemetry, channels: Sequence[str], step: int = 1) -> np.ndarray:
    """Each channel's level (C,): the median of its finite values over every ``step``-th row
    (NaN where it has none)."""
    cols = columns_of(tuple(d.channels), tuple(channels))
    with pywarnings.catch_warnings():
        pywarnings.simplefilter("ignore", RuntimeWarning)  # all-NaN channels
        return np.nanmedian(d.values[::max(1, int(step)), cols], axis=0)


def scale_floors(channels: Sequence[str], levels: np.ndarray, fm: FeatureMatrix,
                 relative: float, interval_s: float, rows: float,
                 shape_floors: bool = True,
                 sources: dict[str, list[str]] | None = None) -> np.ndarray:
    """Per feature column of ``fm``, the least change that counts (its units; see
    :mod:`reveal.analysis.floors`): ``channels`` with their ``levels`` (derived units),
    ``relative`` share of the level, windows of ``rows`` samples ``interval_s`` seconds
    apart; a CPU rank (``sources``) takes its group's largest floor."""
    per_channel = dict(zip(channels, channel_floors(channels, levels, relative, interval_s),
                           strict=True))
    for name, originals in (sources or {}).items():
        group = [per_channel[c] for c in originals]
        per_channel[name] = ChannelFloor(max(f.level for f in group), max(f.spike for f in group),
                                         max(f.quantum for f in group))
    return feature_floors(fm.channels, fm.features, per_channel, rows, shape_floors)
