"""Times in reports: wall-clock where the run recorded it, else time since the run's start.

A run's timestamps are nanoseconds on its monotonic clock; ``run.wall_offset_ns`` turns
them into Unix time (0 where unknown, as in the SMD/ASD datasets). Reports print
``HH:MM:SS`` (UTC), with the date when the run spans more than one day; without a wall
clock, ``+HH:MM:SS`` since the run's first sample (``+3d 04:12:00`` past a day). Never raw
seconds on the monotonic clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

NS = 1_000_000_000


def span_text(seconds: float) -> str:
    """A length of time in words: ``4 s``, ``2 min 30 s``, ``3 h 10 min``, ``2 d 3 h``."""
    if not seconds > 0:
        return "0 s"
    if seconds < 10:
        return f"{seconds:.3g} s"
    s = round(seconds)
    d, rest = divmod(s, 86400)
    h, rest = divmod(rest, 3600)
    m, sec = divmod(rest, 60)
    parts = [(d, "d"), (h, "h"), (m, "min"), (sec, "s")]
    first = next(i for i, (n, _) in enumerate(parts) if n)
    return " ".join(f"{n} {u}" for n, u in parts[first:first + 2] if n)


@dataclass(frozen=True)
class Clock:
    """How one report writes its times."""

    start_ns: int  # the run's first sample (monotonic clock)
    end_ns: int  # the end of its last window
    wall_offset_ns: int  # 0: no wall clock

    @classmethod
    def of(cls, run: Mapping[str, Any], end_ns: int | None = None) -> Clock:
        start = int(run.get("start_ns") or 0)
        end = end_ns if end_ns is not None else start + int(float(run.get("duration_s")
                                                                   or 0) * NS)
        return cls(start, max(int(end), start), int(run.get("wall_offset_ns") or 0))

    @property
    def wall(self) -> bool:
        return self.wall_offset_ns != 0

    def _moment(self, ns: int) -> datetime:
        return datetime.fromtimestamp((ns + self.wall_offset_ns) / NS, tz=UTC)

    @property
    def spans_days(self) -> bool:
        """Whether the run's times cross a date (wall clock) or a day (since the start)."""
        if self.wall:
            return self._moment(self.start_ns).date() != self._moment(self.end_ns).date()
        return self.end_ns - self.start_ns >= 86400 * NS

    def at(self, ns: int) -> str:
        """The time of ``ns`` (monotonic): ``14:03:22``, ``2024-05-01 14:03:22``,
        ``+00:12:03`` or ``+3d 04:12:00``."""
        if self.wall:
            return self._moment(ns).strftime("%Y-%m-%d %H:%M:%S" if self.spans_days
                                             else "%H:%M:%S")
        s = max(0, int((ns - self.start_ns) // NS))
        d, rest = divmod(s, 86400)
        h, rest = divmod(rest, 3600)
        m, sec = divmod(rest, 60)
        return f"+{d}d {h:02d}:{m:02d}:{sec:02d}" if self.spans_days else \
            f"+{h:02d}:{m:02d}:{sec:02d}"

    def between(self, start_ns: int, end_ns: int) -> str:
        """``14:01:21–14:01:25``; the date is not repeated on the same day."""
        a, b = self.at(start_ns), self.at(end_ns)
        if self.wall and self.spans_days and a[:10] == b[:10]:
            b = b[11:]
        return f"{a}–{b}"

    def note(self) -> str:
        """What the times mean, said once per report."""
        if self.wall:
            return "times are UTC"
        return "times are since the run's first sample (no wall clock recorded)"
