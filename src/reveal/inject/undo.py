"""The undo stack: a callback for every live change a fault or workload makes, run newest
first at interpreter exit (``atexit``), on SIGTERM/SIGHUP once
:func:`reveal.inject.cleanup.install_signal_handlers` has turned them into
:class:`SystemExit`, or by the change's owner when it ends."""

from __future__ import annotations

import atexit
import contextlib
import threading
from collections.abc import Callable


class UndoStack:
    """Undo callbacks for live changes, run newest first; each runs at most once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[int, tuple[str, Callable[[], None]]] = {}
        self._next = 0
        self._installed = False

    def push(self, label: str, undo: Callable[[], None]) -> int:
        self._install()
        with self._lock:
            self._next += 1
            self._items[self._next] = (label, undo)
            return self._next

    def pop(self, handle: int, run: bool = True) -> None:
        with self._lock:
            item = self._items.pop(handle, None)
        if item is not None and run:
            _quiet(item[1])

    def run_all(self) -> list[str]:
        """Run every pending undo (newest first); returns their labels."""
        with self._lock:
            items = sorted(self._items.items(), reverse=True)
            self._items.clear()
        for _, (_, undo) in items:
            _quiet(undo)
        return [label for _, (label, _) in items]

    def pending(self) -> list[str]:
        with self._lock:
            return [label for label, _ in self._items.values()]

    def _install(self) -> None:
        if not self._installed:
            atexit.register(self.run_all)
            self._installed = True


UNDO = UndoStack()


def _quiet(undo: Callable[[], None]) -> None:
    with contextlib.suppress(Exception):
        undo()


def _quiet(undo: Callable[[], None]) -> None:
    with contextlib.suppress(Exception):
        undo()
