"""A real Alertmanager for ``reveal validate --live --via-alertmanager``: the alerts of the
live suite's watch reach its webhook the way they reach an operator, through Alertmanager's
routing (its v2 API in, a webhook receiver out), so that the time to an alert includes it.

The route groups by episode and waits :data:`GROUP_WAIT` before a group's first
notification and :data:`GROUP_INTERVAL` before each later one (a resolution among them);
an operator's route may wait longer (Alertmanager's own default is 30 s), which adds to
every time measured here by as much.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from reveal.errors import RevealError

#: Alertmanager's route: before a group's first notification, and between two of its
#: notifications (seconds, in Alertmanager's duration syntax)
GROUP_WAIT = "1s"
GROUP_INTERVAL = "1s"
#: What a suite that needs Alertmanager says when it is not installed.
MISSING = "--via-alertmanager needs Alertmanager on PATH (apt-get install prometheus-alertmanager)"
#: Longest wait for Alertmanager to answer after it starts (seconds).
START_WAIT_S = 60.0


def find_alertmanager() -> str | None:
    """The Alertmanager binary on PATH (Debian's ``prometheus-alertmanager`` or upstream's
    ``alertmanager``), or None."""
    return shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def route_config(webhook_url: str) -> str:
    """Alertmanager's configuration: every alert to ``webhook_url``, grouped by episode,
    resolutions sent."""
    return ("route:\n  receiver: suite\n  group_by: ['episode']\n"
            f"  group_wait: {GROUP_WAIT}\n  group_interval: {GROUP_INTERVAL}\n"
            "  repeat_interval: 1h\nreceivers:\n- name: suite\n  webhook_configs:\n"
            f"  - url: '{webhook_url}'\n    send_resolved: true\n")


class LocalAlertmanager:
    """An Alertmanager on 127.0.0.1 routing every alert to one webhook; ``url`` is what
    ``reveal watch --alertmanager`` takes. Its configuration and data live in a temporary
    directory removed by :meth:`close`; its log at ``log`` (default: in that directory)."""

    def __init__(self, webhook_url: str, binary: str | None = None,
                 log: Path | None = None) -> None:
        found = binary or find_alertmanager()
        if found is None:
            raise RevealError(MISSING)
        self.root = Path(tempfile.mkdtemp(prefix="reveal-validate-am-"))
        (self.root / "am.yml").write_text(route_config(webhook_url), encoding="utf-8")
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.log = log or self.root / "alertmanager.log"
        with open(self.log, "wb") as handle:
            self.proc = subprocess.Popen(
                [found, f"--config.file={self.root / 'am.yml'}",
                 f"--storage.path={self.root / 'data'}",
                 f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
                stdout=handle, stderr=subprocess.STDOUT)
        try:
            self._wait_ready()
        except BaseException:
            self.close()
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_WAIT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                with urllib.request.urlopen(f"{self.url}/api/v2/status", timeout=2) as r:
                    r.read()
                return
            except (OSError, urllib.error.URLError):
                time.sleep(0.2)
        tail = self.log.read_text(encoding="utf-8", errors="replace")[-500:].strip()
        raise RevealError(f"Alertmanager did not start within {START_WAIT_S:g} s: {tail}")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)
