"""What the watch shows at a ``/metrics`` scrape, typed: :class:`WatchSnapshot`.

The watch fills one at each scrape (:meth:`reveal.live.service.Watch.snapshot`) from what
it already holds; :mod:`reveal.live.exporter` turns it into Prometheus metrics. Kept apart
from the exporter so that the watch needs prometheus-client only when it serves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from reveal.analysis.baseline_health import UnhealthyChannel
    from reveal.live.scorer import LiveWindow
    from reveal.live.sinks import Sink


@dataclass
class CollectorHealth:
    """The collector's own health at a scrape (counts since it started)."""

    samples: int = 0
    missed_ticks: int = 0
    dropped_samples: int = 0
    channels: int = 0
    bytes_on_disk: int = 0
    cpu_s: float = 0.0  # CPU time of the watch process, seconds
    lag_quantiles: dict[str, float] = field(default_factory=dict)  # tick lag, seconds


@dataclass
class WatchSnapshot:
    """What ``/metrics`` shows, as the watch holds it at a scrape (times in seconds)."""

    window: LiveWindow | None = None  # the last window scored
    window_end_unix: float | None = None
    windows_scored: int = 0
    windows_flagged: int = 0
    windows_skipped: int = 0
    scoring_calls: int = 0
    scoring_calls_early: int = 0
    scoring_lag_s: float = 0.0
    scoring_s: float = 0.0  # the last scoring call's wall time
    active: dict[str, int] = field(default_factory=dict)  # open episodes by subsystem
    alert_counts: dict[str, int] = field(default_factory=dict)  # events raised by kind
    sinks: list[Sink] = field(default_factory=list)
    generation: int = 0
    learned_at: float | None = None  # unix seconds
    model_age_s: float | None = None
    learning: bool = False
    learn_remaining_s: float = 0.0
    model_channels: int = 0
    model_windows: int = 0  # the learn's windows
    model_windows_left_out: int = 0  # of those, left out of the fit as bursts
    unmodelled: list[str] = field(default_factory=list)
    # channels whose level lay outside their healthy range through much of the span the
    # model in use was learned on (reveal.analysis.baseline_health)
    unhealthy: list[UnhealthyChannel] = field(default_factory=list)
    collector: CollectorHealth = field(default_factory=CollectorHealth)
    # the newest sample: (monotonic ns, values, channels)
    last_row: tuple[int, np.ndarray, list[str]] | None = None
