"""A wall-clock step under a running ``reveal watch``: windows and their timestamps run on
the monotonic clock, so scoring goes on at its pace, nothing is skipped, and the exported
window end keeps the wall time of the watch's start (docs/watch.md, errors and fallbacks).

The step is real inside the watch and only there: ``tests/native/wall_step.c``, preloaded
into the watch and its children, moves CLOCK_REALTIME (and ``gettimeofday``, ``time``)
back by an hour once the test creates a file; the host's clock is never touched.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from test_watch_service import free_port, wait_for

pytestmark = pytest.mark.slow

SHIM = Path(__file__).with_name("native") / "wall_step.c"
STEP_S = -3600.0


def _metrics(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def _scored(port: int) -> float:
    return _metrics(port).get("reveal_windows_scored_total", 0.0)


@pytest.fixture
def shim(tmp_path: Path) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the clock shim")
    out = tmp_path / "wall_step.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(out), str(SHIM), "-ldl"],
                   check=True, capture_output=True)
    return out


def test_a_wall_clock_step_back_neither_stops_nor_shifts_the_windows(shim, tmp_path):
    port = free_port()
    trigger = tmp_path / "step-now"
    env = {**os.environ, "LD_PRELOAD": str(shim), "REVEAL_TEST_WALL_STEP_S": str(STEP_S),
           "REVEAL_TEST_WALL_STEP_FILE": str(trigger)}
    log = tmp_path / "watch.log"
    with open(log, "wb") as handle:
        proc = subprocess.Popen(
            [sys.executable, "-m", "reveal.cli", "watch", "--state", str(tmp_path / "state"),
             "--learn", "20s", "--allow-short-learn", "--listen", f"127.0.0.1:{port}",
             "--threshold-factor", "1e6"],
            stdout=subprocess.DEVNULL, stderr=handle, env=env)
    try:
        wait_for("the watch to score", lambda: _scored(port) >= 3, 150)
        before = _metrics(port)
        assert abs(before["reveal_window_end_timestamp_seconds"] - time.time()) < 30
        trigger.touch()
        time.sleep(1.0)  # the shim looks for the file every 100 ms
        # the step is real for every process of the watch's environment
        seen = subprocess.run([sys.executable, "-c", "import time; print(time.time())"],
                              env=env, capture_output=True, text=True, check=True)
        assert abs(float(seen.stdout) - (time.time() + STEP_S)) < 30
        start, t0 = _scored(port), time.monotonic()
        time.sleep(12.0)
        after = _metrics(port)
        elapsed = time.monotonic() - t0
        rate = (after["reveal_windows_scored_total"] - start) / (time.monotonic() - t0)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    text = log.read_text(errors="replace")
    assert proc.returncode == 0, text[-3000:]
    # windows close every second (1 s stride) before and after the step, none skipped
    assert 0.6 <= rate <= 1.4, (rate, text[-3000:])
    assert after.get("reveal_windows_skipped_total", 0.0) == before.get(
        "reveal_windows_skipped_total", 0.0)
    # the model's age goes on (monotonic), not back by an hour or stuck at 0
    grown = after["reveal_model_age_seconds"] - before["reveal_model_age_seconds"]
    assert elapsed <= grown <= elapsed + 30, (before, after)
    # the window end is still the real time (wall clock of the watch's start + monotonic),
    # not the stepped one an hour back
    assert abs(after["reveal_window_end_timestamp_seconds"] - time.time()) < 30, text[-3000:]
