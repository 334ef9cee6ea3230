"""Where alert events go: JSON lines, an HTTP webhook, Alertmanager's v2 API.

The JSON-lines sink writes at once (a file or stdout). The HTTP sinks hand each event to
their own worker thread through a bounded queue: ``submit`` never blocks, so a sink that is
down never stalls collection or scoring. The worker retries a failed delivery with
exponential backoff (0.5 s doubling to 30 s, for at most ``give_up_s``); when the queue is
full the oldest event waiting is dropped and counted. Each delivery is reported to
``on_delivered`` (the episode state keeps it, so that nothing is sent twice).
"""

from __future__ import annotations

import contextlib
import json
import queue
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, TextIO

from reveal.errors import InputError
from reveal.registry import Registry

if TYPE_CHECKING:  # the alerts module imports the analysis: not needed to list the sinks
    from reveal.live.alerts import Event

Delivered = Callable[[str, "Event"], None]
Notify = Callable[[str, str], None]


#: how long an active alert stays firing in Alertmanager without a refresh (seconds)
AM_ACTIVE_FOR_S = 300.0


def _quiet(level: str, message: str) -> None:
    del level, message


class Sink:
    """Counters every sink keeps (the exporter publishes them).

    A sink the watch can open is registered (:func:`register`) with the command-line
    option that turns it on (``option``, ``metavar``, ``help``) and built from that
    option's value by :meth:`open`; ``reveal watch`` offers every registered sink.
    """

    name = "sink"
    #: whether informational ``notice`` events go to this sink (see reveal.live.notices)
    takes_notices = True
    #: the ``reveal watch`` option that turns this sink on, its value's name, its help
    option: ClassVar[str] = ""
    metavar: ClassVar[str] = "TARGET"
    help: ClassVar[str] = ""
    #: open episodes are sent again every :data:`AM_REFRESH_S` (a receiver that lets an
    #: alert expire unless it is refreshed)
    refreshes_open: ClassVar[bool] = False

    @classmethod
    def open(cls, target: str, on_delivered: Delivered | None = None,
             notify: Notify = _quiet, max_queue: int = 1000) -> Sink:
        """The sink for the option's value ``target``; ``InputError`` when it cannot be."""
        raise NotImplementedError

    def __init__(self, on_delivered: Delivered | None = None, notify: Notify = _quiet) -> None:
        self.on_delivered = on_delivered or (lambda _s, _e: None)
        self.notify = notify
        self.sent = 0
        self.failed = 0  # attempts that failed
        self.dropped = 0  # events given up (queue full, or retried too long)
        self._failing = False

    def submit(self, event: Event) -> None:
        raise NotImplementedError

    def queued(self) -> int:
        return 0

    def close(self, timeout: float = 5.0) -> None:
        del timeout

    def _ok(self, event: Event) -> None:
        self.sent += 1
        if self._failing:
            self._failing = False
            self.notify("notice", f"alert sink {self.name} works again")
        self.on_delivered(self.name, event)

    def _failed(self, why: str) -> None:
        self.failed += 1
        if not self._failing:
            self._failing = True
            self.notify("warning", f"alert sink {self.name}: {why}; retrying (alerts are "
                                   f"queued, collection and scoring go on)")


#: the alert sinks ``reveal watch`` can open, by name (a :class:`reveal.registry.Registry`)
SINKS: Registry[type[Sink]] = Registry("alert sink", Sink)


def register(cls: type[Sink]) -> type[Sink]:
    """Class decorator: offer the sink ``cls`` to ``reveal watch`` (its ``option``)."""
    if not cls.option.startswith("--"):
        raise ValueError(f"{cls.__name__} needs its command-line option (--NAME)")
    return SINKS.register(cls)


@register
class JsonLinesSink(Sink):
    """One JSON object per line, to a file (appended) or stdout (``-``)."""

    name = "jsonl"
    option = "--alerts-file"
    metavar = "FILE"
    help = "append alert events as JSON lines to FILE ('-': stdout)"

    @classmethod
    def open(cls, target: str, on_delivered: Delivered | None = None,
             notify: Notify = _quiet, max_queue: int = 1000) -> Sink:
        try:
            return cls(target, on_delivered, notify)
        except OSError as exc:
            raise InputError(f"cannot write alerts ({exc.strerror})", target) from None

    def __init__(self, target: str, on_delivered: Delivered | None = None,
                 notify: Notify = _quiet) -> None:
        super().__init__(on_delivered, notify)
        self.target = target
        self._handle: TextIO = (sys.stdout if target == "-"
                                else open(target, "a", encoding="utf-8"))  # noqa: SIM115
        self._lock = threading.Lock()

    def submit(self, event: Event) -> None:
        line = json.dumps(event, sort_keys=True, default=str)
        with self._lock:
            try:
                self._handle.write(line + "\n")
                self._handle.flush()
            except OSError as exc:
                self.dropped += 1
                self._failed(f"cannot write {self.target} ({exc.strerror})")
                return
        self._ok(event)

    def close(self, timeout: float = 5.0) -> None:
        if self._handle is not sys.stdout:
            with contextlib.suppress(OSError):
                self._handle.close()


class HttpSink(Sink):
    """A worker thread delivering events by HTTP POST, with retries and a bounded queue."""

    metavar = "URL"

    @classmethod
    def open(cls, target: str, on_delivered: Delivered | None = None,
             notify: Notify = _quiet, max_queue: int = 1000) -> Sink:
        if not target.startswith(("http://", "https://")):
            raise InputError(f"{cls.option} {target!r}: expected an http:// or https:// URL")
        return cls(target, on_delivered, notify, max_queue=max_queue)

    def __init__(self, url: str, on_delivered: Delivered | None = None,
                 notify: Notify = _quiet, max_queue: int = 1000, timeout_s: float = 5.0,
                 give_up_s: float = 600.0, backoff_s: float = 0.5,
                 max_backoff_s: float = 30.0) -> None:
        super().__init__(on_delivered, notify)
        self.url = url
        self.timeout_s = timeout_s
        self.give_up_s = give_up_s
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._queue: queue.Queue[Event] = queue.Queue(maxsize=max_queue)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._work, name=f"reveal-{self.name}",
                                        daemon=True)
        self._thread.start()

    def submit(self, event: Event) -> None:
        while True:
            try:
                self._queue.put_nowait(event)
                return
            except queue.Full:
                with contextlib.suppress(queue.Empty):
                    self._queue.get_nowait()  # the oldest waiting gives way
                    self._queue.task_done()
                    self.dropped += 1

    def queued(self) -> int:
        return self._queue.qsize()

    def close(self, timeout: float = 5.0) -> None:
        """Deliver what is queued or being sent for up to ``timeout`` s (retrying as ever,
        a failing target too), then stop; events still undelivered are counted in
        ``dropped`` and named in a warning, never lost unsaid."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.05)
        self._stop.set()
        self._thread.join(max(0.1, deadline - time.monotonic()))
        left = self._queue.unfinished_tasks
        if left:
            self.dropped += left
            self.notify("warning", f"alert sink {self.name}: {left} alert event(s) not "
                                   f"delivered to {self.url} before it closed")

    def body(self, event: Event) -> Any:
        return event

    def _post(self, payload: Any) -> None:
        data = json.dumps(payload, default=str).encode()
        request = urllib.request.Request(self.url, data=data, method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
            response.read()

    def _work(self) -> None:
        while not self._stop.is_set():
            try:
                event = self._queue.get(timeout=0.2)
            except queue.Empty:
                continue
            if self._deliver(event):
                self._queue.task_done()  # an event stopped mid-retry stays unfinished

    def _deliver(self, event: Event) -> bool:
        """POST ``event`` until it is delivered or given up (True), or the sink stops."""
        started = time.monotonic()
        delay = self.backoff_s
        while not self._stop.is_set():
            try:
                self._post(self.body(event))
            except (OSError, urllib.error.URLError, ValueError) as exc:
                reason = getattr(exc, "reason", None) or exc
                self._failed(f"POST {self.url} failed ({reason})")
                if time.monotonic() - started > self.give_up_s:
                    self.dropped += 1
                    return True
                self._stop.wait(delay)
                delay = min(delay * 2, self.max_backoff_s)
                continue
            self._ok(event)
            return True
        return False


@register
class WebhookSink(HttpSink):
    """POSTs each event as JSON to a URL."""

    name = "webhook"
    option = "--alert-webhook"
    help = "POST each alert event as JSON to URL (retried; never blocks scoring)"


@register
class AlertmanagerSink(HttpSink):
    """Alerts for Alertmanager's v2 API (``POST /api/v2/alerts``).

    Labels: ``alertname="RevealAnomaly"``, ``host``, ``subsystem`` (at opening: labels name
    the alert, so they do not change while it lasts), ``severity`` and ``episode`` (the
    episode id). Annotations: ``claim``, ``reasons`` (one line each), ``subsystem_now``,
    ``peak_score``. ``startsAt`` is the episode's start; a firing alert gets ``endsAt`` =
    now + 5 min and is refreshed while it lasts (so an alert whose sender died resolves on
    its own), a resolved one its end.
    """

    name = "alertmanager"
    takes_notices = False  # every Alertmanager alert may page: notes go elsewhere
    option = "--alertmanager"
    help = "send alerts to Alertmanager's v2 API at URL (e.g. http://127.0.0.1:9093)"
    refreshes_open = True  # a firing alert's endsAt is 5 min ahead: refresh it

    @classmethod
    def open(cls, target: str, on_delivered: Delivered | None = None,
             notify: Notify = _quiet, max_queue: int = 1000) -> Sink:
        sink = super().open(target, on_delivered, notify, max_queue)
        assert isinstance(sink, AlertmanagerSink)
        why = sink.reachable()
        if why is not None:
            notify("warning", f"Alertmanager at {sink.base_url} does not answer ({why}); "
                              f"alerts are queued and retried")
        return sink

    def __init__(self, url: str, *args: Any, **kwargs: Any) -> None:
        base = url.rstrip("/")
        if base.endswith("/api/v2/alerts"):
            base = base[:-len("/api/v2/alerts")]
        self.base_url = base
        super().__init__(f"{base}/api/v2/alerts", *args, **kwargs)

    def reachable(self, timeout_s: float = 2.0) -> str | None:
        """None when ``/api/v2/status`` answers, else why not."""
        try:
            with urllib.request.urlopen(f"{self.base_url}/api/v2/status",
                                        timeout=timeout_s) as response:
                response.read()
        except (OSError, urllib.error.URLError, ValueError) as exc:
            return str(getattr(exc, "reason", None) or exc)
        return None

    def body(self, event: Event) -> Any:
        resolved = event["event"] == "resolved"
        from reveal.live.alerts import iso

        ends = event["end"] if resolved else iso(time.time() + AM_ACTIVE_FOR_S)
        reasons = "\n".join(_reason_line(r) for r in event.get("reasons", []))
        return [{
            "labels": {"alertname": "RevealAnomaly", "host": event["host"],
                       "subsystem": event.get("opened_subsystem") or event["subsystem"],
                       "severity": event["severity"], "episode": event["id"]},
            "annotations": {"claim": event["claim"], "reasons": reasons,
                            "subsystem_now": event["subsystem"],
                            "peak_score": f"{event['peak_score']:.3g}",
                            "summary": f"{event['subsystem']} anomaly on {event['host']}"},
            "startsAt": event["start"],
            "endsAt": ends,
        }]


def _reason_line(reason: dict[str, Any]) -> str:
    unit = f" {reason['unit']}" if reason.get("unit") else ""
    value, base = reason.get("value"), reason.get("baseline")
    def fmt(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.4g}"

    return (f"{reason['channel']} {reason['feature']}: {fmt(value)}{unit} "
            f"(baseline {fmt(base)}{unit})")
