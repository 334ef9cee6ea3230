"""What the fleet comparison takes and gives: per-host features and the fleet result.

All times are wall-clock nanoseconds (Unix epoch): a run's monotonic timestamps plus its
recorded ``wall_offset_ns``. Arrays state their shapes; ``H`` hosts, ``G`` windows of the
common grid, ``K`` compared columns, ``S`` subsystems.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class OwnVerdicts:
    """A host scored against its own baseline (:class:`reveal.model.Reveal`), per window.

    start_ns : (W,) int64 window starts, wall clock. flagged : (W,) bool.
    score : (W,) combined score over the threshold (above 1 = above the threshold).
    subsystem : (W,) str, the leading subsystem of each flagged window ("" elsewhere).
    """

    start_ns: np.ndarray
    flagged: np.ndarray
    score: np.ndarray
    subsystem: list[str]


@dataclass
class HostFeatures:
    """One host's window features, ready to be compared with its peers.

    Attributes
    ----------
    host : str
        Host name (untrusted text: escape it in reports).
    start_ns : ndarray of int64, shape (W,)
        Window starts on the wall clock (ns).
    stride_ns, size_ns : int
        Window stride and length (ns).
    values : ndarray of float32, shape (W, K)
        ``values[w, k]``: feature ``features[k]`` of channel ``channels[k]``.
    channels, features : list of str, length K
        Column channel (matched by role: ``cpu=r0`` busiest CPU, ``iface=rank0`` busiest
        interface, GPUs by index) and feature.
    floors : ndarray of float64, shape (K,)
        Least change that counts per column, in the feature's units.
    statics : dict
        Configuration channels (catalog kind ``static``, role-matched names) and values.
    activity : ndarray of float64, shape (W,)
        The fleet's common signal for clock alignment: mean CPU busy % per window (NaN
        where absent).
    roles : dict
        Role-matched channel name -> the host's own channel name (for reports).
    source : dict
        Where the data came from (path, samples, interval, wall offset).
    warnings : list of str
    own : OwnVerdicts or None
        The host scored against its own baseline, when one was given.
    """

    host: str
    start_ns: np.ndarray
    stride_ns: int
    size_ns: int
    values: np.ndarray
    channels: list[str]
    features: list[str]
    floors: np.ndarray
    statics: dict[str, float] = field(default_factory=dict)
    activity: np.ndarray = field(default_factory=lambda: np.zeros(0))
    roles: dict[str, str] = field(default_factory=dict)
    source: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    own: OwnVerdicts | None = None

    @property
    def columns(self) -> list[tuple[str, str]]:
        """(channel, feature) of every column."""
        return list(zip(self.channels, self.features, strict=True))

    def __sizeof__(self) -> int:
        """Bytes held, arrays and names included: what Dask counts for a result it keeps
        (``dask.sizeof`` falls back to ``sys.getsizeof``), so that its memory accounting
        sees the features as managed memory rather than as unmanaged growth."""
        arrays = [self.start_ns, self.values, self.floors, self.activity]
        if self.own is not None:
            arrays += [self.own.start_ns, self.own.flagged, self.own.score]
        names = [self.host, *self.channels, *self.features, *self.statics, *self.roles,
                 *self.roles.values(), *self.warnings]
        if self.own is not None:
            names += self.own.subsystem
        return (object.__sizeof__(self) + sum(a.nbytes for a in arrays)
                + sum(sys.getsizeof(n) for n in names) + 16 * len(self.statics))


@dataclass
class PeerReason:
    """One column that set a host apart during an episode (values in the feature's units).

    ``value``: the host's median over the episode; ``peer_median``: the peers' median;
    ``z``: median robust z against the peers; ``channel``: role-matched name,
    ``host_channel``: the host's own name for it.
    """

    channel: str
    feature: str
    z: float
    value: float
    peer_median: float
    host_channel: str
    subsystem: str


@dataclass
class HostEpisode:
    """Consecutive windows in which one host stood apart from its peers."""

    host: str
    start_ns: int  # wall clock, first window's start
    end_ns: int  # wall clock, last window's end
    first: int  # grid index of the first window
    last: int  # grid index of the last window (inclusive)
    peak_score: float
    subsystem: str
    reasons: list[PeerReason]
    # share of the episode's windows the host's own baseline also flagged (None: no baseline)
    own_share: float | None = None


@dataclass
class ConfigOutlier:
    """A configuration (static channel) value that differs from the peers' majority.

    ``value`` is None when the host lacks the channel the majority has.
    """

    host: str
    channel: str
    host_channel: str
    value: float | None
    majority: float
    peers_with_majority: int
    peers: int


@dataclass
class ClockOffset:
    """A host whose activity is shifted against its peers'.

    ``offset_s``: how far the host's clock is ahead of its peers (positive: the host's
    timestamps are late; its activity appears after the peers'), at the resolution of one
    window stride; ``corr``: correlation at that lag, ``corr_at_zero`` at none.
    """

    host: str
    offset_s: float
    corr: float
    corr_at_zero: float
    resolution_s: float
    aligned: bool  # the comparison moved the host by this offset


@dataclass
class FleetResult:
    """The fleet comparison: per host × window scores, flagged episodes, findings.

    Attributes
    ----------
    hosts : list of str, length H
    grid_start_ns : ndarray of int64, shape (G,)
        Wall-clock start of each grid window.
    stride_ns, size_ns : int
    subsystems : list of str, length S
    scores : ndarray of float32, shape (H, G)
        Host deviation score per window (robust sigmas; NaN where the host has no data).
    subsystem_scores : ndarray of float32, shape (H, G, S)
    cut : ndarray of float32, shape (G,)
        The score above which a host stands apart in that window.
    flagged : ndarray of bool, shape (H, G)
    peer_median, peer_p10, peer_p90 : ndarray of float32, shape (G, K)
        The peer band of each compared column.
    columns : list of (channel, feature), length K
    episodes, config_outliers, clock : findings
    own_flagged : ndarray of bool, shape (H, G), or None
        Windows each host's own baseline flagged.
    warnings : list of str
    """

    hosts: list[str]
    grid_start_ns: np.ndarray
    stride_ns: int
    size_ns: int
    subsystems: list[str]
    scores: np.ndarray
    subsystem_scores: np.ndarray
    cut: np.ndarray
    flagged: np.ndarray
    peer_median: np.ndarray
    peer_p10: np.ndarray
    peer_p90: np.ndarray
    columns: list[tuple[str, str]]
    episodes: list[HostEpisode] = field(default_factory=list)
    config_outliers: list[ConfigOutlier] = field(default_factory=list)
    clock: list[ClockOffset] = field(default_factory=list)
    own_flagged: np.ndarray | None = None
    warnings: list[str] = field(default_factory=list)
    sources: dict[str, dict[str, Any]] = field(default_factory=dict)  # host -> source
    # host -> column index -> (G,) the host's values of an episode's implicated columns
    traces: dict[str, dict[int, np.ndarray]] = field(default_factory=dict)

    def flagged_hosts(self) -> list[str]:
        """Hosts with an episode, a configuration outlier or an offset clock (in host order)."""
        named = ({e.host for e in self.episodes} | {c.host for c in self.config_outliers}
                 | {c.host for c in self.clock})
        return [h for h in self.hosts if h in named]


def summary(features: HostFeatures) -> HostFeatures:
    """``features`` without its value matrix (what planning a comparison needs; small)."""
    return HostFeatures(features.host, features.start_ns, features.stride_ns, features.size_ns,
                        np.zeros((0, len(features.channels)), np.float32),
                        list(features.channels), list(features.features), features.floors,
                        dict(features.statics), features.activity, dict(features.roles),
                        dict(features.source), list(features.warnings), features.own)
