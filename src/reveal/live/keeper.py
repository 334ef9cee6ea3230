"""The watch's model keeper: load or learn a model, rehearse while learning, refit on a
quiet span, and hand the model in use to a :class:`reveal.live.scorer.LiveScorer`.

Every fit runs in a child process (:mod:`reveal.live.fitproc`) and is saved as the next
generation in the state directory; the scoring thread calls :meth:`ModelKeeper.learn_step`
until a model is in use, then :meth:`ModelKeeper.seen` for every scored window and
:meth:`ModelKeeper.maybe_refit` when a refit is due.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from reveal.analysis.baseline_health import UnhealthyChannel
from reveal.analysis.pipeline import stride_seconds
from reveal.analysis.presets import preset, preset_name_for, with_overrides
from reveal.analysis.quietspan import QuietSpan
from reveal.collect.runner import Notify
from reveal.errors import InputError, ModelFormatError
from reveal.live.allocators import trim_heap
from reveal.live.buffer import SampleBuffer
from reveal.live.fitproc import fit_in_child
from reveal.live.scorer import LiveScorer, LiveWindow
from reveal.live.state import MODEL_FILE, StateDir
from reveal.model import Reveal

if TYPE_CHECKING:
    from reveal.collect.runner import Collector
    from reveal.live.service import WatchOptions

#: windows the baseline needs for the 99th-percentile threshold (AnalyzeConfig's
#: min_baseline_windows): 60 windows of 3 s sliding by 1 s take 63 s. The default of the
#: setting ``watch.learn_floor_s`` (:class:`reveal.live.config.WatchConfig`), which the
#: watch reads instead (``WatchOptions.learn_floor_s``)
RECOMMENDED_LEARN_S = 63.0
#: seconds after one of the watch's own fits still counted as its work: the child's exit
#: and the model's load in the watch (left out of every later learn with the fit)
OWN_FIT_TAIL_S = 2.0
#: the least learning span at all (``--allow-short-learn``): enough windows to fit the
#: detectors (the ensemble's minimum of 10) with some margin
ABSOLUTE_MIN_LEARN_S = 15.0

#: Analysis settings every learn and refit of the watch starts from (``--set`` goes over
#: them): the span a watch learns on is whatever the host did in it, not a run someone
#: chose as clean, so windows that most detectors score beyond 12 robust sigmas of the
#: span's own scores (a burst inside it) are left out of the fit (``baseline_trim_mads``;
#: docs/detectors.md, "A burst inside the learn").
LEARN_SETTINGS: dict[str, object] = {"baseline_trim_mads": 12.0}


def learn_settings(settings: dict[str, object] | None) -> dict[str, object]:
    """The settings a watch learns with: :data:`LEARN_SETTINGS` under ``settings``."""
    return {**LEARN_SETTINGS, **(settings or {})}


def left_out_windows(model: Reveal) -> np.ndarray:
    """The learn's windows (indices from the span's first) the fit left out as bursts
    (``baseline_trim_mads``); empty when none was. Counted among all of the span's
    windows: those of the watch's own fits, left out before the fit, are skipped over."""
    fitted = model.fitted_
    rows = np.asarray(getattr(fitted.ensemble, "baseline_left_out_", ()), dtype=np.int64)
    skipped = np.asarray(getattr(fitted, "skipped_windows", ()), dtype=np.int64)
    if rows.size == 0 or skipped.size == 0:
        return rows
    fitted_rows = np.setdiff1d(np.arange(fitted.baseline_windows + skipped.size), skipped)
    return fitted_rows[rows]


def left_out_text(model: Reveal) -> str:
    """``"; 63 windows of the span left out of the fit as bursts (at 0–31 s, 201–217 s)"``:
    the learn's windows the fit left out (``baseline_trim_mads``), as spans of seconds
    from the span's start (window start times), or ``""`` when none was."""
    fitted = model.fitted_
    rows = left_out_windows(model)
    if rows.size == 0:
        return ""
    stride_s = stride_seconds(fitted.window, fitted.interval_s)
    breaks = np.flatnonzero(np.diff(rows) > 1)
    starts, ends = rows[np.r_[0, breaks + 1]], rows[np.r_[breaks, rows.size - 1]]
    spans = [f"{a * stride_s:g} s" if a == b else f"{a * stride_s:g}–{b * stride_s:g} s"
             for a, b in zip(starts, ends, strict=True)]
    more = f", +{len(spans) - 8} more" if len(spans) > 8 else ""
    windows = fitted.baseline_windows + len(getattr(fitted, "skipped_windows", ()))
    return (f"; {rows.size} of {windows} windows of the span left out of "
            f"the fit as bursts (at {', '.join(spans[:8])}{more})")


def unhealthy_channels(model: Reveal | None) -> tuple[UnhealthyChannel, ...]:
    """The channels whose level lay outside their healthy range through much of the span
    ``model`` was learned on (:mod:`reveal.analysis.baseline_health`; none for a model
    saved before the check, or no model)."""
    return tuple(getattr(model.fitted_, "health", ())) if model is not None else ()


def rehearsal_start_s(learn_s: float,
                      floor_s: float = RECOMMENDED_LEARN_S) -> float | None:
    """Seconds into the learning span at which a provisional model starts scoring (its
    verdicts discarded), or None for a span too short to hold a rehearsal: a third of
    the span, at least the learn floor ``floor_s`` (``watch.learn_floor_s``,
    :data:`RECOMMENDED_LEARN_S` by default), with at least that much left after."""
    start = max(floor_s, learn_s / 3.0)
    return start if learn_s - start >= floor_s else None


class ModelKeeper:
    """The model a watch scores with, and how it is kept current.

    ``on_adopt`` is called after every model taken into use (learned, refitted), so that
    what the watch derived from the last model (which channels it knows) is asked again.
    """

    def __init__(self, options: WatchOptions, statedir: StateDir, notify: Notify,
                 stopping: Callable[[], bool],
                 on_adopt: Callable[[], None] = lambda: None) -> None:
        self.options = options
        self.statedir = statedir
        self.notify = notify
        self.stopping = stopping
        self.on_adopt = on_adopt
        self.model: Reveal | None = None
        self.scorer: LiveScorer | None = None
        self.generation = 0
        self.learned_at: float | None = None  # unix seconds, as written in watch.json
        #: monotonic seconds at the learn (the model's age does not follow wall-clock steps)
        self.learned_mono: float | None = None
        self.learning = False
        self.learn_start_ns: int | None = None
        self.rehearse = options.rehearse
        self.rehearsal: LiveScorer | None = None  # scores while learning; verdicts dropped
        #: when a refit on the latest quiet --learn is due and allowed (monotonic ns)
        self.quiet = QuietSpan(span_ns=int(options.learn_s * 1e9),
                               every_ns=int(options.refit_every_s * 1e9),
                               retry_ns=int(options.resolve_after_s * 1e9))
        #: the spans (monotonic ns, the samples' clock) of the watch's own model fits: a
        #: burst of its CPU that no later learn may take as the host's normal
        self.own_fits: list[tuple[int, int]] = []
        self.buffer: SampleBuffer | None = None
        self.collector: Collector | None = None

    # -- start ---------------------------------------------------------------------------
    def read_state(self) -> None:
        """The generation and learn time a previous watch wrote (watch.json)."""
        info = self.statedir.read_info()
        self.generation = int(info.get("generation", 0))
        self.learned_at = info.get("learned_at")

    def load(self) -> None:
        """Load the saved model unless ``--relearn`` (or there is none); one-line errors."""
        path = self.statedir.model
        if self.options.relearn or not path.exists():
            return
        try:
            model = Reveal.load(path)
        except ModelFormatError as exc:  # another release's model: learn, keep the old file
            kept = path.with_name(f"{path.name}.unreadable-{time.strftime('%Y%m%d-%H%M%S')}")
            path.rename(kept)
            self.notify("warning", f"{exc}; it is kept as {kept.name}, and a new model is "
                                   f"learned from the first {self.options.learn_s:g} s")
            return
        except InputError as exc:
            raise InputError(f"{exc}; start with --relearn to learn a new model "
                             f"(it replaces this one)") from None
        fitted = model.fitted_
        wanted = preset_name_for(self.options.interval_s)
        if abs(fitted.interval_s - self.options.interval_s) > 1e-9 or \
                fitted.config.preset != wanted:
            raise InputError(f"the model was learned from samples every "
                             f"{fitted.interval_s:g} s, not --interval "
                             f"{self.options.interval_s:g}; use --relearn", str(path))
        self.model = model
        saved = dict(model.overrides or {})
        learning = learn_settings(self.options.settings)
        if fitted.config != with_overrides(preset(wanted), learning):
            self.notify("warning", f"the saved model was learned with settings {saved or 'none'}"
                                   f", not those this watch learns with ({learning})"
                                   f": they apply at the next learn (--relearn, or a refit)")
        if self.learned_at is None:
            self.learned_at = path.stat().st_mtime
        self.learned_mono = time.monotonic() - max(0.0, time.time() - self.learned_at)
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.learned_at))
        self.notify("info", f"model loaded from {path} (generation {self.generation}, "
                            f"{len(fitted.channels)} channels, learned {when}); scoring")

    def begin(self, buffer: SampleBuffer, collector: Collector) -> None:
        """Score the samples ``buffer`` receives with the loaded model, or learn one from
        the first ``learn_s`` of what ``collector`` records."""
        self.buffer = buffer
        self.collector = collector
        if self.model is not None:
            self._use(self.model, origin=0)
        else:
            self.learning = True
            self.notify("info", f"learning a model from the first {self.options.learn_s:g} s "
                                f"(recording into {collector.run_dir})")

    # -- learning ------------------------------------------------------------------------
    def learn_step(self) -> None:
        """While learning: rehearse, and fit once the span is recorded."""
        if self.learning:
            self._rehearse()
            self._maybe_learn()

    def learn_remaining_s(self) -> float:
        """Seconds of the learning span still to record (0 when not learning)."""
        if not self.learning:
            return 0.0
        last = self.buffer.last_row() if self.buffer is not None else None
        if last is None or self.learn_start_ns is None:
            return self.options.learn_s
        return max(0.0, self.options.learn_s - (last[0] - self.learn_start_ns) / 1e9)

    def age_s(self) -> float | None:
        """Seconds since the model in use was learned (None without one)."""
        if self.model is None or self.learned_mono is None:
            return None
        return time.monotonic() - self.learned_mono

    def _rehearse(self) -> None:
        """While learning, score as the watch will once it has learned, verdicts dropped.

        The watch's own scoring is work on this host (CPU, allocations, the TLB
        shootdowns its freed arrays cause): learned without it, the first windows scored
        after learning differ from the learned span by exactly that, and raise alerts
        about the watch itself. From :func:`rehearsal_start_s` into the span a
        provisional model, fitted on what was recorded so far, scores every window, so
        that the rest of the span holds the watch's steady cost."""
        assert self.buffer is not None and self.collector is not None
        buffer = self.buffer
        if self.rehearsal is not None:
            if self.rehearsal.pending(buffer.total) >= self.options.score_every:
                self.rehearsal.score(buffer.read, buffer.total, buffer.oldest)
            return
        start_s = rehearsal_start_s(self.options.learn_s, self.options.learn_floor_s)
        last = buffer.last_row()
        if not self.rehearse or start_s is None or last is None or self.learn_start_ns is None:
            return
        if last[0] < self.learn_start_ns + int((start_s + 2.0) * 1e9):
            return
        scratch = self.statedir.provisional
        try:
            with self._own_fit():
                fit_in_child(self.collector.run_dir, self.learn_start_ns,
                             self.learn_start_ns + int(start_s * 1e9), scratch, self.stopping,
                             settings=learn_settings(self.options.settings))
                provisional = Reveal.load(scratch)
        except InterruptedError:
            return
        except InputError as exc:  # too little data after all: learn without rehearsal
            self.notify("info", f"no rehearsal while learning: {exc}")
            self.rehearsal = None
            self.rehearse = False
            return
        finally:
            with contextlib.suppress(OSError):
                scratch.unlink()
        self.rehearsal = LiveScorer(provisional, interval_s=self.options.interval_s,
                                    origin=max(buffer.total - 1, 0),
                                    threshold_factor=self.options.threshold_factor)
        self.notify("info", f"scoring with a provisional model from {start_s:g} s into the "
                            f"learning span, verdicts dropped, so that the span holds the "
                            f"watch's own scoring work")

    def _maybe_learn(self) -> None:
        assert self.buffer is not None and self.collector is not None
        first = self.buffer.last_row()
        if first is None:
            return
        if self.learn_start_ns is None:
            self.learn_start_ns = int(self.buffer.read(0, 1).timestamps_ns[0])
        learn_end = self.learn_start_ns + int(self.options.learn_s * 1e9)
        if first[0] < learn_end + int(2e9):  # wait for the journal to hold the span
            return
        t0 = time.monotonic()
        try:
            model, path = self._fit_span(self.learn_start_ns, learn_end)
        except InterruptedError:  # stopping while it fitted: nothing learned
            return
        self.rehearsal = None
        self._adopt(model, learn_end)
        fitted = model.fitted_
        unhealthy = {f.message for f in unhealthy_channels(model)}
        for w in fitted.warnings:
            if w not in unhealthy:
                self.notify("info", f"model: {w}")
        self._say_unhealthy(model)
        self.notify("info", f"model learned in {time.monotonic() - t0:.1f} s and saved to "
                            f"{path} (generation {self.generation}, {len(fitted.channels)} "
                            f"channels, {fitted.baseline_windows} windows, threshold "
                            f"{fitted.ensemble.combined_threshold_:.3g}){left_out_text(model)}"
                            f"; scoring")

    # -- while scoring -------------------------------------------------------------------
    def seen(self, window: LiveWindow) -> None:
        """Note a scored window (a refit learns only from a span with none above the
        threshold)."""
        self.quiet.seen(window.end_ns, window.above)

    def refit_due(self, now_s: float) -> bool:
        """Whether a refit is due at monotonic ``now_s`` (seconds)."""
        return self.quiet.due(int(now_s * 1e9))

    def maybe_refit(self, now_ns: int, alert_open: bool) -> None:
        """Learn again from the latest ``learn_s`` once it holds no window above the
        threshold, none of an earlier model's span, and no alert is open
        (``alert_open``); else try again a stride of ``resolve_after_s`` later."""
        assert self.collector is not None
        opts = self.options
        recorded_from = self.collector.sampler.start_ns if self.collector.sampler else 0
        why = self.quiet.why_not(now_ns, recorded_from, alert_open, span_name="--learn")
        if why:
            if self.quiet.postpone(time.monotonic_ns()):
                self.notify("info", f"refit postponed until the latest {opts.learn_s:g} s "
                                    f"are quiet ({why})")
            return
        start_ns, now_ns = self.quiet.span(now_ns)
        before = len(self.model.fitted_.channels) if self.model is not None else 0
        t0 = time.monotonic()
        try:
            model, path = self._fit_span(start_ns, now_ns)
        except InterruptedError:
            return
        except InputError as exc:  # e.g. the span's data is unreadable: keep the model
            self.notify("warning", f"refit skipped ({exc}); the model in use is kept")
            self.quiet.retry_later(time.monotonic_ns())
            return
        self._adopt(model, now_ns)
        fitted = model.fitted_
        self._say_unhealthy(model)
        self.notify("info", f"model refitted in {time.monotonic() - t0:.1f} s on the latest "
                            f"{opts.learn_s:g} s with no window flagged, saved to {path} "
                            f"(generation {self.generation}, {len(fitted.channels)} channels, "
                            f"{len(fitted.channels) - before:+d}){left_out_text(model)}; "
                            f"scoring")

    def adopt_now(self, now_ns: int, span_s: float | None) -> None:
        """At the operator's request: learn from the latest ``span_s`` seconds (None:
        ``--learn``) up to ``now_ns`` whatever was flagged in them, and score with that
        model: what they held is normal from now on, and an open alert resolves once no
        window is flagged. A span shorter than the learn floor (or than what was recorded
        since the watch started) is refused with a notice; the model in use is kept."""
        assert self.collector is not None
        opts = self.options
        span = float(opts.learn_s if span_s is None else span_s)
        recorded_from = self.collector.sampler.start_ns if self.collector.sampler else 0
        start_ns = max(now_ns - int(span * 1e9), recorded_from)
        got_s = (now_ns - start_ns) / 1e9
        floor = ABSOLUTE_MIN_LEARN_S if opts.allow_short_learn else opts.learn_floor_s
        if got_s < floor:
            self.notify("notice", f"adopt refused: {got_s:.0f} s recorded since the watch "
                                  f"started, a model needs at least {floor:g} s; the model "
                                  f"in use is kept")
            return
        t0 = time.monotonic()
        try:
            model, path = self._fit_span(start_ns, now_ns)
        except InterruptedError:
            return
        except InputError as exc:
            self.notify("warning", f"adopt failed ({exc}); the model in use is kept")
            return
        self._adopt(model, now_ns)
        self.statedir.write_info({**self.statedir.read_info(), "adopted_on_request": True})
        self._say_unhealthy(model)
        self.notify("notice", f"the latest {got_s:.0f} s adopted as normal at the operator's "
                              f"request: model learned in {time.monotonic() - t0:.1f} s, "
                              f"saved to {path} (generation {self.generation}); scoring")

    def _say_unhealthy(self, model: Reveal) -> None:
        """Warn of each channel whose level lay outside its healthy range through much of
        the span just learned: the model takes that fault as normal."""
        for finding in unhealthy_channels(model):
            self.notify("warning", finding.message)

    # -- fitting and adopting ------------------------------------------------------------
    def _fit_span(self, start_ns: int, end_ns: int) -> tuple[Reveal, Path]:
        """Fit a model on the recorded ``[start_ns, end_ns)`` (monotonic ns) in a child
        process (:mod:`reveal.live.fitproc`: the fit's memory never enters this one), saved
        as the next generation; returns it and its path."""
        assert self.collector is not None
        run = self.collector.run_dir
        skip = [(a, b) for a, b in self.own_fits if a < end_ns and b > start_ns]
        own_s = sum(min(b, end_ns) - max(a, start_ns) for a, b in skip) / 1e9
        left_out = f", leaving out the {own_s:.0f} s of its own earlier fits" if skip else ""
        self.notify("info", f"fitting the model on {(end_ns - start_ns) / 1e9:g} s of "
                            f"{run}{left_out}")
        with self._own_fit():
            path = fit_in_child(run, start_ns, end_ns, self.statedir.model, self.stopping,
                                settings=learn_settings(self.options.settings), skip_ns=skip)
            model = Reveal.load(path)
        self.generation += 1
        self.learned_at = time.time()
        self.learned_mono = time.monotonic()
        self.statedir.write_info({
            "generation": self.generation, "learned_at": self.learned_at,
            "learned_from": str(run), "learn_s": (end_ns - start_ns) / 1e9,
            "channels": len(model.fitted_.channels), "model": MODEL_FILE,
            "windows": int(model.fitted_.baseline_windows),
            "windows_left_out": int(left_out_windows(model).size)})
        return model, path

    @contextlib.contextmanager
    def _own_fit(self) -> Iterator[None]:
        """Keep the span of a fit this watch makes (with :data:`OWN_FIT_TAIL_S` after it:
        the child's exit, the model's load), so that every later learn leaves its windows
        out; spans no learn can reach any more are forgotten."""
        began = time.monotonic_ns()
        try:
            yield
        finally:
            now = time.monotonic_ns()
            horizon = now - int((self.options.learn_s + OWN_FIT_TAIL_S) * 1e9)
            self.own_fits = [(a, b) for a, b in self.own_fits if b > horizon]
            self.own_fits.append((began, now + int(OWN_FIT_TAIL_S * 1e9)))

    def _adopt(self, model: Reveal, span_end_ns: int) -> None:
        """Score with ``model`` from the first sample after the fit: the samples between
        the fitted span's end and now hold the fit itself (a burst of CPU, allocations,
        huge-page faults), work of the watch that no window should be judged on."""
        assert self.buffer is not None
        origin = max(self.buffer.total - 1, int(np.searchsorted(
            self.buffer.read(self.buffer.oldest, self.buffer.total).timestamps_ns,
            span_end_ns)) + self.buffer.oldest)
        self._use(model, origin=max(origin - 1, 0))
        self.on_adopt()
        trim_heap()  # the fit's rows and features are freed: give their pages back

    def _use(self, model: Reveal, origin: int) -> None:
        self.model = model
        self.scorer = LiveScorer(model, interval_s=self.options.interval_s, origin=origin,
                                 threshold_factor=self.options.threshold_factor)
        self.learning = False
        self.quiet.adopted(time.monotonic_ns())
