"""Telemetry: one host's time series as a timestamp vector plus a channel matrix.

A **channel** is one time series, named ``metric{label=value,...}`` (labels sorted by key),
for example ``cpu.user{cpu=3}``. The metric part is looked up in :mod:`reveal.catalog`.
Values are float64; NaN means "not sampled" (a channel absent from part of the run, a
failed read). Timestamps are int64 nanoseconds on the monotonic clock of the recording
host; ``wall_offset_ns`` converts them to Unix time (``wall = mono + offset``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

_CHANNEL_RE = re.compile(r"^(?P<metric>[^{}]+)(?:\{(?P<labels>.*)\})?$")


def format_channel(metric: str, labels: dict[str, str] | None = None) -> str:
    """Build a channel name from a metric and its labels (sorted by key).

    Label values may hold any text except ``,``, ``=``, ``{`` and ``}``, which are
    replaced by ``_``; this keeps tenant-chosen names (containers, interfaces) parseable.
    """
    if not labels:
        return metric
    body = ",".join(f"{k}={_clean_label(str(v))}" for k, v in sorted(labels.items()))
    return f"{metric}{{{body}}}"


def _clean_label(value: str) -> str:
    return re.sub(r"[,={}\n\r]", "_", value)


def parse_channel(name: str) -> tuple[str, dict[str, str]]:
    """Split ``metric{k=v,...}`` into the metric and a label dict (a new dict each call)."""
    metric, labels = _parse_channel(name)
    return metric, dict(labels)


@lru_cache(maxsize=1 << 16)
def _parse_channel(name: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """``parse_channel`` with the labels as pairs, remembered: analyses parse the same few
    thousand channel names over and over (every live window)."""
    match = _CHANNEL_RE.match(name)
    if match is None:
        return name, ()
    labels: dict[str, str] = {}
    raw = match.group("labels")
    if raw:
        for part in raw.split(","):
            key, _, value = part.partition("=")
            labels[key] = value
    return match.group("metric"), tuple(labels.items())


def channel_metric(name: str) -> str:
    """The metric part of a channel name (everything before ``{``)."""
    return name.split("{", 1)[0]


@dataclass
class Telemetry:
    """One host's recording: ``values[t, c]`` is channel ``channels[c]`` at ``timestamps_ns[t]``.

    Attributes
    ----------
    host : str
        Host name the data came from.
    timestamps_ns : ndarray of int64, shape (T,)
        Sample times, nanoseconds, strictly increasing.
    values : ndarray of float64, shape (T, C)
        Channel values as read (counters raw, not yet rated).
    channels : list of str, length C
        Channel names.
    meta : dict
        Run metadata (interval, wall-clock offset, probes, source, ...).
    """

    host: str
    timestamps_ns: np.ndarray
    values: np.ndarray
    channels: list[str]
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.timestamps_ns = np.asarray(self.timestamps_ns, dtype=np.int64)
        self.values = np.asarray(self.values, dtype=np.float64)
        if self.values.ndim != 2:
            raise ValueError(f"values must be 2-D (T, C), got shape {self.values.shape}")
        if self.values.shape != (len(self.timestamps_ns), len(self.channels)):
            raise ValueError(
                f"values shape {self.values.shape} does not match "
                f"{len(self.timestamps_ns)} timestamps x {len(self.channels)} channels"
            )

    @property
    def n_samples(self) -> int:
        return int(self.values.shape[0])

    @property
    def n_channels(self) -> int:
        return int(self.values.shape[1])

    @property
    def wall_offset_ns(self) -> int:
        return int(self.meta.get("wall_offset_ns", 0))

    @property
    def interval_s(self) -> float:
        """Nominal sampling interval in seconds (from metadata, else the median step)."""
        if "interval_s" in self.meta:
            return float(self.meta["interval_s"])
        if self.n_samples < 2:
            return float("nan")
        return float(np.median(np.diff(self.timestamps_ns))) / 1e9

    def wall_time_s(self) -> np.ndarray:
        """Sample times as Unix seconds (float64)."""
        return (self.timestamps_ns + self.wall_offset_ns) / 1e9

    def column(self, channel: str) -> np.ndarray:
        return self.values[:, self.channels.index(channel)]

    def select(self, channels: list[str]) -> Telemetry:
        """A view holding only ``channels`` (in that order); unknown names raise KeyError."""
        index = {name: i for i, name in enumerate(self.channels)}
        missing = [c for c in channels if c not in index]
        if missing:
            raise KeyError(f"unknown channels: {missing[:5]}")
        cols = [index[c] for c in channels]
        return Telemetry(self.host, self.timestamps_ns, self.values[:, cols], list(channels),
                         dict(self.meta))

    def slice_rows(self, start: int, stop: int) -> Telemetry:
        return Telemetry(self.host, self.timestamps_ns[start:stop], self.values[start:stop],
                         list(self.channels), dict(self.meta))
