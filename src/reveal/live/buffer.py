"""The latest samples in memory, fed beside the segment writer.

:class:`SampleBuffer` is a row sink (the sampler's ``append`` / ``append_block`` /
``set_channels``) that keeps the newest ``capacity`` rows as they were sampled (raw
counters, the collector's channel layout of the moment), numbered from 0 in the order they
arrived. :class:`TeeSink` hands every row to the segment writer first and then to the
buffer, so ``reveal watch`` stores exactly what it scores. Rows are copied in blocks (the
sampler reuses its drain buffers); a reader takes any range still held as one
:class:`Telemetry` (channels of several layouts joined, NaN where a channel was absent).
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

import numpy as np

from reveal.frame import Telemetry


class _Block:
    __slots__ = ("channels", "first", "rows", "ts")

    def __init__(self, first: int, ts: np.ndarray, rows: np.ndarray,
                 channels: list[str]) -> None:
        self.first = first  # number of its first row
        self.ts = ts
        self.rows = rows
        self.channels = channels

    @property
    def stop(self) -> int:
        return self.first + len(self.ts)


class SampleBuffer:
    """The newest ``capacity`` rows (at least; whole blocks are dropped), thread-safe.

    Parameters
    ----------
    channels : list of str
        The sampler's channels when the buffer starts.
    capacity : int
        Rows kept at least (older blocks are dropped once this many newer rows are held).
    host, meta : str, dict
        Put on every :class:`Telemetry` read (``meta["interval_s"]`` is the nominal
        sampling interval the analysis uses).
    """

    #: single rows (the per-tick Python loop) are gathered into blocks of this many
    GATHER_ROWS = 16

    def __init__(self, channels: list[str], capacity: int, host: str = "",
                 meta: dict[str, Any] | None = None) -> None:
        self.capacity = int(capacity)
        self.host = host
        self.meta = dict(meta or {})
        self._channels = list(channels)
        self._blocks: deque[_Block] = deque()
        self._pending_ts: list[int] = []
        self._pending_rows: list[np.ndarray] = []
        self._total = 0  # rows received (pending ones included)
        self._next = 0  # number of the next row put into a block
        self._held = 0  # rows in blocks
        self.layout_changes = 0
        #: number of the first row received in the current layout
        self.layout_since = 0
        self._cond = threading.Condition()

    # -- the row sink ------------------------------------------------------------------
    def append(self, ts_ns: int, row: np.ndarray) -> None:
        with self._cond:
            self._pending_ts.append(int(ts_ns))
            self._pending_rows.append(np.array(row, dtype=np.float64, copy=True))
            self._total += 1
            if len(self._pending_ts) >= self.GATHER_ROWS:
                self._gather()
            self._cond.notify_all()

    def append_block(self, ts_ns: np.ndarray, rows: np.ndarray) -> None:
        with self._cond:
            self._gather()
            n = len(ts_ns)
            if n:
                self._total += n
                self._push(np.array(ts_ns, dtype=np.int64, copy=True),
                           np.array(rows, dtype=np.float64, copy=True))
            self._cond.notify_all()

    def set_channels(self, channels: list[str]) -> None:
        with self._cond:
            self._gather()
            if list(channels) != self._channels:
                self._channels = list(channels)
                self.layout_changes += 1
                self.layout_since = self._total

    def flush(self) -> None:
        """Make single rows received so far readable (the sampler flushes every drain)."""
        with self._cond:
            self._gather()
            self._cond.notify_all()

    # -- internals ---------------------------------------------------------------------
    def _gather(self) -> None:
        if not self._pending_ts:
            return
        ts = np.asarray(self._pending_ts, dtype=np.int64)
        rows = np.vstack(self._pending_rows)
        self._pending_ts, self._pending_rows = [], []
        self._push(ts, rows)

    def _push(self, ts: np.ndarray, rows: np.ndarray) -> None:
        self._blocks.append(_Block(self._next, ts, rows, self._channels))
        self._next += len(ts)
        self._held += len(ts)
        while self._blocks and self._held - len(self._blocks[0].ts) >= self.capacity:
            self._held -= len(self._blocks.popleft().ts)

    # -- reading -----------------------------------------------------------------------
    @property
    def channels(self) -> list[str]:
        return list(self._channels)

    @property
    def total(self) -> int:
        """Rows readable so far (numbers 0 .. total − 1 were received)."""
        with self._cond:
            return self._blocks[-1].stop if self._blocks else 0

    @property
    def oldest(self) -> int:
        """Number of the oldest row still held."""
        with self._cond:
            return self._blocks[0].first if self._blocks else 0

    def last_row(self) -> tuple[int, np.ndarray, list[str]] | None:
        """The newest readable row: (timestamp ns, values, channels), or None."""
        with self._cond:
            if not self._blocks:
                return None
            b = self._blocks[-1]
            return int(b.ts[-1]), b.rows[-1].copy(), b.channels

    def wait(self, beyond: int, timeout: float) -> int:
        """Wait up to ``timeout`` s for rows numbered ``beyond`` or later; returns total."""
        with self._cond:
            self._cond.wait_for(lambda: bool(self._blocks) and self._blocks[-1].stop > beyond,
                                timeout)
            return self._blocks[-1].stop if self._blocks else 0

    def wake(self) -> None:
        """Wake every :meth:`wait` (to stop)."""
        with self._cond:
            self._cond.notify_all()

    def read(self, start: int, stop: int) -> Telemetry:
        """Rows ``start`` .. ``stop − 1`` as one Telemetry (they must still be held)."""
        with self._cond:
            blocks = [b for b in self._blocks if b.stop > start and b.first < stop]
            if not blocks or blocks[0].first > start or blocks[-1].stop < stop:
                held = (self._blocks[0].first, self._blocks[-1].stop) if self._blocks \
                    else (0, 0)
                raise LookupError(f"rows {start}..{stop} are not held (held: "
                                  f"{held[0]}..{held[1]})")
        pieces = [(b.ts[max(start - b.first, 0):stop - b.first],
                   b.rows[max(start - b.first, 0):stop - b.first], b.channels) for b in blocks]
        layouts = {id(p[2]) for p in pieces}
        ts = np.concatenate([p[0] for p in pieces])
        if len(layouts) == 1:
            channels = list(pieces[0][2])
            values = np.vstack([p[1] for p in pieces]) if len(pieces) > 1 else pieces[0][1].copy()
        else:
            channels = []
            seen: set[str] = set()
            for p in pieces:
                for c in p[2]:
                    if c not in seen:
                        seen.add(c)
                        channels.append(c)
            index = {c: j for j, c in enumerate(channels)}
            values = np.full((len(ts), len(channels)), np.nan)
            row = 0
            for p_ts, p_rows, p_channels in pieces:
                cols = [index[c] for c in p_channels]
                values[row:row + len(p_ts), cols] = p_rows
                row += len(p_ts)
        return Telemetry(self.host, ts, values, channels, dict(self.meta))


class TeeSink:
    """The segment writer, with every row also handed to a :class:`SampleBuffer`.

    Anything else (``stats``, ``submit``, ``close``, ...) is the writer's own.
    """

    def __init__(self, writer: Any, buffer: SampleBuffer) -> None:
        self._writer = writer
        self._buffer = buffer
        if hasattr(writer, "append_block"):
            self.append_block = self._append_block

    def append(self, ts_ns: int, row: np.ndarray) -> None:
        self._writer.append(ts_ns, row)
        self._buffer.append(ts_ns, row)

    def _append_block(self, ts_ns: np.ndarray, rows: np.ndarray) -> None:
        self._writer.append_block(ts_ns, rows)
        self._buffer.append_block(ts_ns, rows)

    def set_channels(self, channels: list[str]) -> None:
        self._writer.set_channels(channels)
        self._buffer.set_channels(channels)

    def flush(self) -> None:
        flush = getattr(self._writer, "flush", None)
        if flush is not None:
            flush()
        self._buffer.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._writer, name)
