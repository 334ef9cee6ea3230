"""Headless Chromium driven over the DevTools protocol on a pipe (no port, no network).

:func:`start` launches Chromium (``chromium`` on Debian, ``chromium-browser`` on Ubuntu,
whichever ``PATH`` has) headless with a private profile in a
temporary directory and ``--remote-debugging-pipe``: commands go to the browser on its
fd 3 and replies come back on its fd 4, as NUL-separated JSON. :class:`Page` opens one
tab, navigates it with the network switched off, evaluates scripts, collects console
errors and uncaught exceptions, and takes screenshots. The ``browser`` fixture yields a
:class:`Browser` and skips cleanly when Chromium is absent.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

#: the browser's executable: Debian names it ``chromium``, Ubuntu ``chromium-browser``
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or "chromium"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--mute-audio", "--remote-debugging-pipe")


class CdpError(RuntimeError):
    """The browser answered a command with an error, or did not answer in time."""


class Browser:
    """One Chromium process and its DevTools pipe."""

    def __init__(self, executable: str = CHROMIUM) -> None:
        self.profile = tempfile.mkdtemp(prefix="reveal-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def fds() -> None:  # the child's fd 3 reads commands, fd 4 writes replies
            a, b = os.dup(to_child_r), os.dup(from_child_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=fds, pass_fds=(3, 4), close_fds=True)
        os.close(to_child_r)
        os.close(from_child_w)
        self._next = 0
        self._replies: dict[int, dict] = {}
        self._events: queue.Queue[dict] = queue.Queue()
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self._from_child, 1 << 20)
            except OSError:
                chunk = b""
            if not chunk:
                with self._cond:
                    self._replies[-1] = {"error": {"message": "browser closed its pipe"}}
                    self._cond.notify_all()
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                message = json.loads(raw)
                if "id" in message:
                    with self._cond:
                        self._replies[message["id"]] = message
                        self._cond.notify_all()
                else:
                    self._events.put(message)

    def send(self, method: str, params: dict | None = None, session: str | None = None,
             timeout_s: float = 30.0) -> dict:
        """Send one command and wait for its result (raises :class:`CdpError`)."""
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_child, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._next not in self._replies and -1 not in self._replies:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CdpError(f"{method}: no answer in {timeout_s:g} s")
                self._cond.wait(left)
            reply = self._replies.pop(self._next, None) or self._replies[-1]
        if "error" in reply:
            raise CdpError(f"{method}: {reply['error'].get('message')}")
        return reply.get("result", {})

    def events(self) -> Iterator[dict]:
        """Events received so far (drained)."""
        while True:
            try:
                yield self._events.get_nowait()
            except queue.Empty:
                return

    def wait_event(self, method: str, session: str, timeout_s: float = 30.0,
                   seen: list | None = None) -> dict:
        """The next event ``method`` of ``session``; others go to ``seen``."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CdpError(f"no {method} in {timeout_s:g} s")
            try:
                event = self._events.get(timeout=left)
            except queue.Empty:
                continue
            if event.get("method") == method and event.get("sessionId") == session:
                return event
            if seen is not None:
                seen.append(event)

    def page(self, width: int = 1280, height: int = 900) -> Page:
        """A new tab with the network off, ``width × height`` CSS pixels."""
        return Page(self, width, height)

    def close(self) -> None:
        with contextlib.suppress(CdpError):
            self.send("Browser.close", timeout_s=5)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        for fd in (self._to_child, self._from_child):
            with contextlib.suppress(OSError):
                os.close(fd)
        shutil.rmtree(self.profile, ignore_errors=True)


class Page:
    """One tab: navigate offline, evaluate, screenshot; records errors and requests."""

    def __init__(self, browser: Browser, width: int, height: int) -> None:
        self.browser = browser
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = browser.send("Target.attachToTarget",
                                    {"targetId": target, "flatten": True})["sessionId"]
        self.events: list[dict] = []
        for domain in ("Page", "Runtime", "Network", "Log"):
            self.send(f"{domain}.enable")
        self.send("Network.emulateNetworkConditions", {"offline": True, "latency": 0,
                                                       "downloadThroughput": -1,
                                                       "uploadThroughput": -1})
        self.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height,
                                                         "deviceScaleFactor": 1,
                                                         "mobile": False})

    def send(self, method: str, params: dict | None = None, timeout_s: float = 30.0) -> dict:
        return self.browser.send(method, params, self.session, timeout_s)

    def open(self, path: Path, timeout_s: float = 30.0) -> None:
        """Navigate to a local file and wait for its load event."""
        self.send("Page.navigate", {"url": Path(path).resolve().as_uri()})
        self.browser.wait_event("Page.loadEventFired", self.session, timeout_s, self.events)

    def evaluate(self, expression: str, timeout_s: float = 30.0) -> Any:
        """The value of a script (promises awaited); raises on an exception."""
        result = self.send("Runtime.evaluate", {"expression": expression,
                                                "returnByValue": True, "awaitPromise": True},
                           timeout_s)
        if "exceptionDetails" in result:
            raise CdpError(f"script failed: {result['exceptionDetails'].get('text')} "
                           f"{result['exceptionDetails'].get('exception', {})}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float = 30.0) -> Any:
        """Poll ``expression`` until it is truthy; its value."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise CdpError(f"still false after {timeout_s:g} s: {expression}")
            time.sleep(0.1)

    def screenshot(self, clip: dict | None = None, full: bool = False) -> bytes:
        """A PNG of the viewport, of ``clip`` (x, y, width, height in CSS pixels), or of
        the whole page (``full``)."""
        params: dict[str, Any] = {"format": "png", "captureBeyondViewport": bool(clip or full)}
        if clip:
            params["clip"] = clip | {"scale": 1}
        elif full:
            size = self.send("Page.getLayoutMetrics")["cssContentSize"]
            params["clip"] = {"x": 0, "y": 0, "width": size["width"],
                              "height": size["height"], "scale": 1}
        return base64.b64decode(self.send("Page.captureScreenshot", params)["data"])

    def errors(self) -> list[str]:
        """Uncaught exceptions, console errors and log errors seen so far."""
        self.events.extend(self.browser.events())
        out = []
        for e in self.events:
            p = e.get("params", {})
            if e.get("method") == "Runtime.exceptionThrown":
                out.append(str(p.get("exceptionDetails", {}).get("exception", {})
                               .get("description") or p))
            elif e.get("method") == "Runtime.consoleAPICalled" and p.get("type") == "error":
                out.append(" ".join(str(a.get("value", a.get("description")))
                                    for a in p.get("args", [])))
            elif e.get("method") == "Log.entryAdded" and p.get("entry", {}).get("level") \
                    == "error":
                out.append(p["entry"].get("text", ""))
        return out

    def requests(self) -> list[str]:
        """URLs the page asked for, other than files and inline data."""
        self.events.extend(self.browser.events())
        urls = [e["params"]["request"]["url"] for e in self.events
                if e.get("method") == "Network.requestWillBeSent"]
        return [u for u in urls if not u.startswith(("file:", "data:", "blob:", "about:"))]


def available() -> bool:
    return shutil.which(CHROMIUM) is not None


def start() -> Browser:
    """A headless Chromium (raises when it cannot start)."""
    browser = Browser()
    browser.send("Browser.getVersion", timeout_s=60)
    return browser


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """A headless Chromium for the module's tests; skips when Chromium is absent."""
    if not available():
        pytest.skip("chromium is not installed (neither chromium nor chromium-browser on PATH)")
    b = start()
    try:
        yield b
    finally:
        b.close()
