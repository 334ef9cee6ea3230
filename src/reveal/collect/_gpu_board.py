"""The latest values of a polled probe: one float64 array that pollers write and ticks copy.

Pollers (threads that may block in a driver) publish whole *blocks* of values; the tick
path only copies :attr:`Board.values` (in Python with :meth:`Board.copy_to`, or from C:
the array itself is the probe's native part, re-copied by the tick thread every tick).
A block whose last publication is older than its ``stale_s`` is set to NaN by
:meth:`Board.expire`, so a poller stuck in a call reads as missing, never as a frozen value.
A pause of the whole process (the interpreter or the host starving every thread at once)
is not a GPU failing: :attr:`Board.grace_ns`, set by the watchdog to how late its own
recent wakes were, is added to every block's ``stale_s`` (0 when the process keeps time).

Every value is one aligned 8-byte store, so a reader never sees half a value; a tick that
copies while a block is being published may see part of that block from the previous poll.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np

from reveal.collect.probe import NativePart


@dataclass
class _Block:
    start: int
    stop: int
    stale_s: float
    last_ns: int  # CLOCK_MONOTONIC of the last publication, or of the layout before it
    stale: bool = False


class Board:
    """Latest values by block; ``values`` is replaced (never resized) by :meth:`layout`."""

    def __init__(self) -> None:
        self.values = np.empty(0, dtype=np.float64)
        self._blocks: dict[Hashable, _Block] = {}
        self._lock = threading.Lock()
        self.expired = 0  # blocks that went stale, over the board's life
        self.grace_ns = 0  # the process's own recent lateness, added to every stale_s

    def layout(self, blocks: list[tuple[Hashable, int, float]]) -> None:
        """New blocks ``(key, size, stale_s)`` laid out in order; every value NaN until its
        block is published, and the block counted stale when that takes over ``stale_s``."""
        table: dict[Hashable, _Block] = {}
        at = 0
        now = time.monotonic_ns()
        for key, size, stale_s in blocks:
            table[key] = _Block(at, at + size, stale_s, now)
            at += size
        with self._lock:
            self._blocks = table
            self.values = np.full(at, np.nan, dtype=np.float64)

    def publish(self, key: Hashable, values: np.ndarray, now_ns: int | None = None) -> bool:
        """Write a block's values; False when the board has no block of that key and size
        (not laid out yet, or laid out for another layout)."""
        with self._lock:
            block = self._blocks.get(key)
            if block is None or block.stop - block.start != len(values):
                return False
            self.values[block.start:block.stop] = values
            block.last_ns = time.monotonic_ns() if now_ns is None else now_ns
            block.stale = False
        return True

    def expire(self, now_ns: int | None = None) -> list[Hashable]:
        """NaN every block not published for longer than its ``stale_s`` (plus
        :attr:`grace_ns`); returns the keys that went stale now."""
        now = time.monotonic_ns() if now_ns is None else now_ns
        gone: list[Hashable] = []
        with self._lock:
            for key, block in self._blocks.items():
                if block.stale:
                    continue
                if now - block.last_ns > block.stale_s * 1e9 + self.grace_ns:
                    self.values[block.start:block.stop] = np.nan
                    block.stale = True
                    gone.append(key)
            self.expired += len(gone)
        return gone

    def stale_keys(self) -> list[Hashable]:
        """Blocks now NaN for staleness."""
        with self._lock:
            return [key for key, block in self._blocks.items() if block.stale]

    def copy_to(self, out: np.ndarray) -> None:
        """Copy the latest values into ``out`` (NaN where the layout is shorter)."""
        values = self.values
        n = min(len(values), len(out))
        out[:n] = values[:n]
        out[n:] = np.nan


class BoardReads:
    """``read`` and ``native_parts`` of a probe whose pollers fill a :class:`Board`
    (``self._board``) laid out as ``self.channels``: no NVML call on the tick path."""

    _board: Board
    channels: list[str]

    def read(self, out: np.ndarray) -> None:
        """Copy the latest polled values (no NVML call); stale groups read NaN."""
        self._board.expire()
        self._board.copy_to(out)

    def native_parts(self) -> list[NativePart] | None:
        """The latest-values array itself: the C tick thread copies it every tick."""
        values = self._board.values
        if len(values) != len(self.channels):
            return None
        return [NativePart(values, 0, len(values), self.read)] if len(values) else []
