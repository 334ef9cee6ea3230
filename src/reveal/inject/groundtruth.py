"""Ground truth of injected faults: one JSON object a line in the run's ``events.jsonl``.

Each episode is ``{"start_ns", "end_ns", "kind", "subsystem", "intensity", "detail"}`` with
times on ``CLOCK_MONOTONIC`` in nanoseconds (``time.monotonic_ns()``), the clock of the
samples' ``ts_ns``. A line is appended, flushed and fsynced when an episode ends, so a run
killed mid-way still holds every finished episode.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from reveal.errors import InputError
from reveal.store.layout import EVENTS_FILE, read_events


@dataclass
class Episode:
    """One injected fault: ``[start_ns, end_ns)`` monotonic nanoseconds."""

    start_ns: int
    end_ns: int
    kind: str
    subsystem: str
    intensity: str
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], path: str = "") -> Episode:
        try:
            episode = cls(int(data["start_ns"]), int(data["end_ns"]), str(data["kind"]),
                          str(data["subsystem"]), str(data.get("intensity", "")),
                          dict(data.get("detail") or {}))
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"bad ground-truth event {data!r} ({exc})", path) from None
        if episode.end_ns < episode.start_ns:
            raise InputError(f"event ends before it starts: {data!r}", path)
        return episode


class EventLog:
    """Appends episodes to ``RUN/events.jsonl`` (thread-safe, durable per line)."""

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / EVENTS_FILE
        self._lock = threading.Lock()

    def append(self, episode: Episode) -> None:
        line = json.dumps(episode.to_dict(), sort_keys=True) + "\n"
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(line)
                handle.flush()
                os.fsync(handle.fileno())


def load_episodes(run_dir: Path) -> list[Episode]:
    """Episodes recorded in a run (empty when it has no ``events.jsonl``), by start time."""
    path = str(Path(run_dir) / EVENTS_FILE)
    return sorted((Episode.from_dict(e, path) for e in read_events(Path(run_dir))),
                  key=lambda e: e.start_ns)
