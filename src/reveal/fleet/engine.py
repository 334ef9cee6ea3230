"""The fleet engine: hosts of one job compared with each other at the same moment.

    hosts = [host_features(tel, config) for tel in runs]     # per host, independent
    result = compare_fleet(hosts, baselines=None, config)     # peers, configuration, clocks

:func:`compare_fleet` runs in three steps that :mod:`reveal.fleet.distributed` spreads over
Dask workers: :func:`plan_fleet` (from small per-host summaries: the wall-clock grid, hosts
sharing no time, clock offsets, the columns hosts share, configuration outliers),
:func:`compare_block` per time block (all hosts × a block of windows × the shared
columns, built by :func:`host_block`), and :func:`assemble` (the cut, flags, episodes).
"""

from __future__ import annotations

import warnings as pywarnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from reveal.analysis.ensemble import persistence_windows
from reveal.analysis.subsystems import channel_subsystems
from reveal.catalog import SUBSYSTEMS, default_catalog
from reveal.errors import InputError
from reveal.fleet.align import clock_offsets, grid_slots, place
from reveal.fleet.config import FleetConfig
from reveal.fleet.episodes import episodes, flag, window_cut
from reveal.fleet.host import host_features, own_verdicts
from reveal.fleet.peers import BlockResult, compare_block
from reveal.fleet.records import (
    ClockOffset,
    ConfigOutlier,
    FleetResult,
    HostFeatures,
    OwnVerdicts,
    summary,
)
from reveal.fleet.statics import config_outliers
from reveal.report.escape import plain

__all__ = [
    "FleetConfig",
    "FleetPlan",
    "FleetResult",
    "HostFeatures",
    "OwnVerdicts",
    "assemble",
    "compare_block",
    "compare_fleet",
    "host_block",
    "host_columns",
    "host_features",
    "own_verdicts",
    "plan_fleet",
    "run_block",
    "summary",
    "trace_requests",
]

#: share of hosts flagged by their own baselines at one moment that makes it a job-wide change
JOB_WIDE_SHARE = 0.5


@dataclass
class FleetPlan:
    """Everything the block comparisons and the assembly share (small: no feature values).

    ``index``: position in the input sequence of every compared host; ``slots``: each
    compared host's window slots on the grid (after any clock alignment);
    ``column_maps``: per compared host, the grid column of each of its columns (-1: not
    compared); ``blocks``: (first, stop) grid windows of each time block.
    """

    hosts: list[str]
    index: list[int]
    origin_ns: int
    stride_ns: int
    size_ns: int
    n_slots: int
    slots: list[np.ndarray]
    lags: np.ndarray
    columns: list[tuple[str, str]]
    column_maps: list[np.ndarray]
    floors: np.ndarray
    column_subsystem: list[str]
    subsystems: list[str]
    subsystem_index: np.ndarray
    blocks: list[tuple[int, int]]
    channel_index: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    clock: list[ClockOffset] = field(default_factory=list)
    config_outliers: list[ConfigOutlier] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _common(values: list[int], what: str, hosts: Sequence[HostFeatures],
            warnings: list[str]) -> tuple[int, list[int]]:
    """The most common value and the hosts that have another one (named in a warning)."""
    value = Counter(values).most_common(1)[0][0]
    odd = [i for i, v in enumerate(values) if v != value]
    if odd:
        names = ", ".join(plain(hosts[i].host, 60) for i in odd[:5])
        warnings.append(f"{len(odd)} hosts have another window {what} than the "
                        f"{value / 1e9:g} s of the others and were not compared: {names}")
    return value, odd


def plan_fleet(hosts: Sequence[HostFeatures], config: FleetConfig | None = None) -> FleetPlan:
    """Plan the comparison from per-host summaries (``values`` may be empty).

    Raises
    ------
    InputError
        Fewer than ``config.min_hosts`` hosts with windows in common.
    """
    config = config or FleetConfig()
    warnings: list[str] = []
    have = [i for i, h in enumerate(hosts) if len(h.start_ns)]
    for h in hosts:
        if not len(h.start_ns):
            warnings += [f"{plain(h.host, 120)}: {plain(w, 300)}" for w in h.warnings] or \
                [f"{plain(h.host, 120)}: no windows; not compared"]
    stride, odd_stride = _common([hosts[i].stride_ns for i in have], "stride", hosts, warnings)
    keep = [i for j, i in enumerate(have) if j not in set(odd_stride)]
    size = Counter(hosts[i].size_ns for i in keep).most_common(1)[0][0] if keep else 0
    if len(keep) < config.min_hosts:
        raise InputError(f"comparing hosts with their peers needs at least {config.min_hosts} "
                         f"hosts with windows in common, got {len(keep)}")
    origin, slots = grid_slots([hosts[i] for i in keep], stride)
    n_slots = int(max(int(s.max()) for s in slots)) + 1
    present = place([np.ones(len(s)) for s in slots], slots, n_slots) == 1
    count = present.sum(axis=0)
    alone = [j for j in range(len(keep)) if not np.any(present[j] & (count >= 2))]
    if alone:
        names = ", ".join(plain(hosts[keep[j]].host, 60) for j in alone[:5])
        warnings.append(f"{len(alone)} hosts share no time with their peers (check their "
                        f"clocks and recording times) and were not compared: {names}")
        keep = [i for j, i in enumerate(keep) if j not in set(alone)]
        if len(keep) < config.min_hosts:
            raise InputError(f"comparing hosts with their peers needs at least "
                             f"{config.min_hosts} hosts recorded at the same time, "
                             f"got {len(keep)}")
        origin, slots = grid_slots([hosts[i] for i in keep], stride)
        n_slots = int(max(int(s.max()) for s in slots)) + 1
    names = _unique([hosts[i].host for i in keep], warnings)
    for i in keep:
        warnings += [f"{plain(hosts[i].host, 60)}: {plain(w, 300)}" for w in hosts[i].warnings]
    activity = place([hosts[i].activity for i in keep], slots, n_slots)
    clock, lags, clock_note = clock_offsets(names, activity, stride / 1e9,
                                            config.max_clock_offset_s, config.clock_min_corr,
                                            config.clock_min_gain, config.align_clocks)
    if clock_note:
        warnings.append(clock_note)
    if config.align_clocks and np.any(lags):
        slots = [s - lag for s, lag in zip(slots, lags, strict=True)]
        low = min(int(s.min()) for s in slots)
        slots = [s - low for s in slots]
        origin += low * stride
        n_slots = int(max(int(s.max()) for s in slots)) + 1
    columns, maps, floors = _columns([hosts[i] for i in keep], config.min_hosts, warnings)
    subsystems = [s for s in SUBSYSTEMS]
    col_sub = channel_subsystems([c for c, _ in columns], default_catalog())
    sub_index = np.array([subsystems.index(s) for s in col_sub], dtype=np.int64)
    per_block = max(1, config.block_values // max(1, len(keep) * max(1, len(columns))))
    blocks = [(g, min(g + per_block, n_slots)) for g in range(0, n_slots, per_block)]
    channel_index = np.unique([c for c, _ in columns], return_inverse=True)[1]
    return FleetPlan(names, keep, origin, stride, size, n_slots, slots, lags, columns, maps,
                     floors, col_sub, subsystems, sub_index, blocks,
                     channel_index.astype(np.int64).ravel(), clock,
                     config_outliers([hosts[i] for i in keep], config.min_hosts), warnings)


def _unique(names: list[str], warnings: list[str]) -> list[str]:
    """Host names made unique (a second run of one host becomes ``name#2``)."""
    seen: Counter[str] = Counter()
    out = []
    for name in names:
        seen[name] += 1
        out.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    repeated = [n for n, c in seen.items() if c > 1]
    if repeated:
        warnings.append(f"{len(repeated)} host names occur in more than one run (e.g. "
                        f"{plain(repeated[0], 60)}); later runs are named NAME#2, ...")
    return out


def _columns(hosts: Sequence[HostFeatures], min_hosts: int,
             warnings: list[str]) -> tuple[list[tuple[str, str]], list[np.ndarray], np.ndarray]:
    """Columns at least ``min_hosts`` hosts share, each host's map onto them, their floors."""
    counts = Counter(col for h in hosts for col in set(h.columns))
    columns = sorted(c for c, n in counts.items() if n >= min_hosts)
    dropped = sum(1 for n in counts.values() if n < min_hosts)
    if dropped:
        warnings.append(f"{dropped} feature columns are on fewer than {min_hosts} hosts "
                        f"and were not compared")
    if not columns:
        raise InputError(f"the hosts share no channel (none on at least {min_hosts} hosts)")
    where = {c: k for k, c in enumerate(columns)}
    maps = [np.array([where.get(c, -1) for c in h.columns], dtype=np.int64) for h in hosts]
    floors = np.full((len(hosts), len(columns)), np.nan)
    for i, (h, m) in enumerate(zip(hosts, maps, strict=True)):
        ok = m >= 0
        floors[i, m[ok]] = h.floors[ok]
    with pywarnings.catch_warnings():
        pywarnings.simplefilter("ignore", RuntimeWarning)
        return columns, maps, np.nan_to_num(np.nanmedian(floors, axis=0))


def host_block(features: HostFeatures, column_map: np.ndarray, slots: np.ndarray,
               first: int, stop: int, n_columns: int) -> np.ndarray:
    """One host's values on grid windows ``first:stop`` and the plan's columns, (B, K)
    float32, NaN where the host has no value."""
    out = np.full((stop - first, n_columns), np.nan, dtype=np.float32)
    rows = np.flatnonzero((slots >= first) & (slots < stop))
    cols = np.flatnonzero(column_map >= 0)
    if rows.size and cols.size:
        out[np.ix_(slots[rows] - first, column_map[cols])] = features.values[np.ix_(rows, cols)]
    return out


def run_block(plan: FleetPlan, blocks: Sequence[np.ndarray], b: int,
              config: FleetConfig) -> BlockResult:
    """Compare block ``b`` of the plan from every compared host's :func:`host_block`."""
    first, _stop = plan.blocks[b]
    return compare_block(blocks, plan.floors, plan.subsystem_index,
                         len(plan.subsystems), first=first,
                         relative_floor=config.relative_floor, z_cap=config.z_cap,
                         top_k=config.top_k, keep_columns=config.keep_columns,
                         min_hosts=config.min_hosts,
                         channel_of=plan.channel_index if config.distinct_channels else None,
                         max_deviating_share=config.max_deviating_share)


def _own_grid(plan: FleetPlan, own: Sequence[OwnVerdicts | None]) -> np.ndarray | None:
    """Windows each host's own baseline flagged, on the grid (H, G); None without any."""
    if not any(o is not None for o in own):
        return None
    out = np.zeros((len(plan.hosts), plan.n_slots), dtype=bool)
    for i, o in enumerate(own):
        if o is None:
            continue
        s = np.rint((o.start_ns - plan.origin_ns) / plan.stride_ns).astype(np.int64) - \
            plan.lags[i]
        ok = (s >= 0) & (s < plan.n_slots)
        out[i, s[ok]] = o.flagged[ok]
    return out


def assemble(plan: FleetPlan, results: Sequence[BlockResult], hosts: Sequence[HostFeatures],
             config: FleetConfig | None = None,
             baselines: Mapping[str, OwnVerdicts] | None = None) -> FleetResult:
    """The fleet result from the plan, every block's result (any order) and the summaries."""
    config = config or FleetConfig()
    results = sorted(results, key=lambda r: r.first)
    sub = np.concatenate([r.subsystem_scores for r in results], axis=1)
    present = place([np.ones(len(s)) for s in plan.slots], plan.slots, plan.n_slots) == 1
    sub[~present] = np.nan
    with pywarnings.catch_warnings():
        pywarnings.simplefilter("ignore", RuntimeWarning)
        scores = np.nanmax(sub, axis=2).astype(np.float32)
    cut = window_cut(scores, config.min_score, config.cut_mads).astype(np.float32)
    stride_s = plan.stride_ns / 1e9
    persistence = persistence_windows(config.persistence_s, stride_s)
    above, flagged = flag(scores, cut, persistence)
    median = np.concatenate([r.median for r in results], axis=0)
    evidence = tuple(np.concatenate([getattr(r, name) for r in results], axis=1)
                     for name in ("top_column", "top_z", "top_value"))
    grid = plan.origin_ns + np.arange(plan.n_slots, dtype=np.int64) * plan.stride_ns
    compared = [hosts[i] for i in plan.index]
    found = episodes(plan.hosts, scores, sub, plan.subsystems, above, flagged,
                     evidence, median, plan.columns, plan.column_subsystem,  # type: ignore[arg-type]
                     [h.roles for h in compared], grid, plan.size_ns,
                     round(config.merge_gap_s / stride_s), config.top_reasons)
    own = [(baselines or {}).get(name, h.own)
           for name, h in zip(plan.hosts, compared, strict=True)]
    own_flagged = _own_grid(plan, own)
    warnings = list(plan.warnings)
    if own_flagged is not None:
        for e in found:
            i = plan.hosts.index(e.host)
            if own[i] is not None:
                e.own_share = float(own_flagged[i, e.first:e.last + 1].mean())
        warnings += _job_wide(own_flagged, own, grid)
    return FleetResult(
        hosts=plan.hosts, grid_start_ns=grid, stride_ns=plan.stride_ns, size_ns=plan.size_ns,
        subsystems=plan.subsystems, scores=scores, subsystem_scores=sub.astype(np.float32),
        cut=cut, flagged=flagged, peer_median=median,
        peer_p10=np.concatenate([r.p10 for r in results], axis=0),
        peer_p90=np.concatenate([r.p90 for r in results], axis=0),
        columns=list(plan.columns), episodes=found, config_outliers=plan.config_outliers,
        clock=plan.clock, own_flagged=own_flagged, warnings=warnings,
        sources={name: dict(h.source) for name, h in zip(plan.hosts, compared, strict=True)})


def _job_wide(own_flagged: np.ndarray, own: Sequence[OwnVerdicts | None],
              grid: np.ndarray) -> list[str]:
    """Moments most hosts' own baselines flagged at once: the job changed, not one host."""
    with_own = np.array([o is not None for o in own])
    if with_own.sum() < 2:
        return []
    share = own_flagged[with_own].mean(axis=0)
    wide = share >= JOB_WIDE_SHARE
    if not wide.any():
        return []
    idx = np.flatnonzero(wide)
    return [f"{idx.size} windows (first at wall time {grid[idx[0]] / 1e9:.0f} s) were flagged "
            f"by the own baselines of at least {JOB_WIDE_SHARE:.0%} of the hosts at once: a "
            f"change of the whole job, which the peer comparison does not count against "
            f"any host"]


#: episodes (strongest first) and implicated columns of each whose traces a result keeps
TRACE_EPISODES = 6
TRACE_COLUMNS = 3


def trace_requests(result: FleetResult) -> dict[str, list[int]]:
    """Host -> the columns of its strongest episodes' reasons whose traces to keep."""
    where = {c: k for k, c in enumerate(result.columns)}
    out: dict[str, list[int]] = {}
    for e in result.episodes[:TRACE_EPISODES]:
        cols = out.setdefault(e.host, [])
        for r in e.reasons[:TRACE_COLUMNS]:
            k = where.get((r.channel, r.feature))
            if k is not None and k not in cols:
                cols.append(k)
    return out


def host_columns(features: HostFeatures, column_map: np.ndarray, slots: np.ndarray,
                 columns: Sequence[int], n_slots: int) -> dict[int, np.ndarray]:
    """One host's values of the plan's ``columns`` over the whole grid, (G,) float32 each
    (NaN where the host has no value)."""
    rows = np.flatnonzero((slots >= 0) & (slots < n_slots))
    out = {}
    for k in columns:
        own = np.flatnonzero(column_map == k)
        v = np.full(n_slots, np.nan, dtype=np.float32)
        if own.size and features.values.shape[0]:
            v[slots[rows]] = features.values[rows, own[0]]
        out[int(k)] = v
    return out


def compare_fleet(hosts: Sequence[HostFeatures],
                  baselines: Mapping[str, OwnVerdicts] | None = None,
                  config: FleetConfig | None = None) -> FleetResult:
    """Compare every host with its peers, in this process (see
    :func:`reveal.fleet.distributed.compare_fleet_dask` for Dask).

    Parameters
    ----------
    hosts : sequence of HostFeatures
        From :func:`host_features`, one per host.
    baselines : mapping, optional
        Host name -> the host scored against its own baseline (:func:`own_verdicts`); by
        default each host's ``own`` (set when ``host_features`` was given a baseline).
    config : FleetConfig, optional
    """
    config = config or FleetConfig()
    plan = plan_fleet([summary(h) for h in hosts], config)
    results = []
    for b, (first, stop) in enumerate(plan.blocks):
        cube = [host_block(hosts[i], plan.column_maps[j], plan.slots[j], first, stop,
                           len(plan.columns)) for j, i in enumerate(plan.index)]
        results.append(run_block(plan, cube, b, config))
    result = assemble(plan, results, hosts, config, baselines)
    for host, cols in trace_requests(result).items():
        j = plan.hosts.index(host)
        result.traces[host] = host_columns(hosts[plan.index[j]], plan.column_maps[j],
                                           plan.slots[j], cols, plan.n_slots)
    return result
