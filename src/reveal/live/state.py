"""The watch's state directory: its layout, the lock that keeps one watch per directory,
and ``watch.json`` (which model generation is in use, when and from what it was learned).

The state directory holds::

    model.reveal     the fitted model (Reveal.save: versioned, checksummed, atomic)
    watch.json       model generation, when and from which run it was learned
    alerts.json      alert episodes and what each sink delivered (atomic)
    runs/HOST-TIME/  the recordings (one per start; the first learn comes from its start)
    kept/HOST-TIME/  the segments around alerts of recordings removed by retention
    lock             held while a watch runs (one watch per state directory)
    adopt.request    an operator's request that the running watch adopt the latest span
                     as normal (``reveal watch --adopt``; taken and removed by the watch)
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path
from typing import Any, TextIO

from reveal.errors import InputError
from reveal.store.layout import write_json_atomic

MODEL_FILE = "model.reveal"
#: where the provisional model of the rehearsal is written by its fit, and removed
PROVISIONAL_FILE = ".provisional.reveal"
WATCH_FILE = "watch.json"
ALERTS_FILE = "alerts.json"
RUNS_DIR = "runs"
KEPT_DIR = "kept"
LOCK_FILE = "lock"
ADOPT_FILE = "adopt.request"


class _Entry:
    """An attribute of :class:`StateDir`: the path of the file or directory ``name``
    inside the state directory."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, state: StateDir | None, owner: type | None = None) -> Any:
        if state is None:  # looked up on the class
            return self
        return state.path / self.name

    def __set__(self, state: StateDir, value: object) -> None:
        raise AttributeError(f"{self.name}: a state directory's paths are read-only")


class StateDir:
    """One watch's state directory, locked while it is open (:meth:`open`, :meth:`close`)."""

    # -- where things are --------------------------------------------------------------
    model = _Entry(MODEL_FILE)
    provisional = _Entry(PROVISIONAL_FILE)
    alerts = _Entry(ALERTS_FILE)
    runs = _Entry(RUNS_DIR)
    kept = _Entry(KEPT_DIR)

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock: TextIO | None = None

    # -- opening and closing -----------------------------------------------------------
    def open(self) -> None:
        """Create the directory (and ``runs/``), check it is writable, and take its lock;
        ``InputError`` when it is not writable or another watch holds it."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            self.runs.mkdir(exist_ok=True)
            probe = self.path / f".write-test-{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
            lock = open(self.path / LOCK_FILE, "a+")  # noqa: SIM115
        except OSError as exc:
            raise InputError(f"state directory is not writable ({exc.strerror}); choose "
                             f"another with --state DIR", str(self.path)) from None
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.seek(0)
            holder = lock.read().strip() or "?"
            lock.close()
            raise InputError(f"another reveal watch (pid {holder}) uses this state "
                             f"directory; stop it or choose --state DIR",
                             str(self.path)) from None
        lock.seek(0)
        lock.truncate()
        lock.write(str(os.getpid()))
        lock.flush()
        self._lock = lock

    def close(self) -> None:
        """Release the lock (idempotent)."""
        if self._lock is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock, fcntl.LOCK_UN)
                self._lock.close()
            self._lock = None

    # -- watch.json --------------------------------------------------------------------
    def read_info(self) -> dict[str, Any]:
        """``watch.json`` as written by :meth:`write_info` ({} when absent or unreadable)."""
        try:
            return json.loads((self.path / WATCH_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}

    def write_info(self, info: dict[str, Any]) -> None:
        """Write ``watch.json`` atomically."""
        write_json_atomic(self.path / WATCH_FILE, info)

    # -- an operator's request to adopt the present as normal ----------------------------
    def watch_pid(self) -> int | None:
        """The pid of the watch that holds this directory's lock, None when none does."""
        try:
            lock = open(self.path / LOCK_FILE)  # noqa: SIM115 (closed below)
        except OSError:
            return None
        with lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:  # held: a watch runs
                text = lock.read().strip()
                return int(text) if text.isdigit() else -1
            fcntl.flock(lock, fcntl.LOCK_UN)
            return None

    def request_adopt(self, span_s: float | None) -> int:
        """Ask the watch running on this directory to learn a new model from the latest
        ``span_s`` seconds (None: its ``--learn``) whatever was flagged in them, and score
        with it: the operator says the present is the new normal. Returns the watch's pid;
        :class:`InputError` when no watch runs here (nothing is written then)."""
        pid = self.watch_pid()
        if pid is None:
            raise InputError("no reveal watch runs on this state directory (its lock is "
                             "free): nothing to adopt; give the --state DIR of a running "
                             "watch", str(self.path))
        write_json_atomic(self.path / ADOPT_FILE, {"span_s": span_s})
        return pid

    def adopt_requested(self) -> bool:
        """Whether an adopt request waits (a ``stat``: cheap enough for every loop)."""
        return (self.path / ADOPT_FILE).exists()

    def take_adopt_request(self) -> float | str | None:
        """Take (remove) the waiting request: its span in seconds (None: the watch's
        ``--learn``), or a one-line reason when it cannot be read."""
        path = self.path / ADOPT_FILE
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            return f"the adopt request could not be read ({exc.strerror})"
        finally:
            with contextlib.suppress(OSError):
                path.unlink()
        try:
            span = json.loads(text).get("span_s")
            return None if span is None else float(span)
        except (ValueError, TypeError, AttributeError):
            return "the adopt request is not the JSON reveal watch --adopt writes"
