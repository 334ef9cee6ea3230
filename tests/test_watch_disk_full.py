"""``reveal watch`` with its state directory on a disk that fills up (a real tmpfs, filled
for real): scoring and alerting go on from memory, the watch says so once, recording
resumes when space returns, and it stops cleanly when asked."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from test_disk_full import _fill
from test_watch_service import free_port, hog, wait_for
from tmpfs import mounted_tmpfs

pytestmark = [pytest.mark.root, pytest.mark.slow]


@pytest.fixture
def state_fs(tmp_path):
    with mounted_tmpfs(tmp_path / "mnt", "96m") as mnt:
        yield mnt


def metric(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    for line in text.decode().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not exported")


@pytest.mark.alone  # busy loops are the fault: on a host other tests keep busy, no change
def test_a_full_disk_stops_neither_scoring_nor_alerting(state_fs: Path, tmp_path: Path) -> None:
    port = free_port()
    alerts = tmp_path / "alerts.jsonl"  # the sink is elsewhere: it must keep receiving
    log = tmp_path / "watch.log"
    with open(log, "wb") as handle:
        watch = subprocess.Popen(
            [sys.executable, "-m", "reveal.cli", "watch", "--state", str(state_fs / "state"),
             "--learn", "20s", "--allow-short-learn", "--resolve-after", "3s",
             "--listen", f"127.0.0.1:{port}", "--alerts-file", str(alerts)],
            stdout=subprocess.DEVNULL, stderr=handle)
    filler = None
    busy = None
    try:
        wait_for("scoring", lambda: "; scoring" in log.read_text(errors="replace"), 180)
        with open(state_fs / "filler", "wb", buffering=0) as filler:
            _fill(state_fs / "filler", filler)
            assert os.statvfs(state_fs).f_bavail * os.statvfs(state_fs).f_frsize < 65536
            scored = metric(port, "reveal_windows_scored_total")
            time.sleep(8)
            assert watch.poll() is None, log.read_text()[-2000:]
            assert metric(port, "reveal_windows_scored_total") >= scored + 5  # still scoring
            busy = [hog() for _ in range(os.cpu_count() or 1)]
            wait_for("an alert while the disk is full",
                     lambda: alerts.is_file() and '"firing"' in alerts.read_text(), 60)
            for h in busy:
                h.kill()
                h.wait()
            busy = None
            text = log.read_text(errors="replace")
            # each part that cannot write says so once: the recording, the alert state
            assert text.count("dropping samples until space returns") == 1, text[-2000:]
            assert text.count("cannot write the alert state") <= 1, text[-2000:]
            assert "Traceback" not in text, text[-3000:]
        (state_fs / "filler").unlink()
        wait_for("recording to resume", lambda: "recording resumed" in log.read_text(), 30)
        watch.send_signal(signal.SIGTERM)
        assert watch.wait(60) == 0, log.read_text()[-2000:]
    finally:
        for h in busy or []:
            h.kill()
        if watch.poll() is None:
            watch.kill()
            watch.wait()
