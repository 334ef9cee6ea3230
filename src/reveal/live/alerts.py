"""Alert episodes from live verdicts, and their state on disk.

An **episode** opens at the first flagged window (flagged after persistence), is updated
while flagged windows keep coming (peak score, windows, the strongest evidence, the
subsystem that weighs most: a change of subsystem is sent at once, a higher peak at most
every ``UPDATE_EVERY_S``), and resolves once no window has been flagged for
``resolve_after_s`` seconds of scored data; its end is the end of its last flagged window.
It carries an id, the host, start and end, subsystem, claim, top reasons (channel, feature,
value, baseline median, unit where the catalog has one) and the peak score.

Every event (``firing``, ``update``, ``resolved``) goes to each sink; a sink reports back
what it delivered, and that is kept in ``alerts.json`` in the state directory (written
atomically at each change). After a restart nothing already delivered is sent again: an
undelivered ``firing`` or ``resolved`` is sent once more; an episode still open is
continued by the next flagged window within ``resolve_after_s`` of its last one, and
resolved otherwise (at once when the host rebooted meanwhile, as monotonic times of two
boots do not compare).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from reveal._version import __version__
from reveal.analysis.evidence import named_subsystem, weigh_subsystems
from reveal.catalog import default_catalog
from reveal.frame import channel_metric
from reveal.live.scorer import LiveWindow

STATE_VERSION = 1
#: resolved episodes kept in alerts.json (the newest)
KEEP_RESOLVED = 200
#: an open episode sends an ``update`` at most this often (seconds of data)
UPDATE_EVERY_S = 10.0
#: a peak this much above the last one sent is worth an update
UPDATE_PEAK_RATIO = 1.25
#: a change of subsystem is sent at once, but at most this often (seconds of data)
RELABEL_EVERY_S = 2.0
#: severity ``critical`` from this multiple of the threshold (else ``warning``)
CRITICAL_RATIO = 3.0

Event = dict[str, Any]


def iso(unix_s: float | None) -> str | None:
    """RFC 3339 UTC time of ``unix_s`` seconds, millisecond precision."""
    if unix_s is None:
        return None
    whole = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(unix_s))
    return f"{whole}.{int((unix_s % 1) * 1000):03d}Z"


@dataclass
class Episode:
    """One alert episode (times: monotonic ns of the recording host's current boot)."""

    id: str
    host: str
    start_ns: int
    end_ns: int  # end of its last flagged window
    subsystem: str  # the subsystem that weighs most so far
    opened_subsystem: str  # the subsystem at opening (Alertmanager's label keeps it)
    severity: str
    claim: str
    reasons: list[dict[str, Any]]
    peak_score: float
    threshold: float
    detectors: list[str]
    windows: int = 1
    weights: dict[str, float] = field(default_factory=dict)
    resolved: bool = False
    delivered: dict[str, list[str]] = field(default_factory=dict)  # sink -> events
    last_update_ns: int = 0
    last_update_peak: float = 0.0
    sent_subsystem: str = ""  # the subsystem of the last event sent
    #: per subsystem, the strongest window it led: {"score", "claim", "reasons"}
    leads: dict[str, dict[str, Any]] = field(default_factory=dict)
    wall_offset_ns: int = 0

    def keep_lead(self, window: LiveWindow) -> None:
        """Keep ``window``'s claim and reasons if it is the strongest its subsystem led."""
        ev = window.evidence
        if ev is None or not ev.subsystems or not window.claim:
            return
        best = self.leads.get(ev.subsystems[0])
        if best is None or window.combined > best["score"]:
            self.leads[ev.subsystems[0]] = {"score": window.combined, "claim": window.claim,
                                            "reasons": reasons_of(window)}

    def follow_lead(self) -> None:
        """Name the episode (:func:`reveal.analysis.evidence.named_subsystem`) and take the
        claim and reasons of the strongest window its subsystem led (kept as they are
        when no window has a claim)."""
        self.subsystem = named_subsystem(self.weights, self.leads, default=self.subsystem)
        best = self.leads.get(self.subsystem)
        if best is not None:
            self.claim, self.reasons = best["claim"], best["reasons"]

    def unix(self, mono_ns: int) -> float:
        return (mono_ns + self.wall_offset_ns) / 1e9

    def event(self, kind: str) -> Event:
        """The JSON event of kind ``firing``, ``update`` or ``resolved``."""
        return {
            "event": kind,
            "status": "resolved" if self.resolved else "firing",
            "id": self.id,
            "host": self.host,
            "start": iso(self.unix(self.start_ns)),
            "end": iso(self.unix(self.end_ns)) if self.resolved else None,
            "last_flagged": iso(self.unix(self.end_ns)),
            "subsystem": self.subsystem,
            "severity": self.severity,
            "claim": self.claim,
            "reasons": self.reasons,
            "peak_score": self.peak_score,
            "threshold": self.threshold,
            "windows": self.windows,
            "detectors": self.detectors,
            "opened_subsystem": self.opened_subsystem,
            "reveal_version": __version__,
        }


def reasons_of(window: LiveWindow, limit: int = 5) -> list[dict[str, Any]]:
    """The top reasons of a window's evidence, with the catalog's unit."""
    if window.evidence is None:
        return []
    catalog = default_catalog()
    out = []
    for r in window.evidence.reasons[:limit]:
        unit = catalog.lookup(channel_metric(r.channel)).unit or None
        out.append({"channel": r.channel, "feature": r.feature, "subsystem": r.subsystem,
                    "value": _num(r.value), "baseline": _num(r.baseline_median),
                    "unit": unit, "robust_z": _num(r.robust_z),
                    "contribution": _num(r.contribution)})
    return out


def _num(x: float) -> float | None:
    x = float(x)
    return x if x == x and abs(x) != float("inf") else None


class EpisodeTracker:
    """Episodes of one host: opened, updated and resolved from scored windows, kept in
    ``path`` (JSON, written atomically). ``emit(event)`` receives every new event.

    A state file that cannot be written (disk full, read-only) does not stop alerting: the
    state stays in memory, ``warn(message)`` hears it once, the next change tries again,
    and ``warn`` hears when it is written again."""

    def __init__(self, path: Path, host: str, resolve_after_s: float, wall_offset_ns: int,
                 boot_id: str, emit: Callable[[Event], None] | None = None,
                 warn: Callable[[str], None] | None = None) -> None:
        self.path = Path(path)
        self.host = host
        self.resolve_after_ns = int(resolve_after_s * 1e9)
        self.wall_offset_ns = int(wall_offset_ns)
        self.boot_id = boot_id
        self.emit = emit or (lambda _e: None)
        self.episodes: list[Episode] = []
        self.seq = 0
        self.counts = {"firing": 0, "update": 0, "resolved": 0}
        self.warn = warn or (lambda _m: None)
        self.unsaved: str | None = None  # why the last save failed
        self._lock = threading.RLock()

    # -- state -------------------------------------------------------------------------
    def load(self) -> list[Event]:
        """Read the state; returns the events still owed (undelivered, or the resolution of
        episodes that cannot go on after a reboot) — call :meth:`owed` per sink for them."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            broken = self.path.with_name(self.path.name + ".unreadable")
            os.replace(self.path, broken)
            raise ValueError(f"{self.path}: unreadable alert state ({exc}); moved to "
                             f"{broken.name}, starting with none") from None
        if data.get("version") != STATE_VERSION:
            return []
        self.seq = int(data.get("seq", 0))
        fields = set(Episode.__dataclass_fields__)
        self.episodes = [Episode(**{k: v for k, v in e.items() if k in fields})
                         for e in data.get("episodes", [])]
        for ep in self.episodes:  # a state written before these were kept
            ep.sent_subsystem = ep.sent_subsystem or ep.subsystem
            ep.leads = ep.leads or {ep.subsystem: {"score": ep.peak_score, "claim": ep.claim,
                                                   "reasons": ep.reasons}}
        out: list[Event] = []
        if data.get("boot_id") != self.boot_id:  # times of another boot: resolve now
            for ep in self.open():
                ep.resolved = True
                self.counts["resolved"] += 1
                out.append(ep.event("resolved"))
            for ep in self.episodes:  # keep times comparable to this boot's clock
                shift = ep.wall_offset_ns - self.wall_offset_ns
                ep.start_ns += shift
                ep.end_ns += shift
                ep.wall_offset_ns = self.wall_offset_ns
        self.save()
        return out

    def save(self) -> None:
        with self._lock:
            open_ = [e for e in self.episodes if not e.resolved]
            done = [e for e in self.episodes if e.resolved][-KEEP_RESOLVED:]
            self.episodes = sorted(done + open_, key=lambda e: e.start_ns)
            payload = {"version": STATE_VERSION, "host": self.host, "boot_id": self.boot_id,
                       "seq": self.seq, "episodes": [asdict(e) for e in self.episodes]}
            tmp = self.path.with_name(self.path.name + ".tmp")
            try:
                with open(tmp, "w", encoding="utf-8") as handle:
                    json.dump(payload, handle, indent=1)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(tmp, self.path)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    tmp.unlink()
                why = exc.strerror or str(exc)
                if self.unsaved is None:
                    self.warn(f"{self.path}: cannot write the alert state ({why}); alerting "
                              f"goes on, the state is kept in memory and written at the next "
                              f"change that fits")
                self.unsaved = why
                return
            if self.unsaved is not None:
                self.unsaved = None
                self.warn(f"{self.path}: alert state written again")

    def owed(self, sink: str) -> list[Event]:
        """Events ``sink`` has not delivered: an open episode's ``firing``, a resolved
        one's ``resolved`` (after its ``firing``, when that was not delivered either)."""
        with self._lock:
            out = []
            for ep in self.episodes:
                done = ep.delivered.get(sink, [])
                if "firing" not in done and not ep.resolved:
                    out.append(ep.event("firing"))
                elif ep.resolved and "resolved" not in done and "firing" in done:
                    out.append(ep.event("resolved"))
            return out

    def delivered(self, sink: str, event: Event) -> None:
        """``sink`` delivered ``event`` (kept, so that it is never sent again)."""
        if event.get("event") not in ("firing", "resolved"):
            return
        with self._lock:
            for ep in self.episodes:
                if ep.id == event.get("id"):
                    done = ep.delivered.setdefault(sink, [])
                    if event["event"] not in done:
                        done.append(event["event"])
                        self.save()
                    return

    def open(self) -> list[Episode]:
        return [e for e in self.episodes if not e.resolved]

    # -- verdicts ----------------------------------------------------------------------
    def observe(self, window: LiveWindow) -> list[Event]:
        """Take one scored window (in time order); returns the events it caused."""
        with self._lock:
            events: list[Event] = []
            current = self.open()
            if window.flagged:
                ep = current[-1] if current else None
                if ep is not None and window.start_ns - ep.end_ns > self.resolve_after_ns:
                    events += self._resolve(ep)
                    ep = None
                if ep is None:
                    events.append(self._open(window))
                else:
                    events += self._update(ep, window)
                current = [e for e in self.open() if e is not ep]
            for ep in current if not window.flagged else []:
                if window.end_ns - ep.end_ns >= self.resolve_after_ns:
                    events += self._resolve(ep)
            return self._publish(events)

    def expire(self, now_ns: int) -> list[Event]:
        """Resolve episodes quiet for ``resolve_after_s`` by the clock (nothing is being
        scored: learning a model)."""
        with self._lock:
            events: list[Event] = []
            for ep in self.open():
                if now_ns - ep.end_ns >= self.resolve_after_ns:
                    events += self._resolve(ep)
            return self._publish(events)

    def _publish(self, events: list[Event]) -> list[Event]:
        """Keep the state that ``events`` changed, then hand each to ``emit``."""
        if events:
            self.save()
        for e in events:
            self.emit(e)
        return events

    def _open(self, window: LiveWindow) -> Event:
        self.seq += 1
        start_unix = (window.start_ns + self.wall_offset_ns) / 1e9
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(start_unix))
        ev = window.evidence
        subsystem = ev.subsystems[0] if ev is not None and ev.subsystems else "unknown"
        weights = (weigh_subsystems({}, ev.subsystem_shares, window.combined)
                   if ev is not None else {})
        ep = Episode(
            id=f"{self.host}-{stamp}-{self.seq}", host=self.host, start_ns=window.start_ns,
            end_ns=window.end_ns, subsystem=subsystem, opened_subsystem=subsystem,
            severity="critical" if window.combined >= CRITICAL_RATIO * window.threshold
            else "warning",
            claim=window.claim or "", reasons=[],
            peak_score=window.combined, threshold=window.threshold,
            detectors=list(window.detectors), weights=weights,
            last_update_ns=window.end_ns, last_update_peak=window.combined,
            sent_subsystem=subsystem,
            wall_offset_ns=self.wall_offset_ns)
        ep.keep_lead(window)
        ep.follow_lead()
        ep.opened_subsystem = ep.sent_subsystem = ep.subsystem  # as the firing event says
        if ep.subsystem not in ep.leads:  # a window with no claim still has its reasons
            ep.reasons = reasons_of(window)
        self.episodes.append(ep)
        self.counts["firing"] += 1
        return ep.event("firing")

    def _update(self, ep: Episode, window: LiveWindow) -> list[Event]:
        ep.end_ns = max(ep.end_ns, window.end_ns)
        ep.windows += 1
        ev = window.evidence
        if ev is not None:
            weigh_subsystems(ep.weights, ev.subsystem_shares, window.combined)
        if window.combined > ep.peak_score:
            ep.peak_score = window.combined
            ep.detectors = list(window.detectors)
        ep.keep_lead(window)
        ep.follow_lead()  # the claim speaks of the subsystem the alert names
        since_s = (window.end_ns - ep.last_update_ns) / 1e9
        relabel = ep.subsystem != ep.sent_subsystem and since_s >= RELABEL_EVERY_S
        bigger = ep.peak_score >= UPDATE_PEAK_RATIO * ep.last_update_peak
        if relabel or (bigger and since_s >= UPDATE_EVERY_S):
            ep.last_update_ns = window.end_ns
            ep.last_update_peak = ep.peak_score
            ep.sent_subsystem = ep.subsystem
            self.counts["update"] += 1
            return [ep.event("update")]
        return []

    def _resolve(self, ep: Episode) -> list[Event]:
        ep.resolved = True
        self.counts["resolved"] += 1
        return [ep.event("resolved")]
