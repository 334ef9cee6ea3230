"""The Probe contract and registry.

A probe is one small class per source (``/proc/stat``, NVML, perf_event_open, ...). The
sampler calls ``open()`` once, then ``read(out)`` every tick with a preallocated float64
view of length ``len(channels)``; the probe fills it in place (NaN for a value it could not
read this tick) and keeps its file descriptors open between ticks. ``refresh()`` is called
every few seconds to pick up channels that appear mid-run (a new NIC, disk, container).

A probe that cannot run here raises :class:`ProbeUnavailable` from ``open()`` with a reason
an operator can act on; the rest of the collector keeps going. A probe that runs with less
than everything (e.g. perf without a hardware PMU) sets ``status = "degraded"`` and says why
in ``reason``. Probes never import :mod:`reveal.analyze`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np


class ProbeUnavailable(Exception):
    """Raised by ``Probe.open`` when the source is absent or not permitted here."""


class Probe(ABC):
    """One telemetry source. Subclasses set ``name``, ``description``, ``default_enabled``."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    default_enabled: ClassVar[bool] = True

    def __init__(self, **options: Any) -> None:
        self.options = options
        self.channels: list[str] = []
        self.status: str = "ok"  # ok | degraded | unavailable | disabled
        self.reason: str = ""
        self.info: dict[str, Any] = {}  # extra run metadata (e.g. unsupported events, GPUs)

    @abstractmethod
    def open(self) -> None:
        """Discover channels and open what must stay open. Raise ProbeUnavailable."""

    @abstractmethod
    def read(self, out: np.ndarray) -> None:
        """Fill ``out`` (float64, shape ``(len(self.channels),)``) with current values."""

    def refresh(self) -> bool:
        """Re-discover channels; return True when ``self.channels`` changed."""
        return False

    def schedule(self, start_ns: int, interval_ns: int) -> None:  # noqa: B027 (optional hook)
        """The sampler's tick grid, ``start_ns + k * interval_ns`` (CLOCK_MONOTONIC ns),
        given before the first tick: a probe may prepare each tick's values on it."""

    def close(self) -> None:  # noqa: B027 (optional hook)
        """Release file descriptors and handles."""


REGISTRY: dict[str, type[Probe]] = {}


def register(cls: type[Probe]) -> type[Probe]:
    """Class decorator adding a probe to :data:`REGISTRY` under ``cls.name``."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    REGISTRY[cls.name] = cls
    return cls
