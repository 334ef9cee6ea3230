"""Every tunable of the fleet comparison, with its default and unit."""

from __future__ import annotations

from dataclasses import dataclass, field

from reveal.config import WindowConfig
from reveal.fleet.channels import JOB_PREFIXES

#: Window features compared across hosts: the level (events get their sum). Spread and
#: extremes were tried too (bench/bench_fleet.py): on the tune fleet they raise the clean
#: hosts' scores more than the faulty ones'. Shape features (skewness, ADF, ...) describe
#: one host's rhythm and add little across peers.
FLEET_FEATURES: tuple[str, ...] = ("mean",)


@dataclass(frozen=True)
class FleetConfig:
    """How hosts are compared with their peers at the same moment.

    The channel set, features and cut were chosen on the tune part of a recorded fleet
    and checked on its report part and on a second recording (``bench/bench_fleet.py``,
    ``docs/fleet-simulation.md``).

    Times are seconds unless named otherwise; ``z`` values are robust sigmas across hosts
    (``(x - median) / max(1.4826 × MAD, floor)``).
    """

    window: WindowConfig = field(default_factory=WindowConfig)
    # metric prefixes compared (None: every channel; configuration channels always are),
    # see :mod:`reveal.fleet.channels`
    channels: tuple[str, ...] | None = JOB_PREFIXES
    # where a host has channels of network namespaces (the job's), compare only those
    job_network_only: bool = True
    features: tuple[str, ...] = FLEET_FEATURES
    # least change that counts, as a share of the peers' level (the catalog's unit floors
    # also apply: a jiffy of CPU, a few pages); constant channels do not explode
    relative_floor: float = 0.002
    # the scale is also at least this many standard errors a window statistic has by chance
    # (the channel's typical within-window spread over the window's rows; 0: off)
    sampling_floor: float = 1.0
    # |z| is capped here before scores are formed, so one column cannot own a score
    z_cap: float = 50.0
    # a host's score in a window per subsystem: the mean of its top-k |z| in that subsystem
    top_k: int = 3
    # a channel counts once in that top-k (its largest |z| over its features): a score
    # then needs that many channels setting the host apart, not one channel's statistics
    distinct_channels: bool = False
    # a column is left out at a moment when more than this share of the hosts with a value
    # deviate on it (|z| > 3): the peers do not agree there (levels that depend on each
    # host's history, such as page-cache or socket states); 1.0: never
    max_deviating_share: float = 1.0
    # a window of a host is above the cut when its score exceeds both this many sigmas and
    # the peers' median score + ``cut_mads`` robust sigmas of the scores at that moment
    min_score: float = 16.0
    cut_mads: float = 3.0
    # seconds a host must stay above the cut before its windows are flagged
    persistence_s: float = 3.0
    # flagged windows at most this many seconds apart make one episode
    merge_gap_s: float = 2.0
    # fewest hosts that must share a column (and have a value in a window) to compare it
    min_hosts: int = 3
    # channels named per episode (the columns that set the host apart most)
    top_reasons: int = 5
    # per host-window columns kept for the evidence (the highest |z|)
    keep_columns: int = 8
    # clock alignment: largest offset searched (seconds), least correlation of the
    # host's activity with the peers' at the best lag, and least gain over lag zero
    max_clock_offset_s: float = 120.0
    clock_min_corr: float = 0.5
    clock_min_gain: float = 0.2
    # compare a host whose clock is off after moving it by the estimated offset
    align_clocks: bool = True
    # values per time block of the peer comparison (hosts × windows × columns): bounds the
    # memory of one reduction task (4 bytes each, a few temporaries)
    block_values: int = 48_000_000
