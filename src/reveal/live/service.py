"""``reveal watch``: collect, learn or load a model, score each window as it closes, alert,
export — one process per host, restart-safe.

Threads: the main thread runs the collector (as ``reveal collect`` does: the C tick thread
samples, Python drains every second into the segment writer, which now also feeds the
sample buffer); a scoring thread learns the model (once) and scores windows; each HTTP
alert sink has its own worker; prometheus-client serves ``/metrics`` from its own thread.
Nothing that scoring or a sink does can delay a tick.

Its parts: the state directory (:mod:`reveal.live.state`), the model keeper (load, learn,
rehearse, refit, each fit in a child process: :mod:`reveal.live.keeper`,
:mod:`reveal.live.fitproc`), the scorer (:mod:`reveal.live.scorer`), alert episodes and
sinks (:mod:`reveal.live.alerts`, :mod:`reveal.live.sinks`), retention
(:mod:`reveal.live.retention`) and what ``/metrics`` shows (:mod:`reveal.live.snapshot`,
:mod:`reveal.live.exporter`); :class:`Watch` runs them.
"""

from __future__ import annotations

import contextlib
import os
import resource
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reveal.analysis.constants import EPISODE_GAP_S
from reveal.collect.hostinfo import boot_id, wall_offset_ns
from reveal.collect.runner import CollectOptions, Collector, Notify, stop_on_signals
from reveal.errors import InputError
from reveal.live.alerts import EpisodeTracker, Event
from reveal.live.allocators import trim_heap
from reveal.live.buffer import SampleBuffer, TeeSink
from reveal.live.config import check_learn_floor
from reveal.live.keeper import (
    ABSOLUTE_MIN_LEARN_S,
    RECOMMENDED_LEARN_S,
    ModelKeeper,
    left_out_windows,
    unhealthy_channels,
)
from reveal.live.notices import appeared, notice_event
from reveal.live.retention import Retention, prune
from reveal.live.scorer import LiveScorer, LiveWindow
from reveal.live.sinks import SINKS, Sink
from reveal.live.snapshot import CollectorHealth, WatchSnapshot
from reveal.live.state import StateDir
from reveal.model import Reveal

#: the default learning span, seconds
DEFAULT_LEARN_S = 600.0
#: seconds of samples the buffer keeps (scoring may fall behind by this much, e.g. while
#: a model is fitted, before windows are skipped)
BUFFER_S = 180.0
#: how often the heap's free memory is handed back to the kernel (seconds; see
#: :mod:`reveal.live.allocators`)
TRIM_EVERY_S = 60.0
#: how often an active alert is sent again to Alertmanager (seconds)
AM_REFRESH_S = 60.0
#: how often old recordings are pruned (seconds)
RETENTION_EVERY_S = 60.0


def default_state_dir() -> Path:
    """``/var/lib/reveal`` as root, else ``$XDG_STATE_HOME/reveal`` (~/.local/state)."""
    if os.geteuid() == 0:
        return Path("/var/lib/reveal")
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "reveal"


@dataclass
class WatchOptions:
    state: Path
    learn_s: float = DEFAULT_LEARN_S
    relearn: bool = False
    refit_every_s: float = 0.0  # learn again on the latest quiet learn_s (0: never)
    allow_short_learn: bool = False
    # the shortest learn without allow_short_learn, and the earliest rehearsal start
    # (``watch.learn_floor_s``, reveal.live.config.WatchConfig)
    learn_floor_s: float = RECOMMENDED_LEARN_S
    rehearse: bool = True  # score with a provisional model while learning (ModelKeeper)
    resolve_after_s: float = EPISODE_GAP_S
    listen: tuple[str, int] | None = ("127.0.0.1", 9464)
    # alert sinks to open: registered sink name (reveal.live.sinks.SINKS) → its option's
    # value (a file, a URL)
    sinks: dict[str, str] = field(default_factory=dict)
    threshold_factor: float = 1.0
    score_every: int = 5
    # score at once a window that holds a change that matters (LiveScorer.change_seen)
    early: bool = True
    # analysis settings by dotted name (``--set``), used when a model is learned
    settings: dict[str, Any] = field(default_factory=dict)
    interval_s: float = 0.1
    include: list[str] | None = None
    exclude: list[str] | None = None
    probe_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    realtime: bool = True
    retain_s: float = 86400.0
    retain_bytes: int = 2 << 30
    retain_alerts_s: float = 30 * 86400.0
    webhook_queue: int = 1000


def check_learn(learn_s: float, allow_short: bool,
                floor_s: float = RECOMMENDED_LEARN_S) -> None:
    """The learning span is long enough: at least the learn floor ``floor_s``
    (``watch.learn_floor_s``, :data:`RECOMMENDED_LEARN_S` by default), or with
    ``allow_short`` at least :data:`ABSOLUTE_MIN_LEARN_S`, below which no span goes."""
    least = ABSOLUTE_MIN_LEARN_S if allow_short else max(floor_s, ABSOLUTE_MIN_LEARN_S)
    if learn_s >= least:
        return
    if least == ABSOLUTE_MIN_LEARN_S:
        why = (f"a model needs at least {ABSOLUTE_MIN_LEARN_S:g} s (the detectors fit on "
               f"10 windows at the least, with some margin)")
    elif floor_s == RECOMMENDED_LEARN_S:
        why = (f"the model needs at least 60 windows ({RECOMMENDED_LEARN_S:g} s) to place "
               f"its 99th-percentile threshold")
    else:
        why = (f"the learn floor watch.learn_floor_s is {floor_s:g} s (by default "
               f"{RECOMMENDED_LEARN_S:g} s: 60 windows place the model's 99th-percentile "
               f"threshold)")
    hint = ("" if least == ABSOLUTE_MIN_LEARN_S else
            f" (--allow-short-learn goes down to {ABSOLUTE_MIN_LEARN_S:g} s, for tests)")
    raise InputError(f"--learn {learn_s:g}s is too short: {why}{hint}")


class Watch:
    """One ``reveal watch``: :meth:`start` (checks and opens everything, one-line errors),
    then :meth:`run` until SIGTERM/SIGINT or :meth:`stop`."""

    def __init__(self, options: WatchOptions, notify: Notify) -> None:
        self.options = options
        self.notify = notify
        self.state = Path(options.state)
        self.statedir = StateDir(self.state)
        self.host = socket.gethostname()
        self.sinks: list[Sink] = []
        self.collector: Collector | None = None
        self.buffer: SampleBuffer | None = None
        self.server: Any = None
        self.tracker: EpisodeTracker | None = None
        self.last_window: LiveWindow | None = None
        self.counts = {"scored": 0, "flagged": 0, "calls": 0, "early": 0}
        self.scoring_lag_s = 0.0
        self.scoring_s = 0.0
        self.unmodelled: list[str] = []
        self._reported: set[str] = set()
        #: (label, value) of the things the model knows or a notice named (None: not read)
        self._known_things: set[tuple[str, str]] | None = None
        self._layouts_seen = -1
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.wall_offset = wall_offset_ns()
        self.keeper = ModelKeeper(options, self.statedir, notify, self._stop.is_set,
                                  on_adopt=self._model_changed)

    @property
    def model(self) -> Reveal | None:
        """The model in use (None while learning)."""
        return self.keeper.model

    @property
    def scorer(self) -> LiveScorer | None:
        """Scores windows with the model in use (None while learning)."""
        return self.keeper.scorer

    # -- start -------------------------------------------------------------------------
    def start(self) -> None:
        opts = self.options
        if not opts.score_every >= 1:
            raise InputError(f"--score-every must be at least 1, got {opts.score_every}")
        if not opts.resolve_after_s > 0:
            raise InputError(f"--resolve-after must be positive, got {opts.resolve_after_s}")
        if not opts.refit_every_s >= 0:
            raise InputError(f"--refit-every must be 0 or more, got {opts.refit_every_s:g}")
        check_learn_floor(opts.learn_floor_s)
        if 0 < opts.refit_every_s < opts.learn_s:
            raise InputError(f"--refit-every {opts.refit_every_s:g}s is shorter than --learn "
                             f"{opts.learn_s:g}s: a refit learns from the latest --learn")
        self._open_state()
        self.keeper.load()
        if self.model is None:
            check_learn(opts.learn_s, opts.allow_short_learn, opts.learn_floor_s)
        if opts.listen is not None:
            from reveal.live.exporter import serve

            self.server = serve(opts.listen, self.snapshot)
        try:
            self._open_sinks()
            self._open_collector()
        except BaseException:
            self.close()
            raise

    def _open_state(self) -> None:
        self.statedir.open()
        self.keeper.read_state()

    def _open_sinks(self) -> None:
        opts = self.options
        self.tracker = EpisodeTracker(self.statedir.alerts, self.host,
                                      opts.resolve_after_s, self.wall_offset, boot_id(),
                                      emit=self._dispatch,
                                      warn=lambda m: self.notify("warning", m))
        try:
            after_reboot = self.tracker.load()
        except ValueError as exc:
            self.notify("warning", str(exc))
            after_reboot = []
        delivered = self.tracker.delivered
        unknown = sorted(set(opts.sinks) - set(SINKS))
        if unknown:
            raise InputError(f"unknown alert sink {unknown[0]!r}; known: {', '.join(SINKS)}")
        for name, cls in SINKS.items():  # in registration order
            if opts.sinks.get(name) is not None:
                self.sinks.append(cls.open(opts.sinks[name], delivered, self.notify,
                                           max_queue=opts.webhook_queue))
        for e in after_reboot:
            self.notify("info", f"episode {e['id']} resolved: the host rebooted since")
        for sink in self.sinks:  # what a previous run did not get delivered
            for event in self.tracker.owed(sink.name):
                sink.submit(event)

    def _open_collector(self) -> None:
        opts = self.options
        out = self.statedir.runs / f"{self.host}-{time.strftime('%Y%m%d-%H%M%S')}"
        n = 1
        while out.exists():
            n += 1
            out = out.with_name(f"{self.host}-{time.strftime('%Y%m%d-%H%M%S')}-{n}")
        self.collector = Collector(CollectOptions(
            out=out, interval_s=opts.interval_s, include=opts.include, exclude=opts.exclude,
            probe_options=opts.probe_options, realtime=opts.realtime, source="reveal watch"),
            self.notify)
        self.collector.open()
        sampler = self.collector.sampler
        assert sampler is not None
        capacity = max(int(BUFFER_S / opts.interval_s), 200)
        self.buffer = SampleBuffer(sampler.channels, capacity, host=self.host,
                                   meta={"interval_s": opts.interval_s, "host": self.host,
                                         "path": str(out)})
        self.collector.writer = TeeSink(self.collector.writer, self.buffer)
        self.keeper.begin(self.buffer, self.collector)

    # -- run ---------------------------------------------------------------------------
    def run(self) -> int:
        """Collect and score until a signal or :meth:`stop`; returns the exit code."""
        assert self.collector is not None
        self._thread = threading.Thread(target=self._score_loop, name="reveal-scoring",
                                        daemon=True)
        self._thread.start()
        try:
            with stop_on_signals(lambda _sig: self.stop()):
                self.collector.run(lambda: self._stop.is_set())
        finally:
            self.stop()
            self.close()
        if self.error is not None:
            raise self.error
        return 0

    def stop(self) -> None:
        self._stop.set()
        if self.collector is not None:
            self.collector.request_stop()
        if self.buffer is not None:
            self.buffer.wake()

    def close(self) -> None:
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(30)
        if self.sinks:  # side by side: one target that is down does not eat the others' time
            with ThreadPoolExecutor(len(self.sinks), thread_name_prefix="reveal-close") as pool:
                list(pool.map(lambda sink: sink.close(timeout=3.0), self.sinks))
        if self.tracker is not None:
            with contextlib.suppress(OSError):
                self.tracker.save()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
        if self.collector is not None:
            self.collector.close()
        self.statedir.close()

    # -- the scoring thread -------------------------------------------------------------
    def _score_loop(self) -> None:
        try:
            self._scoring()
        except BaseException as exc:  # stop the watch, and say why (the main thread raises)
            self.error = exc
            self.stop()

    def _scoring(self) -> None:
        assert self.buffer is not None and self.tracker is not None
        buffer = self.buffer
        seen = 0
        next_refresh = time.monotonic() + AM_REFRESH_S
        next_retention = time.monotonic()
        next_trim = time.monotonic() + TRIM_EVERY_S
        while not self._stop.is_set():
            seen = buffer.wait(seen, 0.5)
            now = time.monotonic()
            if now >= next_trim:
                next_trim = now + TRIM_EVERY_S
                trim_heap(collect=False)
            if now >= next_retention:
                next_retention = now + RETENTION_EVERY_S
                self._retention()
            if self.statedir.adopt_requested():
                self._take_adopt_request()
            if self.scorer is None:
                self.tracker.expire(time.monotonic_ns())
                self.keeper.learn_step()
                continue
            if buffer.layout_changes != self._layouts_seen:
                self._check_channels()
            early = self.scorer.pending(buffer.total) < self.options.score_every
            if not self.scorer.due(buffer.read, buffer.total, buffer.oldest,
                                   self.options.score_every, self.options.early):
                continue  # windows are scored in batches (each call has a fixed cost)
            t0 = time.monotonic()
            windows = self.scorer.score(buffer.read, buffer.total, buffer.oldest)
            if not windows:
                continue
            self.scoring_s = time.monotonic() - t0
            self.counts["calls"] += 1
            self.counts["early"] += int(early)
            for w in windows:
                self.counts["scored"] += 1
                self.counts["flagged"] += int(w.flagged)
                self.keeper.seen(w)
                self.tracker.observe(w)
            self.last_window = windows[-1]
            self.scoring_lag_s = max(0.0, time.monotonic_ns() - windows[-1].end_ns) / 1e9
            if now >= next_refresh:
                next_refresh = now + AM_REFRESH_S
                self._refresh_alertmanager()
            if self.keeper.refit_due(now):
                self.keeper.maybe_refit(windows[-1].end_ns, bool(self.tracker.open()))

    def _take_adopt_request(self) -> None:
        """An operator's ``reveal watch --adopt``: learn from the latest span whatever it
        held and score with that model (refused while the first model is learned)."""
        span = self.statedir.take_adopt_request()
        if isinstance(span, str):
            self.notify("warning", f"{span}; nothing adopted")
        elif self.scorer is None or self.last_window is None:
            self.notify("notice", "adopt request ignored: the watch is still learning its "
                                  "first model, whose span is the present")
        else:
            self.keeper.adopt_now(self.last_window.end_ns, span)

    def _model_changed(self) -> None:
        """A new model is in use: which channels it knows is asked again."""
        self._layouts_seen = -1
        self._reported = set()
        self._known_things = None

    def _check_channels(self) -> None:
        assert self.buffer is not None and self.scorer is not None
        self._layouts_seen = self.buffer.layout_changes
        total = self.buffer.total
        # only rows of the current layout: the layout changes before its first rows come
        first = max(self.buffer.oldest, self.buffer.layout_since, total - 20)
        if total - first < 2:
            self._layouts_seen = -1  # asked again when rows have come
            return
        tail = self.buffer.read(first, total)
        self.unmodelled = self.scorer.unmodelled(tail)
        new = [c for c in self.unmodelled if c not in self._reported]
        if new:
            self._reported.update(new)
            self.notify("warning", f"{len(new)} channels appeared that the model does not "
                                   f"know (e.g. {', '.join(new[:3])}); they are recorded but "
                                   f"not scored until the next fit (--relearn)")
            self._announce(new)

    def _announce(self, new: list[str]) -> None:
        """A ``notice`` event, once, for each container, cgroup, pod, network namespace or
        interface among ``new`` channels that the model does not know
        (:mod:`reveal.live.notices`); to the sinks that take notes."""
        assert self.scorer is not None and self.tracker is not None
        if self._known_things is None:
            self._known_things = set(appeared(self.scorer.fitted.baseline_channels))
        for (label, value), channels in appeared(new).items():
            if (label, value) in self._known_things:
                continue
            self._known_things.add((label, value))
            event = notice_event(self.host, label, value, channels)
            self.tracker.counts["notice"] = self.tracker.counts.get("notice", 0) + 1
            self.notify("info", f"notice: {event['claim']}")
            for sink in self.sinks:
                if sink.takes_notices:
                    sink.submit(event)

    def _dispatch(self, event: Event) -> None:
        kind = event["event"]
        self.notify("info" if kind != "firing" else "warning",
                    f"alert {kind}: {event['id']} {event['subsystem']}: {event['claim']}")
        for sink in self.sinks:
            sink.submit(event)

    def _refresh_alertmanager(self) -> None:
        assert self.tracker is not None
        for sink in self.sinks:
            if sink.refreshes_open:
                for ep in self.tracker.open():
                    sink.submit(ep.event("update"))

    def _retention(self) -> None:
        """Prune the recordings (:func:`reveal.live.retention.prune`)."""
        prune(self.statedir.runs, self.statedir.kept,
              self.collector.run_dir if self.collector else None,
              self.tracker.episodes if self.tracker is not None else [],
              Retention(self.options.retain_s, self.options.retain_bytes,
                        self.options.retain_alerts_s), self.notify)

    # -- what /metrics shows -------------------------------------------------------------
    def snapshot(self) -> WatchSnapshot:
        """What ``/metrics`` shows now (read at each scrape)."""
        tracker = self.tracker
        active: dict[str, int] = {}
        if tracker is not None:
            for ep in tracker.open():
                active[ep.subsystem] = active.get(ep.subsystem, 0) + 1
        w = self.last_window
        health = CollectorHealth()
        c = self.collector
        if c is not None and c.sampler is not None and c.writer is not None:
            stats = c.sampler.stats
            lag = stats.lag_s
            usage = resource.getrusage(resource.RUSAGE_SELF)
            health = CollectorHealth(
                samples=stats.samples, missed_ticks=stats.missed_ticks,
                dropped_samples=c.writer.stats.dropped_samples,
                channels=len(c.sampler.channels), bytes_on_disk=c.writer.stats.bytes_on_disk,
                cpu_s=usage.ru_utime + usage.ru_stime,
                lag_quantiles={"0.5": lag.quantile(0.5), "0.99": lag.quantile(0.99),
                               "1": lag.max} if stats.samples else {})
        return WatchSnapshot(
            window=w,
            window_end_unix=(w.end_ns + self.wall_offset) / 1e9 if w else None,
            windows_scored=self.counts["scored"], windows_flagged=self.counts["flagged"],
            windows_skipped=self.scorer.skipped if self.scorer else 0,
            scoring_calls=self.counts["calls"], scoring_calls_early=self.counts["early"],
            scoring_lag_s=self.scoring_lag_s, scoring_s=self.scoring_s, active=active,
            alert_counts=dict(tracker.counts) if tracker else {}, sinks=list(self.sinks),
            generation=self.keeper.generation,
            learned_at=self.keeper.learned_at if self.model is not None else None,
            model_age_s=self.keeper.age_s(),
            learning=self.keeper.learning, learn_remaining_s=self.keeper.learn_remaining_s(),
            model_channels=len(self.model.fitted_.channels) if self.model else 0,
            model_windows=int(self.model.fitted_.baseline_windows) if self.model else 0,
            model_windows_left_out=int(left_out_windows(self.model).size) if self.model else 0,
            unmodelled=list(self.unmodelled), unhealthy=list(unhealthy_channels(self.model)),
            collector=health,
            last_row=self.buffer.last_row() if self.buffer else None)


