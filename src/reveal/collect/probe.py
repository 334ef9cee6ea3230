"""The Probe contract and registry.

A probe is one small class per source (``/proc/stat``, NVML, perf_event_open, ...). The
sampler calls ``open()`` once, then ``read(out)`` every tick with a preallocated float64
view of length ``len(channels)``; the probe fills it in place (NaN for a value it could not
read this tick) and keeps its file descriptors open between ticks. ``refresh()`` is called
every few seconds to pick up channels that appear mid-run (a new NIC, disk, container).

A probe whose every channel the C extension can read without Python says so in
``native_parts()``; when all probes do, the sampler hands the ticks to a C thread
(:class:`reveal.collect._procread.Ticker`) and Python only drains its rows a few times a
second.

A probe that cannot run here raises :class:`ProbeUnavailable` from ``open()`` with a reason
an operator can act on; the rest of the collector keeps going. A probe that runs with less
than everything (e.g. perf without a hardware PMU) sets ``status = "degraded"`` and says why
in ``reason``. Probes never import :mod:`reveal.analysis`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from reveal.registry import Registry


class ProbeUnavailable(Exception):
    """Raised by ``Probe.open`` when the source is absent or not permitted here."""


@dataclass(frozen=True)
class NativePart:
    """Channels ``start:stop`` of a probe, read each tick by C without Python.

    ``reader`` is a :class:`_procread.Plan`, a :class:`_procread.PerfGroups` or a float64
    array of values that change only at ``refresh()``; ``recover(out)`` is the Python read
    of the same slice, called when a Plan stopped fitting (it re-discovers the layout).
    ``period_s`` > 0: read only every ``period_s`` seconds (rounded to whole ticks), the
    last values repeated on the ticks between.
    """

    reader: Any
    start: int
    stop: int
    recover: Callable[[np.ndarray], None]
    period_s: float = 0.0


class Probe(ABC):
    """One telemetry source. Subclasses set ``name``, ``description``, ``default_enabled``."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    default_enabled: ClassVar[bool] = True
    #: Options this probe reads (``reveal collect --probe-option NAME.KEY=VALUE`` or a
    #: ``[probes.NAME]`` table of ``--config``): key → one line saying what it does and its
    #: default. A subclass lists only its own: its bases' options are added to them. Keys
    #: listed nowhere are refused by the command line.
    options_help: ClassVar[dict[str, str]] = {}

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

    def wants_refresh(self) -> bool:
        """True when the probe knows its channels changed (the sampler then refreshes at
        its next drain instead of waiting for ``refresh_s``); asked about once a second."""
        return False

    def drive(self) -> bool:
        """Offer the probe's periodic work (reads slower than the tick, done on a thread of
        its own) to the sampler, which then calls :meth:`poll` about once a second from its
        own wake-ups; True when the probe takes the offer."""
        return False

    def poll(self) -> None:  # noqa: B027 (optional hook)
        """Periodic work, when due (after :meth:`drive` returned True)."""

    def schedule(self, start_ns: int, interval_ns: int) -> None:  # noqa: B027 (optional hook)
        """The sampler's tick grid, ``start_ns + k * interval_ns`` (CLOCK_MONOTONIC ns),
        given before the first tick: a probe may prepare each tick's values on it."""

    def native_parts(self) -> list[NativePart] | None:
        """What C can read of every channel each tick, or None when some channel needs
        Python on every tick (the sampler then reads the whole row in Python)."""
        return None

    def close(self) -> None:  # noqa: B027 (optional hook)
        """Release file descriptors and handles."""


#: the probe classes by name (a :class:`reveal.registry.Registry`)
REGISTRY: Registry[type[Probe]] = Registry("probe", Probe)


def register(cls: type[Probe]) -> type[Probe]:
    """Class decorator adding a probe to :data:`REGISTRY` under ``cls.name`` (a name
    another probe holds is a ``ValueError``)."""
    return REGISTRY.register(cls)
