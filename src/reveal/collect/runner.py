"""Collection orchestration: choose and open probes, describe the host, run the sampler
into a segment writer, keep ``meta.json`` current, stop cleanly on SIGTERM/SIGINT.

Nothing here prints: warnings and progress go to the callbacks the command passes in.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import pkgutil
import resource
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from reveal.collect.hostinfo import host_meta, wall_offset_ns
from reveal.collect.options import check_probe_options, probe_options_help
from reveal.collect.probe import REGISTRY, Probe, ProbeUnavailable
from reveal.collect.sampler import Sampler
from reveal.errors import InputError
from reveal.store.layout import (
    FORMAT_NAME,
    FORMAT_VERSION,
    META_FILE,
    data_bytes,
    write_json_atomic,
    write_meta_file,
)
from reveal.store.segment_writer import SegmentWriter

Notify = Callable[[str, str], None]  # (level "warning" | "notice" | "info", message)
Progress = Callable[[dict[str, Any]], None]


def _quiet(level: str, message: str) -> None:
    del level, message


#: Modules of :mod:`reveal.collect` that hold no probes.
_NOT_PROBES = frozenset({"probe", "sampler", "runner", "hostinfo", "options"})

#: Probe modules that failed to import: module name → "ExceptionType: message".
IMPORT_ERRORS: dict[str, str] = {}


def registered_probes() -> dict[str, type[Probe]]:
    """Every probe class by name: what :mod:`reveal.collect` registers on import, the perf
    probe, and any other public module of the package (a module that fails to import is
    recorded in :data:`IMPORT_ERRORS` and the rest still load)."""
    package = importlib.import_module("reveal.collect")  # its __init__ may import probes
    importlib.import_module("reveal.collect.perf")
    for module in pkgutil.iter_modules(package.__path__):
        if module.name.startswith("_") or module.name in _NOT_PROBES:
            continue
        try:
            importlib.import_module(f"reveal.collect.{module.name}")
        except Exception as exc:  # one broken probe module must not stop collection
            IMPORT_ERRORS[module.name] = f"{type(exc).__name__}: {exc}"
    return dict(sorted(REGISTRY.items()))


def select_probes(include: list[str] | None = None,
                  exclude: list[str] | None = None) -> tuple[list[type[Probe]], list[str]]:
    """Probe classes to run and names disabled: ``include`` (else the defaults) minus
    ``exclude``. Unknown names are an :class:`InputError` listing the known ones."""
    known = registered_probes()
    for name in [*(include or []), *(exclude or [])]:
        if name not in known:
            raise InputError(f"unknown probe {name!r}; known: {', '.join(known)}")
    wanted = set(include) if include else {n for n, c in known.items() if c.default_enabled}
    wanted -= set(exclude or [])
    chosen = [cls for name, cls in known.items() if name in wanted]
    disabled = [name for name in known if name not in wanted]
    return chosen, disabled


@dataclass
class ProbeState:
    """One probe's outcome at open: the instance (None when unavailable) and why."""

    name: str
    probe: Probe | None
    status: str
    reason: str = ""
    open_s: float = 0.0


def open_probe(cls: type[Probe], options: dict[str, Any] | None = None) -> ProbeState:
    """Instantiate and open ``cls``; a failure becomes status ``unavailable`` with the reason."""
    started = time.perf_counter()
    try:
        probe = cls(**(options or {}))
        probe.open()
    except ProbeUnavailable as exc:
        return ProbeState(cls.name, None, "unavailable", str(exc), time.perf_counter() - started)
    except Exception as exc:  # a broken probe must not stop the others
        return ProbeState(cls.name, None, "unavailable",
                          f"open failed: {type(exc).__name__}: {exc}",
                          time.perf_counter() - started)
    return ProbeState(cls.name, probe, probe.status or "ok", probe.reason,
                      time.perf_counter() - started)


@dataclass
class CollectOptions:
    """What to record, where, and how often (seconds throughout)."""

    out: Path
    interval_s: float = 0.1
    duration_s: float | None = None
    include: list[str] | None = None
    exclude: list[str] | None = None
    segment_seconds: float = 300.0
    flush_seconds: float = 1.0
    refresh_s: float = 30.0  # periodic re-discovery (new disks, sensors, unnamed namespaces)
    meta_every_s: float = 60.0
    progress_s: float = 5.0
    self_channels: bool = False
    realtime: bool = True  # the C tick thread asks for SCHED_FIFO (see Sampler)
    source: str = "reveal collect"
    command: list[str] | None = None
    #: probe name → {option: value}, checked against each probe's ``options_help``
    probe_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    extra_meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class CollectResult:
    run: Path
    meta: dict[str, Any]


def prepare_run_dir(out: Path) -> Path:
    """Create ``out`` for a new run; refuse one that already holds a run or other files."""
    out = Path(out)
    if out.exists():
        if not out.is_dir():
            raise InputError("exists and is not a directory", str(out))
        if (out / META_FILE).exists():
            raise InputError("already holds a run; choose another --out", str(out))
        if any(out.iterdir()):
            raise InputError("directory is not empty; choose another --out", str(out))
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create the run directory ({exc.strerror})", str(out)) from None
    return out


class Collector:
    """One recording: ``open()``, then ``run()`` until stopped, then ``close()``.

    ``notify(level, message)`` receives warnings (a probe failing, a full disk);
    ``progress(status)`` receives a status dict every ``options.progress_s`` seconds.
    """

    def __init__(self, options: CollectOptions, notify: Notify = _quiet,
                 progress: Progress | None = None) -> None:
        self.options = options
        self.notify = notify
        self.progress = progress
        self.states: list[ProbeState] = []
        self.disabled: list[str] = []
        self.sampler: Sampler | None = None
        self.writer: SegmentWriter | None = None
        self.meta: dict[str, Any] = {}
        self.stop_requested = False
        self._started_wall = 0.0
        self._cpu_at_start = 0.0
        self._closed = False
        self._meta_failing = False

    @property
    def run_dir(self) -> Path:
        return Path(self.options.out)

    # -- open ------------------------------------------------------------------------------
    def open(self) -> None:
        """Open probes, create the run directory, write the first ``meta.json``."""
        opts = self.options
        if not opts.interval_s > 0:
            raise InputError(f"--interval must be positive, got {opts.interval_s}")
        if not opts.refresh_s > 0:
            raise InputError(f"--refresh must be positive, got {opts.refresh_s}")
        if opts.duration_s is not None and not opts.duration_s > 0:
            raise InputError(f"--duration must be positive, got {opts.duration_s}")
        if not opts.segment_seconds >= max(1.0, opts.interval_s):
            raise InputError(f"--segment-seconds must be at least 1 and at least the "
                             f"interval, got {opts.segment_seconds}")
        classes, self.disabled = select_probes(opts.include, opts.exclude)
        check_probe_options(opts.probe_options, registered_probes())
        prepare_run_dir(opts.out)
        self.states = [open_probe(cls, self._options_of(cls)) for cls in classes]
        for state in self.states:
            if state.status == "unavailable":
                self.notify("info", f"probe {state.name} unavailable: {state.reason}")
            elif state.status == "degraded":
                self.notify("info", f"probe {state.name} degraded: {state.reason}")
        probes = [s.probe for s in self.states if s.probe is not None]
        if not any(p.channels for p in probes):
            self._close_probes()
            why = "; ".join(f"{s.name}: {s.reason or 'no channels'}" for s in self.states)
            raise InputError(f"no probe has anything to record here ({why or 'none chosen'})")
        self.sampler = Sampler(probes, opts.interval_s, opts.refresh_s, opts.self_channels,
                               self.notify, realtime=opts.realtime)
        self.sampler.on_layout_change = self.write_meta
        self.meta = self._base_meta()
        try:
            write_json_atomic(self.run_dir / META_FILE, self.meta)
        except OSError as exc:
            self._close_probes()
            raise InputError(f"cannot write run metadata ({exc.strerror})",
                             str(self.run_dir / META_FILE)) from None
        try:
            self.writer = SegmentWriter(self.run_dir, self.sampler.channels,
                                        interval_s=opts.interval_s,
                                        segment_seconds=opts.segment_seconds,
                                        flush_seconds=opts.flush_seconds, notify=self.notify)
        except OSError as exc:
            self._close_probes()
            raise InputError(f"cannot start the run ({exc.strerror or exc})",
                             str(self.run_dir)) from None

    def _options_of(self, cls: type[Probe]) -> dict[str, Any]:
        """The options ``cls`` is opened with: what was given, and the sampling interval for
        a probe that polls on its own thread (it declares ``interval_s``)."""
        options = dict(self.options.probe_options.get(cls.name) or {})
        if "interval_s" in probe_options_help(cls):
            options.setdefault("interval_s", self.options.interval_s)
        return options

    def _base_meta(self) -> dict[str, Any]:
        opts = self.options
        meta: dict[str, Any] = {"format": FORMAT_NAME, "version": FORMAT_VERSION}
        meta.update(host_meta())
        meta.update({
            "interval_s": opts.interval_s,
            "start_mono_ns": None,
            "wall_offset_ns": wall_offset_ns(),
            "source": opts.source,
            "segment_seconds": opts.segment_seconds,
            "closed": False,
        })
        if opts.command is not None:
            meta["command"] = list(opts.command)
        if opts.probe_options:
            meta["probe_options"] = opts.probe_options
        meta.update(opts.extra_meta)
        gpus = list(meta.get("gpus") or [])
        for state in self.states:
            if state.probe is not None and not gpus and state.probe.info.get("gpus"):
                gpus = list(state.probe.info["gpus"])
        meta["gpus"] = gpus
        self._refresh_probe_meta(meta)
        return meta

    def _refresh_probe_meta(self, meta: dict[str, Any]) -> None:
        probes: dict[str, Any] = {}
        unsupported: list[str] = []
        errors = self.sampler.stats.read_errors if self.sampler else {}
        for state in self.states:
            entry: dict[str, Any] = {"status": state.status, "reason": state.reason,
                                     "channels": 0, "open_ms": round(state.open_s * 1e3, 2)}
            probe = state.probe
            if probe is not None:
                entry.update(status=probe.status or "ok", reason=probe.reason,
                             channels=len(probe.channels))
                info = {k: v for k, v in probe.info.items() if k != "gpus"}
                if info:
                    entry["info"] = info
                unsupported += [str(e) for e in probe.info.get("unsupported_events", [])]
            if state.name in errors:
                entry["read_errors"] = errors[state.name]
                if entry["status"] == "ok":
                    entry["status"] = "degraded"
                    entry["reason"] = f"read failed: {errors[state.name]['first']}"
            probes[state.name] = entry
        for name in self.disabled:
            probes[name] = {"status": "disabled", "reason": "not selected", "channels": 0}
        meta["probes"] = dict(sorted(probes.items()))
        meta["unsupported_events"] = sorted(set(unsupported))
        meta["n_channels"] = len(self.sampler.channels) if self.sampler else 0

    def status(self) -> dict[str, Any]:
        """Live figures: samples, channels, missed ticks, dropped samples, bytes on disk."""
        assert self.sampler is not None and self.writer is not None
        s, w = self.sampler.stats, self.writer.stats
        return {
            "elapsed_s": time.monotonic() - self._started_wall if self._started_wall else 0.0,
            "samples": s.samples, "channels": len(self.sampler.channels),
            "missed_ticks": s.missed_ticks, "dropped_samples": w.dropped_samples,
            "bytes_on_disk": w.bytes_on_disk, "segments": w.segments_written,
            "latency_ms_p50": s.summary()["latency_ms_p50"] if s.samples else None,
        }

    def write_meta(self, closed: bool = False) -> None:
        """Rewrite ``meta.json`` with current probes and stats (a full disk only warns).

        ``bytes_on_disk`` is measured from the run's segment and journal files. The final
        write (``closed``) falls back on the space reserved for it; when even that fails,
        ``self.meta["closed"]`` stays False, as on disk, and a warning says so."""
        assert self.sampler is not None
        self._refresh_probe_meta(self.meta)
        if self.sampler.start_ns:
            self.meta["start_mono_ns"] = self.sampler.start_ns
        stats = self.sampler.stats.summary()
        stats["ticks_taken_by"] = "c-thread" if self.sampler.mode == "native" else "python"
        stats["ticks_realtime"] = self.sampler.realtime_granted
        if self.writer is not None:
            w = self.writer.stats
            stats.update(dropped_samples=w.dropped_samples, segments=w.segments_written,
                         bytes_on_disk=data_bytes(self.run_dir),
                         journal_bytes_written=w.journal_bytes_total,
                         disk_full_episodes=w.disk_full_episodes,
                         pending_segments=w.pending_segments)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        stats["cpu_s"] = round(usage.ru_utime + usage.ru_stime - self._cpu_at_start, 3)
        stats["max_rss_bytes"] = usage.ru_maxrss * 1024
        if self._started_wall:
            stats["duration_s"] = round(time.monotonic() - self._started_wall, 3)
        self.meta["stats"] = stats
        self.meta["closed"] = closed
        snapshot = json.loads(json.dumps(self.meta, default=str))
        if self.writer is not None and not closed:
            self.writer.submit(lambda: self._store_meta(snapshot))  # off the sampling thread
        elif not self._store_meta(snapshot) and closed:
            self.meta["closed"] = False  # what meta.json says: the run reads as not closed

    def _store_meta(self, meta: dict[str, Any]) -> bool:
        """Write ``meta`` as ``meta.json`` (keeping space for the final write); False when
        the storage refused. The final write (``closed: true``) is tried three times."""
        final = meta.get("closed") is True
        error = OSError()
        for attempt in range(3 if final else 1):
            if attempt:
                time.sleep(0.5)  # space may come back (a log rotated, a file removed)
            try:
                write_meta_file(self.run_dir, meta, final=final)
            except OSError as exc:
                error = exc
            else:
                self._meta_failing = False
                return True
        if final:
            self.notify("warning", f"{self.run_dir / META_FILE}: final metadata not written "
                                   f"({error.strerror}); the run stays readable but reads as "
                                   f"not closed, with the stats of its last update")
        elif not self._meta_failing:  # once until it works again
            self.notify("warning", f"{self.run_dir / META_FILE}: not updated "
                                   f"({error.strerror}); will retry")
        self._meta_failing = True
        return False

    # -- run -------------------------------------------------------------------------------
    def run(self, should_stop: Callable[[], bool] | None = None) -> CollectResult:
        """Sample until ``duration_s``, ``should_stop()`` or a stop request; then close."""
        assert self.sampler is not None and self.writer is not None
        opts = self.options
        sampler, writer = self.sampler, self.writer
        usage = resource.getrusage(resource.RUSAGE_SELF)
        self._cpu_at_start = usage.ru_utime + usage.ru_stime
        self._started_wall = time.monotonic()
        progress_ns = int(opts.progress_s * 1e9)
        meta_ns = int(opts.meta_every_s * 1e9)
        due = {"progress": 0, "meta": 0}

        def after_tick(ts_ns: int) -> None:
            if not due["meta"]:
                due["meta"] = ts_ns + meta_ns
                due["progress"] = ts_ns + progress_ns
                self.write_meta()  # now with start_mono_ns
                return
            if ts_ns >= due["meta"]:
                due["meta"] = ts_ns + meta_ns
                self.write_meta()
            if self.progress is not None and ts_ns >= due["progress"]:
                due["progress"] = ts_ns + progress_ns
                writer.update_journal_size()
                self.progress(self.status())

        def stop() -> bool:
            return self.stop_requested or (should_stop is not None and should_stop())

        try:
            sampler.run(writer, stop, opts.duration_s, after_tick)
        finally:
            self.close()
        return CollectResult(self.run_dir, self.meta)

    def request_stop(self) -> None:
        self.stop_requested = True

    def close(self) -> None:
        """Flush and close the writer, close probes, write the final ``meta.json``."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.writer is not None:
                self.writer.close()
        finally:
            self._close_probes()
            if self.sampler is not None:
                self.write_meta(closed=True)

    def _close_probes(self) -> None:
        for state in self.states:
            if state.probe is not None:
                with contextlib.suppress(Exception):
                    state.probe.close()


@contextlib.contextmanager
def stop_on_signals(handler: Callable[[int], None],
                    signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)) -> Iterator[None]:
    """Route ``signals`` to ``handler(signum)`` for the duration (main thread only)."""
    previous: dict[int, Any] = {}
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return

    def _handle(signum: int, frame: FrameType | None) -> None:
        del frame
        handler(signum)

    for sig in signals:
        previous[sig] = signal.signal(sig, _handle)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def collect(options: CollectOptions, notify: Notify = _quiet, progress: Progress | None = None,
            should_stop: Callable[[], bool] | None = None) -> CollectResult:
    """Record until the duration ends, ``should_stop()`` is true, or SIGTERM/SIGINT."""
    collector = Collector(options, notify, progress)
    collector.open()
    with stop_on_signals(lambda _sig: collector.request_stop()):
        return collector.run(should_stop)

