"""Live scoring: the batch analysis fed window by window.

Each time a window closes, :class:`LiveScorer` takes from the sample buffer exactly the
rows that window needs (its own samples, plus the one before its first that rates are
derived from) and scores them with :meth:`reveal.model.Reveal.score_windows` — the code
``reveal analyze`` runs, with the same model (its generations too, where it carries them).
Nothing of a window's score depends on data outside it: the telemetry preset has no
drift-following centre, and CPU busy ranks are taken within each window. When the scorer
falls behind (a slow call), the windows that closed meanwhile are scored together in one
call, in the same way.

Between scoring calls, :meth:`LiveScorer.change_seen` looks at each newly closed window
for a change that matters (a channel's level that lasts through a window, as the
significance rule judges it: its window median, an event count's sum, a held counter's
mean, moved by its least change that matters and ``significance.significant_z`` robust σ)
or direct evidence (a catalog sign, a setting changed, a rare event such as one OOM kill):
a window can be flagged only when it holds one, and the watch then scores at once instead
of waiting for its batch. The look costs a derive, a median and the signs of one window's
rows (about an eighth of a scoring call) and changes no verdict, only when it is given.

The persistence rule is applied across calls as :func:`reveal.analysis.ensemble.persistent`
applies it to a whole run: a window is flagged when its combined score and those of the
``persistence − 1`` windows before it exceed the threshold; windows before the first one
scored (or lost to a gap) count as below it. So the live verdicts of a recording replayed
through the buffer equal ``Reveal.report`` on the whole recording (tests/test_watch_live.py).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from reveal.analysis.derive import derive
from reveal.analysis.direct import is_sign
from reveal.analysis.ensemble import persistence_windows, persistent
from reveal.analysis.evidence import WindowEvidence
from reveal.analysis.percpu import RANK_PREFIX
from reveal.analysis.pipeline import (
    FittedAnalysis,
    directions_of,
    held_levels,
    rows_per_window,
    settle_windows,
    significance_scales,
    significant_cells_of,
    stride_seconds,
    usable_channels,
    window_config,
    window_signs,
)
from reveal.analysis.significance import gate_active, lasts, significant_cells
from reveal.catalog import default_catalog
from reveal.config import significance_of
from reveal.errors import InputError
from reveal.frame import Telemetry
from reveal.live.buffer import SampleBuffer
from reveal.model import Reveal

#: Windows whose changed channels :meth:`LiveScorer.change_seen` remembers: a change in a
#: channel changed in one of them asks for no early scoring.
RECENT_CHANGES = 10
#: Rows before a window's first that derive consumes (a rate needs the sample before).
DERIVE_LEAD = 1


@dataclass
class LiveWindow:
    """One scored window: numbers of the batch verdicts for that window.

    ``above``: the combined score exceeds the threshold; ``flagged``: so did the windows
    before it, as persistence asks. ``evidence`` and ``claim`` are set for windows above
    the threshold (flagged or not yet).
    """

    window_id: int
    start_ns: int  # monotonic ns of its first sample
    end_ns: int  # exclusive end, monotonic ns
    combined: float
    threshold: float
    above: bool
    flagged: bool
    scores: dict[str, float]
    thresholds: dict[str, float]
    detectors: list[str]  # detectors whose own threshold the window exceeds
    evidence: WindowEvidence | None = None
    claim: str | None = None
    warnings: list[str] = field(default_factory=list)


def _stride_rows(fitted: FittedAnalysis, interval_s: float) -> int:
    window = window_config(fitted.config, interval_s)
    if window.size_rows is not None:
        return int(window.stride_rows or 1)
    return round(stride_seconds(window, interval_s) / interval_s)


class LiveScorer:
    """Scores the windows of a growing recording as they close.

    Parameters
    ----------
    model : Reveal
        A fitted model (``Reveal.fit`` or ``Reveal.load``).
    interval_s : float, optional
        The recording's nominal sampling interval (default: the model's baseline's).
    origin : int
        Number of the buffer row that is row 0 of the scored stream: window ``k`` holds
        rows ``origin + k·stride + 1 ..`` (the row before is its rates' predecessor).
    max_windows : int
        Most windows scored in one call (a scorer far behind catches up in several).
    threshold_factor : float
        Multiplies the model's combined threshold (1: as fitted). Below 1 flags more; for
        tests and tuning only — the verdicts then differ from ``reveal analyze``'s.

    Attributes
    ----------
    size, stride : int
        Rows per window and between window starts.
    persistence : int
        Consecutive windows above the threshold before one is flagged.
    next_window : int
        The next window to score.
    skipped : int
        Windows never scored because their rows left the buffer first.
    """

    def __init__(self, model: Reveal, interval_s: float | None = None, origin: int = 0,
                 max_windows: int = 60, threshold_factor: float = 1.0) -> None:
        if not hasattr(model, "fitted_"):
            raise InputError("the model is not fitted")
        fitted = model.fitted_
        interval = float(interval_s or fitted.interval_s)
        window = window_config(fitted.config, interval)
        self.interval_s = interval
        self.size = rows_per_window(window, interval)
        self.stride = _stride_rows(fitted, interval)
        self.persistence = persistence_windows(fitted.config.detect.persistence_s,
                                               stride_seconds(window, interval))
        # every window on its own in one call; persistence is applied here, across calls
        self.model = model.without_persistence(threshold_factor)
        self.fitted = self.model.scoring_fitted()  # generations, where the model has them
        ensemble = self.fitted.ensemble
        self.threshold = float(getattr(ensemble, "combined_threshold_", None)
                               or ensemble.reference_threshold)
        self.origin = int(origin)
        self.max_windows = max(1, int(max_windows))
        self.next_window = 0
        self.skipped = 0
        # whether each of the last persistence − 1 windows scored was above the threshold
        self._recent: deque[bool] = deque(maxlen=max(self.persistence - 1, 1))
        # the feature rows of the last windows scored, to see a changed level hold still
        # across calls (a new steady state, see reveal.analysis.steady)
        self._rows: deque[np.ndarray] = deque(
            maxlen=max(settle_windows(self.fitted, self.fitted.interval_s) - 1,
                       getattr(self.fitted, "lasting_windows", 0) - 1, 1))
        self._watched = _watched_columns(self.fitted)
        self._checked = -1  # the last window change_seen looked at
        # channels changed in each of the last windows looked at
        self._changed: deque[frozenset[str]] = deque(maxlen=RECENT_CHANGES)
        self._last_above = False  # the last window scored was above the threshold
        # derived channels of the last window looked at, and where the watched ones are
        self._layout: tuple[list[str], np.ndarray, np.ndarray] = (
            [], np.zeros(0, np.intp), np.zeros(0, np.intp))

    # -- where windows are -------------------------------------------------------------
    def rows_of(self, window_id: int) -> tuple[int, int]:
        """Buffer rows ``[start, stop)`` window ``window_id`` is scored from."""
        start = self.origin + window_id * self.stride
        return start, start + self.size + DERIVE_LEAD

    def closed(self, total: int) -> int:
        """How many windows have closed when ``total`` rows are readable."""
        rows = total - self.origin - self.size - DERIVE_LEAD
        return 0 if rows < 0 else rows // self.stride + 1

    def pending(self, total: int) -> int:
        """Windows closed but not yet scored."""
        return max(0, self.closed(total) - self.next_window)

    # -- a look between scoring calls --------------------------------------------------
    def due(self, read: Callable[[int, int], Telemetry], total: int, oldest: int,
            score_every: int, early: bool) -> bool:
        """Whether to score now: ``score_every`` windows wait, or (with ``early``) the
        newest holds a change that asks for it (:meth:`change_seen`)."""
        pending = self.pending(total)
        return pending >= score_every or bool(
            pending and early and self.change_seen(read, total, oldest))

    def change_seen(self, read: Callable[[int, int], Telemetry], total: int,
                    oldest: int = 0) -> bool:
        """Whether the newest closed window, not scored yet, asks to be scored now: it
        holds a change that matters in a channel that held none in the
        :data:`RECENT_CHANGES` windows before (a channel that flickers around its least
        change asks once), or the last window scored was above the threshold, so
        persistence waits on this one. Each window is looked at once; False when the
        model judges surprise alone."""
        window = self.closed(total) - 1
        if self._watched is None or window < self.next_window or window <= self._checked:
            return False
        start, stop = self.rows_of(window)
        if start < oldest:
            return False
        self._checked = window
        changed = self._changes(read(start, stop))
        new = bool(changed.difference(*self._changed))
        self._changed.append(changed)
        return bool(changed) and (new or self._last_above)

    def _changes(self, tel: Telemetry) -> frozenset[str]:
        """Channels whose lasting level moved by a change that matters in ``tel`` (one
        window's rows and the one before), and those that show direct evidence in it (a
        catalog sign, a configuration change, a rare event: :func:`window_signs`)."""
        assert self._watched is not None
        derived, _ = derive(tel, default_catalog())
        signed = frozenset()
        if derived.n_samples >= self.size:
            signs = window_signs(self.fitted, derived,
                                 derived.timestamps_ns[-self.size:][:1], self.size)
            signed = frozenset(r.channel for r in signs.reasons.get(0, []))
        if derived.channels != self._layout[0]:  # the buffer's layout changed: map again
            index = {c: i for i, c in enumerate(derived.channels)}
            pairs = [(k, index[c]) for k, c in enumerate(self._watched.channels)
                     if c in index]
            cols, where = (np.array(a, dtype=np.intp) for a in zip(*pairs, strict=True)) \
                if pairs else (np.zeros(0, np.intp), np.zeros(0, np.intp))
            self._layout = (list(derived.channels), cols, where)
        _, cols, where = self._layout
        if not len(cols) or derived.n_samples == 0:
            return signed
        rows = derived.values[-self.size:, where]
        w = self._watched
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            stat = w.features[cols]
            now = np.nanmedian(rows, axis=0)
            for name, reduce in (("sum", np.nansum), ("mean", np.nanmean)):
                code = LASTING_STATS.index(name)
                if (stat == code).any():
                    now = np.where(stat == code, reduce(rows, axis=0), now)
        moved = significant_cells(now[None, :], w.median[cols], w.scale[cols], w.least[cols],
                                  significance_of(self.fitted.config).significant_z,
                                  direction=w.direction[cols])[0]
        return signed | frozenset(w.channels[k] for k in cols[moved])

    # -- scoring -----------------------------------------------------------------------
    def score(self, read: Callable[[int, int], Telemetry], total: int,
              oldest: int = 0) -> list[LiveWindow]:
        """Score the windows closed by row ``total`` and not scored yet (at most
        ``max_windows``). ``read(start, stop)`` gives buffer rows; ``oldest`` is the
        oldest row it still holds (windows older than that are skipped)."""
        closed = self.closed(total)
        first = self.next_window
        if first >= closed:
            return []
        reachable = -(-(oldest - self.origin) // self.stride) if oldest > self.origin else 0
        if first < reachable:  # their rows are gone: a gap in the verdicts
            self.skipped += reachable - first
            self._recent.clear()
            self._rows.clear()
            first = reachable
            if first >= closed:
                self.next_window = first
                return []
        last = min(closed, first + self.max_windows) - 1
        start, _ = self.rows_of(first)
        _, stop = self.rows_of(last)
        tel = read(start, stop)
        analysis = self.model.score_windows(
            tel, history=np.array(self._rows) if self._rows else None)
        n = last - first + 1
        if len(analysis.windows) != n:
            raise RuntimeError(f"scored {len(analysis.windows)} windows from rows {start}.."
                               f"{stop}, expected {n}")
        self.next_window = last + 1
        return self._verdicts(first, analysis)

    def _held(self, analysis) -> np.ndarray | None:
        """(W,) windows of ``analysis`` that are a new steady state once the windows
        scored before are seen too (None: the model judges surprise alone)."""
        values = analysis.features.values
        history = np.array(self._rows) if self._rows else None
        cells = significant_cells_of(self.fitted, values, history)
        for row in values:
            self._rows.append(row)
        if cells is None or history is None:
            return None
        return held_levels(self.fitted, values, cells, history)[0]

    def _verdicts(self, first: int, analysis) -> list[LiveWindow]:
        v = analysis.verdicts
        above = np.asarray(v.flagged, dtype=bool)  # persistence 0: above the threshold
        held = self._held(analysis)
        if held is not None and held.any():
            signed = [e.window_id for e in analysis.evidence
                      if any(is_sign(r.metric) for r in e.reasons)]
            held[signed] = False  # a direct sign is flagged whatever else holds
            above = above & ~held
            analysis = dataclasses.replace(
                analysis, evidence=[e for e in analysis.evidence if not held[e.window_id]])
        history = list(self._recent) if self.persistence > 1 else []
        pad = max(self.persistence - 1 - len(history), 0)
        joined = np.r_[np.zeros(pad, dtype=bool), np.asarray(history, dtype=bool), above]
        flagged = persistent(joined, self.persistence)[len(joined) - len(above):]
        if self.persistence > 1:
            for a in above:
                self._recent.append(bool(a))
        self._last_above = bool(above[-1]) if len(above) else self._last_above
        evidence = {e.window_id: e for e in analysis.evidence}
        # the words of the report (claims), from the same report code as `reveal analyze`
        claims = ({a.window_id: a.claim for a in self.model.report(analysis).anomalies}
                  if evidence else {})
        names = list(v.scores)
        out = []
        for i in range(len(above)):
            ev = evidence.get(i)
            if ev is not None:
                ev = dataclasses.replace(ev, window_id=first + i)
            out.append(LiveWindow(
                window_id=first + i,
                start_ns=int(analysis.windows.start_ns[i]),
                end_ns=int(analysis.windows.end_ns[i]),
                combined=float(v.combined[i]),
                threshold=float(v.combined_threshold),
                above=bool(above[i]), flagged=bool(flagged[i]),
                scores={n: float(v.scores[n][i]) for n in names},
                thresholds={n: float(v.thresholds[n]) for n in names},
                detectors=[n for n in names if v.flags[n][i]],
                evidence=ev,
                claim=claims.get(i) if ev is not None else None,
            ))
        return out

    def unmodelled(self, tel: Telemetry) -> list[str]:
        """Channels with data in ``tel`` that the model was not fitted on (they join at
        the next fit)."""
        known = set(self.fitted.baseline_channels)
        return [c for c in usable_channels(tel) if c not in known]


@dataclass(frozen=True)
class _Watched:
    """The columns :meth:`LiveScorer.change_seen` looks at: each channel's level that lasts
    through a window, as the significance rule judges it (:func:`lasts`: its window median,
    an event count's sum, a held counter's mean), with the baseline median, the least change
    that matters and the scale a change must exceed ``significance.significant_z`` times.
    A channel may have more than one (an event count's median and sum)."""

    channels: list[str]
    features: np.ndarray  # per column, one of LASTING_STATS
    median: np.ndarray
    least: np.ndarray
    scale: np.ndarray
    direction: np.ndarray


#: The window statistics :meth:`LiveScorer.change_seen` computes, by feature name.
LASTING_STATS = ("median", "sum", "mean")


def _watched_columns(fitted: FittedAnalysis) -> _Watched | None:
    """The lasting level columns of channels as recorded (CPU ranks are left out: their
    channel names exist only after ranking), or None where significance is not judged."""
    least = getattr(fitted, "significance", None)
    if least is None or not gate_active(np.asarray(least, dtype=np.float64)):
        return None
    least = np.asarray(least, dtype=np.float64)
    scale = significance_scales(fitted)
    median = np.asarray(fitted.median, dtype=np.float64)
    ks = np.array([k for k, (channel, feature) in enumerate(zip(
        fitted.column_channels, fitted.column_features, strict=True))
        if feature in LASTING_STATS and lasts(channel, feature)
        and np.isfinite(least[k]) and least[k] > 0
        and f"cpu={RANK_PREFIX}" not in channel], dtype=np.intp)  # not a CPU rank
    if not len(ks):
        return None
    return _Watched([fitted.column_channels[k] for k in ks],
                    np.array([LASTING_STATS.index(fitted.column_features[k]) for k in ks]),
                    median[ks], least[ks], scale[ks], directions_of(fitted)[ks])


def replay(model: Reveal, tel: Telemetry, chunk_rows: int | list[int] = 10,
           score_every: int = 1, early: bool = False,
           scored_at: list[int] | None = None, **options) -> list[LiveWindow]:
    """Feed ``tel`` through a :class:`SampleBuffer` in chunks (sizes cycled from
    ``chunk_rows``) and score windows as ``reveal watch`` does: ``score_every`` at a time,
    and at once where ``early`` and :meth:`LiveScorer.change_seen` asks. ``scored_at``,
    if given, receives for each window the rows the buffer held when it was scored."""
    sizes = [chunk_rows] if isinstance(chunk_rows, int) else list(chunk_rows)
    interval = float(tel.meta.get("interval_s") or tel.interval_s)
    scorer = LiveScorer(model, interval_s=interval, **options)
    buffer = SampleBuffer(tel.channels, capacity=4 * (scorer.size + scorer.stride) + max(sizes),
                          host=tel.host, meta=dict(tel.meta, interval_s=interval))
    out: list[LiveWindow] = []
    row, i = 0, 0
    while row < tel.n_samples:
        n = sizes[i % len(sizes)]
        i += 1
        block = slice(row, min(row + n, tel.n_samples))
        buffer.append_block(tel.timestamps_ns[block], tel.values[block])
        row = block.stop
        if not scorer.due(buffer.read, buffer.total, buffer.oldest, score_every, early):
            continue
        windows = scorer.score(buffer.read, buffer.total, buffer.oldest)
        if scored_at is not None:
            scored_at += [buffer.total] * len(windows)
        out += windows
    windows = scorer.score(buffer.read, buffer.total, buffer.oldest)  # what is left
    if scored_at is not None:
        scored_at += [buffer.total] * len(windows)
    return out + windows
