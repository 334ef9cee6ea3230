"""When a model may be refitted on the latest quiet span (``refit.scheme = "quiet_span"``).

The other way to keep a model current, beside the generations of
:mod:`reveal.analysis.consensus`: every ``every`` of data, fit a whole new model on the
latest ``span`` of raw samples and score with it alone, but only when that span is
quiet — no window in it was above the threshold, it holds nothing the model in use was
fitted on or scored before it began (a refit must learn from what this model judged
normal), and no alert is open. A refit that is not allowed waits ``retry`` and asks
again. ``reveal watch`` keeps its model current this way (``--refit-every`` every,
``--learn`` the span; the fit in a child process, :mod:`reveal.live.keeper`), and
``Reveal.partial_fit`` does the same in process, so that ``reveal evaluate --mode stream
--set refit.scheme=quiet_span`` measures the watch's scheme on labelled data.

All times are nanoseconds on one clock: a watch's monotonic clock, or a recording's
sample timestamps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class QuietSpan:
    """The quiet-span refit clock of one model in use.

    ``span_ns``: the span a refit learns from; ``every_ns``: time between refits (0:
    never); ``retry_ns``: wait before asking again after a refit was not allowed.
    """

    span_ns: int
    every_ns: int
    retry_ns: int
    #: end of the last window above the threshold
    last_above_ns: int = 0
    #: when the model in use began to score
    model_since_ns: int = 0
    #: when the next refit is due (None: never)
    next_due_ns: int | None = None
    #: a refit was refused and has not happened since (its notice said so once)
    waiting: bool = False
    #: refits made, and refits refused for want of a quiet span
    refits: int = 0
    refused: int = 0

    def seen(self, end_ns: np.ndarray | int, above: np.ndarray | bool) -> None:
        """Note scored windows: their end times (ns) and whether each was above the
        threshold."""
        ends = np.atleast_1d(np.asarray(end_ns, dtype=np.int64))
        hits = np.atleast_1d(np.asarray(above, dtype=bool))
        if hits.any():
            self.last_above_ns = max(self.last_above_ns, int(ends[hits].max()))

    def adopted(self, now_ns: int) -> None:
        """A model (fitted or refitted) began to score at ``now_ns``."""
        self.model_since_ns = now_ns
        self.next_due_ns = now_ns + self.every_ns if self.every_ns > 0 else None

    def due(self, now_ns: int) -> bool:
        """Whether a refit is due at ``now_ns``."""
        return self.next_due_ns is not None and now_ns >= self.next_due_ns

    def why_not(self, now_ns: int, recorded_from_ns: int = 0, alert_open: bool = False,
                span_name: str = "the span") -> str:
        """Why the span ending at ``now_ns`` may not be learned from ("" when it may):
        ``recorded_from_ns`` is when the samples available begin; ``span_name`` words the
        span (the watch's "--learn")."""
        start_ns = now_ns - self.span_ns
        if alert_open:
            return "an alert is open"
        if start_ns <= self.last_above_ns:
            return (f"a window was above the threshold "
                    f"{(now_ns - self.last_above_ns) / 1e9:.0f} s ago")
        if start_ns <= max(self.model_since_ns, recorded_from_ns):
            return f"the model in use has scored for less than {span_name}"
        return ""

    def postpone(self, now_ns: int) -> bool:
        """A refit was not allowed at ``now_ns``: ask again ``retry_ns`` later. Returns
        whether this is the first refusal since the last refit (to say so once)."""
        first = not self.waiting
        self.waiting = True
        self.refused += 1
        self.next_due_ns = now_ns + self.retry_ns
        return first

    def retry_later(self, now_ns: int) -> None:
        """The refit failed (e.g. unreadable data): the model in use stays; try again one
        period later."""
        self.next_due_ns = now_ns + self.every_ns if self.every_ns > 0 else None

    def span(self, now_ns: int) -> tuple[int, int]:
        """The span a refit at ``now_ns`` learns from: ``(start_ns, end_ns)``."""
        self.waiting = False
        return now_ns - self.span_ns, now_ns

    def describe(self) -> dict:
        """What the stream showed this clock, as ``Consensus.describe`` words its own."""
        return {"scheme": "quiet_span", "refits": self.refits,
                "refits_waiting": self.refused, "generations": [{"origin": "latest"}]}
